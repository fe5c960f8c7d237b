/* test_tzfile.c - time zones read from the tz database, checked against
 * zdump (the tz database's own reader, from libc-bin) over 30 years, which
 * crosses 2037: after it Debian's files give only the footer's rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tzfile.h"

/* Checks every line of `zdump -v -c 2016,2046 zone`: the offset, DST flag
 * and abbreviation at each instant either side of each transition. */
static void check_against_zdump(const char *zone)
{
    char err[200] = "", cmd[160], line[512];
    const tz *z = tz_get(zone, err, sizeof err);
    assert_non_null(z);
    assert_string_equal(tz_name(z), zone);
    snprintf(cmd, sizeof cmd, "zdump -v -c 2016,2046 %s", zone);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    int checked = 0;
    while (fgets(line, sizeof line, p)) {
        /* Europe/Berlin  Sun Mar 29 00:59:59 2026 UT = Sun Mar 29 01:59:59 2026 CET isdst=0 gmtoff=3600 */
        char name[64], wd[8], mon[8], hms[16], lwd[8], lmon[8], lhms[16], abbr[32];
        int day, year, lday, lyear, isdst;
        long gmtoff;
        if (sscanf(line, "%63s %7s %7s %d %15s %d UT = %7s %7s %d %15s %d %31s isdst=%d gmtoff=%ld", name, wd, mon,
                   &day, hms, &year, lwd, lmon, &lday, lhms, &lyear, abbr, &isdst, &gmtoff) != 14)
            continue;
        char when[64];
        struct tm tm = {0};
        snprintf(when, sizeof when, "%s %d %s %d", mon, day, hms, year);
        assert_non_null(strptime(when, "%b %d %H:%M:%S %Y", &tm));
        int64_t t = (int64_t)timegm(&tm);
        int dst = -1;
        int32_t off = tz_offset_at(z, t, &dst);
        if (off != gmtoff || dst != isdst || strcmp(tz_abbrev_at(z, t), abbr) != 0)
            fail_msg("%s at %s: zdump says %ld/%d/%s, tz_offset_at %d/%d/%s", zone, when, gmtoff, isdst, abbr, off,
                     dst, tz_abbrev_at(z, t));
        checked++;
    }
    pclose(p);
    assert_true(checked >= 4 || strcmp(zone, "Asia/Kathmandu") == 0);
}

static void test_offsets_equal_zdump_for_30_years_of_transitions(void **state)
{
    (void)state;
    const char *zones[] = {"Europe/Berlin",     "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu",
                           "America/Santiago",  "Europe/Dublin",    "Pacific/Chatham",     "Africa/Casablanca"};
    for (size_t i = 0; i < sizeof zones / sizeof *zones; i++)
        check_against_zdump(zones[i]);
}

static void test_the_footer_rule_holds_past_the_listed_transitions(void **state)
{
    (void)state;
    char err[200];
    const tz *z = tz_get("Europe/Berlin", err, sizeof err);
    /* 2090-07-01 12:00 UTC: summer, CEST; 2090-01-01: CET */
    assert_int_equal(tz_offset_at(z, 3802593600LL, NULL), 7200);
    assert_string_equal(tz_abbrev_at(z, 3802593600LL), "CEST");
    assert_int_equal(tz_offset_at(z, 3786912000LL, NULL), 3600);
    const tz *k = tz_get("Asia/Kathmandu", err, sizeof err);
    assert_int_equal(tz_offset_at(k, 3802593600LL, NULL), 5 * 3600 + 45 * 60);
}

static void test_bad_or_unknown_names_are_refused_with_a_reason(void **state)
{
    (void)state;
    const char *bad[] = {"../etc/passwd", "Nope/Zone", "", "/abs", "Europe/../Europe/Berlin", "Europe//Berlin",
                         "Europe/Berlin/", "a b", "Europe/Berlin\n", "Europe", "posixrules-x",
                         "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[200] = "";
        if (tz_get(bad[i], err, sizeof err))
            fail_msg("'%s' was accepted", bad[i]);
        assert_true(strlen(err) > 10);
    }
    char err[200];
    assert_null(tz_get(NULL, err, sizeof err));
    assert_null(tz_get("right/Europe/Berlin", err, sizeof err)); /* leap seconds */
    assert_null(tz_get("localtime", err, sizeof err)); /* the host's own (a link to /etc/localtime) */
    assert_non_null(strstr(err, "this host's setting"));
}

static void test_utc_works_without_tzdata(void **state)
{
    (void)state;
    char dir[] = "/tmp/hw_tzdir_XXXXXX", err[200];
    assert_non_null(mkdtemp(dir));
    const char *old = getenv("TZDIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("TZDIR", dir, 1);
    const tz *z = tz_get("Etc/GMT", err, sizeof err);
    assert_non_null(z);
    assert_int_equal(tz_offset_at(z, 0, NULL), 0);
    assert_int_equal(tz_offset_at(z, 4000000000LL, NULL), 0);
    assert_null(tz_get("Europe/Paris", err, sizeof err)); /* not there: unknown */
    if (saved) {
        setenv("TZDIR", saved, 1);
        free(saved);
    } else {
        unsetenv("TZDIR");
    }
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utc_works_without_tzdata),
        cmocka_unit_test(test_offsets_equal_zdump_for_30_years_of_transitions),
        cmocka_unit_test(test_the_footer_rule_holds_past_the_listed_transitions),
        cmocka_unit_test(test_bad_or_unknown_names_are_refused_with_a_reason),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
