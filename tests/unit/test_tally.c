/* test_tally.c - unit tests of the per-minute figures' buckets, quantile
 * estimate and (namespace, queue) slots (service/tally.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tally.h"

static void test_tally_bucket_bounds_are_inclusive_and_the_last_bucket_is_open(void **state)
{
    (void)state;
    assert_int_equal(tally_bucket(0), 0);
    assert_int_equal(tally_bucket(250), 0);
    assert_int_equal(tally_bucket(251), 1);
    assert_int_equal(tally_bucket(1000), 2);
    assert_int_equal(tally_bucket(1001), 3);
    assert_int_equal(tally_bucket(60000000), STATS_BUCKETS - 2);
    assert_int_equal(tally_bucket(60000001), STATS_BUCKETS - 1);
    assert_int_equal(tally_bucket(UINT64_MAX), STATS_BUCKETS - 1);
    for (int i = 1; i < STATS_BUCKETS - 1; i++)
        assert_true(tally_bounds_us[i] > tally_bounds_us[i - 1]);
}

static void test_tally_quantile_of_no_observation_is_minus_one(void **state)
{
    (void)state;
    uint64_t b[STATS_BUCKETS] = {0};
    assert_true(tally_quantile_ms(b, 0.5) < 0);
}

static void test_tally_quantile_interpolates_inside_its_bucket(void **state)
{
    (void)state;
    uint64_t b[STATS_BUCKETS] = {0};
    b[tally_bucket(2500)] = 10; /* ten observations in (2 ms, 3 ms] */
    assert_float_equal(tally_quantile_ms(b, 0.5), 2.5, 1e-9);
    assert_float_equal(tally_quantile_ms(b, 0.99), 2.99, 1e-9);
    b[tally_bucket(100)] = 10; /* and ten in [0, 0.25 ms] */
    assert_float_equal(tally_quantile_ms(b, 0.5), 0.25, 1e-9); /* rank 10: the top of the first bucket */
    assert_float_equal(tally_quantile_ms(b, 0.25), 0.125, 1e-9);
    assert_float_equal(tally_quantile_ms(b, 0.75), 2.5, 1e-9);
}

static void test_tally_quantile_in_the_open_bucket_is_its_lower_bound(void **state)
{
    (void)state;
    uint64_t b[STATS_BUCKETS] = {0};
    b[0] = 1;
    b[STATS_BUCKETS - 1] = 99;
    assert_float_equal(tally_quantile_ms(b, 0.99), 60000.0, 1e-9);
    assert_float_equal(tally_quantile_ms(b, 0.5), 60000.0, 1e-9);
}

static void test_tally_slot_gives_one_slot_per_namespace_and_queue(void **state)
{
    (void)state;
    tally *t = tally_create(NULL);
    int a = tally_slot(t, "team-a/x", "default"), open = tally_slot(t, "plain-id", "default");
    assert_true(a >= 0 && open >= 0 && a != open);
    assert_int_equal(tally_slot(t, "team-a/y", "default"), a);
    assert_int_equal(tally_slot(t, "other-id", "default"), open); /* no '/': the open API's one namespace */
    int b = tally_slot(t, "team-b/x", "default");
    assert_true(b >= 0 && b != a && b != open);
    int aq = tally_slot(t, "team-a/z", "emails"); /* same namespace, another queue: another slot */
    assert_true(aq >= 0 && aq != a && aq != b && aq != open);
    assert_int_equal(tally_slot(t, "team-a/x", "emails"), aq);
    assert_int_equal(tally_slot(t, "team-b/x", "emails"), aq + 1);
    char id[128];
    memset(id, 'n', 65);
    strcpy(id + 65, "/x"); /* longer than any namespace */
    assert_int_equal(tally_slot(t, id, "default"), -1);
    memset(id, 'q', 65); /* longer than any queue */
    id[65] = 0;
    assert_int_equal(tally_slot(t, "team-a/x", id), -1);
    tally_delivered(t, a); /* counted; nothing is written without tally_start/stop */
    tally_attempt(t, -1);  /* not counted, no crash */
    tally_free(t);
    tally_delivered(NULL, 0); /* no tally: no-ops */
    assert_int_equal(tally_slot(NULL, "a/b", "default"), -1);
}

static void test_tally_slot_stops_at_max_slots(void **state)
{
    (void)state;
    tally *t = tally_create(NULL);
    char id[32], q[32];
    for (int i = 0; i < TALLY_MAX_SLOTS; i++) {
        snprintf(id, sizeof id, "ns%d/x", i / 4);
        snprintf(q, sizeof q, "q%d", i % 4);
        assert_int_equal(tally_slot(t, id, q), i);
    }
    assert_int_equal(tally_slot(t, "one-more/x", "q0"), -1);
    assert_int_equal(tally_slot(t, "ns0/x", "q4"), -1); /* a known namespace's new queue too */
    assert_int_equal(tally_slot(t, "ns7/y", "q2"), 30);
    tally_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tally_bucket_bounds_are_inclusive_and_the_last_bucket_is_open),
        cmocka_unit_test(test_tally_quantile_of_no_observation_is_minus_one),
        cmocka_unit_test(test_tally_quantile_interpolates_inside_its_bucket),
        cmocka_unit_test(test_tally_quantile_in_the_open_bucket_is_its_lower_bound),
        cmocka_unit_test(test_tally_slot_gives_one_slot_per_namespace_and_queue),
        cmocka_unit_test(test_tally_slot_stops_at_max_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
