/* duration.h - "90s", "5m", "1h30m", "1500ms" as milliseconds, for
 * hookwheelctl's --in, --every and --timeout. Pure; any thread. */
#ifndef HW_CLI_DURATION_H
#define HW_CLI_DURATION_H

#include <stdint.h>

/* Parses one or more <digits><unit> parts, units d, h, m, s and ms, in any
 * order ("1h30m", "2m15s500ms"); "0" alone is 0. Returns 0 and sets *ms, or
 * -EINVAL for anything else (no unit, an unknown unit, a sum beyond
 * 2^53 ms, which JSON numbers keep exactly). */
int duration_parse(const char *s, int64_t *ms) __attribute__((warn_unused_result));

#endif
