/* api.h - hookwheel's HTTP API: the route table and its handlers.
 *
 * Handlers run on libmicrohttpd threads; they validate, queue their Redis
 * work on the store and return; the store's writer thread answers from the
 * command's callback. No handler waits on Redis. */
#ifndef HW_API_H
#define HW_API_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "engine.h"
#include "http.h"
#include "metrics.h"
#include "netpolicy.h"
#include "spec.h"
#include "store.h"
#include "timers.h"
#include "trace.h"

typedef struct api {
    const config *cfg;
    store *st;
    engine *eng;
    timers *tm; /* the engine's timer verbs */
    spec_limits lim;
    metrics *m; /* set by the caller after api_init; NULL: /metrics answers 503 */
    atomic_int counts_busy;          /* /metrics: a read of the queue counts is in flight */
    _Atomic uint64_t counts_read_ms; /* /metrics: when the last one was asked for */
    _Atomic(struct counts_answers *) counts_new; /* /metrics: the last read's answers, for the next scrape to sum */
} api;

/* The route table (api/routes.c): every endpoint of the API. */
extern const http_route api_routes[];
extern const size_t api_route_count;

/* Handlers (http_handler_cb), by resource. */
void api_timer_create(http_req *r, const char *const *params, void *app); /* timers.c */
void api_timer_batch(http_req *r, const char *const *params, void *app);  /* batch.c */
void api_timers_cancel(http_req *r, const char *const *params, void *app); /* select.c */
void api_timers_pause(http_req *r, const char *const *params, void *app);
void api_timers_resume(http_req *r, const char *const *params, void *app);
void api_timers_reschedule(http_req *r, const char *const *params, void *app);
void api_timer_get(http_req *r, const char *const *params, void *app);
void api_timer_cancel(http_req *r, const char *const *params, void *app);
void api_timer_list(http_req *r, const char *const *params, void *app); /* listing.c */
void api_timer_fire(http_req *r, const char *const *params, void *app);
void api_timer_reschedule(http_req *r, const char *const *params, void *app);
void api_timer_pause(http_req *r, const char *const *params, void *app);
void api_timer_resume(http_req *r, const char *const *params, void *app);
void api_timer_retry(http_req *r, const char *const *params, void *app);
void api_dead_letters_replay(http_req *r, const char *const *params, void *app); /* deadletters.c */
void api_dead_letters_purge(http_req *r, const char *const *params, void *app);
void api_queue_list(http_req *r, const char *const *params, void *app); /* queues.c */
void api_queue_get(http_req *r, const char *const *params, void *app);
void api_queue_put(http_req *r, const char *const *params, void *app);
void api_queue_patch(http_req *r, const char *const *params, void *app);
void api_queue_delete(http_req *r, const char *const *params, void *app);
void api_lease_acquire(http_req *r, const char *const *params, void *app); /* leases.c */
void api_lease_heartbeat(http_req *r, const char *const *params, void *app);
void api_lease_get(http_req *r, const char *const *params, void *app);
void api_lease_release(http_req *r, const char *const *params, void *app);
void api_healthz(http_req *r, const char *const *params, void *app);
void api_readyz(http_req *r, const char *const *params, void *app);
void api_metrics(http_req *r, const char *const *params, void *app); /* metrics_api.c */
void api_schedule_preview(http_req *r, const char *const *params, void *app); /* schedules.c */
void api_stats(http_req *r, const char *const *params, void *app);            /* stats.c */
void api_lease_list(http_req *r, const char *const *params, void *app);       /* leases.c */
void api_ui_redirect(http_req *r, const char *const *params, void *app); /* ui.c: the dashboard */
void api_ui_index(http_req *r, const char *const *params, void *app);
void api_ui_file(http_req *r, const char *const *params, void *app);

/* Fills a for the handlers (http_start's app pointer); cfg, st, eng and
 * policy (the destination policy checked on every new timer's URL; NULL:
 * none) must outlive the server. */
void api_init(api *a, const config *cfg, store *st, engine *eng, const netpolicy *policy);
/* Frees what a is left holding, once no callback of its store can run. */
void api_fini(api *a);

/* The Timer resource from a stored timer v of key id `id`, as malloc'd
 * JSON text (*len set); NULL when its spec is unreadable. */
char *api_timer_from_view(const char *id, const timer_view *v, size_t *len);

/* The answers every resource gives alike (timers.c): 503 + Retry-After when
 * Redis did not answer (a write may have been made: the detail says so,
 * or, to a GET, that a read changes nothing), and the answer to a store
 * submit that failed at once (-EAGAIN: 429, the write queue is full; else
 * 503, stopping). */
void api_respond_unavailable(http_req *r);

/* 503 + Retry-After for a write Redis refused before running it, saying
 * why (refusal: STORE_REFUSES_MEMORY, maxmemory reached, or
 * STORE_REFUSES_DISK, its AOF or RDB could not be written) and that
 * `not_done` ("the timer was not stored"): nothing was written, unlike the
 * unanswered write api_respond_unavailable describes. Returns 1 when it
 * answered, 0 (nothing answered) when refusal is 0. */
int api_respond_refused(http_req *r, int refusal, const char *not_done);
/* A timers call that failed (status < 0, persistence/timers.h): refused
 * (api_respond_refused, saying not_done) or unanswered (api_respond_unavailable). */
void api_respond_timers_failed(http_req *r, int status, const char *not_done);
void api_respond_submit_error(http_req *r, int rc);

/* A request body that must be a JSON object (duplicate keys refused): the
 * object, or NULL after answering 400 (no field) with why the JSON is
 * malformed, or with not_object when it is JSON of another kind. */
json_t *api_body_object(http_req *r, const char *body, size_t len, const char *not_object);

/* Writes prefix + name (an id, queue name or lease key, whose characters
 * need no escape) as a path for a Location header: a name that is a dot
 * segment ("." or "..") is percent-encoded, so a client keeps it. */
void api_location(char *out, size_t size, const char *prefix, const char *name);

/* The id a client knows from a key id ("namespace/id" or "id"). */
const char *api_public_id(const char *key_id);

/* Timers are stored under "<namespace>/<id>" when the API runs with tokens
 * (auth.h), and under "<id>" without: neither a namespace nor an id holds a
 * '/', so the key id is unambiguous, ids are unique per namespace, and a
 * caller can only ever name its own namespace's timers. A key id is at most
 * 64 + 1 + 128 bytes (a callback timer's adds its suffix). */
#define KEY_ID_MAX 200
void api_key_id(char *out, size_t size, const char *ns, const char *id);

/* The W3C trace context a create request brings (api/timers.c): one valid
 * traceparent header and its tracestate, as much as a timer keeps; none
 * (trace.parent_len 0) when the header is absent or invalid, which W3C says
 * is no error. trace points into the struct. */
typedef struct api_trace {
    timer_trace trace;
    char parent[TRACE_PARENT_LEN + 1];
    char state[TIMERS_TRACESTATE_MAX + 1];
} api_trace;
void api_request_trace(const http_req *r, api_trace *t);

/* A new timer id: 32 hex digits of getrandom (malloc'd). */
char *api_new_id(void);

/* A number in a query parameter or cursor: s[0..len) is 1 to 18 ASCII
 * digits, without a leading zero (as JSON writes an integer; no sign,
 * space or other form strtoul would take), and at most max. Sets *out and
 * returns 0, else -1. */
int api_number(const char *s, size_t len, unsigned long long max, unsigned long long *out);

/* 1 when s is "key:value", a label a timer may have (spec.h), else 0. */
int api_label_valid(const char *s);

/* Builds the Timer resource (openapi.yaml) as JSON text from a timer's
 * stored fields: the canonical spec (a JSON object, see spec.h) with the
 * state fields appended, so nothing is parsed or re-encoded. last is the
 * stored attempts line (record.h: attempt objects, newest first, separated
 * by tabs) or NULL. Returns malloc'd text (*len set), or
 * NULL when spec is not a JSON object's text. Any thread. */
char *api_timer_text(const char *id, const char *spec, size_t spec_len, const char *state,
                     long long fire_ms, long long created_ms, long long attempts, long long version,
                     long long runs, const char *last, size_t last_len, size_t *len);

#endif
