/* record.h - a timer as stored in Redis: one string of nine lines
 *   state, fire_ms, attempts, created, owner, when, last, run, spec
 * (created: "created_ms request_id", or created_ms alone)
 * (persistence/lua/_record.lua writes it; spec is compact JSON, last the
 * latest attempts as compact JSON objects, newest first, separated by tabs;
 * neither holds a raw newline). Any thread; pure. */
#ifndef HW_RECORD_H
#define HW_RECORD_H

#include <stddef.h>

enum { REC_STATE, REC_FIRE, REC_ATTEMPTS, REC_CREATED, REC_OWNER, REC_WHEN, REC_LAST, REC_RUN, REC_SPEC,
       REC_FIELDS };

typedef struct record {
    const char *f[REC_FIELDS]; /* point into the parsed text; not NUL-terminated */
    size_t len[REC_FIELDS];
} record;

/* The run line (persistence/lua/_record.lua): a recurring timer's state
 * word, numbers separated by spaces, missing ones zero. */
enum { RUN_VERSION, RUN_RUNS, RUN_RESERVED, RUN_FLAG, RUN_PLANNED, RUN_NEXT, RUN_TOKEN, RUN_FIELDS };
enum { RUN_FLAG_PAUSE = 1, RUN_FLAG_CANCEL = 2 }; /* what arrived during a run */

/* Splits text[0..len) into r. Returns 0, or -EINVAL when it has fewer than
 * nine lines. */
int record_parse(const char *text, size_t len, record *r);

/* The field's leading number, up to a space (0 when empty or not a number). */
long long record_int(const record *r, int field);

/* The id of the request that created the timer (the created line after its
 * first space) and its length; "" when there is none. */
const char *record_request_id(const record *r, size_t *len);

/* The run line's numbers into out[RUN_FIELDS]. */
void record_run(const record *r, long long out[RUN_FIELDS]);

#endif
