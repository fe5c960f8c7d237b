/* spec.h - a timer's specification: validation of a POST /timers body and its
 * canonical form.
 *
 * Any thread; no shared state. spec_parse is the single parser for timer
 * specs: the API validates client input with it (with limits), and the engine
 * re-reads the canonical form stored in Redis with it (limits NULL).
 *
 * The canonical form is the effective spec as compact JSON with sorted keys
 * and defaults applied, without the id and without the due time:
 *   {"body"|"json", "headers", "method", "queue",
 *    "labels", "on_failure", "on_success" (when given), "repeat":{"every_ms","mode","times"} (recurring timers only),
 *    "retry":{"max_attempts","max_backoff_ms","max_duration_ms" (when set),"min_backoff_ms"},
 *    "timeout_ms", "url"}
 * It is exactly the spec part of the Timer resource the API returns, so the
 * API answers by appending the state fields to it, without re-encoding.
 * The due time as the client gave it is kept apart, in `when`
 * ("delay_ms=1500", or "fire_at_ms=<ms>" for fire_at and fire_at_ms). Two
 * requests are "the same spec" for idempotency exactly when both their
 * canonical forms and their `when` are equal.
 *
 * The stored form is the canonical form without the members that equal the
 * contract's defaults below (method POST, queue "default", no headers,
 * timeout_ms and retry at their defaults): a pending timer's bytes in Redis
 * are mostly its own body and URL. Parsing it with lim NULL gives the
 * canonical form back, and equal canonical forms have equal stored forms. */

#define SPEC_DEFAULT_TIMEOUT_MS 10000
/* The default retry policy: backoff doubling from 1 s to 1 h, each delay
 * drawn from the upper half of its ceiling (backoff.h), 36 attempts: a
 * failing target is retried for at least 12 h (12.07 h) and at most 24.2 h
 * after the first attempt (README: the retry ladder). */
#define SPEC_DEFAULT_MAX_ATTEMPTS 36
#define SPEC_DEFAULT_MIN_BACKOFF_MS 1000
#define SPEC_DEFAULT_MAX_BACKOFF_MS 3600000
/* The shortest period of a recurring timer (repeat.every_ms, and the floor
 * of a Hookwheel-Next-Delay-Ms answer): shorter periods are below any
 * sensible tick. */
#define SPEC_MIN_EVERY_MS 10
/* How deep a `json` body may nest arrays and objects. Every component that
 * reads the stored spec must handle it with room to spare: Redis's cjson
 * refuses more than 1000 levels, and listings with a queue filter decode the
 * spec in Lua. Deeper bodies are refused with a 400 naming `json`. */
#define SPEC_MAX_JSON_DEPTH 64
#ifndef HW_SPEC_H
#define HW_SPEC_H

#include <stddef.h>
#include <stdint.h>

struct netpolicy;
struct cron_expr;
struct tz;

typedef struct spec_limits {
    size_t max_url_len;           /* bytes of `url` */
    uint32_t max_headers;         /* entries in `headers` */
    size_t max_header_bytes;      /* bytes of one header name + value */
    uint64_t max_delay_ms;        /* horizon: fire time at most now + this */
    uint32_t max_timeout_ms;      /* cap of `timeout_ms` */
    uint32_t max_attempts;        /* cap of `retry.max_attempts` */
    uint64_t max_backoff_cap_ms;  /* cap of `retry.max_backoff_ms` */
    uint32_t default_timeout_ms;
    uint32_t default_max_attempts;
    uint64_t default_min_backoff_ms;
    uint64_t default_max_backoff_ms;
    const struct netpolicy *policy; /* NULL: the URL's host is not checked */
    size_t max_stored_bytes;      /* the spec as stored (timer_spec.stored): 413 beyond; 0: no limit */
} spec_limits;

typedef struct spec_error {
    int status;        /* HTTP status to answer: 400, or 413 for a spec over max_stored_bytes */
    char field[96];    /* offending field as a dotted path ("retry.max_attempts",
                          "headers.X-Foo"), or "" when the whole body is at fault */
    char detail[256];  /* one sentence for a human */
} spec_error;

typedef struct timer_spec {
    char *id;              /* client-chosen id, or NULL */
    char *url;
    char method[8];        /* GET HEAD POST PUT PATCH DELETE OPTIONS */
    char **headers;        /* nheaders lines "Name: value", as given */
    uint32_t nheaders;
    char *body;            /* request body to send (NULL: none); for `json`, its compact dump */
    size_t body_len;
    int body_is_json;      /* 1 when given as `json`: sent as application/json */
    int has_content_type;  /* 1 when headers set Content-Type */
    int64_t fire_at_ms;    /* resolved due time, epoch ms */
    uint32_t timeout_ms;
    uint32_t max_attempts;
    uint64_t min_backoff_ms;
    uint64_t max_backoff_ms;
    uint64_t max_duration_ms; /* retry.max_duration_ms: a run's retries end this long after it
                                 was due (0: no such bound) */
    char *queue;           /* "default" when not given */
    uint64_t every_ms;     /* repeat.every_ms; 0: a one-shot timer or a calendar schedule */
    int fixed_rate;        /* repeat.mode is fixed_rate (else fixed_delay) */
    uint32_t times;        /* repeat.times; 0: no limit */
    /* a calendar schedule (repeat.cron; NULL: none) and its settings */
    char *cron;                 /* the expression as given */
    struct cron_expr *cron_x;   /* parsed */
    const struct tz *tz;        /* repeat.tz (UTC by default); process-wide, never freed */
    int dst_gap;                /* enum cron_gap: repeat.dst_gap */
    int dst_overlap;            /* enum cron_overlap: repeat.dst_overlap */
    int64_t start_at_ms;        /* repeat.start_at: no slot before it (0: none) */
    int64_t end_at_ms;          /* repeat.end_at: no slot after it (0: none) */
    int misfire_fire_once;      /* repeat.misfire: 1 fire_once, 0 skip */
    int has_callbacks;     /* on_success or on_failure is set (their URLs are in the stored form) */
    char **labels;         /* nlabels "key:value" lines, sorted by key */
    uint32_t nlabels;
    char *canonical;       /* canonical JSON, see above */
    char *stored;          /* the form kept in Redis, see below */
    size_t stored_len;
    char when[40];         /* the due time as given, see above ("" for a stored spec) */
} timer_spec;

/* Validates the JSON text json[0..len) against lim (NULL: no limits, for
 * specs read back from Redis) and resolves delay_ms against now_ms. With lim
 * NULL no time field is required (a stored canonical spec has none; the
 * caller knows the due time); fire_at_ms is then now_ms.
 * Returns 0 and *out (free with spec_free), or -EINVAL with *err filled and
 * *out untouched. Unknown fields, wrong types and out-of-range values are
 * errors naming the field. */
int spec_parse(const char *json, size_t len, const spec_limits *lim, uint64_t now_ms,
               timer_spec **out, spec_error *err) __attribute__((warn_unused_result));

/* spec_parse of an already parsed JSON value (an item of POST
 * /timers/batch); v is not taken. */
struct json_t;
int spec_parse_value(struct json_t *v, const spec_limits *lim, uint64_t now_ms, timer_spec **out,
                     spec_error *err) __attribute__((warn_unused_result));

/* Labels (`labels`): at most SPEC_MAX_LABELS pairs, keys of 1 to
 * SPEC_LABEL_KEY_MAX characters of [A-Za-z0-9._-], values of 1 to
 * SPEC_LABEL_VALUE_MAX characters of [A-Za-z0-9._:@+=-]. A selector names
 * one as "key:value" (the first ':' separates them). */
#define SPEC_MAX_LABELS 16
#define SPEC_LABEL_KEY_MAX 64
#define SPEC_LABEL_VALUE_MAX 64
int spec_label_key_valid(const char *k);
int spec_label_value_valid(const char *v);
/* "key:value" (malloc'd), the form labels are indexed and selected by. */
char *spec_label_line(const char *key, const char *value);

/* Validates a body that holds only a due time (one of delay_ms, fire_at,
 * fire_at_ms; POST /timers/{id}/reschedule) against lim (not NULL) and
 * resolves it against now_ms into *fire_ms. Returns 0, or -EINVAL with *err
 * filled. */
int spec_parse_when(const char *json, size_t len, const spec_limits *lim, uint64_t now_ms,
                    int64_t *fire_ms, spec_error *err) __attribute__((warn_unused_result));

/* The rules for a URL hookwheel will call (a timer's url, a lease's
 * probe_url): http or https, a host, no user-info, and, with policy, a host
 * the destination policy allows. Returns 0, or -EINVAL with *err naming
 * field. */
int spec_check_url(spec_error *err, const char *field, const char *url, const struct netpolicy *policy);

/* 1 for a recurring timer (it has runs: repeat), 0 for a one-shot. */
static inline int spec_recurring(const timer_spec *s) { return s->every_ms != 0 || s->cron_x != NULL; }

/* A calendar schedule's first slot strictly after after_ms within its
 * bounds (start_at, end_at) and by its DST policy: returns 0 with *next_ms
 * (and *flags, may be NULL: CRON_SHIFTED, CRON_SECOND_OCCURRENCE), or -1
 * when there is none (past end_at, none within 10 years, not a calendar
 * schedule). */
int spec_next_slot(const timer_spec *s, int64_t after_ms, int64_t *next_ms, int *flags);

/* Frees s. NULL is a no-op. */
void spec_free(timer_spec *s);

/* Timer ids a client may not choose: hookwheel names a lease's on_expire
 * timer lease:<key>:<token>. */
#define SPEC_RESERVED_ID_PREFIX "lease:"

#define SPEC_ID_MAX 128 /* bytes of a timer id */

/* 1 if id matches [A-Za-z0-9._:-]{1,SPEC_ID_MAX}, else 0. */
int spec_id_valid(const char *id);

/* 1 if q is a queue name, [A-Za-z0-9._-]{1,64}, else 0. */
int spec_queue_valid(const char *q);

/* A callback timer's id: "<id>#on_success.<version>" or
 * "<id>#on_failure.<version>" (finish.lua makes it; '#' is no id character,
 * so it is never a client's, and the partition is the parent's: keys.h). */
#define SPEC_CALLBACK_SEP '#'
/* 1 if id names a timer: spec_id_valid, or a callback timer's id. */
int spec_lookup_id_valid(const char *id);

#endif
