/* test_trace.c - W3C Trace Context (service/trace.h): which traceparents are
 * taken, what of a tracestate is kept, and what an attempt sends. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "trace.h"

#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static void assert_parsed(const char *v, const char *want)
{
    char out[TRACE_PARENT_LEN + 1];
    memset(out, 'x', sizeof out);
    assert_int_equal(trace_parent_parse(v, out), 0);
    assert_string_equal(out, want);
}

static void assert_refused(const char *v)
{
    char out[TRACE_PARENT_LEN + 1];
    if (trace_parent_parse(v, out) != -EINVAL)
        fail_msg("taken: \"%s\"", v ? v : "(null)");
}

static void test_a_version_00_traceparent_is_taken_as_it_is(void **state)
{
    (void)state;
    assert_parsed(TP, TP);
    assert_parsed(" \t" TP "\t ", TP); /* blanks around the value */
    assert_parsed("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", /* not sampled */
                  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
    assert_parsed("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff", /* flags unknown to us */
                  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff");
}

static void test_a_later_version_is_read_as_its_first_55_characters(void **state)
{
    (void)state;
    assert_parsed("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                  "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    assert_parsed("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next",
                  "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    assert_refused("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"); /* no '-' after the 55 */
}

static void test_an_invalid_traceparent_is_refused(void **state)
{
    (void)state;
    assert_refused(NULL);
    assert_refused("");
    assert_refused(TP "-"); /* version 00 has nothing more */
    assert_refused("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1");
    assert_refused("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"); /* version ff */
    assert_refused("00-00000000000000000000000000000000-00f067aa0ba902b7-01"); /* zero trace id */
    assert_refused("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"); /* zero parent id */
    assert_refused("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"); /* upper case */
    assert_refused("00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01");
    assert_refused("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A");
    assert_refused("0-04bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"); /* dashes misplaced */
    assert_refused("00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01");
    assert_refused("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01"); /* not hex */
    assert_refused("0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    assert_refused("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"); /* cut short */
}

static void assert_kept(const char *v, size_t max, const char *want)
{
    char out[600];
    size_t n = trace_state_keep(v, out, max);
    assert_string_equal(out, want);
    assert_int_equal(n, strlen(want));
    assert_true(n <= max);
}

static void test_a_tracestate_keeps_whole_members_from_the_left_that_fit(void **state)
{
    (void)state;
    assert_kept("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", 70, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
    assert_kept(" rojo=1 ,\tcongo=2\t, ,", 70, "rojo=1,congo=2"); /* blanks and empty members go */
    assert_kept("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", 30, "rojo=00f067aa0ba902b7");
    assert_kept("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", 10, "");
    assert_kept("a=1,b=2,c=3", 7, "a=1,b=2"); /* exactly full */
    assert_kept("a=1,b=2,c=3", 6, "a=1");
    assert_kept("k=v w", 70, "k=v w"); /* a blank inside a value stays */
    assert_kept(NULL, 70, "");
    assert_kept("", 70, "");
}

static void test_an_invalid_or_too_long_tracestate_is_not_kept_at_all(void **state)
{
    (void)state;
    assert_kept("rojo=1,congo", 70, "");   /* a member without '=' */
    assert_kept("rojo=1,=2", 70, "");      /* nor without a key */
    assert_kept("rojo=1,c=\x01", 70, "");  /* a control byte */
    assert_kept("rojo=1,c=\xc3\xa9", 70, ""); /* not ASCII */
    assert_kept("a=1,c=x\ty", 70, "");     /* a tab inside a member */
    assert_kept("a=1,b=2,c", 3, "");       /* checked past what fits too */
    char big[TRACE_STATE_MAX + 2];
    memset(big, 'a', sizeof big - 1);
    big[0] = 'k', big[1] = '=', big[TRACE_STATE_MAX] = '\0';
    assert_kept(big, 70, ""); /* 512 bytes: checked, but one member longer than 70 */
    assert_kept(big, TRACE_STATE_MAX, big);
    big[TRACE_STATE_MAX] = 'a', big[TRACE_STATE_MAX + 1] = '\0';
    assert_kept(big, 600, ""); /* 513 bytes */
}

static int by_text(const void *a, const void *b) { return strcmp(a, b); }

static void test_each_attempt_sends_the_trace_id_and_flags_under_a_span_id_of_its_own(void **state)
{
    (void)state;
    enum { N = 10000 };
    char *spans = malloc((size_t)N * 17);
    for (int i = 0; i < N; i++) {
        char out[TRACE_PARENT_LEN + 1];
        trace_attempt_parent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", out);
        char again[TRACE_PARENT_LEN + 1];
        assert_int_equal(trace_parent_parse(out, again), 0); /* a valid version-00 traceparent */
        assert_memory_equal(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-", 36);
        assert_string_equal(out + 52, "-03");
        assert_memory_not_equal(out + 36, "00f067aa0ba902b7", 16);
        memcpy(spans + (size_t)i * 17, out + 36, 16);
        spans[(size_t)i * 17 + 16] = '\0';
    }
    qsort(spans, N, 17, by_text);
    for (int i = 1; i < N; i++)
        assert_string_not_equal(spans + (size_t)(i - 1) * 17, spans + (size_t)i * 17);
    free(spans);
}

static void *draw(void *arg)
{
    trace_attempt_parent(TP, arg);
    return NULL;
}

static void test_threads_draw_span_ids_of_their_own(void **state)
{
    (void)state;
    char a[TRACE_PARENT_LEN + 1], b[TRACE_PARENT_LEN + 1];
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, draw, a), 0);
    assert_int_equal(pthread_create(&tb, NULL, draw, b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_memory_not_equal(a + 36, b + 36, 16); /* each seeded on its own */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_version_00_traceparent_is_taken_as_it_is),
        cmocka_unit_test(test_a_later_version_is_read_as_its_first_55_characters),
        cmocka_unit_test(test_an_invalid_traceparent_is_refused),
        cmocka_unit_test(test_a_tracestate_keeps_whole_members_from_the_left_that_fit),
        cmocka_unit_test(test_an_invalid_or_too_long_tracestate_is_not_kept_at_all),
        cmocka_unit_test(test_each_attempt_sends_the_trace_id_and_flags_under_a_span_id_of_its_own),
        cmocka_unit_test(test_threads_draw_span_ids_of_their_own),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
