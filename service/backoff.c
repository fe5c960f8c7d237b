/* backoff.c - retry delays and the Retry-After header.
 *
 * The delay after n failed attempts is drawn uniformly from the upper half
 * of its ceiling c = min(max, min * 2^(n-1)): [max(min, c/2), c] ("equal
 * jitter": a burst of failures spreads out instead of retrying in lockstep,
 * while the sum of the delays, and so how long a policy keeps retrying, has
 * a floor half its ceiling, so a ladder can promise "at least 12 h"). The ceiling is
 * computed by comparing min with max >> (n-1), so it never overflows, and the
 * draw maps rnd onto the range with a 64x64->128 multiply (Lemire), which
 * has no modulo bias worth the name and no division.
 *
 * Retry-After is either delta-seconds or an HTTP-date (RFC 9110 5.6.7): the
 * preferred IMF-fixdate and, as the RFC asks recipients to accept, the
 * obsolete RFC 850 and asctime forms. Dates are parsed with strptime in the
 * C locale's names (the service never calls setlocale) and converted with
 * timegm, as every HTTP-date is in GMT.
 */
#include "backoff.h"

#include <stddef.h>
#include <time.h>

/* Delays are capped at about 31 years: far beyond any sane Retry-After, and
 * small enough that seconds * 1000 cannot overflow. */
#define MAX_DELAY_S INT64_C(1000000000)

__extension__ typedef unsigned __int128 u128; /* GCC and Clang, any 64-bit target */

uint64_t backoff_delay_ms(uint32_t attempts, uint64_t min_ms, uint64_t max_ms, uint64_t rnd)
{
    uint32_t shift = attempts > 1 ? attempts - 1 : 0;
    uint64_t hi;
    if (min_ms == 0)
        return 0; /* the ceiling min * 2^(n-1) is 0 too */
    if (max_ms < min_ms)
        max_ms = min_ms;
    if (shift >= 64 || min_ms > (max_ms >> shift))
        hi = max_ms;
    else
        hi = min_ms << shift;
    uint64_t lo = hi / 2 > min_ms ? hi / 2 : min_ms;
    /* lo >= 1, so the range's size hi - lo + 1 cannot wrap. */
    uint64_t span = hi - lo + 1;
    return lo + (uint64_t)(((u128)rnd * span) >> 64);
}

static int is_ows(char c) { return c == ' ' || c == '\t'; }

/* Parses 1*DIGIT followed only by optional whitespace into *secs, saturating
 * at MAX_DELAY_S. Returns 0, or -1 when anything else is present. */
static int parse_delta_seconds(const char *s, int64_t *secs)
{
    int64_t v = 0;
    if (*s < '0' || *s > '9')
        return -1;
    for (; *s >= '0' && *s <= '9'; s++) {
        v = v * 10 + (*s - '0');
        if (v > MAX_DELAY_S)
            v = MAX_DELAY_S;
    }
    while (is_ows(*s))
        s++;
    if (*s != '\0')
        return -1;
    *secs = v;
    return 0;
}

/* The HTTP-date forms, preferred first. */
static const char *const http_date_formats[] = {
    "%a, %d %b %Y %H:%M:%S GMT", /* IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT */
    "%A, %d-%b-%y %H:%M:%S GMT", /* RFC 850:     Sunday, 06-Nov-94 08:49:37 GMT */
    "%a %b %e %H:%M:%S %Y",      /* asctime:     Sun Nov  6 08:49:37 1994 */
};

/* Parses an HTTP-date into epoch seconds. Returns 0, or -1 when s matches no
 * form in full. */
static int parse_http_date(const char *s, int64_t *epoch_s)
{
    size_t n = sizeof http_date_formats / sizeof http_date_formats[0];
    for (size_t i = 0; i < n; i++) {
        struct tm tm = {0};
        const char *end = strptime(s, http_date_formats[i], &tm);
        if (!end)
            continue;
        while (is_ows(*end))
            end++;
        if (*end != '\0')
            continue;
        *epoch_s = (int64_t)timegm(&tm);
        return 0;
    }
    return -1;
}

int64_t backoff_parse_retry_after(const char *value, uint64_t now_ms)
{
    int64_t secs, at_s;
    if (!value)
        return -1;
    while (is_ows(*value))
        value++;
    if (parse_delta_seconds(value, &secs) == 0)
        return secs * 1000;
    if (parse_http_date(value, &at_s) != 0)
        return -1;
    /* Compare in seconds first so that no product can overflow. */
    int64_t now_s = (int64_t)(now_ms / 1000);
    if (at_s <= now_s - 1)
        return 0;
    if (at_s - now_s > MAX_DELAY_S)
        return MAX_DELAY_S * 1000;
    int64_t delta = (at_s - now_s) * 1000 - (int64_t)(now_ms % 1000);
    return delta > 0 ? delta : 0;
}

uint64_t splitmix64_next(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}
