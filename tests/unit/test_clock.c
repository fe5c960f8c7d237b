/* test_clock.c - RFC 3339 formatting and parsing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "clock.h"

/* 2026-01-02T03:04:05.678Z */
#define T0 1767323045678LL

static int64_t parse(const char *s)
{
    int64_t ms = -1;
    assert_int_equal(clock_parse_rfc3339(s, &ms), 0);
    return ms;
}

static void assert_invalid(const char *s)
{
    int64_t ms = 42;
    assert_int_equal(clock_parse_rfc3339(s, &ms), -EINVAL);
    assert_int_equal(ms, 42); /* untouched on error */
}

static void test_format_writes_utc_with_milliseconds(void **state)
{
    char buf[32];
    (void)state;
    clock_format_rfc3339((uint64_t)T0, buf, sizeof buf);
    assert_string_equal(buf, "2026-01-02T03:04:05.678Z");
    clock_format_rfc3339(0, buf, sizeof buf);
    assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
}

static void test_format_fits_the_documented_25_bytes_even_for_huge_values(void **state)
{
    char buf[25];
    (void)state;
    clock_format_rfc3339(UINT64_MAX, buf, sizeof buf);
    assert_string_equal(buf, "9999-12-31T23:59:59.999Z");
}

/* The hand-made calendar against libc's, over leap days, century years and
 * a spread of instants up to the last four-digit year. */
static void test_format_agrees_with_gmtime(void **state)
{
    static const int64_t fixed[] = {0, 86399999, 86400000, 951782400000LL /* 2000-02-29 */,
                                    951868800000LL /* 2000-03-01 */, 4107542400000LL /* 2100-03-01 */,
                                    4107456000000LL /* 2100-02-28 */, 1709164800000LL /* 2024-02-29 */,
                                    253402300799999LL};
    char got[32], want[96];
    (void)state;
    uint64_t x = 42;
    for (int i = 0; i < 200000; i++) {
        int64_t ms;
        if (i < (int)(sizeof fixed / sizeof *fixed)) {
            ms = fixed[i];
        } else {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            ms = (int64_t)((x >> 11) % 253402300800000ull);
        }
        time_t secs = (time_t)(ms / 1000);
        struct tm tm;
        gmtime_r(&secs, &tm);
        snprintf(want, sizeof want, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
        clock_format_rfc3339((uint64_t)ms, got, sizeof got);
        assert_string_equal(got, want);
    }
}

static void test_format_truncates_like_snprintf_into_a_short_buffer(void **state)
{
    char buf[11];
    (void)state;
    clock_format_rfc3339((uint64_t)T0, buf, sizeof buf);
    assert_string_equal(buf, "2026-01-02");
}

static void test_format_then_parse_round_trips(void **state)
{
    static const int64_t samples[] = {0, 1, 999, T0, 951782400000LL /* 2000-02-29 */,
                                      253402300799999LL};
    char buf[32];
    (void)state;
    for (size_t i = 0; i < sizeof samples / sizeof *samples; i++) {
        clock_format_rfc3339((uint64_t)samples[i], buf, sizeof buf);
        assert_int_equal(parse(buf), samples[i]);
    }
}

static void test_parse_accepts_lowercase_t_and_z(void **state)
{
    (void)state;
    assert_int_equal(parse("2026-01-02t03:04:05.678z"), T0);
}

static void test_parse_without_fraction_gives_whole_seconds(void **state)
{
    (void)state;
    assert_int_equal(parse("2026-01-02T03:04:05Z"), T0 - 678);
}

static void test_parse_keeps_milliseconds_and_truncates_further_digits(void **state)
{
    (void)state;
    assert_int_equal(parse("2026-01-02T03:04:05.6789999Z"), T0);
    assert_int_equal(parse("2026-01-02T03:04:05.6Z"), T0 - 78);
    assert_int_equal(parse("2026-01-02T03:04:05.67Z"), T0 - 8);
}

static void test_parse_applies_positive_and_negative_offsets(void **state)
{
    (void)state;
    assert_int_equal(parse("2026-01-02T05:04:05.678+02:00"), T0);
    assert_int_equal(parse("2026-01-01T21:34:05.678-05:30"), T0);
    assert_int_equal(parse("2026-01-02T03:04:05.678+00:00"), T0);
    assert_int_equal(parse("2026-01-02T03:04:05.678-00:00"), T0);
}

static void test_parse_accepts_leap_days_only_in_leap_years(void **state)
{
    (void)state;
    assert_int_equal(parse("2000-02-29T00:00:00Z"), 951782400000LL);
    parse("2024-02-29T00:00:00Z");
    assert_invalid("2026-02-29T00:00:00Z");
    assert_invalid("1900-02-29T00:00:00Z");
}

static void test_parse_rolls_a_leap_second_into_the_next_minute(void **state)
{
    (void)state;
    assert_int_equal(parse("2016-12-31T23:59:60Z"), parse("2017-01-01T00:00:00Z"));
}

static void test_parse_rejects_impossible_dates_and_times(void **state)
{
    (void)state;
    assert_invalid("2026-02-30T00:00:00Z");
    assert_invalid("2026-04-31T00:00:00Z");
    assert_invalid("2026-13-01T00:00:00Z");
    assert_invalid("2026-00-01T00:00:00Z");
    assert_invalid("2026-01-00T00:00:00Z");
    assert_invalid("2026-01-01T24:00:00Z");
    assert_invalid("2026-01-01T00:60:00Z");
    assert_invalid("2026-01-01T00:00:61Z");
    assert_invalid("2026-01-01T00:00:00+24:00");
    assert_invalid("2026-01-01T00:00:00+01:60");
}

static void test_parse_rejects_trailing_garbage(void **state)
{
    (void)state;
    assert_invalid("2026-01-02T03:04:05Z ");
    assert_invalid("2026-01-02T03:04:05Zx");
    assert_invalid("2026-01-02T03:04:05+01:00:00");
}

static void test_parse_rejects_malformed_text(void **state)
{
    (void)state;
    assert_invalid("");
    assert_invalid(NULL);
    assert_invalid("2026-01-02");
    assert_invalid("2026-01-02T03:04:05");     /* no zone */
    assert_invalid("2026-01-02 03:04:05Z");    /* space separator */
    assert_invalid("2026-1-02T03:04:05Z");     /* short month */
    assert_invalid("2026-01-02T03:04:05.Z");   /* empty fraction */
    assert_invalid("2026-01-02T03:04:05+0100"); /* offset without colon */
    assert_invalid("2026-01-02T03:04:05+01");
    assert_invalid("+2026-01-02T03:04:05Z");
    assert_invalid("1767323045678");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_writes_utc_with_milliseconds),
        cmocka_unit_test(test_format_fits_the_documented_25_bytes_even_for_huge_values),
        cmocka_unit_test(test_format_agrees_with_gmtime),
        cmocka_unit_test(test_format_truncates_like_snprintf_into_a_short_buffer),
        cmocka_unit_test(test_format_then_parse_round_trips),
        cmocka_unit_test(test_parse_accepts_lowercase_t_and_z),
        cmocka_unit_test(test_parse_without_fraction_gives_whole_seconds),
        cmocka_unit_test(test_parse_keeps_milliseconds_and_truncates_further_digits),
        cmocka_unit_test(test_parse_applies_positive_and_negative_offsets),
        cmocka_unit_test(test_parse_accepts_leap_days_only_in_leap_years),
        cmocka_unit_test(test_parse_rolls_a_leap_second_into_the_next_minute),
        cmocka_unit_test(test_parse_rejects_impossible_dates_and_times),
        cmocka_unit_test(test_parse_rejects_trailing_garbage),
        cmocka_unit_test(test_parse_rejects_malformed_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
