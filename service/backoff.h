/* backoff.h - retry delays: exponential backoff with equal jitter, and the
 * Retry-After header.
 *
 * Pure functions, any thread. */
#ifndef HW_BACKOFF_H
#define HW_BACKOFF_H

#include <stdint.h>

/* Delay before the next attempt after `attempts` (>= 1) failed attempts:
 * with the ceiling c = min(max_ms, min_ms * 2^(attempts-1)), uniformly drawn
 * from [max(min_ms, c/2), c] using
 * the random value rnd (any 64-bit value; the caller draws it). Never below
 * min_ms, never above max_ms (max_ms < min_ms is treated as max_ms = min_ms).
 * No overflow for any input. */
uint64_t backoff_delay_ms(uint32_t attempts, uint64_t min_ms, uint64_t max_ms, uint64_t rnd);

/* Parses a Retry-After value (delta-seconds, or an HTTP-date as in
 * RFC 9110 section 10.2.3) against now_ms. Returns the delay in ms (0 for a date
 * in the past), or -1 when the value is invalid. */
int64_t backoff_parse_retry_after(const char *value, uint64_t now_ms);

/* splitmix64: a fast, well-mixed 64-bit generator step (state advanced in
 * place). Used for jitter and in tests and benchmarks. */
uint64_t splitmix64_next(uint64_t *state);

#endif
