/* timers.c - the timer verbs over the store (timers.h), and the record's
 * byte layout on the C side (persistence/lua/_record.lua is the other).
 *
 * Design. Each verb lays out one FCALL: the keys of one partition (so one
 * Redis Cluster slot), then its arguments as text, and decodes the reply
 * into the verb's structs before calling back. The engine's verbs take
 * batches: every timer of a partition that falls due (or finishes) in one
 * turn of the engine's loop is one call, which is most of what makes a
 * delivery cheap in Redis. Argument vectors are built in one allocation per
 * call: the pointer and length arrays and a text arena the numbers are
 * written into. */
#include "timers.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "keys.h"
#include "log.h"
#include "xalloc.h"

#define HEAD 51          /* the record's head: HEAD_FMT in _record.lua */
#define MAGIC 178
#define NO_OWNER "0000000000000000"
#define FIELD_MAX 255    /* the request id field: a length byte's worth */
#define PARENT_MAX 55    /* a traceparent (service/trace.h) */

struct pending;

struct timers {
    store *st;
    uint32_t partitions;
    atomic_ullong release_calls; /* release.lua calls answered (timers_release_calls) */
    char *instance;
    char tag[17];        /* this instance's owner tag */
    char retention[24];  /* ms, as text */
    char history[24];
    char budget[24];     /* a batch call's time budget, us, as text (budget_start in _record.lua) */
    /* timers_create's writes: while one create_batch call of a queue is in
     * flight, the creates that come meanwhile wait, and its reply sends
     * them as the next call (the comment of timers_create below). A queue
     * per partition on a Redis Cluster (a call is of one slot); one for
     * all partitions on one Redis (one_queue). */
    pthread_mutex_t cmu;
    int one_queue;
    uint32_t waiting; /* creates waiting, all partitions' */
    struct create_queue {
        int busy;
        struct pending *head, **tail;
    } *cq;
};

/* ---- the record ---- */

static uint64_t get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int64_t get_i6(const unsigned char *p)
{
    uint64_t v = get_le(p, 6);
    return v & 0x800000000000ULL ? (int64_t)(v | 0xFFFF000000000000ULL) : (int64_t)v;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++, v >>= 8)
        p[i] = (unsigned char)v;
}

static const char *state_name(unsigned char code)
{
    switch (code) {
    case 's': return "scheduled";
    case 'f': return "firing";
    case 'r': return "retrying";
    case 'd': return "delivered";
    case 'x': return "failed";
    case 'c': return "cancelled";
    case 'p': return "paused";
    default: return NULL;
    }
}

/* The tail's request id field holds "<request id>[ <traceparent>[
 * <tracestate>]]": a request id never holds a blank (api/http.c), nor does a
 * traceparent, so the first blank ends the id and the second the
 * traceparent. So idempotency, which compares the tail from the field after
 * this one (same_from in _record.lua), ignores the trace context as it
 * ignores the request id, and the record keeps its layout. */
static void field_split(const char *f, size_t n, timer_view *v)
{
    const char *sp = memchr(f, ' ', n), *end = f + n;
    v->request_id = f;
    v->request_id_len = sp ? (size_t)(sp - f) : n;
    if (!sp || sp + 1 == end || sp[1] == ' ')
        return; /* no trace context */
    const char *p = sp + 1, *sp2 = memchr(p, ' ', (size_t)(end - p));
    v->trace.parent = p;
    v->trace.parent_len = (size_t)((sp2 ? sp2 : end) - p);
    if (sp2 && sp2 + 1 < end) {
        v->trace.state = sp2 + 1;
        v->trace.state_len = (size_t)(end - sp2 - 1);
    }
}

/* Writes the request id field of n into out (FIELD_MAX bytes at most):
 * what does not fit, or breaks the form field_split reads, is left out, the
 * tracestate first. Returns its length. */
static size_t field_join(const timer_new *n, char *out)
{
    const timer_trace *tr = &n->trace;
    size_t rlen = n->request_id ? strnlen(n->request_id, FIELD_MAX) : 0, len = rlen;
    memcpy(out, n->request_id ? n->request_id : "", rlen);
    if (!tr->parent_len || tr->parent_len > PARENT_MAX || memchr(tr->parent, ' ', tr->parent_len) ||
        rlen + 1 + tr->parent_len > FIELD_MAX || (rlen && memchr(out, ' ', rlen)))
        return len;
    out[len++] = ' ';
    memcpy(out + len, tr->parent, tr->parent_len);
    len += tr->parent_len;
    if (tr->state_len && tr->state_len <= TIMERS_TRACESTATE_MAX && len + 1 + tr->state_len <= FIELD_MAX) {
        out[len++] = ' ';
        memcpy(out + len, tr->state, tr->state_len);
        len += tr->state_len;
    }
    return len;
}

int timers_decode(const char *rec, size_t rec_len, const char *history, size_t history_len, timer_view *v)
{
    const unsigned char *p = (const unsigned char *)rec;
    if (!rec || rec_len < HEAD + 8 || p[0] != MAGIC || !state_name(p[1]))
        return -EINVAL;
    size_t rlen = p[HEAD + 6], at = HEAD + 7 + rlen; /* the kind byte of the due time as given */
    if (rec_len < at + 14 || rec_len < at + 14 + p[at + 13])
        return -EINVAL;
    size_t qlen = p[at + 13];
    memset(v, 0, sizeof *v);
    snprintf(v->state, sizeof v->state, "%s", state_name(p[1]));
    v->attempts = (uint32_t)get_le(p + 2, 2);
    v->fire_ms = get_i6(p + 4);
    v->version = get_le(p + 26, 4);
    v->runs = get_le(p + 30, 4);
    v->created_ms = get_i6(p + HEAD);
    field_split(rec + HEAD + 7, rlen, v);
    v->every_ms = (uint64_t)get_i6(p + at + 7);
    v->queue = qlen ? rec + at + 14 : "default";
    v->queue_len = qlen ? qlen : 7;
    v->spec = rec + at + 14 + qlen;
    v->spec_len = rec_len - (at + 14 + qlen);
    v->history = history ? history : "";
    v->history_len = history ? history_len : 0;
    /* A finished timer's record may hold its history after its spec, past a
     * byte 0 (never in compact JSON; _record.lua); then it has no history key. */
    const char *z = memchr(v->spec, '\0', v->spec_len);
    if (z) {
        if (!v->history_len) {
            v->history = z + 1;
            v->history_len = (size_t)(v->spec + v->spec_len - (z + 1));
        }
        v->spec_len = (size_t)(z - v->spec);
    }
    return 0;
}

/* The record of a new timer: its head (scheduled, no attempt yet) and the
 * tail written once. Returns its length; *out is freed by the caller. */
static size_t record_new(const timers *t, const timer_new *n, unsigned char **out)
{
    char field[FIELD_MAX];
    size_t rlen = field_join(n, field);
    const char *q = n->queue && strcmp(n->queue, "default") ? n->queue : "";
    size_t qlen = strnlen(q, 255);
    int delay = strncmp(n->when, "delay_ms=", 9) == 0, calendar = strcmp(n->when, "cron") == 0;
    const char *eq = strchr(n->when, '=');
    int64_t when = calendar ? 0 : eq ? strtoll(eq + 1, NULL, 10) : n->fire_ms;
    size_t len = HEAD + 7 + rlen + 14 + qlen + n->spec_len;
    unsigned char *r = xmalloc(len), *p = r;
    memset(r, 0, HEAD);
    p[0] = MAGIC;
    p[1] = 's';
    put_le(p + 4, (uint64_t)n->fire_ms, 6);
    memcpy(p + 10, n->hold ? t->tag : NO_OWNER, 16);
    p[34] = 32; /* the run word's counted bit: create.lua counts it (_record.lua) */
    if (n->nlabels)
        p[34] |= 64; /* the run word's labels bit (_record.lua) */
    if (n->callbacks)
        p[34] |= 128; /* its callbacks bit */
    p += HEAD;
    put_le(p, n->now_ms, 6);
    p[6] = (unsigned char)rlen;
    memcpy(p + 7, field, rlen);
    p += 7 + rlen;
    p[0] = delay ? 'd' : calendar ? 'c' : 'f';
    put_le(p + 1, (uint64_t)when, 6);
    put_le(p + 7, n->every_ms, 6);
    p[13] = (unsigned char)qlen;
    memcpy(p + 14, q, qlen);
    memcpy(p + 14 + qlen, n->spec, n->spec_len);
    *out = r;
    return len;
}

/* ---- argument vectors ---- */

typedef struct args {
    const char **v;
    size_t *len;
    int n;
    char *arena; /* numbers and keys, written once, never moved */
    size_t used, cap;
} args;

static void args_init(args *a, int max, size_t arena)
{
    a->v = xmalloc((size_t)max * sizeof *a->v);
    a->len = xmalloc((size_t)max * sizeof *a->len);
    a->n = 0;
    a->arena = xmalloc(arena);
    a->used = 0;
    a->cap = arena;
}

static void args_free(args *a)
{
    free(a->v);
    free(a->len);
    free(a->arena);
}

static void add_arg(args *a, const char *s, size_t len)
{
    a->v[a->n] = s;
    a->len[a->n++] = len;
}

static void arg_str(args *a, const char *s) { add_arg(a, s ? s : "", s ? strlen(s) : 0); }

/* The arena's free end, for a key builder to write into (KEYS_MAX bytes
 * left: the callers size the arena so). */
static char *arena_end(args *a) { return a->arena + a->used; }

/* Adds what a key builder just wrote at arena_end (len bytes) as the next
 * argument. */
static void arg_built(args *a, size_t len)
{
    add_arg(a, a->arena + a->used, len);
    a->used += len + 1;
}

/* Appends a text made by fmt into the arena (the caller sized it). */
__attribute__((format(printf, 2, 3))) static void arg_fmt(args *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(a->arena + a->used, a->cap - a->used, fmt, ap);
    va_end(ap);
    size_t len = k < 0 ? 0 : (size_t)k >= a->cap - a->used ? a->cap - a->used - 1 : (size_t)k;
    add_arg(a, a->arena + a->used, len);
    a->used += len + 1;
}

static void arg_i64(args *a, int64_t v) { arg_fmt(a, "%" PRId64, v); }
static void arg_u64(args *a, uint64_t v) { arg_fmt(a, "%" PRIu64, v); }

static int submit(timers *t, enum store_script s, int nkeys, args *a, store_reply_cb cb, void *ctx)
{
    int rc = store_eval(t->st, s, nkeys, a->n, a->v, a->len, cb, ctx);
    args_free(a);
    return rc;
}

/* get and list are sent with store_eval_read: Redis runs them while it
 * refuses writes (their no-writes twins). */
static int submit_read(timers *t, enum store_script s, int nkeys, args *a, store_reply_cb cb, void *ctx)
{
    int rc = store_eval_read(t->st, s, nkeys, a->n, a->v, a->len, cb, ctx);
    args_free(a);
    return rc;
}

/* The status of a reply that is not the verb's: none, or an error. */
static int reply_status(const redisReply *r, const char *verb)
{
    if (!r)
        return TIMERS_UNREACHABLE;
    if (r->type == REDIS_REPLY_ERROR) {
        char eb[256];
        if (!store_reply_refusal(r)) /* a refusal (OOM, MISCONF): the store says it once */
            LOG(LOG_ERROR, "Redis refused a timer call", "\"call\":\"%s\",\"error\":\"%s\"", verb,
                log_json_escape(r->str, eb, sizeof eb));
        return TIMERS_FAILED;
    }
    return r->type == REDIS_REPLY_ARRAY ? TIMERS_OK : TIMERS_FAILED;
}

/* A write's status: reply_status's, or TIMERS_NO_MEMORY when Redis refused
 * the call for its maxmemory, TIMERS_NO_DISK when it refuses writes after a
 * failed AOF write or RDB save, TIMERS_NO_REPLICAS when it has fewer good
 * replicas than its min-replicas-to-write (it refuses a function before it runs, so
 * nothing of the call was written). */
static int write_status(const redisReply *r, const char *verb)
{
    int st = reply_status(r, verb);
    if (st != TIMERS_FAILED)
        return st;
    switch (store_reply_refusal(r)) {
    case STORE_REFUSES_MEMORY: return TIMERS_NO_MEMORY;
    case STORE_REFUSES_DISK: return TIMERS_NO_DISK;
    case STORE_REFUSES_REPLICAS: return TIMERS_NO_REPLICAS;
    default: return st;
    }
}

int timers_refusal(int status)
{
    return status == TIMERS_NO_MEMORY     ? STORE_REFUSES_MEMORY
           : status == TIMERS_NO_DISK     ? STORE_REFUSES_DISK
           : status == TIMERS_NO_REPLICAS ? STORE_REFUSES_REPLICAS
                                          : 0;
}

/* ---- set-up ---- */

timers *timers_new(store *st, const timers_config *c)
{
    if (!st || !c || !c->partitions || !c->instance_id)
        return NULL;
    timers *t = xcalloc(1, sizeof *t);
    t->st = st;
    t->partitions = c->partitions;
    t->instance = xstrdup(c->instance_id);
    keys_owner_tag(t->tag, c->instance_id);
    snprintf(t->retention, sizeof t->retention, "%" PRIu64, c->retention_ms);
    snprintf(t->history, sizeof t->history, "%" PRIu32, c->history);
    snprintf(t->budget, sizeof t->budget, "%" PRIu32, c->call_budget_us ? c->call_budget_us : TIMERS_CALL_BUDGET_US);
    pthread_mutex_init(&t->cmu, NULL);
    t->one_queue = !store_is_cluster(st);
    uint32_t nq = t->one_queue ? 1 : t->partitions; /* create_queue_of */
    t->cq = xcalloc(nq, sizeof *t->cq);
    for (uint32_t q = 0; q < nq; q++)
        t->cq[q].tail = &t->cq[q].head;
    return t;
}

void timers_free(timers *t)
{
    if (!t)
        return;
    free(t->cq); /* (its store has stopped: no call is in flight, none waits) */
    pthread_mutex_destroy(&t->cmu);
    free(t->instance);
    free(t);
}

uint32_t timers_partition(const timers *t, const char *id) { return keys_partition(id, t->partitions); }

/* ---- verbs with one timer: create, get, cancel, control ---- */

typedef struct one_ctx {
    void (*done)(struct one_ctx *c, const redisReply *r);
    const char *verb;
    union {
        timers_create_cb create;
        timers_view_cb view;
    } cb;
    void *arg;
} one_ctx;

static void one_cb(void *arg, const redisReply *r)
{
    one_ctx *c = arg;
    c->done(c, r);
    free(c);
}

static one_ctx *one_new(const char *verb, void (*done)(one_ctx *, const redisReply *), void *arg)
{
    one_ctx *c = xcalloc(1, sizeof *c);
    c->verb = verb;
    c->done = done;
    c->arg = arg;
    return c;
}

/* Decodes elements i (record) and i + 1 (history) of r into v. */
static int view_at(const redisReply *r, int i, timer_view *v)
{
    size_t len = 0, hlen = 0;
    const char *rec = store_reply_str(r, i, &len), *hist = store_reply_str(r, i + 1, &hlen);
    if (!rec || timers_decode(rec, len, hist, hlen, v) < 0) {
        LOG(LOG_ERROR, "stored timer unreadable", "\"bytes\":%zu", len);
        return -EINVAL;
    }
    return 0;
}

static void create_done(one_ctx *c, const redisReply *r)
{
    int st = write_status(r, c->verb);
    timer_view v;
    if (st != TIMERS_OK) {
        c->cb.create(c->arg, st, NULL, NULL);
        return;
    }
    long long code = store_reply_int(r, 0, -1);
    if (code == 1)
        c->cb.create(c->arg, TIMERS_OK, NULL, NULL);
    else if (code == 0 && view_at(r, 1, &v) == 0)
        c->cb.create(c->arg, TIMERS_EXISTS, &v, NULL);
    else if (code == 2)
        c->cb.create(c->arg, TIMERS_CONFLICT, NULL, store_reply_str(r, 1, NULL));
    else
        c->cb.create(c->arg, TIMERS_FAILED, NULL, NULL);
}

/* Sends one create through create.lua, which answers a repeat with the
 * timer it repeats. */
static int create_single(timers *t, uint32_t p, const char *id, const unsigned char *rec, size_t len,
                         char *const *labels, uint32_t nlabels, timers_create_cb cb, void *arg)
{
    char tk[KEYS_MAX];
    size_t tklen = keys_timer(tk, p, id);
    one_ctx *c = one_new("create", create_done, arg);
    c->cb.create = cb;
    const char *argv[3 + TIMERS_LABELS_MAX] = {tk, id, (const char *)rec};
    size_t lens[3 + TIMERS_LABELS_MAX] = {tklen, strlen(id), len};
    int argc = 3;
    for (uint32_t i = 0; i < nlabels && i < TIMERS_LABELS_MAX; i++, argc++) {
        argv[argc] = labels[i];
        lens[argc] = strlen(labels[i]);
    }
    int rc = store_eval_admitted(t->st, SCRIPT_CREATE, 1, argc, argv, lens, one_cb, c);
    if (rc < 0)
        free(c);
    return rc;
}

/* Replies {code, record, history, flag} (cancel, control) or {record,
 * history} / {} (get). */
static void view_done(one_ctx *c, const redisReply *r)
{
    int st = write_status(r, c->verb);
    timer_view v;
    if (st != TIMERS_OK) {
        c->cb.view(c->arg, st, NULL, 0);
        return;
    }
    if (!strcmp(c->verb, "get")) {
        if (r->elements == 0)
            c->cb.view(c->arg, TIMERS_UNKNOWN, NULL, 0);
        else if (view_at(r, 0, &v) == 0) {
            v.skipped = (uint64_t)store_reply_int(r, 2, 0);
            v.with_skipped = 1;
            c->cb.view(c->arg, TIMERS_OK, &v, 0);
        } else
            c->cb.view(c->arg, TIMERS_FAILED, NULL, 0);
        return;
    }
    long long code = store_reply_int(r, 0, -9);
    int flag = (int)store_reply_int(r, 3, 0);
    if (code == -1)
        c->cb.view(c->arg, TIMERS_UNKNOWN, NULL, 0);
    else if (view_at(r, 1, &v) < 0)
        c->cb.view(c->arg, TIMERS_FAILED, NULL, 0);
    else if (code == 1)
        c->cb.view(c->arg, TIMERS_OK, &v, flag);
    else if (code == 2)
        c->cb.view(c->arg, TIMERS_AFTER_RUN, &v, 0);
    else
        c->cb.view(c->arg, TIMERS_TOO_LATE, &v, 0);
}

static int one_timer(timers *t, const char *verb, enum store_script s, const char *id, args *a, timers_view_cb cb,
                     void *ctx)
{
    one_ctx *c = one_new(verb, view_done, ctx);
    c->cb.view = cb;
    int rc = submit(t, s, 1, a, one_cb, c);
    if (rc < 0)
        free(c);
    (void)id;
    return rc;
}

/* An argument vector of the timer's key then room for `more`. */
static void args_timer(timers *t, args *a, const char *id, int more)
{
    args_init(a, 1 + more, KEYS_MAX + (size_t)more * 24 + 64);
    arg_built(a, keys_timer(arena_end(a), timers_partition(t, id), id));
}

int timers_get(timers *t, const char *id, timers_view_cb cb, void *arg)
{
    args a;
    args_timer(t, &a, id, 0);
    one_ctx *c = one_new("get", view_done, arg);
    c->cb.view = cb;
    int rc = submit_read(t, SCRIPT_GET, 1, &a, one_cb, c);
    if (rc < 0)
        free(c);
    return rc;
}

int timers_cancel(timers *t, const char *id, uint64_t now_ms, timers_view_cb cb, void *arg)
{
    args a;
    args_timer(t, &a, id, 3);
    arg_str(&a, id);
    arg_str(&a, t->retention);
    arg_u64(&a, now_ms);
    return one_timer(t, "cancel", SCRIPT_CANCEL, id, &a, cb, arg);
}

int timers_control(timers *t, const char *id, const char *op, uint64_t now_ms, int64_t fire_ms,
                   uint64_t hold_until_ms, timers_view_cb cb, void *arg)
{
    args a;
    args_timer(t, &a, id, 6);
    arg_str(&a, id);
    arg_str(&a, op);
    arg_u64(&a, now_ms);
    arg_i64(&a, fire_ms);
    arg_i64(&a, hold_until_ms ? (int64_t)hold_until_ms : -1);
    arg_str(&a, t->tag);
    return one_timer(t, "control", SCRIPT_CONTROL, id, &a, cb, arg);
}

int timers_skip(timers *t, const char *id, uint64_t version, uint64_t now_ms, int64_t fire_ms, uint64_t skipped,
                uint64_t hold_until_ms, timers_view_cb cb, void *arg)
{
    args a;
    args_timer(t, &a, id, 8);
    arg_str(&a, id);
    arg_str(&a, "skip");
    arg_u64(&a, now_ms);
    arg_i64(&a, fire_ms);
    arg_i64(&a, hold_until_ms ? (int64_t)hold_until_ms : -1);
    arg_str(&a, t->tag);
    arg_u64(&a, version);
    arg_u64(&a, skipped);
    return one_timer(t, "control", SCRIPT_CONTROL, id, &a, cb, arg);
}

/* ---- listings and dead letters ---- */

typedef struct list_ctx {
    timers_list_cb cb;
    void *arg;
} list_ctx;

static void list_done(void *arg, const redisReply *r)
{
    list_ctx *c = arg;
    int st = reply_status(r, "list");
    if (st != TIMERS_OK || r->elements < 3) {
        c->cb(c->arg, st != TIMERS_OK ? st : TIMERS_FAILED, 0, NULL, NULL, 0, NULL);
        free(c);
        return;
    }
    size_t n = (r->elements - 3) / 4, k = 0;
    timer_listed *items = xmalloc((n ? n : 1) * sizeof *items);
    for (size_t i = 3; i + 3 < r->elements; i += 4) {
        timer_listed *it = &items[k];
        it->id = store_reply_str(r, (int)i, NULL);
        it->score = store_reply_str(r, (int)i + 1, NULL);
        it->rec = store_reply_str(r, (int)i + 2, &it->rec_len);
        it->history = store_reply_str(r, (int)i + 3, &it->history_len);
        if (it->id && it->score && it->rec)
            k++;
    }
    c->cb(c->arg, TIMERS_OK, store_reply_int(r, 0, 0) == 1, store_reply_str(r, 1, NULL), store_reply_str(r, 2, NULL),
          k, items);
    free(items);
    free(c);
}

int timers_list(timers *t, uint32_t partition, const char *ns, const char *state, int asc,
                const char *cursor_score, const char *cursor_id, uint32_t limit, const char *queue,
                const char *label, uint32_t budget, uint64_t max_bytes, timers_list_cb cb, void *arg)
{
    args a;
    args_init(&a, 12, 2 * KEYS_MAX + 96);
    arg_built(&a, keys_index(arena_end(&a), partition, ns, state));
    arg_built(&a, keys_timer_prefix(arena_end(&a), partition));
    arg_str(&a, asc ? "asc" : "desc");
    arg_str(&a, cursor_score ? cursor_score : "");
    arg_str(&a, cursor_score ? cursor_id : "");
    arg_u64(&a, limit);
    arg_str(&a, queue);
    arg_u64(&a, budget);
    arg_str(&a, ns);
    arg_str(&a, state);
    arg_u64(&a, max_bytes);
    arg_str(&a, label);
    list_ctx *c = xmalloc(sizeof *c);
    *c = (list_ctx){cb, arg};
    int rc = submit_read(t, SCRIPT_LIST, 1, &a, list_done, c);
    if (rc < 0)
        free(c);
    return rc;
}

typedef struct dl_ctx {
    timers_deadletters_cb cb;
    void *arg;
} dl_ctx;

static void dl_done(void *arg, const redisReply *r)
{
    dl_ctx *c = arg;
    int st = write_status(r, "deadletters");
    if (st == TIMERS_OK)
        c->cb(c->arg, st, store_reply_int(r, 0, 0), store_reply_int(r, 1, 0) == 1);
    else
        c->cb(c->arg, st, 0, 0);
    free(c);
}

int timers_deadletters(timers *t, uint32_t partition, const char *ns, const char *op, const char *queue,
                       uint64_t now_ms, uint32_t limit, timers_deadletters_cb cb, void *arg)
{
    args a;
    args_init(&a, 6, 2 * KEYS_MAX + 64);
    arg_built(&a, keys_index(arena_end(&a), partition, ns, "failed"));
    arg_built(&a, keys_timer_prefix(arena_end(&a), partition));
    arg_str(&a, op);
    arg_str(&a, queue);
    arg_u64(&a, now_ms);
    arg_u64(&a, limit);
    dl_ctx *c = xmalloc(sizeof *c);
    *c = (dl_ctx){cb, arg};
    int rc = submit(t, SCRIPT_DEADLETTERS, 1, &a, dl_done, c);
    if (rc < 0)
        free(c);
    return rc;
}

/* ---- the engine's verbs ---- */

typedef struct batch_ctx {
    void *cb;
    void *arg;
    size_t n;
} batch_ctx;

static batch_ctx *batch_new(void *cb, void *arg, size_t n)
{
    batch_ctx *c = xmalloc(sizeof *c);
    *c = (batch_ctx){cb, arg, n};
    return c;
}

static int submit_batch(timers *t, enum store_script s, int nkeys, args *a, store_reply_cb done, batch_ctx *c)
{
    int rc = submit(t, s, nkeys, a, done, c);
    if (rc < 0)
        free(c);
    return rc;
}

static void claim_done(void *arg, const redisReply *r)
{
    batch_ctx *c = arg;
    timers_claim_cb cb = (timers_claim_cb)c->cb;
    int st = reply_status(r, "claim");
    long long nrev = 0;
    if (st == TIMERS_OK &&
        (r->elements < 2 || r->element[0]->type != REDIS_REPLY_INTEGER || (nrev = r->element[0]->integer) < 0 ||
         (size_t)nrev > r->elements - 2 || (r->elements - 2 - (size_t)nrev) % 2)) {
        LOG(LOG_ERROR, "claim answered an unexpected reply", "\"elements\":%zu", r->elements);
        st = TIMERS_FAILED;
        nrev = 0;
    }
    size_t first = st == TIMERS_OK ? 2 + (size_t)nrev : 0;
    int more = st == TIMERS_OK && store_reply_int(r, 1, 0) == 1;
    size_t n = st == TIMERS_OK ? (r->elements - first) / 2 : 0, k = 0, kr = 0;
    timer_claimed *items = xmalloc((n ? n : 1) * sizeof *items);
    timer_revoked *rev = xmalloc((nrev ? (size_t)nrev : 1) * sizeof *rev);
    for (size_t i = 0; i < (size_t)nrev; i++) {
        const char *s = store_reply_str(r, (int)(2 + i), NULL), *sp = s ? strchr(s, ' ') : NULL;
        char *end;
        unsigned long long ver = s ? strtoull(s, &end, 10) : 0;
        if (!sp || end != sp || !sp[1])
            continue; /* not written by revoke() */
        rev[kr++] = (timer_revoked){sp + 1, ver};
    }
    for (size_t i = 0; i < n; i++) {
        timer_view v;
        size_t len;
        const char *id = store_reply_str(r, (int)(first + 2 * i), NULL),
                   *rec = store_reply_str(r, (int)(first + 2 * i + 1), &len);
        if (!id || !rec || timers_decode(rec, len, NULL, 0, &v) < 0) {
            LOG(LOG_ERROR, "claimed timer unreadable", "\"timer\":\"%s\"", id ? id : "");
            continue;
        }
        items[k++] = (timer_claimed){id, v.spec, v.spec_len, v.fire_ms, v.attempts, v.version, v.request_id,
                                     v.request_id_len, v.trace};
    }
    cb(c->arg, st, k, items, kr, rev, more);
    free(rev);
    free(items);
    free(c);
}

int timers_claim(timers *t, uint32_t partition, uint64_t horizon_ms, uint32_t limit, int replay, uint64_t ns_cap,
                 const char *ns_room, timers_claim_cb cb, void *arg)
{
    args a;
    args_init(&a, 11, 4 * KEYS_MAX + 96);
    arg_built(&a, keys_namespaces(arena_end(&a), partition));
    arg_built(&a, keys_claimed(arena_end(&a), partition, t->tag));
    arg_built(&a, keys_lastclaim(arena_end(&a), partition, t->tag));
    arg_u64(&a, horizon_ms);
    arg_u64(&a, limit);
    arg_str(&a, t->tag);
    arg_built(&a, keys_timer_prefix(arena_end(&a), partition));
    arg_str(&a, replay ? "1" : "0");
    arg_u64(&a, ns_cap);
    arg_str(&a, ns_room);
    arg_str(&a, t->budget);
    return submit_batch(t, SCRIPT_CLAIM, 3, &a, claim_done, batch_new((void *)cb, arg, 0));
}

/* ---- batches answered in parts: begin, finish ----
 * begin.lua and finish.lua stop once a call has run for its time budget
 * (budget_start in _record.lua) and answer for their first timers; the rest
 * goes again, as many calls as it takes, and the callback gets all the
 * results at once. The arguments are kept for that: the arena's, and the
 * strings of the caller's items, which live until the callback (timers.h).
 * A part that fails ends the batch with the results of the parts before
 * (n less than asked: the caller treats the rest as unanswered). */
typedef struct parts {
    timers *t;
    enum store_script script;
    const char *verb;
    void *cb, *arg;
    args a;         /* n keys, nfixed arguments, then `group` per timer */
    int nfixed, group;
    size_t n, done; /* timers, and those answered */
    size_t width;   /* reply elements per timer */
    void (*decode)(const redisReply *r, size_t i, void *res); /* element i * width on, to res */
    void (*finish)(struct parts *c, int status); /* calls cb with the done results */
    size_t res_size;
    _Alignas(max_align_t) unsigned char res[]; /* n results of res_size */
} parts;

static void parts_done(void *arg, const redisReply *r);

static void parts_free(parts *c)
{
    args_free(&c->a);
    free(c);
}

/* Sends the timers from c->done on (the first call: the arguments as made). */
static int parts_send(parts *c)
{
    if (c->done == 0)
        return store_eval(c->t->st, c->script, (int)c->n, c->a.n, c->a.v, c->a.len, parts_done, c);
    size_t rest = c->n - c->done;
    int argc = (int)(rest * (size_t)(1 + c->group)) + c->nfixed;
    const char **v = xmalloc((size_t)argc * sizeof *v);
    size_t *len = xmalloc((size_t)argc * sizeof *len), k = 0;
    const size_t fixed = c->n, groups = c->n + (size_t)c->nfixed;
    for (size_t i = c->done; i < c->n; i++, k++)
        v[k] = c->a.v[i], len[k] = c->a.len[i];
    for (int i = 0; i < c->nfixed; i++, k++)
        v[k] = c->a.v[fixed + (size_t)i], len[k] = c->a.len[fixed + (size_t)i];
    for (size_t i = groups + c->done * (size_t)c->group; i < groups + c->n * (size_t)c->group; i++, k++)
        v[k] = c->a.v[i], len[k] = c->a.len[i];
    int rc = store_eval(c->t->st, c->script, (int)rest, argc, v, len, parts_done, c);
    free(v);
    free(len);
    return rc;
}

static void parts_done(void *arg, const redisReply *r)
{
    parts *c = arg;
    int st = reply_status(r, c->verb);
    size_t m = st == TIMERS_OK ? r->elements / c->width : 0;
    if (st == TIMERS_OK && (r->elements % c->width || m == 0 || m > c->n - c->done)) {
        LOG(LOG_ERROR, "a batch call answered an unexpected reply",
            "\"call\":\"%s\",\"elements\":%zu,\"timers\":%zu", c->verb, r->elements, c->n - c->done);
        st = TIMERS_FAILED;
        m = 0;
    }
    for (size_t i = 0; i < m; i++)
        c->decode(r, i, c->res + (c->done + i) * c->res_size);
    c->done += m;
    if (st == TIMERS_OK && c->done < c->n && parts_send(c) == 0)
        return;
    /* the parts answered stand, the rest unanswered (a later part failed,
     * or could not be sent) */
    c->finish(c, c->done > 0 ? TIMERS_OK : st);
    parts_free(c);
}

/* Sends a batch whose arguments a holds (n keys, nfixed, then group per
 * timer); on failure frees everything and answers nothing. */
static int parts_submit(timers *t, enum store_script script, const char *verb, args *a, int nfixed, int group,
                        size_t n, size_t width, size_t res_size, void (*decode)(const redisReply *, size_t, void *),
                        void (*finish)(parts *, int), void *cb, void *arg)
{
    parts *c = xmalloc(sizeof *c + n * res_size);
    *c = (parts){.t = t, .script = script, .verb = verb, .cb = cb, .arg = arg, .a = *a, .nfixed = nfixed,
                 .group = group, .n = n, .width = width, .decode = decode, .finish = finish, .res_size = res_size};
    int rc = parts_send(c);
    if (rc < 0)
        parts_free(c);
    return rc;
}

static void begin_decode(const redisReply *r, size_t i, void *res)
{
    *(timer_begun *)res = (timer_begun){(int32_t)store_reply_int(r, (int)(3 * i), TIMERS_GONE),
                                        (uint32_t)store_reply_int(r, (int)(3 * i + 1), 0),
                                        store_reply_int(r, (int)(3 * i + 2), 0)};
}

static void begin_finish(parts *c, int status)
{
    ((timers_begin_cb)c->cb)(c->arg, status, status == TIMERS_OK ? c->done : 0, (const timer_begun *)c->res);
}

/* Writes the timer keys of items (ids at offset id_off of each item of
 * size `stride`) as the first n arguments. */
static void arg_timer_keys(args *a, uint32_t partition, size_t n, const void *items, size_t stride)
{
    for (size_t i = 0; i < n; i++) {
        const char *id = *(const char *const *)((const char *)items + i * stride);
        arg_built(a, keys_timer(arena_end(a), partition, id));
    }
}

int timers_begin(timers *t, uint32_t partition, size_t n, const timer_begin *items, timers_begin_cb cb, void *arg)
{
    if (n == 0 || n > TIMERS_BATCH_MAX)
        return -EINVAL;
    args a;
    args_init(&a, (int)(2 + 5 * n), n * (KEYS_MAX + 4 * 24) + 64);
    arg_timer_keys(&a, partition, n, items, sizeof *items);
    arg_str(&a, t->tag);
    arg_str(&a, t->budget);
    for (size_t i = 0; i < n; i++) {
        arg_u64(&a, items[i].version);
        arg_u64(&a, items[i].token);
        arg_str(&a, items[i].recurring ? "1" : "0");
        arg_u64(&a, items[i].due_ms);
    }
    return parts_submit(t, SCRIPT_BEGIN, "begin", &a, 2, 4, n, 3, sizeof(timer_begun), begin_decode, begin_finish,
                        (void *)cb, arg);
}

static void select_done(void *arg, const redisReply *r)
{
    batch_ctx *c = arg;
    timers_select_cb cb = (timers_select_cb)c->cb;
    int st = write_status(r, "select");
    if (st == TIMERS_OK && r->elements == 1 && store_reply_int(r, 0, 0) == -1) {
        cb(c->arg, TIMERS_CONFLICT, 0, 0, NULL, 0, 0, NULL);
        free(c);
        return;
    }
    if (st != TIMERS_OK || r->elements < 4 || (r->elements - 4) % 4) {
        cb(c->arg, st != TIMERS_OK ? st : TIMERS_FAILED, 0, 0, NULL, 0, 0, NULL);
        free(c);
        return;
    }
    size_t n = (r->elements - 4) / 4, k = 0;
    timer_selected *items = xmalloc((n ? n : 1) * sizeof *items);
    for (size_t i = 0; i < n; i++) {
        const char *id = store_reply_str(r, (int)(4 + 4 * i), NULL), *state = store_reply_str(r, (int)(6 + 4 * i), NULL);
        const char *q = store_reply_str(r, (int)(7 + 4 * i), NULL);
        if (id && state)
            items[k++] = (timer_selected){id, (int)store_reply_int(r, (int)(5 + 4 * i), 0), state, q ? q : ""};
    }
    const char *after = store_reply_str(r, 2, NULL);
    cb(c->arg, TIMERS_OK, store_reply_int(r, 0, 0) == 1, (uint32_t)store_reply_int(r, 1, TIMERS_SELECT_CHUNKS),
       after ? after : "", store_reply_int(r, 3, 0) == 1, k, items);
    free(items);
    free(c);
}

int timers_select(timers *t, uint32_t partition, const char *ns, const timer_selector *sel, uint32_t chunk,
                  const char *after, uint32_t limit, uint32_t budget, uint64_t now_ms, timers_select_cb cb, void *arg)
{
    if (!sel->nlabels || sel->nlabels > TIMERS_LABELS_MAX)
        return -EINVAL;
    args a;
    args_init(&a, (int)(15 + sel->nlabels), 2 * KEYS_MAX + 10 * 24);
    arg_built(&a, keys_select_receipt(arena_end(&a), partition, ns, sel->idem ? sel->idem : "", chunk, after));
    arg_built(&a, keys_timer_prefix(arena_end(&a), partition));
    arg_str(&a, ns);
    arg_str(&a, sel->op);
    arg_str(&a, sel->queue);
    arg_str(&a, sel->state);
    arg_u64(&a, chunk);
    arg_str(&a, after);
    arg_u64(&a, limit);
    arg_u64(&a, budget);
    arg_u64(&a, now_ms);
    arg_str(&a, t->retention);
    arg_i64(&a, sel->fire_ms);
    arg_str(&a, sel->idem);
    arg_str(&a, sel->fingerprint);
    for (uint32_t i = 0; i < sel->nlabels; i++)
        arg_str(&a, sel->labels[i]);
    return submit_batch(t, SCRIPT_SELECT, 1, &a, select_done, batch_new((void *)cb, arg, 0));
}

/* ---- create_batch ---- */

/* A timer ready for create_batch: its record made (record_new). */
typedef struct prepared {
    uint32_t p; /* its partition */
    const char *id;
    const unsigned char *rec;
    size_t len;
    int64_t fire_ms;
    int hold;
    const char *queue; /* as the record stores it: "" for the default */
    char *const *labels;
    uint32_t nlabels;
} prepared;

static const char *record_queue(const char *queue) { return queue && strcmp(queue, "default") ? queue : ""; }

/* Whether an id comes twice among the items (an open-addressing set of
 * their FNV-1a hashes, the ids compared on equal hashes). */
static int id_twice(size_t n, const prepared *items)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    struct slot {
        uint64_t h;
        const char *id;
    } *set = xcalloc(cap, sizeof *set);
    int twice = 0;
    for (size_t i = 0; i < n && !twice; i++) {
        uint64_t h = 14695981039346656037u;
        for (const unsigned char *p = (const unsigned char *)items[i].id; *p; p++)
            h = (h ^ *p) * 1099511628211u;
        size_t k = (size_t)(h ^ h >> 32) & (cap - 1);
        while (set[k].id && !(twice = set[k].h == h && strcmp(set[k].id, items[i].id) == 0))
            k = (k + 1) & (cap - 1);
        set[k] = (struct slot){h, items[i].id};
    }
    free(set);
    return twice;
}

/* Whether the items can go as a plain call (create_batch.lua): no labels,
 * one namespace and one queue, and no id twice. */
static int batch_plain(size_t n, const prepared *items)
{
    size_t nslen = keys_ns_len(items[0].id);
    for (size_t i = 0; i < n; i++) {
        if (items[i].nlabels || keys_ns_len(items[i].id) != nslen || memcmp(items[i].id, items[0].id, nslen) ||
            strcmp(items[i].queue, items[0].queue))
            return 0;
    }
    return !id_twice(n, items);
}

/* Sends one create_batch call for n prepared timers (of one partition
 * on a Redis Cluster; on one Redis of any: each key is of its item's). A
 * plain call lists the timers no instance holds first, then the ones this
 * instance holds at once; any other call keeps the items' order. order
 * (n places) gets the items' places in the call's order. bulk: POST /timers/batch's call, sent
 * with store_eval_bulk (the creates that waited for the next create call
 * are not). */
static int send_create_batch(timers *t, size_t n, const prepared *items, int atomic, int admitted,
                             int bulk, size_t *order, store_reply_cb done, void *ctx)
{
    size_t argc = 6 + n, arena = n * KEYS_MAX + KEYS_MAX + FIELD_MAX + 128;
    for (size_t i = 0; i < n; i++) {
        argc += 3 + items[i].nlabels;
        arena += 24;
    }
    int plain = batch_plain(n, items);
    size_t nfree = 0;
    for (size_t i = 0; i < n; i++)
        if (!plain || !items[i].hold)
            order[nfree++] = i;
    for (size_t i = 0, k = nfree; i < n && plain; i++)
        if (items[i].hold)
            order[k++] = i;
    args a;
    args_init(&a, (int)argc, arena);
    for (size_t j = 0; j < n; j++)
        arg_built(&a, keys_timer(arena_end(&a), items[order[j]].p, items[order[j]].id));
    if (plain) {
        const char *id = items[0].id, *q = items[0].queue;
        arg_str(&a, atomic ? "P1" : "P0");
        add_arg(&a, id, keys_ns_len(id));
        /* create's count field: "<namespace>/s<queue>" (_record.lua: count_add) */
        arg_fmt(&a, "%.*s/s%.255s", (int)keys_ns_len(id), id, *q ? q : "default");
        arg_u64(&a, nfree);
        add_arg(&a, t->tag, 16);
    } else {
        arg_str(&a, atomic ? "1" : "0");
    }
    for (size_t j = 0; j < n; j++) {
        const prepared *it = &items[order[j]];
        arg_str(&a, it->id);
        add_arg(&a, (const char *)it->rec, it->len);
        if (plain) {
            arg_i64(&a, it->fire_ms);
        } else {
            arg_u64(&a, it->nlabels);
            for (uint32_t k = 0; k < it->nlabels; k++)
                arg_str(&a, it->labels[k]);
        }
    }
    int rc = (admitted ? store_eval_admitted : bulk ? store_eval_bulk : store_eval)(t->st, SCRIPT_CREATE_BATCH, (int)n,
                                                                                  a.n, a.v, a.len, done, ctx);
    args_free(&a);
    return rc;
}

/* A create_batch reply for n timers sent in order (send_create_batch):
 * its status, and each timer's result at its item's place in res. */
static int created_results(const redisReply *r, size_t n, const size_t *order, timer_created *res)
{
    int st = write_status(r, "create_batch");
    /* {n}: a plain call that created every timer; else {code, state} per timer */
    int all = st == TIMERS_OK && r->elements == 1 && store_reply_int(r, 0, -1) == (long long)n;
    if (st == TIMERS_OK && !all && r->elements != 2 * n)
        st = TIMERS_FAILED;
    for (size_t j = 0; j < n; j++) {
        long long code = all ? 1 : st == TIMERS_OK ? store_reply_int(r, (int)(2 * j), -1) : -1;
        timer_created *o = &res[order[j]];
        o->status = st != TIMERS_OK ? st
                    : code == 1     ? TIMERS_OK
                    : code == 0     ? TIMERS_EXISTS
                    : code == 2     ? TIMERS_CONFLICT
                    : code == 3     ? TIMERS_NOT_STORED
                                    : TIMERS_FAILED;
        o->state = all ? "" : st == TIMERS_OK ? store_reply_str(r, (int)(2 * j + 1), NULL) : NULL;
    }
    return st;
}

/* A timers_create_batch call in flight. */
typedef struct create_batch_ctx {
    timers_create_batch_cb cb;
    void *arg;
    size_t n;
    size_t order[];
} create_batch_ctx;

static void create_batch_done(void *arg, const redisReply *r)
{
    create_batch_ctx *c = arg;
    timer_created *res = xmalloc(c->n * sizeof *res);
    int st = created_results(r, c->n, c->order, res);
    c->cb(c->arg, st, c->n, res);
    free(res);
    free(c);
}

int timers_create_batch(timers *t, uint32_t partition, size_t n, const timer_new *items, int atomic,
                        timers_create_batch_cb cb, void *arg)
{
    if (n == 0 || n > TIMERS_CREATE_BATCH_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (timers_partition(t, items[i].id) != partition || items[i].nlabels > TIMERS_LABELS_MAX)
            return -EINVAL;
    prepared *pr = xmalloc(n * sizeof *pr);
    unsigned char **recs = xmalloc(n * sizeof *recs);
    for (size_t i = 0; i < n; i++) {
        size_t len = record_new(t, &items[i], &recs[i]);
        pr[i] = (prepared){partition,         items[i].id,   recs[i],        len, items[i].fire_ms,
                           items[i].hold,     record_queue(items[i].queue), items[i].labels, items[i].nlabels};
    }
    create_batch_ctx *c = xmalloc(sizeof *c + n * sizeof c->order[0]);
    *c = (create_batch_ctx){cb, arg, n};
    int rc = send_create_batch(t, n, pr, atomic, 0, 1, c->order, create_batch_done, c); /* bulk */
    if (rc < 0)
        free(c);
    for (size_t i = 0; i < n; i++)
        free(recs[i]);
    free(recs);
    free(pr);
    return rc;
}

/* ---- timers_create: creates that come together share a call ----
 *
 * A create is sent at once when no create call of its queue is in flight;
 * else it waits, and the reply of the call in flight sends every create
 * that waits in the queue (up to CREATES_MAX) as one create_batch call.
 * So under load many creates share one call (a plain call of 128 costs
 * Redis about a third of what 128 create.lua calls do), and an idle
 * instance sends each at once. On one Redis all partitions share one
 * queue, so a call holds the creates of every partition that came during
 * the one before (R's load, 64 connections, makes calls of about twenty); on
 * a Redis Cluster a call is of one slot, so each partition has its queue
 * (and R's load made calls of two or three there). A create that finds its id taken is sent again
 * alone through create.lua, which answers a repeat with the timer it
 * repeats. The record is made on the caller's thread; the writer thread
 * only lays the call's arguments out. */
#define CREATES_MAX 128

typedef struct pending {
    struct pending *next;
    uint32_t p; /* its partition */
    char *id;
    unsigned char *rec;
    size_t len;
    int64_t fire_ms;
    int hold;
    char *queue; /* as the record stores it */
    char **labels;
    uint32_t nlabels;
    timers_create_cb cb;
    void *arg;
} pending;

typedef struct creates_ctx {
    timers *t;
    uint32_t q; /* its queue (create_queue) */
    size_t n;
    pending **items;
    size_t *order;
} creates_ctx;

static void pending_free(pending *w)
{
    free(w->id);
    free(w->rec);
    free(w->queue);
    for (uint32_t i = 0; i < w->nlabels; i++)
        free(w->labels[i]);
    free(w->labels);
    free(w);
}

static int creates_send(timers *t, uint32_t q, pending *list, int admitted);

/* The queue the creates of partition p wait in. */
static uint32_t create_queue_of(const timers *t, uint32_t p) { return t->one_queue ? 0 : p; }

/* Takes what waits in queue qi, or marks it idle when nothing does. */
static pending *creates_take(timers *t, uint32_t qi)
{
    struct create_queue *q = &t->cq[qi];
    pthread_mutex_lock(&t->cmu);
    pending *list = q->head;
    size_t k = 0;
    pending **cut = &q->head;
    while (*cut && k < CREATES_MAX) {
        cut = &(*cut)->next;
        k++;
    }
    q->head = *cut;
    *cut = NULL;
    if (!q->head)
        q->tail = &q->head;
    q->busy = list != NULL;
    t->waiting -= (uint32_t)k;
    pthread_mutex_unlock(&t->cmu);
    return list;
}

/* Sends what waits in queue q; when the store refuses it, fails it, and
 * so on until nothing waits (the queue idle again). */
static void creates_next(timers *t, uint32_t q)
{
    for (pending *list; (list = creates_take(t, q));) {
        int rc = creates_send(t, q, list, 1); /* (admitted: refused only once the store stops) */
        if (rc == 0)
            return;
        for (pending *w = list, *nx; w; w = nx) {
            nx = w->next;
            w->cb(w->arg, TIMERS_UNREACHABLE, NULL, NULL);
            pending_free(w);
        }
    }
}

static void creates_done(void *arg, const redisReply *r)
{
    creates_ctx *c = arg;
    timer_created *res = xmalloc(c->n * sizeof *res);
    int st = created_results(r, c->n, c->order, res);
    for (size_t i = 0; i < c->n; i++) {
        pending *w = c->items[i];
        int s = st == TIMERS_OK ? res[i].status : st;
        if (s == TIMERS_EXISTS || s == TIMERS_CONFLICT) {
            /* taken: create.lua answers with the timer (or its state) */
            if (create_single(c->t, w->p, w->id, w->rec, w->len, w->labels, w->nlabels, w->cb, w->arg) < 0)
                w->cb(w->arg, TIMERS_UNREACHABLE, NULL, NULL);
        } else {
            w->cb(w->arg, s == TIMERS_OK ? TIMERS_OK : s == TIMERS_NOT_STORED ? TIMERS_FAILED : s, NULL, NULL);
        }
        pending_free(w);
    }
    free(res);
    timers *t = c->t;
    uint32_t q = c->q;
    free(c->items);
    free(c->order);
    free(c);
    creates_next(t, q);
}

/* Sends list (what waited in queue q) as one create_batch call. */
static int creates_send(timers *t, uint32_t q, pending *list, int admitted)
{
    size_t n = 0;
    for (pending *w = list; w; w = w->next)
        n++;
    creates_ctx *c = xmalloc(sizeof *c);
    *c = (creates_ctx){t, q, n, xmalloc(n * sizeof *c->items), xmalloc(n * sizeof *c->order)};
    prepared *pr = xmalloc(n * sizeof *pr);
    size_t i = 0;
    for (pending *w = list; w; w = w->next, i++) {
        c->items[i] = w;
        pr[i] = (prepared){w->p, w->id, w->rec, w->len, w->fire_ms, w->hold, w->queue, w->labels, w->nlabels};
    }
    int rc = send_create_batch(t, n, pr, 0, admitted, 0, c->order, creates_done, c);
    free(pr);
    if (rc < 0) {
        free(c->items);
        free(c->order);
        free(c);
    }
    return rc;
}

int timers_create(timers *t, const timer_new *n, timers_create_cb cb, void *arg)
{
    uint32_t p = timers_partition(t, n->id), qi = create_queue_of(t, p);
    pending *w = xmalloc(sizeof *w);
    *w = (pending){.p = p, .id = xstrdup(n->id), .fire_ms = n->fire_ms, .hold = n->hold,
                   .queue = xstrdup(record_queue(n->queue)), .cb = cb, .arg = arg};
    w->len = record_new(t, n, &w->rec);
    w->nlabels = n->nlabels < TIMERS_LABELS_MAX ? n->nlabels : TIMERS_LABELS_MAX;
    w->labels = w->nlabels ? xmalloc(w->nlabels * sizeof *w->labels) : NULL;
    for (uint32_t i = 0; i < w->nlabels; i++)
        w->labels[i] = xstrdup(n->labels[i]);
    struct create_queue *q = &t->cq[qi];
    pthread_mutex_lock(&t->cmu);
    int wait = q->busy;
    /* Waiting creates are queued writes too: with the store's queue they
     * stay within its cap (past it: -EAGAIN, as a full queue). */
    int full = wait && t->waiting + store_queued(t->st) >= store_max_queued(t->st);
    if (wait && !full) {
        *q->tail = w;
        q->tail = &w->next;
        t->waiting++;
    }
    q->busy = 1;
    pthread_mutex_unlock(&t->cmu);
    if (full) {
        pending_free(w);
        return -EAGAIN;
    }
    if (wait)
        return 0;
    int rc = creates_send(t, qi, w, 0);
    if (rc < 0) {
        pending_free(w);
        creates_next(t, qi); /* (what came meanwhile goes, or fails likewise) */
    }
    return rc;
}

static void finish_decode(const redisReply *r, size_t i, void *res)
{
    int k = (int)(5 * i);
    *(timer_finished *)res = (timer_finished){
        .ok = store_reply_int(r, k, 0) == 1,
        .fire_ms = store_reply_int(r, k + 1, 0),
        .version = (uint64_t)store_reply_int(r, k + 2, 0),
        .kept = store_reply_int(r, k + 3, 0) == 1,
        .attempts = (uint32_t)store_reply_int(r, k + 4, 0),
    };
}

static void finish_finish(parts *c, int status)
{
    ((timers_finish_cb)c->cb)(c->arg, status, status == TIMERS_OK ? c->done : 0, (const timer_finished *)c->res);
}

int timers_finish(timers *t, uint32_t partition, uint64_t now_ms, uint64_t hold_until_ms, size_t n,
                  const timer_finish *items, timers_finish_cb cb, void *arg)
{
    static const char *const outcomes[] = {"delivered", "retry", "failed", "next", "stop", "requeue"};
    if (n == 0 || n > TIMERS_BATCH_MAX)
        return -EINVAL;
    args a;
    args_init(&a, (int)(6 + 10 * n), n * (KEYS_MAX + 6 * 24) + 5 * 24);
    arg_timer_keys(&a, partition, n, items, sizeof *items);
    arg_str(&a, t->tag);
    arg_u64(&a, now_ms);
    arg_str(&a, t->retention);
    arg_u64(&a, hold_until_ms);
    arg_str(&a, t->history);
    arg_str(&a, t->budget);
    for (size_t i = 0; i < n; i++) {
        const timer_finish *f = &items[i];
        arg_str(&a, f->id);
        arg_str(&a, outcomes[f->outcome]);
        arg_str(&a, f->attempt);
        arg_i64(&a, f->next_fire_ms);
        arg_str(&a, f->keep ? "1" : "0");
        arg_u64(&a, f->every_ms);
        arg_str(&a, f->fixed_rate ? "1" : "0");
        arg_u64(&a, f->times);
        arg_i64(&a, f->next_delay_ms);
    }
    return parts_submit(t, SCRIPT_FINISH, "finish", &a, 6, 9, n, 5, sizeof(timer_finished), finish_decode,
                        finish_finish, (void *)cb, arg);
}

static void migrate_done(void *arg, const redisReply *r)
{
    batch_ctx *c = arg;
    timers_migrate_cb cb = (timers_migrate_cb)c->cb;
    int st = reply_status(r, "migrate");
    cb(c->arg, st, st == TIMERS_OK ? store_reply_int(r, 0, 0) : 0, st == TIMERS_OK && store_reply_int(r, 1, 0) == 1);
    free(c);
}

int timers_migrate(timers *t, uint32_t partition, uint32_t limit, timers_migrate_cb cb, void *arg)
{
    args a;
    args_init(&a, 4, 3 * KEYS_MAX + 24);
    arg_fmt(&a, "hw:{%" PRIu32 "}:due", partition); /* the layout before the waiting index was the due set */
    arg_built(&a, keys_failed(arena_end(&a), partition)); /* the dead-letter zset of earlier layouts */
    arg_built(&a, keys_timer_prefix(arena_end(&a), partition));
    arg_u64(&a, limit);
    return submit_batch(t, SCRIPT_MIGRATE, 2, &a, migrate_done, batch_new((void *)cb, arg, partition));
}

static void held_done(void *arg, const redisReply *r)
{
    batch_ctx *c = arg;
    timers_held_cb cb = (timers_held_cb)c->cb;
    int st = reply_status(r, "held");
    if (st == TIMERS_OK && (r->elements < 1 || (r->elements - 1) % 4))
        st = TIMERS_FAILED;
    size_t n = st == TIMERS_OK ? (r->elements - 1) / 4 : 0, k = 0;
    timer_held *items = xmalloc((n ? n : 1) * sizeof *items);
    for (size_t i = 0; i < n; i++) {
        int at = (int)(1 + 4 * i);
        const char *id = store_reply_str(r, at, NULL);
        if (!id)
            continue;
        items[k++] = (timer_held){id, (uint32_t)store_reply_int(r, at + 1, 0),
                                  (uint32_t)store_reply_int(r, at + 2, 0), (uint64_t)store_reply_int(r, at + 3, 0)};
    }
    cb(c->arg, st, st == TIMERS_OK ? (uint64_t)store_reply_int(r, 0, 0) : 0, k, items);
    free(items);
    free(c);
}

int timers_held(timers *t, uint32_t partition, uint64_t until_ms, uint64_t offset, uint32_t limit,
                timers_held_cb cb, void *arg)
{
    if (limit == 0)
        return -EINVAL;
    args a;
    args_init(&a, 6, 2 * KEYS_MAX + 3 * 24 + 32);
    arg_built(&a, keys_claimed(arena_end(&a), partition, t->tag));
    arg_built(&a, keys_timer_prefix(arena_end(&a), partition));
    arg_str(&a, t->tag);
    arg_u64(&a, until_ms);
    arg_u64(&a, offset);
    arg_u64(&a, limit);
    return submit_batch(t, SCRIPT_HELD, 1, &a, held_done, batch_new((void *)cb, arg, 0));
}

static void hand_back_done(void *arg, const redisReply *r)
{
    batch_ctx *c = arg;
    timers_hand_back_cb cb = (timers_hand_back_cb)c->cb;
    int st = reply_status(r, "handback");
    if (st == TIMERS_OK && r->elements != 2 * c->n)
        st = TIMERS_FAILED;
    timer_handed res[TIMERS_BATCH_MAX];
    for (size_t i = 0; st == TIMERS_OK && i < c->n; i++) {
        const char *state = store_reply_str(r, (int)(2 * i + 1), NULL);
        res[i] = (timer_handed){store_reply_int(r, (int)(2 * i), 0) == 1, state ? state : ""};
    }
    cb(c->arg, st, st == TIMERS_OK ? c->n : 0, res);
    free(c);
}

int timers_hand_back(timers *t, uint32_t partition, uint64_t now_ms, const char *why, size_t n,
                     const timer_held *items, timers_hand_back_cb cb, void *arg)
{
    if (n == 0 || n > TIMERS_BATCH_MAX)
        return -EINVAL;
    char at[32];
    clock_format_rfc3339(now_ms, at, sizeof at);
    args a;
    args_init(&a, (int)(5 + 5 * n), n * (KEYS_MAX + 3 * 24) + 1024 + 2 * strlen(why) + 2 * strlen(t->instance));
    arg_timer_keys(&a, partition, n, items, sizeof *items);
    arg_str(&a, t->tag);
    arg_u64(&a, now_ms);
    arg_fmt(&a,
            "{\"at\":\"%s\",\"duration_ms\":0,\"status\":null,\"error\":\"attempt interrupted: %s\","
            "\"response_snippet\":\"\",\"instance\":\"%s\"}",
            at, why, t->instance);
    arg_str(&a, t->retention);
    arg_str(&a, t->history);
    for (size_t i = 0; i < n; i++) {
        arg_str(&a, items[i].id);
        arg_u64(&a, items[i].token);
        arg_u64(&a, items[i].attempt);
        arg_u64(&a, items[i].run);
    }
    return submit_batch(t, SCRIPT_HANDBACK, (int)n, &a, hand_back_done, batch_new((void *)cb, arg, n));
}

/* Claims handed back a call of release.lua: a call holds Redis for about
 * as long as a claim of as many. */
#define RELEASE_SLICE 128

/* One partition's release: sent again while claims are left. */
typedef struct release_ctx {
    timers *t;
    timers_release_cb cb;
    void *arg;
    uint32_t p;
    uint64_t now_ms;
    long long handed; /* so far */
    char tag[17];
    char *instance, *attempt;
} release_ctx;

static void release_done(void *arg, const redisReply *r);

static int release_send(release_ctx *c)
{
    timers *t = c->t;
    args a;
    args_init(&a, 12, 5 * KEYS_MAX + 256 + strlen(c->attempt) + 2 * strlen(c->instance));
    arg_built(&a, keys_claimed(arena_end(&a), c->p, c->tag));
    arg_built(&a, keys_lastclaim(arena_end(&a), c->p, c->tag));
    arg_fmt(&a, "hw:{%" PRIu32 "}:claimed:%s", c->p, c->instance); /* the layout before this one */
    arg_fmt(&a, "hw:{%" PRIu32 "}:lastclaim:%s", c->p, c->instance);
    arg_built(&a, keys_timer_prefix(arena_end(&a), c->p));
    arg_u64(&a, c->now_ms);
    arg_str(&a, c->attempt);
    arg_str(&a, t->retention);
    arg_str(&a, t->history);
    arg_str(&a, c->tag);
    arg_str(&a, c->instance);
    arg_u64(&a, RELEASE_SLICE);
    return submit(t, SCRIPT_RELEASE, 4, &a, release_done, c);
}

static void release_free(release_ctx *c)
{
    free(c->instance);
    free(c->attempt);
    free(c);
}

static void release_done(void *arg, const redisReply *r)
{
    release_ctx *c = arg;
    atomic_fetch_add(&c->t->release_calls, 1);
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
        r->element[1]->type == REDIS_REPLY_INTEGER) {
        c->handed += r->element[0]->integer;
        if (r->element[1]->integer == 1 && release_send(c) == 0)
            return; /* the next slice */
        c->cb(c->arg, r->element[1]->integer == 1 ? TIMERS_UNREACHABLE : TIMERS_OK, c->handed);
    } else {
        if (r)
            reply_status(r, "release"); /* (logs an error reply) */
        c->cb(c->arg, r ? TIMERS_FAILED : TIMERS_UNREACHABLE, c->handed);
    }
    release_free(c);
}

uint64_t timers_release_calls(timers *t) { return atomic_load(&t->release_calls); }

uint32_t timers_release(timers *t, const char *instance, const char *why, uint64_t now_ms,
                        timers_release_cb cb, void *arg)
{
    char at[32];
    clock_format_rfc3339(now_ms, at, sizeof at);
    uint32_t sent = 0;
    for (uint32_t p = 0; p < t->partitions; p++) {
        release_ctx *c = xcalloc(1, sizeof *c);
        *c = (release_ctx){.t = t, .cb = cb, .arg = arg, .p = p, .now_ms = now_ms, .instance = xstrdup(instance)};
        keys_owner_tag(c->tag, instance);
#define RELEASE_ATTEMPT                                                                                        \
    "{\"at\":\"%s\",\"duration_ms\":0,\"status\":null,\"error\":\"attempt interrupted: %s\","                  \
    "\"response_snippet\":\"\",\"instance\":\"%s\"}"
        size_t len = (size_t)snprintf(NULL, 0, RELEASE_ATTEMPT, at, why, instance) + 1;
        c->attempt = xmalloc(len);
        snprintf(c->attempt, len, RELEASE_ATTEMPT, at, why, instance);
        if (release_send(c) == 0)
            sent++;
        else
            release_free(c);
    }
    return sent;
}
