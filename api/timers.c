/* timers.c - the /timers, /healthz and /readyz handlers.
 *
 * Each handler validates on the libmicrohttpd thread, then submits one
 * script or command to the store with a small context; the callback, on the
 * store's writer thread, answers the request and frees the context. A 2xx is
 * only ever sent from a callback that saw Redis's reply (DESIGN §1). */
#include "api.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "clock.h"
#include "jsonesc.h"
#include "jsonload.h"
#include "oneshot.h"
#include "log.h"
#include "trace.h"
#include "xalloc.h"

#define RETRY_AFTER_S 1

void api_init(api *a, const config *cfg, store *st, engine *eng, const netpolicy *policy)
{
    a->cfg = cfg;
    a->st = st;
    a->eng = eng;
    a->tm = engine_timers(eng);
    a->lim = (spec_limits){
        .max_url_len = cfg->max_url_bytes,
        .max_headers = (uint32_t)cfg->max_headers,
        .max_header_bytes = cfg->max_header_bytes,
        .max_delay_ms = cfg->max_delay_ms,
        .max_timeout_ms = (uint32_t)cfg->max_timeout_ms,
        .max_attempts = (uint32_t)cfg->max_attempts,
        .max_backoff_cap_ms = cfg->max_backoff_ms,
        .default_timeout_ms = (uint32_t)cfg->default_timeout_ms,
        .default_max_attempts = (uint32_t)cfg->default_max_attempts,
        .default_min_backoff_ms = cfg->default_min_backoff_ms,
        .default_max_backoff_ms = cfg->default_max_backoff_ms,
        .policy = policy,
        .max_stored_bytes = cfg->max_body_bytes,
    };
}

/* ---- namespaces ---- */

void api_key_id(char *out, size_t size, const char *ns, const char *id)
{
    snprintf(out, size, "%s%s%s", ns, ns[0] ? "/" : "", id);
}

const char *api_public_id(const char *key_id)
{
    const char *slash = strrchr(key_id, '/');
    return slash ? slash + 1 : key_id;
}

void api_location(char *out, size_t size, const char *prefix, const char *name)
{
    /* "." and ".." are valid names, but a client removes such a path
     * segment (RFC 3986 5.2.4) and would ask for another resource. */
    int dots = strcmp(name, ".") == 0 ? 1 : strcmp(name, "..") == 0 ? 2 : 0;
    snprintf(out, size, "%s%s", prefix, dots == 1 ? "%2E" : dots == 2 ? "%2E%2E" : name);
}

int api_number(const char *s, size_t len, unsigned long long max, unsigned long long *out)
{
    unsigned long long n = 0;
    if (!s || len < 1 || len > 18 || (len > 1 && s[0] == '0'))
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        n = n * 10 + (unsigned long long)(s[i] - '0');
    }
    if (n > max)
        return -1;
    *out = n;
    return 0;
}

int api_label_valid(const char *s)
{
    const char *colon = s ? strchr(s, ':') : NULL;
    char key[SPEC_LABEL_KEY_MAX + 2];
    if (!colon || (size_t)(colon - s) > SPEC_LABEL_KEY_MAX)
        return 0;
    snprintf(key, sizeof key, "%.*s", (int)(colon - s), s);
    return spec_label_key_valid(key) && spec_label_value_valid(colon + 1);
}

/* ---- the Timer resource ---- */

char *api_timer_text(const char *id, const char *spec, size_t spec_len, const char *state,
                     long long fire_ms, long long created_ms, long long attempts, long long version,
                     long long runs, const char *last, size_t last_len, size_t *len)
{
    if (!spec || spec_len < 2 || spec[0] != '{' || spec[spec_len - 1] != '}')
        return NULL;
    if (!last || last_len < 2 || last[0] != '{')
        last_len = 0; /* no attempt yet */
    const char *tab = last_len ? memchr(last, '\t', last_len) : NULL;
    size_t first_len = tab ? (size_t)(tab - last) : last_len;
    char fire[32], created[32];
    id = api_public_id(id);
    clock_format_rfc3339((uint64_t)fire_ms, fire, sizeof fire);
    clock_format_rfc3339((uint64_t)created_ms, created, sizeof created);
    size_t cap = spec_len + strlen(id) + (state ? strlen(state) : 7) + 2 * last_len + 300;
    char *t = xmalloc(cap);
    memcpy(t, spec, spec_len - 1);
    size_t n = spec_len - 1;
    /* Appended piece by piece: this runs for every create's answer, and
     * snprintf was most of its cost. */
#define PUT(str) (memcpy(t + n, (str), strlen(str)), n += strlen(str))
    if (spec_len > 2)
        t[n++] = ',';
    PUT("\"id\":\"");
    PUT(id);
    PUT("\",\"state\":\"");
    PUT(state ? state : "unknown");
    PUT("\",\"fire_at\":\"");
    PUT(fire);
    PUT("\",\"fire_at_ms\":");
    n += json_int(t + n, fire_ms);
    PUT(",\"created_at\":\"");
    PUT(created);
    PUT("\",\"attempts\":");
    n += json_int(t + n, attempts);
    PUT(",\"version\":");
    n += json_int(t + n, version);
    PUT(",\"runs\":");
    n += json_int(t + n, runs);
    PUT(",\"last_attempt\":");
#undef PUT
    if (first_len) {
        memcpy(t + n, last, first_len);
        n += first_len;
    } else {
        memcpy(t + n, "null", 4);
        n += 4;
    }
    memcpy(t + n, ",\"attempt_history\":[", 20);
    n += 20;
    for (size_t i = 0; i < last_len; i++) /* the tab-separated attempts, newest first */
        t[n++] = last[i] == '\t' ? ',' : last[i];
    t[n++] = ']';
    t[n++] = '}';
    t[n] = '\0';
    *len = n;
    return t;
}

/* Puts member (",\"name\":value") last in the Timer text t of *len bytes;
 * returns the text, reallocated. */
static char *splice_member(char *t, size_t *len, const char *member)
{
    size_t k = strlen(member);
    t = xrealloc(t, *len + k + 1);
    memcpy(t + *len - 1, member, k);
    memcpy(t + *len - 1 + k, "}", 2);
    *len += k;
    return t;
}

/* Adds trace_id to the Timer text t (NULL: none) of a timer created with a
 * trace context. */
static char *with_trace_id(char *t, size_t *len, const timer_trace *tr)
{
    char id[33];
    if (!t || tr->parent_len != TRACE_PARENT_LEN)
        return t;
    snprintf(id, sizeof id, "%.32s", tr->parent + 3);
    if (strspn(id, "0123456789abcdef") != 32)
        return t;
    char member[48];
    snprintf(member, sizeof member, ",\"trace_id\":\"%s\"", id);
    return splice_member(t, len, member);
}

/* The Timer from a stored timer; NULL when its spec is unreadable. The
 * stored spec is the compact form, so it is parsed back to the canonical
 * one first (reads only: GET, cancel, idempotent repeats, listings). */
char *api_timer_from_view(const char *id, const timer_view *v, size_t *len)
{
    timer_spec *spec = NULL;
    spec_error err;
    if (!v || spec_parse(v->spec, v->spec_len, NULL, 0, &spec, &err) < 0)
        return NULL;
    char *t = api_timer_text(id, spec->canonical, strlen(spec->canonical), v->state, v->fire_ms, v->created_ms,
                             v->attempts, (long long)v->version, (long long)v->runs, v->history, v->history_len,
                             len);
    if (t && spec->cron_x && v->with_skipped) { /* a calendar schedule: the slots its misfire policy skipped */
        char extra[48];
        snprintf(extra, sizeof extra, ",\"skipped_slots\":%" PRIu64, v->skipped);
        t = splice_member(t, len, extra);
    }
    spec_free(spec);
    return with_trace_id(t, len, &v->trace);
}

void api_respond_unavailable(http_req *r)
{
    if (!strcmp(http_req_method(r), "GET") || !strcmp(http_req_method(r), "HEAD")) {
        http_respond_problem(r, 503, "Redis did not answer; a read changes nothing. Retry later.", NULL, NULL,
                             RETRY_AFTER_S);
        return;
    }
    /* (A call whose connection broke after it was sent may have been
     * executed: its answer is lost, not its write.) */
    http_respond_problem(r, 503,
                         "Redis did not answer: a write of this request was not made, or was made and its answer "
                         "lost. Retry later; the same request again answers as the first would have (a timer "
                         "created with an id is created once).",
                         NULL, NULL, RETRY_AFTER_S);
}

int api_respond_refused(http_req *r, int refusal, const char *not_done)
{
    const char *why = store_refusal_text(refusal);
    if (!why)
        return 0;
    char detail[256];
    snprintf(detail, sizeof detail, "Redis refuses writes (%s): %s. Retry later.", why, not_done);
    http_respond_problem(r, 503, detail, NULL, NULL, RETRY_AFTER_S);
    return 1;
}

void api_respond_timers_failed(http_req *r, int status, const char *not_done)
{
    if (!api_respond_refused(r, timers_refusal(status), not_done))
        api_respond_unavailable(r);
}

json_t *api_body_object(http_req *r, const char *body, size_t len, const char *not_object)
{
    json_error_t err;
    json_t *j = json_load_fast(body, len, JSON_REJECT_DUPLICATES, &err);
    if (json_is_object(j))
        return j;
    char detail[256];
    if (j)
        snprintf(detail, sizeof detail, "%s", not_object);
    else
        snprintf(detail, sizeof detail, "malformed JSON: %s at line %d, column %d", err.text, err.line, err.column);
    json_decref(j);
    http_respond_problem(r, 400, detail, "", NULL, 0);
    return NULL;
}

static void respond_timer(http_req *r, unsigned status, char *text, size_t len, const char *id)
{
    if (!text) {
        LOG(LOG_ERROR, "stored timer unreadable", "\"timer\":\"%s\"", id);
        http_respond_problem(r, 500, "The stored timer could not be read.", NULL, NULL, 0);
        return;
    }
    char loc[160];
    api_location(loc, sizeof loc, "/timers/", api_public_id(id));
    http_respond_json_text_take(r, status, text, len, status == 201 ? loc : NULL);
}

static void respond_conflict(http_req *r, const char *detail, const char *state)
{
    json_t *extra = state && state[0] ? json_pack("{s:s}", "state", state) : NULL;
    http_respond_problem(r, 409, detail, NULL, extra, 0);
}

void api_respond_submit_error(http_req *r, int rc)
{
    if (rc == -EAGAIN) {
        http_count_shed();
        http_respond_problem(r, 429, "Too many writes are waiting for Redis. Retry later.", NULL, NULL,
                             RETRY_AFTER_S);
    } else {
        http_respond_problem(r, 503, "The service is shutting down.", NULL, NULL, RETRY_AFTER_S);
    }
}

/* ---- POST /timers ---- */

typedef struct create_ctx {
    http_req *r;
    api *a;
    uint64_t now_ms;
    char rid[HTTP_REQUEST_ID_MAX + 1]; /* the creating request's id, kept with the timer */
    api_trace tr;                      /* the W3C trace context it brought, kept too */
} create_ctx;

static void create_cb(void *arg, int status, const timer_view *v, const char *state, const char *id,
                      const timer_spec *spec)
{
    create_ctx *c = arg;
    size_t len = 0;
    if (status == TIMERS_OK) {
        metrics_count(c->a->m, spec->queue, MT_CREATED); /* before the 201: a scrape after it sees it */
        char *t = api_timer_text(id, spec->canonical, strlen(spec->canonical), "scheduled", spec->fire_at_ms,
                                 (long long)c->now_ms, 0, 0, 0, NULL, 0, &len);
        t = with_trace_id(t, &len, &c->tr.trace);
        LOG(LOG_DEBUG, "timer created",
            "\"timer\":\"%s\",\"queue\":\"%s\",\"attempt\":0,\"request_id\":\"%s\",\"fire_at_ms\":%" PRId64,
            id, spec->queue, c->rid, spec->fire_at_ms);
        respond_timer(c->r, 201, t, len, id);
    } else if (status == TIMERS_EXISTS) {
        char *t = api_timer_from_view(id, v, &len);
        respond_timer(c->r, 200, t, len, id);
    } else if (status == TIMERS_CONFLICT) {
        respond_conflict(c->r, "A timer with this id already exists with a different spec.", state);
    } else if (status == TIMERS_UNREACHABLE && store_call_unsent()) {
        /* never sent: a create without an id may be repeated with no risk of two timers */
        http_respond_problem(c->r, 503, "Redis is unreachable: the timer was not stored. Retry later.", NULL, NULL,
                             RETRY_AFTER_S);
    } else {
        api_respond_timers_failed(c->r, status, "the timer was not stored");
    }
    free(c);
}

char *api_new_id(void)
{
    unsigned char b[16];
    if (getrandom(b, sizeof b, 0) != sizeof b)
        abort(); /* cannot happen on Linux >= 3.17 for 16 bytes */
    char *id = xmalloc(33);
    for (int i = 0; i < 16; i++)
        snprintf(id + 2 * i, 3, "%02x", b[i]);
    return id;
}

/* The W3C trace context a create brings: one valid traceparent header, and
 * with it the request's tracestate headers, joined, as much of them as a
 * timer keeps (trace.h). W3C says to drop an invalid traceparent and start
 * a new trace, not to refuse the request, so nothing here answers 400: the
 * timer then carries no trace context. */
void api_request_trace(const http_req *r, api_trace *t)
{
    t->trace = (timer_trace){0};
    if (http_req_header_nth(r, "traceparent", 1) || /* twice: ambiguous, so invalid */
        trace_parent_parse(http_req_header(r, "traceparent"), t->parent) < 0)
        return;
    char joined[TRACE_STATE_MAX + 1];
    size_t n = 0;
    for (size_t i = 0;; i++) {
        const char *v = http_req_header_nth(r, "tracestate", i);
        if (!v)
            break;
        size_t len = strnlen(v, TRACE_STATE_MAX + 1);
        if (n + (n ? 1 : 0) + len > TRACE_STATE_MAX) {
            n = 0; /* too long: ignored */
            break;
        }
        if (n)
            joined[n++] = ',';
        memcpy(joined + n, v, len);
        n += len;
    }
    joined[n] = '\0';
    t->trace = (timer_trace){t->parent, TRACE_PARENT_LEN, t->state,
                             trace_state_keep(joined, t->state, TIMERS_TRACESTATE_MAX)};
}

void api_timer_create(http_req *r, const char *const *params, void *app)
{
    (void)params;
    api *a = app;
    size_t len;
    const char *body = http_req_body(r, &len);
    timer_spec *spec;
    spec_error err;
    uint64_t now_ms = clock_now_ms();
    if (spec_parse(body, len, &a->lim, now_ms, &spec, &err) < 0) {
        http_respond_problem(r, (unsigned)err.status, err.detail, err.field, NULL, 0);
        return;
    }
    create_ctx *c = xcalloc(1, sizeof *c);
    c->r = r;
    c->a = a;
    c->now_ms = now_ms;
    snprintf(c->rid, sizeof c->rid, "%s", http_req_id(r));
    api_request_trace(r, &c->tr);
    char *given = spec->id ? xstrdup(spec->id) : api_new_id(), kid[KEY_ID_MAX];
    api_key_id(kid, sizeof kid, http_req_namespace(r), given);
    free(given);
    int rc = oneshot_create(a->cfg, a->eng, xstrdup(kid), spec, spec->when, c->rid, &c->tr.trace, now_ms, create_cb, c);
    if (rc < 0) {
        api_respond_submit_error(r, rc);
        free(c);
    }
}

/* ---- GET and DELETE /timers/{id} ---- */

typedef struct id_ctx {
    http_req *r;
    metrics *m; /* cancel only: counts the cancel */
    char id[KEY_ID_MAX]; /* the key id (namespace/id) */
} id_ctx;

static id_ctx *id_ctx_new(http_req *r, const char *id)
{
    if (!spec_lookup_id_valid(id)) {
        http_respond_problem(r, 404, "No timer has this id.", NULL, NULL, 0);
        return NULL;
    }
    id_ctx *c = xmalloc(sizeof *c);
    c->r = r;
    api_key_id(c->id, sizeof c->id, http_req_namespace(r), id);
    return c;
}

static void get_cb(void *arg, int status, const timer_view *v, int flag)
{
    id_ctx *c = arg;
    (void)flag;
    size_t len = 0;
    if (status == TIMERS_OK) {
        char *t = api_timer_from_view(c->id, v, &len);
        respond_timer(c->r, 200, t, len, c->id);
    }
    else if (status == TIMERS_UNKNOWN)
        http_respond_problem(c->r, 404, "No timer has this id.", NULL, NULL, 0);
    else
        api_respond_unavailable(c->r);
    free(c);
}

void api_timer_get(http_req *r, const char *const *params, void *app)
{
    api *a = app;
    id_ctx *c = id_ctx_new(r, params[0]);
    if (!c)
        return;
    int rc = timers_get(a->tm, c->id, get_cb, c);
    if (rc < 0) {
        api_respond_submit_error(r, rc);
        free(c);
    }
}

static void cancel_cb(void *arg, int status, const timer_view *v, int by_this_call)
{
    id_ctx *c = arg;
    size_t len = 0;
    if (status == TIMERS_OK || status == TIMERS_AFTER_RUN) { /* a recurring timer: cancelled once its run ends */
        if (by_this_call) {
            char queue[72];
            snprintf(queue, sizeof queue, "%.*s", (int)v->queue_len, v->queue);
            metrics_count(c->m, queue, MT_CANCELLED);
        }
        char *t = api_timer_from_view(c->id, v, &len);
        respond_timer(c->r, status == TIMERS_OK ? 200 : 202, t, len, c->id);
    } else if (status == TIMERS_TOO_LATE) {
        respond_conflict(c->r, "An attempt already began or the timer has finished; it cannot be cancelled.",
                         v->state);
    } else if (status == TIMERS_UNKNOWN) {
        http_respond_problem(c->r, 404, "No timer has this id.", NULL, NULL, 0);
    } else {
        api_respond_timers_failed(c->r, status, "the timer was not cancelled");
    }
    free(c);
}

void api_timer_cancel(http_req *r, const char *const *params, void *app)
{
    api *a = app;
    id_ctx *c = id_ctx_new(r, params[0]);
    if (!c)
        return;
    c->m = a->m;
    int rc = timers_cancel(a->tm, c->id, clock_now_ms(), cancel_cb, c);
    if (rc < 0) {
        api_respond_submit_error(r, rc);
        free(c);
    }
}

/* ---- fire, reschedule, pause, resume ---- */

typedef struct control_ctx {
    http_req *r;
    api *a;
    const char *op;
    char id[KEY_ID_MAX]; /* the key id (namespace/id) */
    int reserved;        /* room taken in the engine to hold the timer (engine_reserve) */
} control_ctx;

static const char *const control_refusals[][2] = {
    {"fire", "The timer has finished, or is a one-shot timer in its attempt; it cannot be fired."},
    {"reschedule", "The timer has finished, or is a one-shot timer in its attempt; it cannot be rescheduled."},
    {"pause", "The timer has finished, or is a one-shot timer in its attempt; it cannot be paused."},
    {"resume", "The timer has finished; it cannot be resumed."},
    {"retry", "Only a failed timer (a dead letter) can be retried."},
};

static const char *control_refusal(const char *op)
{
    for (size_t i = 0; i < sizeof control_refusals / sizeof *control_refusals; i++)
        if (strcmp(control_refusals[i][0], op) == 0)
            return control_refusals[i][1];
    return "Not possible in the timer's state.";
}

/* The run this instance now holds goes to the engine, under the version
 * the call gave it. */
static void control_hold(control_ctx *c, const timer_view *v)
{
    timer_spec *spec = NULL;
    spec_error err;
    if (spec_parse(v->spec, v->spec_len, NULL, 0, &spec, &err) < 0) {
        engine_unreserve(c->a->eng, c->id, 1);
        return; /* unreadable: the release at stop or a reaper hands it back */
    }
    char rid[HTTP_REQUEST_ID_MAX + 1];
    snprintf(rid, sizeof rid, "%.*s", (int)v->request_id_len, v->request_id);
    engine_add_take(c->a->eng, xstrdup(c->id), spec, (uint64_t)v->fire_ms, v->attempts, v->version, rid, &v->trace);
}

static void control_cb(void *arg, int status, const timer_view *v, int held)
{
    control_ctx *c = arg;
    size_t len = 0;
    if (status == TIMERS_OK) {
        char *t = api_timer_from_view(c->id, v, &len);
        if (held)
            control_hold(c, v);
        else if (c->reserved)
            engine_unreserve(c->a->eng, c->id, 1);
        LOG(LOG_DEBUG, "timer controlled",
            "\"timer\":\"%s\",\"queue\":\"%.*s\",\"attempt\":%u,\"request_id\":\"%.*s\",\"op\":\"%s\","
            "\"by_request_id\":\"%s\"",
            c->id, (int)v->queue_len, v->queue, v->attempts, (int)v->request_id_len, v->request_id, c->op,
            http_req_id(c->r));
        respond_timer(c->r, 200, t, len, c->id);
    } else if (status == TIMERS_TOO_LATE) {
        respond_conflict(c->r, control_refusal(c->op), v->state);
    } else if (status == TIMERS_UNKNOWN) {
        http_respond_problem(c->r, 404, "No timer has this id.", NULL, NULL, 0);
    } else {
        api_respond_timers_failed(c->r, status, "the timer was not changed");
    }
    if (status != TIMERS_OK && c->reserved) /* (a lost reply's claim: the reaper hands it back) */
        engine_unreserve(c->a->eng, c->id, 1);
    free(c);
}

/* fire, pause and resume take no fields: the body is empty or {}. */
static int empty_body(http_req *r)
{
    size_t len;
    const char *body = http_req_body(r, &len);
    size_t i = 0;
    while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n'))
        i++;
    if (i == len)
        return 1;
    json_t *j = json_load_fast(body, len, JSON_DECODE_ANY, NULL);
    int ok = json_is_object(j) && json_object_size(j) == 0;
    if (!ok) {
        const char *key = json_is_object(j) ? json_object_iter_key(json_object_iter(j)) : NULL;
        char field[96];
        snprintf(field, sizeof field, "%s", key ? key : "");
        http_respond_problem(r, 400, key ? "unknown field" : "the body must be empty or {}", field, NULL, 0);
    }
    json_decref(j);
    return ok;
}

static void control(http_req *r, const char *id, api *a, const char *op, int64_t fire_ms)
{
    if (!spec_lookup_id_valid(id)) {
        http_respond_problem(r, 404, "No timer has this id.", NULL, NULL, 0);
        return;
    }
    control_ctx *c = xmalloc(sizeof *c);
    c->r = r;
    c->a = a;
    c->op = op;
    api_key_id(c->id, sizeof c->id, http_req_namespace(r), id);
    uint64_t now_ms = clock_now_ms();
    c->reserved = engine_reserve(a->eng, c->id, 1) == 1; /* room to hold the timer if the call claims it */
    int rc = timers_control(a->tm, c->id, op, now_ms, fire_ms, c->reserved ? now_ms + a->cfg->window_ms : 0,
                            control_cb, c);
    if (rc < 0) {
        api_respond_submit_error(r, rc);
        if (c->reserved)
            engine_unreserve(a->eng, c->id, 1);
        free(c);
    }
}

void api_timer_fire(http_req *r, const char *const *params, void *app)
{
    if (empty_body(r))
        control(r, params[0], app, "fire", 0);
}

void api_timer_pause(http_req *r, const char *const *params, void *app)
{
    if (empty_body(r))
        control(r, params[0], app, "pause", 0);
}

void api_timer_resume(http_req *r, const char *const *params, void *app)
{
    if (empty_body(r))
        control(r, params[0], app, "resume", 0);
}

void api_timer_retry(http_req *r, const char *const *params, void *app)
{
    if (empty_body(r))
        control(r, params[0], app, "retry", 0);
}

void api_timer_reschedule(http_req *r, const char *const *params, void *app)
{
    api *a = app;
    size_t len;
    const char *body = http_req_body(r, &len);
    spec_error err;
    int64_t fire_ms;
    if (spec_parse_when(body, len, &a->lim, clock_now_ms(), &fire_ms, &err) < 0) {
        http_respond_problem(r, (unsigned)err.status, err.detail, err.field, NULL, 0);
        return;
    }
    control(r, params[0], a, "reschedule", fire_ms);
}

/* ---- health ---- */

void api_healthz(http_req *r, const char *const *params, void *app)
{
    (void)params;
    (void)app;
    http_respond_json(r, 200, json_pack("{s:s}", "status", "ok"), NULL);
}

void api_readyz(http_req *r, const char *const *params, void *app)
{
    (void)params;
    api *a = app;
    int refusal = store_refusing_writes(a->st);
    char refused[160];
    snprintf(refused, sizeof refused, "Redis refuses writes (%s).", refusal ? store_refusal_text(refusal) : "");
    const char *why = !store_ready(a->st) && store_loading(a->st)
                          ? "Redis is loading its dataset (it restarted): ready once the data is in memory."
                      : !store_ready(a->st)     ? "Redis is unreachable."
                      : refusal                 ? refused
                      : !engine_running(a->eng) ? "Shutting down."
                                                : NULL;
    if (!why)
        http_respond_json(r, 200, json_pack("{s:s}", "status", "ready"), NULL);
    else
        http_respond_problem(r, 503, why, NULL, NULL, RETRY_AFTER_S);
}
