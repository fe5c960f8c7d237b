/* test_strtab.c - unit tests of the string-keyed intrusive hash table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "list.h"
#include "strtab.h"

typedef struct item {
    strtab_node node;
    char key[16];
    int n;
} item;

static item *of(strtab_node *n) { return n ? container_of(n, item, node) : NULL; }

static void test_nodes_are_found_by_key_in_the_order_added_across_growth(void **state)
{
    (void)state;
    enum { N = 5000 };
    item *it = calloc(N, sizeof *it);
    strtab t;
    strtab_init(&t);
    for (int i = 0; i < N; i++) { /* keys k0..k2499, each twice */
        snprintf(it[i].key, sizeof it[i].key, "k%d", i % (N / 2));
        it[i].n = i;
        assert_false(strtab_linked(&it[i].node));
        strtab_add(&t, &it[i].node, it[i].key);
        assert_true(strtab_linked(&it[i].node));
    }
    assert_int_equal(strtab_count(&t), N);
    for (int i = 0; i < N / 2; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        item *a = of(strtab_find(&t, k));
        assert_non_null(a);
        assert_int_equal(a->n, i);
        item *b = of(strtab_next(&a->node));
        assert_non_null(b);
        assert_int_equal(b->n, i + N / 2);
        assert_null(strtab_next(&b->node));
    }
    assert_null(strtab_find(&t, "k2500"));
    assert_null(strtab_find(&t, ""));
    /* removing the first of a pair leaves the second; removing twice is a no-op */
    strtab_remove(&t, &it[7].node);
    strtab_remove(&t, &it[7].node);
    assert_false(strtab_linked(&it[7].node));
    assert_int_equal(of(strtab_find(&t, "k7"))->n, 7 + N / 2);
    assert_int_equal(strtab_count(&t), N - 1);
    strtab_free(&t);
    free(it);
}

static void count_node(strtab_node *n, void *arg)
{
    *(long *)arg += of(n)->n;
}

static void test_each_visits_every_node_once(void **state)
{
    (void)state;
    item it[100];
    strtab t;
    strtab_init(&t);
    long want = 0, got = 0;
    for (int i = 0; i < 100; i++) {
        snprintf(it[i].key, sizeof it[i].key, "q%d", i);
        it[i].n = i + 1;
        want += i + 1;
        strtab_add(&t, &it[i].node, it[i].key);
    }
    strtab_each(&t, count_node, &got);
    assert_int_equal(got, want);
    strtab_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nodes_are_found_by_key_in_the_order_added_across_growth),
        cmocka_unit_test(test_each_visits_every_node_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
