/* test_backoff.c - unit tests of retry delays and Retry-After parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "backoff.h"
#include "spec.h"

/* min(max, min * 2^(attempts-1)) computed the slow, obviously right way. */
static uint64_t ceiling_of(uint32_t attempts, uint64_t min_ms, uint64_t max_ms)
{
    uint64_t hi = min_ms;
    if (max_ms < min_ms)
        max_ms = min_ms;
    for (uint32_t i = 1; i < attempts && hi < max_ms; i++)
        hi = hi > max_ms / 2 ? max_ms : hi * 2;
    return hi < max_ms ? hi : max_ms;
}

static void test_backoff_delay_stays_within_its_bounds(void **state)
{
    (void)state;
    uint64_t seed = 5;
    const uint64_t mins[] = {1, 100, 1000, 12345};
    const uint64_t maxs[] = {1, 60000, 3600000, UINT64_MAX};
    for (size_t a = 0; a < 4; a++) {
        for (size_t b = 0; b < 4; b++) {
            for (uint32_t n = 1; n <= 100; n++) {
                uint64_t hi = ceiling_of(n, mins[a], maxs[b]), lo = hi / 2 > mins[a] ? hi / 2 : mins[a];
                for (int k = 0; k < 200; k++) {
                    uint64_t d = backoff_delay_ms(n, mins[a], maxs[b], splitmix64_next(&seed));
                    assert_in_range(d, lo, hi); /* the upper half of the ceiling, never below min */
                }
            }
        }
    }
}

static void test_backoff_delay_reaches_both_ends_of_its_range(void **state)
{
    (void)state;
    assert_int_equal(backoff_delay_ms(1, 100, 60000, 0), 100);
    assert_int_equal(backoff_delay_ms(1, 100, 60000, UINT64_MAX), 100);
    assert_int_equal(backoff_delay_ms(4, 100, 60000, 0), 400);
    assert_int_equal(backoff_delay_ms(4, 100, 60000, UINT64_MAX), 800);
    assert_int_equal(backoff_delay_ms(30, 100, 60000, 0), 30000);
    assert_int_equal(backoff_delay_ms(30, 100, 60000, UINT64_MAX), 60000);
    /* Half of the random range lands at about the middle. */
    assert_int_equal(backoff_delay_ms(2, 100, 60000, UINT64_C(1) << 63), 150);
    assert_int_equal(backoff_delay_ms(3, 100, 60000, UINT64_C(1) << 63), 300);
}

static void test_backoff_delay_does_not_overflow_for_huge_attempts(void **state)
{
    (void)state;
    const uint32_t attempts[] = {0, 63, 64, 65, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof attempts / sizeof attempts[0]; i++) {
        assert_in_range(backoff_delay_ms(attempts[i], 1000, 60000, 12345), attempts[i] <= 1 ? 1000 : 30000, 60000);
        assert_int_equal(backoff_delay_ms(attempts[i], 1000, 60000, UINT64_MAX),
                         attempts[i] <= 1 ? 1000 : 60000);
        assert_int_equal(backoff_delay_ms(attempts[i], UINT64_MAX - 1, UINT64_MAX, UINT64_MAX),
                         attempts[i] <= 1 ? UINT64_MAX - 1 : UINT64_MAX);
    }
    assert_int_equal(backoff_delay_ms(UINT32_MAX, 0, UINT64_MAX, UINT64_MAX), 0);
    assert_int_equal(backoff_delay_ms(UINT32_MAX, UINT64_MAX, UINT64_MAX, 7), UINT64_MAX);
}

static void test_backoff_delay_treats_max_below_min_as_min(void **state)
{
    (void)state;
    uint64_t seed = 9;
    for (uint32_t n = 1; n <= 100; n++)
        assert_int_equal(backoff_delay_ms(n, 5000, 10, splitmix64_next(&seed)), 5000);
}

/* The default policy's ladder (spec.h): 36 attempts, backoff 1 s doubling
 * to 1 h, keep retrying for at least 12 h and at most about 24 h. */
static void test_the_default_ladder_retries_for_12_to_25_hours(void **state)
{
    (void)state;
    uint64_t lo = 0, hi = 0;
    for (uint32_t n = 1; n < SPEC_DEFAULT_MAX_ATTEMPTS; n++) { /* the delays after attempts 1..35 */
        lo += backoff_delay_ms(n, SPEC_DEFAULT_MIN_BACKOFF_MS, SPEC_DEFAULT_MAX_BACKOFF_MS, 0);
        hi += backoff_delay_ms(n, SPEC_DEFAULT_MIN_BACKOFF_MS, SPEC_DEFAULT_MAX_BACKOFF_MS, UINT64_MAX);
    }
    assert_true(lo >= 12u * 3600000u);
    assert_true(hi <= 25u * 3600000u);
}

static void test_retry_after_parses_delta_seconds(void **state)
{
    (void)state;
    const uint64_t now = 1700000000000;
    assert_int_equal(backoff_parse_retry_after("120", now), 120000);
    assert_int_equal(backoff_parse_retry_after("0", now), 0);
    assert_int_equal(backoff_parse_retry_after("007", now), 7000);
    assert_int_equal(backoff_parse_retry_after(" 5 ", now), 5000);
    /* Huge values saturate instead of overflowing. */
    assert_int_equal(backoff_parse_retry_after("99999999999999999999999999", now),
                     INT64_C(1000000000) * 1000);
}

static void test_retry_after_rejects_invalid_values(void **state)
{
    (void)state;
    const char *bad[] = {"abc", "-1", "1.5", "", " ", "+5", "12abc", "0x10", "1 2",
                         "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Nov 1994 08:49:37 GMT junk",
                         "Sun, 06 Foo 1994 08:49:37 GMT"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(backoff_parse_retry_after(bad[i], 1700000000000), -1);
    assert_int_equal(backoff_parse_retry_after(NULL, 0), -1);
}

/* Formats epoch seconds as an IMF-fixdate. */
static void format_imf(time_t t, char *buf, size_t size)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    assert_true(strftime(buf, size, "%a, %d %b %Y %H:%M:%S GMT", &tm) > 0);
}

static void test_retry_after_parses_an_http_date_in_the_future(void **state)
{
    (void)state;
    char buf[64];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    format_imf(ts.tv_sec + 10, buf, sizeof buf);
    int64_t d = backoff_parse_retry_after(buf, now_ms);
    /* The date has whole seconds: 10 s minus the current fraction of a second. */
    assert_in_range(d, 9000, 10000);
    assert_int_equal(d, 10000 - (int64_t)(now_ms % 1000));
}

static void test_retry_after_parses_the_rfc_example_and_obsolete_forms(void **state)
{
    (void)state;
    const uint64_t at = UINT64_C(784111777) * 1000; /* Sun, 06 Nov 1994 08:49:37 GMT */
    const uint64_t now = at - 1500;
    assert_int_equal(backoff_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), 1500);
    assert_int_equal(backoff_parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now), 1500);
    assert_int_equal(backoff_parse_retry_after("Sun Nov  6 08:49:37 1994", now), 1500);
    assert_int_equal(backoff_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", at), 0);
}

static void test_retry_after_gives_zero_for_a_date_in_the_past(void **state)
{
    (void)state;
    char buf[64];
    time_t now = time(NULL);
    format_imf(now - 3600, buf, sizeof buf);
    assert_int_equal(backoff_parse_retry_after(buf, (uint64_t)now * 1000), 0);
    assert_int_equal(backoff_parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT",
                                               (uint64_t)now * 1000), 0);
}

static void test_retry_after_caps_a_date_far_in_the_future(void **state)
{
    (void)state;
    int64_t d = backoff_parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", 0);
    assert_int_equal(d, INT64_C(1000000000) * 1000);
    /* A clock at the end of time: no overflow either. */
    assert_int_equal(backoff_parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", UINT64_MAX), 0);
}

static void test_splitmix64_matches_the_reference_sequence(void **state)
{
    (void)state;
    /* Reference values of splitmix64 seeded with 0 (Vigna's splitmix64.c). */
    uint64_t s = 0;
    assert_int_equal(splitmix64_next(&s), UINT64_C(0xe220a8397b1dcdaf));
    assert_int_equal(splitmix64_next(&s), UINT64_C(0x6e789e6aa1b965f4));
    assert_int_equal(splitmix64_next(&s), UINT64_C(0x06c45d188009454f));
    assert_int_equal(s, UINT64_C(0x9e3779b97f4a7c15) * 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backoff_delay_stays_within_its_bounds),
        cmocka_unit_test(test_backoff_delay_reaches_both_ends_of_its_range),
        cmocka_unit_test(test_backoff_delay_does_not_overflow_for_huge_attempts),
        cmocka_unit_test(test_backoff_delay_treats_max_below_min_as_min),
        cmocka_unit_test(test_the_default_ladder_retries_for_12_to_25_hours),
        cmocka_unit_test(test_retry_after_parses_delta_seconds),
        cmocka_unit_test(test_retry_after_rejects_invalid_values),
        cmocka_unit_test(test_retry_after_parses_an_http_date_in_the_future),
        cmocka_unit_test(test_retry_after_parses_the_rfc_example_and_obsolete_forms),
        cmocka_unit_test(test_retry_after_gives_zero_for_a_date_in_the_past),
        cmocka_unit_test(test_retry_after_caps_a_date_far_in_the_future),
        cmocka_unit_test(test_splitmix64_matches_the_reference_sequence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
