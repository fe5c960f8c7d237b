/* clock.h - wall-clock time in milliseconds, and the monotonic clock.
 *
 * Due times are wall-clock epoch milliseconds because they are shared through
 * Redis by every instance; each instance must run with a synchronised clock
 * (NTP). Any thread. */
#ifndef HW_CLOCK_H
#define HW_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline uint64_t clock_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The monotonic clock: for durations and deadlines within this process,
 * which a step of the wall clock (NTP, an operator's date) must not move. */
static inline uint64_t clock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline uint64_t clock_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Formats epoch milliseconds as RFC 3339 UTC with milliseconds
 * ("2026-01-02T03:04:05.678Z") into buf (at least 25 bytes). */
void clock_format_rfc3339(uint64_t ms, char *buf, size_t size);

/* Parses an RFC 3339 date-time (with "Z" or a numeric offset, optional
 * fraction) into epoch milliseconds. Returns 0, or -EINVAL. */
int clock_parse_rfc3339(const char *s, int64_t *out_ms);

#endif
