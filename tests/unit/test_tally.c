/* test_tally.c - unit tests of the per-minute figures' buckets, quantile
 * estimate and namespace slots (service/tally.h). */
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

static void test_tally_ns_gives_one_slot_per_namespace(void **state)
{
    (void)state;
    tally *t = tally_create(NULL);
    int a = tally_ns(t, "team-a/x"), open = tally_ns(t, "plain-id");
    assert_true(a >= 0 && open >= 0 && a != open);
    assert_int_equal(tally_ns(t, "team-a/y"), a);
    assert_int_equal(tally_ns(t, "other-id"), open); /* no '/': the open API's one namespace */
    int b = tally_ns(t, "team-b/x");
    assert_true(b >= 0 && b != a && b != open);
    char id[128];
    memset(id, 'n', 65);
    strcpy(id + 65, "/x"); /* longer than any namespace */
    assert_int_equal(tally_ns(t, id), -1);
    tally_delivered(t, a); /* counted; nothing is written without tally_start/stop */
    tally_attempt(t, -1);  /* not counted, no crash */
    tally_free(t);
    tally_delivered(NULL, 0); /* no tally: no-ops */
    assert_int_equal(tally_ns(NULL, "a/b"), -1);
}

static void test_tally_ns_stops_at_max_namespaces(void **state)
{
    (void)state;
    tally *t = tally_create(NULL);
    char id[32];
    for (int i = 0; i < TALLY_MAX_NAMESPACES; i++) {
        snprintf(id, sizeof id, "ns%d/x", i);
        assert_int_equal(tally_ns(t, id), i);
    }
    assert_int_equal(tally_ns(t, "one-more/x"), -1);
    assert_int_equal(tally_ns(t, "ns7/y"), 7);
    tally_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tally_bucket_bounds_are_inclusive_and_the_last_bucket_is_open),
        cmocka_unit_test(test_tally_quantile_of_no_observation_is_minus_one),
        cmocka_unit_test(test_tally_quantile_interpolates_inside_its_bucket),
        cmocka_unit_test(test_tally_quantile_in_the_open_bucket_is_its_lower_bound),
        cmocka_unit_test(test_tally_ns_gives_one_slot_per_namespace),
        cmocka_unit_test(test_tally_ns_stops_at_max_namespaces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
