/* clock.c - RFC 3339 formatting and parsing of epoch milliseconds.
 *
 * The parser is strict on purpose: it accepts exactly
 * "YYYY-MM-DD(T|t)HH:MM:SS[.fraction](Z|z|+HH:MM|-HH:MM)" and nothing after
 * it, checks every field's range (including the days of February in leap
 * years) and keeps millisecond precision, truncating further digits. A due
 * time that is silently normalised (2026-02-30 becoming March 2nd) would fire
 * a webhook on a day the client never asked for, so such dates are errors. */
#include "clock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "civil.h"

/* 9999-12-31T23:59:59.999Z: the last instant with a four-digit year. */
#define CLOCK_MAX_MS 253402300799999ull

/* Writes v as exactly n decimal digits at p. */
static void put_digits(char *p, unsigned v, int n)
{
    for (int i = n - 1; i >= 0; i--, v /= 10)
        p[i] = (char)('0' + v % 10);
}

void clock_format_rfc3339(uint64_t ms, char *buf, size_t size)
{
    /* Later instants would need a five-digit year and overflow the
     * documented 25-byte buffer, so they are clamped. */
    if (ms > CLOCK_MAX_MS)
        ms = CLOCK_MAX_MS;
    if (size == 0)
        return;
    uint64_t secs = ms / 1000;
    unsigned sod = (unsigned)(secs % 86400);
    int64_t y;
    int mo, d; /* civil_from_days, not gmtime_r: glibc takes its global time-zone lock in it */
    civil_from_days((int64_t)(secs / 86400), &y, &mo, &d);
    char t[25] = "YYYY-MM-DDTHH:MM:SS.mmmZ";
    put_digits(t, (unsigned)y, 4);
    put_digits(t + 5, (unsigned)mo, 2);
    put_digits(t + 8, (unsigned)d, 2);
    put_digits(t + 11, sod / 3600, 2);
    put_digits(t + 14, sod / 60 % 60, 2);
    put_digits(t + 17, sod % 60, 2);
    put_digits(t + 20, (unsigned)(ms % 1000), 3);
    size_t n = size - 1 < 24 ? size - 1 : 24; /* like snprintf: truncated, always terminated */
    memcpy(buf, t, n);
    buf[n] = '\0';
}

/* Reads exactly n decimal digits at *p into *out and advances *p. */
static int digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        char c = (*p)[i];
        if (c < '0' || c > '9')
            return -EINVAL;
        v = v * 10 + (c - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

/* Reads n digits, then requires the separator sep (unless sep is '\0'). */
static int field(const char **p, int n, char sep, int *out)
{
    if (digits(p, n, out) < 0)
        return -EINVAL;
    if (sep == '\0')
        return 0;
    if (**p != sep)
        return -EINVAL;
    (*p)++;
    return 0;
}


/* Reads an optional ".digits" fraction as milliseconds. */
static int fraction(const char **p, int *ms)
{
    *ms = 0;
    if (**p != '.')
        return 0;
    (*p)++;
    if (**p < '0' || **p > '9')
        return -EINVAL;
    for (int scale = 100; **p >= '0' && **p <= '9'; (*p)++, scale /= 10)
        *ms += (**p - '0') * scale;
    return 0;
}

/* Reads "Z", "z" or "+HH:MM"/"-HH:MM" as minutes east of UTC. */
static int offset(const char **p, int *minutes)
{
    char sign = **p;
    int hh, mm;
    *minutes = 0;
    if (sign == 'Z' || sign == 'z') {
        (*p)++;
        return 0;
    }
    if (sign != '+' && sign != '-')
        return -EINVAL;
    (*p)++;
    if (field(p, 2, ':', &hh) < 0 || field(p, 2, '\0', &mm) < 0 || hh > 23 || mm > 59)
        return -EINVAL;
    *minutes = (sign == '-' ? -1 : 1) * (hh * 60 + mm);
    return 0;
}

int clock_parse_rfc3339(const char *s, int64_t *out_ms)
{
    struct tm tm = {0};
    int year, month, day, hour, min, sec, ms, off;
    const char *p = s;

    if (!s)
        return -EINVAL;
    if (field(&p, 4, '-', &year) < 0 || field(&p, 2, '-', &month) < 0 ||
        field(&p, 2, '\0', &day) < 0 || (*p != 'T' && *p != 't'))
        return -EINVAL;
    p++;
    if (field(&p, 2, ':', &hour) < 0 || field(&p, 2, ':', &min) < 0 ||
        field(&p, 2, '\0', &sec) < 0 || fraction(&p, &ms) < 0 || offset(&p, &off) < 0 || *p)
        return -EINVAL;
    if (month < 1 || month > 12 || day < 1 || day > civil_days_in_month(year, month) || hour > 23 ||
        min > 59 || sec > 60)
        return -EINVAL;
    tm.tm_year = year - 1900;
    tm.tm_mon = month - 1;
    tm.tm_mday = day;
    tm.tm_hour = hour;
    tm.tm_min = min;
    tm.tm_sec = sec; /* a leap second (60) rolls over into the next minute */
    *out_ms = (int64_t)timegm(&tm) * 1000 + ms - (int64_t)off * 60000;
    return 0;
}
