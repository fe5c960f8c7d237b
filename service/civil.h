/* civil.h - the proleptic Gregorian calendar in whole days.
 *
 * Header only; any thread; pure. Days are counted from 1970-01-01 (day 0,
 * a Thursday) and may be negative; years are any int64. Howard Hinnant's
 * days_from_civil and civil_from_days: no table, no loop, no time-zone
 * state (gmtime_r and timegm take glibc's global time-zone lock). */
#ifndef HW_CIVIL_H
#define HW_CIVIL_H

#include <stdint.h>

/* a / b rounded towards minus infinity (b > 0). */
static inline int64_t civil_floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); }

static inline int civil_is_leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static inline int civil_days_in_month(int64_t y, int m)
{
    static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && civil_is_leap(y) ? 29 : dim[m - 1];
}

/* The day of y-m-d (m 1-12, d 1-31). */
static inline int64_t civil_days_from(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = civil_floor_div(y, 400);
    int64_t yoe = y - era * 400;                                   /* [0, 399] */
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1; /* [0, 365] */
    return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
}

/* The date of day `days`. */
static inline void civil_from_days(int64_t days, int64_t *y, int *m, int *d)
{
    int64_t z = days + 719468; /* days from 0000-03-01 */
    int64_t era = civil_floor_div(z, 146097);
    int64_t doe = z - era * 146097;                                /* [0, 146096] */
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* [0, 399] */
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);        /* [0, 365] */
    int64_t mp = (5 * doy + 2) / 153;                              /* [0, 11], March first */
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* The weekday of day `days`: 0 Sunday ... 6 Saturday. */
static inline int civil_weekday(int64_t days) { return (int)((days % 7 + 11) % 7); }

#endif
