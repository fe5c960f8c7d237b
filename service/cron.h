/* cron.h - cron expressions and their next instants in a time zone.
 *
 * Any thread; pure but for the zones it reads (tzfile.h).
 *
 * Expressions: 5 fields (minute hour day-of-month month day-of-week) or 6
 * (second first), separated by spaces or tabs, at most CRON_EXPR_MAX bytes;
 * or a macro: @yearly @annually (0 0 1 1 *), @monthly (0 0 1 * *), @weekly
 * (0 0 * * 0), @daily @midnight (0 0 * * *), @hourly (0 * * * *). A field
 * is a list of items: `*` (and `?` in the day fields), a number, a range
 * `a-b`, each with an optional step `/n`, or `a/n` (from a to the field's
 * end); months JAN-DEC and days SUN-SAT by name in any case; day-of-week
 * 0-7, 0 and 7 both Sunday. The day-of-month field may be `L` (the last
 * day of the month); the day-of-week field may hold `dL` (the month's last
 * weekday d, e.g. 5L) and `d#k` (its k-th weekday d, k 1-5, e.g. MON#1).
 * `W` is not supported. Standard (Vixie) cron's day rule: when both day
 * fields are restricted (neither starts with `*` or `?`), a day matches
 * when either does; otherwise it must match both (so `*` + `/10` in
 * day-of-month is the 1st, 11th, 21st and 31st of every month).
 *
 * Next instants are computed in local time of the zone and mapped to UTC
 * by the zone's offsets, with a DST policy (see cron_next), stepping field
 * by field (month, day, hour, minute, second), never second by second. */
#ifndef HW_CRON_H
#define HW_CRON_H

#include <stdint.h>

#include "tzfile.h"

#define CRON_EXPR_MAX 256

typedef struct cron_expr cron_expr;

typedef struct cron_error {
    char field[16]; /* "second", "minute", "hour", "day_of_month", "month", "day_of_week" or "expression" */
    int position;   /* 1-based byte offset in the expression where the problem starts */
    char msg[160];  /* one sentence, e.g. "minute 61 is out of range 0-59" */
} cron_error;

/* Parses expr. Returns 0 and *out (cron_free), or -1 with err filled. */
int cron_parse(const char *expr, cron_expr **out, cron_error *err);
void cron_free(cron_expr *c);
int cron_has_seconds(const cron_expr *c); /* the 6-field form */

enum cron_gap { CRON_GAP_SHIFT, CRON_GAP_SKIP };             /* a local time that does not exist */
enum cron_overlap { CRON_OVERLAP_FIRST, CRON_OVERLAP_BOTH }; /* a local time that exists twice */
enum { CRON_SHIFTED = 1, CRON_SECOND_OCCURRENCE = 2 };       /* flags of an instant */

typedef struct cron_instant {
    int64_t utc_ms; /* whole seconds */
    int flags;      /* CRON_SHIFTED: its local time did not exist (a DST gap) and it runs at the gap's
                       end; CRON_SECOND_OCCURRENCE: the second of two instants with its local time */
} cron_instant;

/* The first instant strictly after after_ms at which the schedule fires in
 * zone z. A slot whose local time is in a gap runs at the gap's end (the
 * transition instant) with SHIFT - several slots in one gap give one run -
 * and not at all with SKIP; a local time that exists twice runs at its
 * first occurrence with FIRST, at both with BOTH. Returns 0, or -1 when
 * there is none within 10 years after after_ms (e.g. "0 0 30 2 *"). */
int cron_next(const cron_expr *c, const tz *z, enum cron_gap gap, enum cron_overlap ov, int64_t after_ms,
              cron_instant *out);

#endif
