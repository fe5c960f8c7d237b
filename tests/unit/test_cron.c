/* test_cron.c - cron expressions: every field form, the errors (field and
 * position), next instants checked by hand (DST edges with the clock of the
 * computation given, not the wall clock) and against a brute-force
 * reference that walks UTC minute by minute through the tz database. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backoff.h"
#include "civil.h"
#include "cron.h"
#include "tzfile.h"

static const tz *zone(const char *name)
{
    char err[200];
    const tz *z = tz_get(name, err, sizeof err);
    if (!z)
        fail_msg("%s: %s", name, err);
    return z;
}

static cron_expr *parse(const char *expr)
{
    cron_expr *c = NULL;
    cron_error err;
    if (cron_parse(expr, &c, &err) < 0)
        fail_msg("'%s': %s (%s, position %d)", expr, err.msg, err.field, err.position);
    return c;
}

/* The next instant (seconds) of expr in zone after `after` (seconds). */
static int64_t next_s(const char *expr, const char *zn, enum cron_gap g, enum cron_overlap o, int64_t after,
                      int *flags)
{
    cron_expr *c = parse(expr);
    cron_instant in = {0, 0};
    int rc = cron_next(c, zone(zn), g, o, after * 1000, &in);
    cron_free(c);
    if (flags)
        *flags = in.flags;
    return rc < 0 ? -1 : in.utc_ms / 1000;
}

#define NEXT(expr, zn, after) next_s(expr, zn, CRON_GAP_SHIFT, CRON_OVERLAP_FIRST, after, NULL)

static void test_field_forms_names_lists_steps_and_day_rules(void **state)
{
    (void)state;
    const int64_t t = 1798761600; /* Friday 2027-01-01 00:00 UTC */
    assert_int_equal(NEXT("* * * * *", "UTC", t), t + 60);
    assert_int_equal(NEXT("*/1 * * * * *", "UTC", t), t + 1);
    assert_int_equal(next_s("*/1 * * * * *", "UTC", 0, 0, t, NULL), t + 1);
    cron_expr *c = parse("*/1 * * * * *");
    cron_instant in;
    assert_int_equal(cron_next(c, zone("UTC"), 0, 0, t * 1000 + 500, &in), 0); /* strictly after, whole seconds */
    assert_int_equal(in.utc_ms, (t + 1) * 1000);
    assert_int_equal(cron_has_seconds(c), 1);
    cron_free(c);
    assert_int_equal(NEXT("30 5 * * *", "UTC", t), t + 5 * 3600 + 1800);
    assert_int_equal(NEXT("0 9-17/4 * * *", "UTC", t), t + 9 * 3600);
    assert_int_equal(NEXT("0 9-17/4 * * *", "UTC", t + 9 * 3600), t + 13 * 3600);
    assert_int_equal(NEXT("0 10/5 * * *", "UTC", t + 16 * 3600), t + 20 * 3600);
    assert_int_equal(NEXT("15,45 * * * *", "UTC", t + 16 * 60), t + 45 * 60);
    assert_int_equal(NEXT("0 0 1 mar *", "UTC", t), 1803859200);  /* 2027-03-01 */
    assert_int_equal(NEXT("0 0 * * SAT", "UTC", t), t + 86400);    /* Saturday 2 Jan */
    assert_int_equal(NEXT("0 0 * * 7", "UTC", t), t + 2 * 86400);  /* 7 is Sunday */
    assert_int_equal(NEXT("0 0 * * WED", "UTC", t), t + 5 * 86400); /* a W in a day name is no W rule */
    assert_int_equal(NEXT("0 0 * * wed", "UTC", t), t + 5 * 86400);
    assert_int_equal(NEXT("0 0 * * MON-WED", "UTC", t), t + 3 * 86400);
    assert_int_equal(NEXT("0 0 * * WED#2", "UTC", t), 1799798400);  /* second Wednesday: 2027-01-13 */
    assert_int_equal(NEXT("0 0 * * WedL", "UTC", t), 1801008000);   /* last Wednesday: 2027-01-27 */
    assert_int_equal(NEXT("0 0 * * 0", "UTC", t), t + 2 * 86400);
    assert_int_equal(NEXT("0 0 * * 1/3", "UTC", t), t + 3 * 86400);              /* Monday */
    /* 7/n is 0/n (Sunday, Tuesday, Thursday, Saturday), not no day at all */
    assert_int_equal(NEXT("0 9 * * 7/2", "UTC", t), t + 86400 + 9 * 3600);                /* Saturday 2 Jan */
    assert_int_equal(NEXT("0 9 * * 7/2", "UTC", t + 86400 + 10 * 3600), t + 2 * 86400 + 9 * 3600); /* Sunday */
    assert_int_equal(NEXT("0 9 * * 7/2", "UTC", t + 2 * 86400 + 10 * 3600), t + 4 * 86400 + 9 * 3600); /* Tuesday */
    assert_int_equal(NEXT("0 9 15 * 7/2", "UTC", t + 3 * 86400), t + 4 * 86400 + 9 * 3600); /* either day field */
    assert_int_equal(NEXT("0 0 * * 1/3", "UTC", t + 3 * 86400), t + 6 * 86400);  /* Thursday */
    assert_int_equal(NEXT("0 0 * * 1/3", "UTC", t + 6 * 86400), t + 10 * 86400); /* Monday: a/n ends at 6 */
    assert_int_equal(NEXT("0 0 L * *", "UTC", 1833753600), 1835395200);    /* 2028-02-29 */
    assert_int_equal(NEXT("0 0 * * 5L", "UTC", t), 1801180800);            /* last Friday: 2027-01-29 */
    assert_int_equal(NEXT("0 0 * * MON#1", "UTC", 1801440001), 1803859200); /* first Monday of March */
    assert_int_equal(NEXT("0 0 13 * FRI", "UTC", t), 1799366400);  /* the 13th or a Friday: Friday 8 Jan */
    assert_int_equal(NEXT("0 0 ? * 1", "UTC", t), t + 3 * 86400);  /* Mondays only */
    assert_int_equal(NEXT("0 0 13 * ?", "UTC", t), t + 12 * 86400);
    assert_int_equal(NEXT("0 0 */10 * *", "UTC", t), t + 10 * 86400); /* `*` first: the 11th */
    assert_int_equal(NEXT("@hourly", "UTC", t + 1800), t + 3600);
    assert_int_equal(NEXT("@daily", "UTC", t), t + 86400);
    assert_int_equal(NEXT("@midnight", "UTC", t), t + 86400);
    assert_int_equal(NEXT("@weekly", "UTC", t), t + 2 * 86400);
    assert_int_equal(NEXT("@monthly", "UTC", t), 1801440000);          /* 2027-02-01 */
    assert_int_equal(NEXT("@yearly", "UTC", t), 1830297600);           /* 2028-01-01 */
    assert_int_equal(NEXT("@annually", "UTC", t), 1830297600);
    assert_int_equal(NEXT("0 0 30 2 *", "UTC", t), -1);                /* never: none in 10 years */
    assert_int_equal(NEXT("0 0 29 2 *", "UTC", t), 1835395200);        /* leap years only */
    assert_int_equal(NEXT("0 0 * * *", "Asia/Kathmandu", 1904169600), 1904235300); /* 18:15 UTC */
}

static void test_errors_name_the_field_and_the_position(void **state)
{
    (void)state;
    static const struct {
        const char *expr, *field;
        int position;
    } cases[] = {
        {"61 * * * *", "minute", 1},      {"* 24 * * *", "hour", 3},         {"* * 0 * *", "day_of_month", 5},
        {"* * * 13 *", "month", 7},       {"* * * * 8", "day_of_week", 9},   {"5-1 * * * *", "minute", 1},
        {"*/0 * * * *", "minute", 3},     {"1,,2 * * * *", "minute", 3},     {"* * * FOO *", "month", 7},
        {"* * * *", "expression", 8},     {"* * * * * * *", "expression", 13}, {"@fortnightly", "expression", 1},
        {"* * * * MON#6", "day_of_week", 13}, {"* * 15W * *", "day_of_month", 5}, {"1x * * * *", "minute", 1},
        {"60 * * * * *", "second", 1},    {"* * * * MON-", "day_of_week", 13}, {"", "expression", 1},
        {"* * * JAN-FOO *", "month", 11}, {"*/x * * * *", "minute", 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cron_expr *c = NULL;
        cron_error err;
        if (cron_parse(cases[i].expr, &c, &err) == 0)
            fail_msg("'%s' was accepted", cases[i].expr);
        if (strcmp(err.field, cases[i].field) != 0 || err.position != cases[i].position || !err.msg[0])
            fail_msg("'%s': %s at %d (%s); expected %s at %d", cases[i].expr, err.field, err.position, err.msg,
                     cases[i].field, cases[i].position);
    }
    char long_expr[400];
    memset(long_expr, '1', sizeof long_expr - 1);
    long_expr[sizeof long_expr - 1] = '\0';
    cron_expr *c;
    cron_error err;
    assert_int_equal(cron_parse(long_expr, &c, &err), -1);
    assert_string_equal(err.field, "expression");
}

static void test_berlin_spring_gap_shifts_or_skips_and_autumn_overlap_runs_once_or_twice(void **state)
{
    (void)state;
    int f = 0;
    /* 2027-03-28: 02:00 -> 03:00. 02:30 does not exist. */
    assert_int_equal(next_s("30 2 * * *", "Europe/Berlin", CRON_GAP_SHIFT, 0, 1806148800, &f), 1806195600);
    assert_int_equal(f, CRON_SHIFTED); /* 03:00 CEST = 01:00 UTC */
    assert_int_equal(next_s("30 2 * * *", "Europe/Berlin", CRON_GAP_SKIP, 0, 1806148800, &f), 1806280200);
    assert_int_equal(f, 0); /* 2027-03-29 02:30 CEST */
    /* several slots in the gap: one run, at its end, then the next day */
    assert_int_equal(next_s("*/15 2 * * *", "Europe/Berlin", CRON_GAP_SHIFT, 0, 1806148800, NULL), 1806195600);
    assert_int_equal(next_s("*/15 2 * * *", "Europe/Berlin", CRON_GAP_SHIFT, 0, 1806195600, NULL), 1806278400);
    /* 2027-10-31: 03:00 -> 02:00. 02:30 happens twice. */
    assert_int_equal(next_s("30 2 * * *", "Europe/Berlin", 0, CRON_OVERLAP_FIRST, 1824897600, &f), 1824942600);
    assert_int_equal(f, 0);
    assert_int_equal(next_s("30 2 * * *", "Europe/Berlin", 0, CRON_OVERLAP_FIRST, 1824942600, NULL), 1825032600);
    assert_int_equal(next_s("30 2 * * *", "Europe/Berlin", 0, CRON_OVERLAP_BOTH, 1824942600, &f), 1824946200);
    assert_int_equal(f, CRON_SECOND_OCCURRENCE);
    assert_int_equal(next_s("30 2 * * *", "Europe/Berlin", 0, CRON_OVERLAP_BOTH, 1824946200, NULL), 1825032600);
    /* every 15 minutes through the doubled hour, both: in UTC order */
    int64_t t = 1824942600 - 1800; /* 00:00 UTC = 02:00 CEST */
    const int64_t want[] = {900, 1800, 2700, 3600, 4500, 5400, 6300, 86400 + 3600}; /* then 02:00 CET, 1 Nov */
    for (size_t i = 0; i < 8; i++) {
        int64_t got = next_s("*/15 2 * * *", "Europe/Berlin", 0, CRON_OVERLAP_BOTH, t, NULL);
        assert_int_equal(got, 1824942600 - 1800 + want[i]);
        t = got;
    }
}

static void test_lord_howe_half_hour_shift_and_new_york_weekdays(void **state)
{
    (void)state;
    int f = 0;
    /* 2027-10-03 02:00 -> 02:30 (+10:30 -> +11): 02:15 does not exist */
    assert_int_equal(next_s("15 2 * * *", "Australia/Lord_Howe", 0, 0, 1822478400, &f), 1822491000);
    assert_int_equal(f, CRON_SHIFTED);
    assert_int_equal(next_s("15 2 * * *", "Australia/Lord_Howe", CRON_GAP_SKIP, 0, 1822478400, NULL), 1822576500);
    /* 2027-04-04 02:00 -> 01:30: 01:45 happens twice, half an hour apart */
    assert_int_equal(next_s("45 1 * * *", "Australia/Lord_Howe", 0, CRON_OVERLAP_BOTH, 1806753600, NULL), 1806763500);
    assert_int_equal(next_s("45 1 * * *", "Australia/Lord_Howe", 0, CRON_OVERLAP_BOTH, 1806763500, &f), 1806765300);
    assert_int_equal(f, CRON_SECOND_OCCURRENCE);
    /* weekdays at 09:00 New York across 2027-03-14 (EST -> EDT) */
    assert_int_equal(NEXT("0 9 * * MON-FRI", "America/New_York", 1804809600), 1804860000); /* Fri 14:00 UTC */
    assert_int_equal(NEXT("0 9 * * MON-FRI", "America/New_York", 1804860000), 1805115600); /* Mon 13:00 UTC */
}

/* ---- the reference: UTC minute by minute ---- */

static int64_t off_at(const tz *z, int64_t u) { return tz_offset_at(z, u, NULL); }

/* Does the 5-field expression match local time L (minute aligned)? A
 * different formulation than cron.c's: fields decoded from the date. */
static int ref_match(const int *mins, const int *hours, const int *doms, const int *dows, int64_t L)
{
    int64_t y;
    int m, d;
    civil_from_days(civil_floor_div(L, 86400), &y, &m, &d);
    int64_t sod = L - civil_floor_div(L, 86400) * 86400;
    int wd = civil_weekday(civil_floor_div(L, 86400));
    (void)y, (void)m;
    return mins[sod / 60 % 60] && hours[sod / 3600] && doms[d] && dows[wd];
}

/* The first run after `after` by the rules, found by walking UTC minutes:
 * a minute u runs when its local time matches and (BOTH or no earlier
 * instant had that local time); at a transition that jumps forward, the
 * transition runs (SHIFT) when a local minute of the gap matches. */
static int64_t ref_next(const int *mins, const int *hours, const int *doms, const int *dows, const tz *z,
                        enum cron_gap g, enum cron_overlap o, int64_t after, int64_t horizon)
{
    int64_t u = civil_floor_div(after, 60) * 60 + 60;
    for (; u <= after + horizon; u += 60) {
        int64_t before = off_at(z, u - 60), now = off_at(z, u);
        if (now > before && g == CRON_GAP_SHIFT) /* a gap just ended at u (transitions are on minutes) */
            for (int64_t l = u - 60 + before + 60; l < u + now; l += 60)
                if (ref_match(mins, hours, doms, dows, l))
                    return u;
        int64_t L = u + now;
        if (!ref_match(mins, hours, doms, dows, L))
            continue;
        int earlier = 0;
        for (int64_t k = 1; o == CRON_OVERLAP_FIRST && k <= 26 * 60 && !earlier; k++)
            earlier = u - 60 * k + off_at(z, u - 60 * k) == L;
        if (!earlier)
            return u;
    }
    return -1;
}

static void test_next_equals_a_brute_force_walk_for_random_schedules_zones_and_instants(void **state)
{
    (void)state;
    static const char *const zones[] = {"Europe/Berlin",    "America/New_York", "Australia/Lord_Howe",
                                        "Asia/Kathmandu",   "America/Santiago", "Europe/Dublin",
                                        "Pacific/Chatham",  "America/Sao_Paulo", "UTC"};
    uint64_t seed = 20271031;
    for (int n = 0; n < 300; n++) {
        int mins[60] = {0}, hours[24] = {0}, doms[32] = {0}, dows[7] = {0};
        char expr[96];
        int kind = (int)(splitmix64_next(&seed) % 5), mi = (int)(splitmix64_next(&seed) % 60),
            h = (int)(splitmix64_next(&seed) % 24), st = 1 + (int)(splitmix64_next(&seed) % 30),
            wd = (int)(splitmix64_next(&seed) % 7);
        for (int i = 1; i < 32; i++)
            doms[i] = 1;
        for (int i = 0; i < 7; i++)
            dows[i] = 1;
        switch (kind) {
        case 0: /* daily at a minute (the hours of DST changes are favoured) */
            h = h % 2 ? h : 1 + h % 3;
            snprintf(expr, sizeof expr, "%d %d * * *", mi, h);
            mins[mi] = hours[h] = 1;
            break;
        case 1: /* every st minutes of an hour */
            h = 1 + h % 3;
            snprintf(expr, sizeof expr, "*/%d %d * * *", st, h);
            for (int i = 0; i < 60; i += st)
                mins[i] = 1;
            hours[h] = 1;
            break;
        case 2: /* a minute of every hour */
            snprintf(expr, sizeof expr, "%d * * * *", mi);
            mins[mi] = 1;
            for (int i = 0; i < 24; i++)
                hours[i] = 1;
            break;
        case 3: /* one weekday */
            snprintf(expr, sizeof expr, "%d %d * * %d", mi, h, wd);
            mins[mi] = hours[h] = 1;
            memset(dows, 0, sizeof dows);
            dows[wd] = 1;
            break;
        default: /* ranges of hours every 30 minutes */
            snprintf(expr, sizeof expr, "0,30 %d-%d * * *", h % 3, h % 3 + 2);
            mins[0] = mins[30] = 1;
            for (int i = h % 3; i <= h % 3 + 2; i++)
                hours[i] = 1;
            break;
        }
        const tz *z = zone(zones[splitmix64_next(&seed) % (sizeof zones / sizeof *zones)]);
        /* an instant within a few days of a transition (2020-2045), or anywhere */
        int64_t base = 1577836800 + (int64_t)(splitmix64_next(&seed) % (25ull * 365 * 86400));
        int64_t probe = base;
        for (int64_t k = 0; k < 400 * 86400 && off_at(z, probe) == off_at(z, base); k += 3600)
            probe = base + k;
        int64_t after = probe - (int64_t)(splitmix64_next(&seed) % (3 * 86400)) + (int64_t)(splitmix64_next(&seed) % 59);
        enum cron_gap g = (enum cron_gap)(splitmix64_next(&seed) % 2);
        enum cron_overlap o = (enum cron_overlap)(splitmix64_next(&seed) % 2);
        int64_t want = ref_next(mins, hours, doms, dows, z, g, o, after, 10 * 86400);
        if (want < 0)
            continue;
        cron_expr *c = parse(expr);
        cron_instant in;
        int rc = cron_next(c, z, g, o, after * 1000, &in);
        cron_free(c);
        if (rc < 0 || in.utc_ms / 1000 != want)
            fail_msg("'%s' in %s (gap %d, overlap %d) after %lld: cron_next %lld, reference %lld", expr, tz_name(z), g,
                     o, (long long)after, rc < 0 ? -1LL : (long long)(in.utc_ms / 1000), (long long)want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_field_forms_names_lists_steps_and_day_rules),
        cmocka_unit_test(test_errors_name_the_field_and_the_position),
        cmocka_unit_test(test_berlin_spring_gap_shifts_or_skips_and_autumn_overlap_runs_once_or_twice),
        cmocka_unit_test(test_lord_howe_half_hour_shift_and_new_york_weekdays),
        cmocka_unit_test(test_next_equals_a_brute_force_walk_for_random_schedules_zones_and_instants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
