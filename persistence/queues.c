/* queues.c - the queue-controls verbs (queues.h): the hash's commands and
 * the stored value's encoding. */
#include "queues.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc.h"

#define QUEUES_KEY "hw:{queues}"
#define VALUE_MAX 64

/* queues.lua's keys, in its KEYS order */
static const char *const fn_keys[] = {QUEUES_KEY, QUEUES_KEY ":version", QUEUES_KEY ":changes", QUEUES_KEY ":floor"};
#define NKEYS 4
/* Their names before they shared a hash tag, in the same order. */
static const char *const old_keys[] = {"hw:queues", "hw:queues:version", "hw:queues:changes", "hw:queues:floor"};

enum op { OP_LIST, OP_GET, OP_PUT, OP_PATCH, OP_DELETE, OP_FEED };

typedef struct call {
    enum op op;
    queues_reply_cb cb;
    void *arg;
} call;

/* The rate's token in a stored value: the shortest text that reads back as
 * the same double, so the engines apply, and GET shows, the rate the PUT
 * answered with (six digits turned 1234.5678 into 1234.57). */
static void format_rate(double rate, char *buf, size_t size)
{
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, size, "%.*g", digits, rate);
        if (strtod(buf, NULL) == rate)
            return;
    }
}

static void format_value(const queue_controls *c, char *buf, size_t size)
{
    char rate[32];
    format_rate(c->rate, rate, sizeof rate);
    snprintf(buf, size, "%u %d %s%s", c->parallelism, c->paused ? 1 : 0, rate, c->per_instance ? " i" : "");
}

/* Returns 0, or -1 when text is not a well-formed value. */
static int parse_value(const char *text, queue_controls *c)
{
    unsigned par = 0;
    int paused = 0, n = 0;
    double rate = 0;
    if (sscanf(text, "%u %d %lf%n", &par, &paused, &rate, &n) != 3 || (text[n] && strcmp(text + n, " i") != 0) ||
        par < 1 ||
        (paused != 0 && paused != 1) || !isfinite(rate) || rate < 0 || rate > QUEUES_RATE_MAX)
        return -1;
    c->parallelism = par;
    c->paused = paused;
    c->per_instance = text[n] != 0;
    c->rate = rate > 0 && rate < QUEUES_RATE_MIN ? QUEUES_RATE_MIN : rate;
    return 0;
}

/* A flat {field, value, ...} from element `from` on into entries (the
 * caller frees them). keep_absent: a nil or malformed value gives an entry
 * that is not present (the feed's deleted fields); otherwise it is left out. */
static queues_entry *decode_list(const redisReply *r, size_t from, int keep_absent, size_t *n)
{
    queues_entry *e = xcalloc(r->elements / 2 + 1, sizeof *e);
    *n = 0;
    for (size_t i = from; i + 1 < r->elements; i += 2) {
        size_t flen;
        const char *f = store_reply_str(r, (int)i, &flen), *v = store_reply_str(r, (int)i + 1, NULL);
        if (!f)
            continue;
        e[*n].present = v && parse_value(v, &e[*n].controls) == 0;
        if (!e[*n].present && !keep_absent)
            continue;
        e[*n].field = f;
        e[*n].field_len = flen;
        (*n)++;
    }
    return e;
}

static enum queues_put_result put_result(long long n)
{
    return n < 0 ? QUEUES_PUT_FULL : n > 0 ? QUEUES_PUT_CREATED : QUEUES_PUT_REPLACED;
}

/* patch's {1|0, value} or {-1} (expected() checked the shape). A stored
 * value this build cannot read is a failure: queues.lua writes only
 * well-formed ones. */
static void decode_patch(const redisReply *r, queues_reply *out)
{
    out->put = put_result(r->element[0]->integer);
    if (out->put == QUEUES_PUT_FULL)
        return;
    out->found = parse_value(r->element[1]->str, &out->controls) == 0;
    if (!out->found)
        out->status = QUEUES_FAILED;
}

/* The reply types each command answers with when it worked. */
static int expected(enum op op, const redisReply *r)
{
    if (op == OP_LIST)
        return r->type == REDIS_REPLY_ARRAY;
    if (op == OP_GET)
        return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL;
    if (op == OP_PATCH)
        return r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->type == REDIS_REPLY_INTEGER &&
               (r->element[0]->integer < 0 ? r->elements == 1
                                           : r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING);
    if (op == OP_FEED)
        return r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->type == REDIS_REPLY_INTEGER &&
               (r->elements == 1 || (r->element[1]->type == REDIS_REPLY_INTEGER && r->elements % 2 == 0));
    return r->type == REDIS_REPLY_INTEGER;
}

static void reply_cb(void *arg, const redisReply *r)
{
    call *c = arg;
    queues_reply out = {0};
    queues_entry *entries = NULL;
    if (!r)
        out.status = QUEUES_UNREACHABLE;
    else if (!expected(c->op, r))
        out.status = QUEUES_FAILED;
    else
        out.status = QUEUES_OK;
    out.refused = store_reply_refusal(r); /* an error: never expected() */
    if (out.status == QUEUES_OK && c->op == OP_LIST)
        out.entries = entries = decode_list(r, 0, 0, &out.n);
    if (out.status == QUEUES_OK && c->op == OP_GET && r->type == REDIS_REPLY_STRING)
        out.found = parse_value(r->str, &out.controls) == 0;
    if (out.status == QUEUES_OK && c->op == OP_PUT)
        out.put = put_result(r->integer);
    if (out.status == QUEUES_OK && c->op == OP_PATCH)
        decode_patch(r, &out);
    if (out.status == QUEUES_OK && c->op == OP_DELETE)
        out.found = r->integer > 0;
    if (out.status == QUEUES_OK && c->op == OP_FEED) {
        out.version = r->element[0]->integer;
        if (r->elements > 1) {
            out.full = r->element[1]->integer != 0;
            out.entries = entries = decode_list(r, 2, !out.full, &out.n);
        }
    }
    c->cb(c->arg, &out);
    free(entries);
    free(c);
}

/* A plain command (fn 0) or queues.lua with argv after its keys (fn 1). */
static int submit(store *st, enum op op, int fn, int argc, const char **argv, queues_reply_cb cb, void *arg)
{
    call *c = xmalloc(sizeof *c);
    *c = (call){op, cb, arg};
    int rc;
    if (fn) {
        const char *v[NKEYS + 8];
        for (int i = 0; i < NKEYS; i++)
            v[i] = fn_keys[i];
        for (int i = 0; i < argc; i++)
            v[NKEYS + i] = argv[i];
        rc = store_eval(st, SCRIPT_QUEUES, NKEYS, NKEYS + argc, v, NULL, reply_cb, c);
    } else {
        rc = store_command(st, argc, argv, NULL, reply_cb, c);
    }
    if (rc < 0)
        free(c);
    return rc;
}

int queues_list(store *st, queues_reply_cb cb, void *arg)
{
    const char *argv[] = {"HGETALL", QUEUES_KEY};
    return submit(st, OP_LIST, 0, 2, argv, cb, arg);
}

int queues_get(store *st, const char *field, queues_reply_cb cb, void *arg)
{
    const char *argv[] = {"HGET", QUEUES_KEY, field};
    return submit(st, OP_GET, 0, 3, argv, cb, arg);
}

int queues_put(store *st, const char *field, const queue_controls *c, uint64_t cap, queues_reply_cb cb, void *arg)
{
    char value[VALUE_MAX], capbuf[24];
    format_value(c, value, sizeof value);
    snprintf(capbuf, sizeof capbuf, "%llu", (unsigned long long)cap);
    const char *argv[] = {"put", field, value, capbuf};
    return submit(st, OP_PUT, 1, 4, argv, cb, arg);
}

int queues_patch(store *st, const char *field, const queue_controls *c, unsigned set, const queue_controls *defaults,
                 uint64_t cap, queues_reply_cb cb, void *arg)
{
    if (!(set & (QUEUES_SET_PARALLELISM | QUEUES_SET_PAUSED | QUEUES_SET_RATE | QUEUES_SET_SCOPE)))
        return -EINVAL;
    /* The members are the stored value's tokens, formatted as format_value
     * writes them; queues.lua only puts them together. */
    char def[VALUE_MAX], capbuf[24], par[12], rate[32];
    format_value(defaults, def, sizeof def);
    snprintf(capbuf, sizeof capbuf, "%llu", (unsigned long long)cap);
    snprintf(par, sizeof par, "%u", c->parallelism);
    format_rate(c->rate, rate, sizeof rate);
    const char *argv[] = {
        "patch", field, def, capbuf,
        set & QUEUES_SET_PARALLELISM ? par : "",
        set & QUEUES_SET_PAUSED ? (c->paused ? "1" : "0") : "",
        set & QUEUES_SET_RATE ? rate : "",
        set & QUEUES_SET_SCOPE ? (c->per_instance ? "i" : "d") : "",
    };
    return submit(st, OP_PATCH, 1, 8, argv, cb, arg);
}

int queues_delete(store *st, const char *field, queues_reply_cb cb, void *arg)
{
    const char *argv[] = {"del", field};
    return submit(st, OP_DELETE, 1, 2, argv, cb, arg);
}

int queues_feed(store *st, int64_t since, queues_reply_cb cb, void *arg)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", (long long)(since < 0 ? -1 : since));
    const char *argv[] = {"feed", buf};
    return submit(st, OP_FEED, 1, 2, argv, cb, arg);
}

static void ignore_cb(void *arg, const redisReply *r)
{
    (void)arg;
    (void)r;
}

int queues_upgrade(store *st)
{
    const char *v[NKEYS + 1 + NKEYS];
    for (int i = 0; i < NKEYS; i++) {
        v[i] = fn_keys[i];
        v[NKEYS + 1 + i] = old_keys[i];
    }
    v[NKEYS] = "upgrade";
    return store_eval(st, SCRIPT_QUEUES, NKEYS, NKEYS + 1 + NKEYS, v, NULL, ignore_cb, NULL);
}

/* ---- permits ---- */

typedef struct permits_call {
    queues_permits_cb cb;
    void *arg;
    size_t n;
} permits_call;

static void permits_reply_cb(void *arg, const redisReply *r)
{
    permits_call *c = arg;
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 * c->n;
    queues_permit *p = ok ? xcalloc(c->n + 1, sizeof *p) : NULL;
    for (size_t i = 0; ok && i < c->n; i++) {
        long long grant = store_reply_int(r, (int)(2 * i), -2);
        const char *rate = store_reply_str(r, (int)(2 * i + 1), NULL);
        char *end = NULL;
        double share = rate ? strtod(rate, &end) : NAN;
        if (grant < -1 || grant > UINT32_MAX || !rate || *end || !isfinite(share) || share < 0) {
            ok = 0;
            break;
        }
        p[i].shared = grant >= 0;
        p[i].grant = grant > 0 ? (uint32_t)grant : 0;
        p[i].rate = share;
    }
    c->cb(c->arg, ok, ok ? p : NULL, ok ? c->n : 0);
    free(p);
    free(c);
}

int queues_permits(store *st, const char *instance, uint32_t ttl_ms, const queues_demand *d, size_t n,
                   queues_permits_cb cb, void *arg)
{
    if (n == 0 || n > QUEUES_PERMITS_MAX)
        return -EINVAL;
    size_t argc = 3 + 3 * n;
    const char **v = xmalloc(argc * sizeof *v);
    char (*num)[12] = xmalloc((2 * n + 1) * sizeof *num);
    v[0] = QUEUES_KEY;
    v[1] = instance;
    snprintf(num[0], sizeof num[0], "%u", ttl_ms);
    v[2] = num[0];
    for (size_t i = 0; i < n; i++) {
        snprintf(num[1 + 2 * i], sizeof num[0], "%u", d[i].want);
        snprintf(num[2 + 2 * i], sizeof num[0], "%u", d[i].inflight);
        v[3 + 3 * i] = d[i].field;
        v[4 + 3 * i] = num[1 + 2 * i];
        v[5 + 3 * i] = num[2 + 2 * i];
    }
    permits_call *c = xmalloc(sizeof *c);
    *c = (permits_call){cb, arg, n};
    int rc = store_eval(st, SCRIPT_PERMITS, 1, (int)argc, v, NULL, permits_reply_cb, c);
    if (rc < 0)
        free(c);
    free(v);
    free(num);
    return rc;
}
