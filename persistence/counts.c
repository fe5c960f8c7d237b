/* counts.c - the counts verbs (counts.h): one counts.lua call per
 * partition, and the sum of their replies. */
#include "counts.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "list.h"
#include "strtab.h"
#include "xalloc.h"

const char *const counts_state_names[COUNTS_STATES] = {
    [COUNTS_SCHEDULED] = "scheduled",
    [COUNTS_RETRYING] = "retrying",
    [COUNTS_PAUSED] = "paused",
};

/* The state codes of _record.lua's STATE_CODE, by enum counts_state. */
static const char state_codes[COUNTS_STATES] = {'s', 'r', 'p'};

/* A row's name and its place in the index: key "<ns>/<queue>", and
 * "<ns>\0<queue>" that the row's ns and queue point into. */
typedef struct row_name {
    strtab_node node;
    size_t row;
    char text[]; /* key, NUL, ns, NUL, queue, NUL */
} row_name;

/* A read: the partitions' answers, taken from their replies as they come
 * (every callback runs on the store's writer thread, one at a time) and
 * summed by counts_sum on the thread of whoever calls it. */
struct counts_answers {
    counts_cb cb;
    void *arg;
    atomic_uint waiting;     /* partitions yet to answer */
    atomic_int lost;         /* 1: a call could not be queued (that partition is unreachable) */
    enum counts_status status;
    int exact;
    redisReply **parts;      /* each answer's counts list, then its due list (store_reply_take) */
    size_t nparts;
    int summed;              /* reply below is made */
    counts_reply reply;
    counts_row *rows;        /* ns and queue point into names[i] */
    row_name **names;        /* owned */
    strtab index;            /* names by key */
    size_t n, cap;
};

/* The row of "<ns>/<queue>" (name: ns_len bytes of namespace, then the
 * queue of queue_len bytes), added when new. Found by hash: a namespace
 * may have tens of thousands of queues, and a look at every row per field
 * cost the writer thread, which every namespace's requests share, seconds
 * a read of 20,000 queues. */
static counts_row *row_of(void *ctx, const char *ns, size_t ns_len, const char *queue, size_t queue_len)
{
    counts_answers *c = ctx;
    size_t len = ns_len + 1 + queue_len;
    char local[256]; /* the key, for the lookup: valid names are 64 + 1 + 64 bytes */
    char *key = len < sizeof local ? local : xmalloc(len + 1);
    memcpy(key, ns, ns_len);
    key[ns_len] = '/';
    memcpy(key + ns_len + 1, queue, queue_len);
    key[len] = 0;
    strtab_node *found = strtab_find(&c->index, key);
    if (found) {
        if (key != local)
            free(key);
        return &c->rows[container_of(found, row_name, node)->row];
    }
    row_name *e = xmalloc(sizeof *e + 2 * (len + 1));
    memcpy(e->text, key, len + 1);
    if (key != local)
        free(key);
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->rows = xrealloc(c->rows, c->cap * sizeof *c->rows);
        c->names = xrealloc(c->names, c->cap * sizeof *c->names);
    }
    char *name = e->text + len + 1;
    memcpy(name, e->text, len + 1);
    name[ns_len] = 0;
    e->row = c->n;
    strtab_add(&c->index, &e->node, e->text);
    c->names[c->n] = e;
    c->rows[c->n] = (counts_row){.ns = name, .queue = name + ns_len + 1};
    return &c->rows[c->n++];
}

/* Where a field's counts go: the row of "<ns>/<queue>", or NULL for a
 * queue not asked about. */
typedef counts_row *(*row_fn)(void *ctx, const char *ns, size_t ns_len, const char *queue, size_t queue_len);

/* {field, count, ...}: field "<ns>/<state code><queue>". */
static void add_counts(const redisReply *list, row_fn row, void *ctx)
{
    for (size_t i = 0; i + 1 < list->elements; i += 2) {
        const redisReply *f = list->element[i], *v = list->element[i + 1];
        const char *slash = f->type == REDIS_REPLY_STRING ? memchr(f->str, '/', f->len) : NULL;
        if (!slash || (size_t)(slash - f->str) + 2 > f->len || v->type != REDIS_REPLY_STRING)
            continue;
        const char *code = memchr(state_codes, slash[1], COUNTS_STATES);
        if (!code)
            continue;
        size_t ns_len = (size_t)(slash - f->str);
        counts_row *r = row(ctx, f->str, ns_len, slash + 2, f->len - ns_len - 2);
        if (!r)
            continue;
        long long n = strtoll(v->str, NULL, 10);
        r->n[code - state_codes] += n > 0 ? (uint64_t)n : 0;
    }
}

/* {"<ns>/<queue>", due, oldest due ms, ...}. */
static void add_due(const redisReply *list, row_fn row, void *ctx)
{
    for (size_t i = 0; i + 2 < list->elements; i += 3) {
        const redisReply *k = list->element[i];
        const char *slash = k->type == REDIS_REPLY_STRING ? memchr(k->str, '/', k->len) : NULL;
        if (!slash)
            continue;
        size_t ns_len = (size_t)(slash - k->str);
        counts_row *r = row(ctx, k->str, ns_len, slash + 1, k->len - ns_len - 1);
        long long due = store_reply_int(list, (int)i + 1, 0), oldest = store_reply_int(list, (int)i + 2, 0);
        if (!r || due <= 0)
            continue;
        if (!r->due || oldest < r->oldest_due_ms)
            r->oldest_due_ms = oldest;
        r->due += (uint64_t)due;
    }
}

static int row_cmp(const void *a, const void *b)
{
    const counts_row *x = a, *y = b;
    int d = strcmp(x->ns, y->ns);
    return d ? d : strcmp(x->queue, y->queue);
}

static void finish_read(counts_answers *c)
{
    if (atomic_load(&c->lost) && c->status == COUNTS_OK)
        c->status = COUNTS_UNREACHABLE;
    c->cb(c->arg, c);
}

enum counts_status counts_answers_status(const counts_answers *c) { return c->status; }

int counts_answers_exact(const counts_answers *c) { return c->exact; }

const counts_reply *counts_sum(counts_answers *c)
{
    if (c->summed)
        return &c->reply;
    c->summed = 1;
    c->reply = (counts_reply){.status = c->status, .exact = c->exact};
    if (c->status != COUNTS_OK)
        return &c->reply;
    for (size_t i = 0; i + 1 < c->nparts; i += 2) {
        add_counts(c->parts[i], row_of, c);
        add_due(c->parts[i + 1], row_of, c);
    }
    if (c->n) /* (rows is NULL when there are none, which qsort may not be given) */
        qsort(c->rows, c->n, sizeof *c->rows, row_cmp);
    c->reply.rows = c->rows;
    c->reply.n = c->n;
    return &c->reply;
}

/* counts_find's row_fn: its one queue's row. */
typedef struct one_queue {
    const char *ns, *queue;
    size_t ns_len, queue_len;
    counts_row *out;
    int found;
} one_queue;

static counts_row *one_row(void *ctx, const char *ns, size_t ns_len, const char *queue, size_t queue_len)
{
    one_queue *q = ctx;
    if (ns_len != q->ns_len || queue_len != q->queue_len || memcmp(ns, q->ns, ns_len) != 0 ||
        memcmp(queue, q->queue, queue_len) != 0)
        return NULL;
    q->found = 1;
    return q->out;
}

int counts_find(const counts_answers *c, const char *ns, const char *queue, counts_row *out)
{
    one_queue q = {ns, queue, strlen(ns), strlen(queue), out, 0};
    *out = (counts_row){.ns = ns, .queue = queue};
    if (c->status != COUNTS_OK)
        return 0;
    for (size_t i = 0; i + 1 < c->nparts; i += 2) {
        add_counts(c->parts[i], one_row, &q);
        add_due(c->parts[i + 1], one_row, &q);
    }
    return q.found;
}

void counts_answers_free(counts_answers *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nparts; i++)
        freeReplyObject(c->parts[i]);
    free(c->parts);
    strtab_free(&c->index);
    for (size_t i = 0; i < c->n; i++)
        free(c->names[i]);
    free(c->names);
    free(c->rows);
    free(c);
}

static void read_cb(void *arg, const redisReply *r)
{
    counts_answers *c = arg;
    if (!r) {
        c->status = COUNTS_UNREACHABLE;
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 || r->element[2]->type != REDIS_REPLY_ARRAY ||
               r->element[3]->type != REDIS_REPLY_ARRAY) {
        if (c->status == COUNTS_OK)
            c->status = COUNTS_FAILED;
    } else if (c->status == COUNTS_OK) {
        if (store_reply_int(r, 0, 0) != 1 || store_reply_int(r, 1, 1) != 0)
            c->exact = 0;
        c->parts[c->nparts++] = store_reply_take(r, 2); /* summed by counts_sum, off this thread */
        c->parts[c->nparts++] = store_reply_take(r, 3);
    }
    if (atomic_fetch_sub(&c->waiting, 1) == 1)
        finish_read(c);
}

int counts_read(store *st, uint32_t partitions, const char *ns, uint64_t now_ms, counts_cb cb, void *arg)
{
    if (partitions == 0)
        return -EINVAL;
    counts_answers *c = xcalloc(1, sizeof *c);
    c->cb = cb;
    c->arg = arg;
    c->status = COUNTS_OK;
    c->exact = 1;
    strtab_init(&c->index);
    c->parts = xmalloc(2 * (size_t)partitions * sizeof *c->parts);
    atomic_init(&c->lost, 0);
    char key[KEYS_MAX], prefix[KEYS_MAX], now[24], budget[24];
    snprintf(now, sizeof now, "%" PRIu64, now_ms);
    snprintf(budget, sizeof budget, "%d", COUNTS_DUE_BUDGET);
    atomic_init(&c->waiting, partitions); /* those not queued are taken off below */
    uint32_t sent = 0;
    int rc = 0;
    for (uint32_t p = 0; p < partitions && rc == 0; p++) {
        snprintf(key, sizeof key, "hw:{%" PRIu32 "}:cn", p);
        keys_timer_prefix(prefix, p);
        const char *argv[] = {key, "read", ns ? ns : "*", now, prefix, budget};
        rc = store_eval_read(st, SCRIPT_COUNTS, 1, 6, argv, NULL, read_cb, c);
        if (rc == 0)
            sent++;
    }
    if (sent == 0) {
        counts_answers_free(c);
        return rc;
    }
    /* The calls that could not be queued: their partitions are unreachable.
     * The others' callbacks may be running already (on the writer thread);
     * whichever takes the count to 0 finishes. */
    if (sent < partitions) {
        atomic_store(&c->lost, 1);
        if (atomic_fetch_sub(&c->waiting, partitions - sent) == partitions - sent)
            finish_read(c);
    }
    return 0;
}

typedef struct rebuild_call {
    counts_rebuild_cb cb;
    void *arg;
} rebuild_call;

static void rebuild_cb(void *arg, const redisReply *r)
{
    rebuild_call *c = arg;
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2;
    c->cb(c->arg, ok, ok ? store_reply_int(r, 0, 0) : 0, ok && store_reply_int(r, 1, 0) == 1);
    free(c);
}

int counts_rebuild(store *st, uint32_t p, uint32_t scan_count, counts_rebuild_cb cb, void *arg)
{
    char key[KEYS_MAX], prefix[KEYS_MAX], count[24];
    snprintf(key, sizeof key, "hw:{%" PRIu32 "}:cn", p);
    keys_timer_prefix(prefix, p);
    snprintf(count, sizeof count, "%" PRIu32, scan_count);
    rebuild_call *c = xmalloc(sizeof *c);
    *c = (rebuild_call){cb, arg};
    const char *argv[] = {key, "rebuild", prefix, count};
    int rc = store_eval(st, SCRIPT_COUNTS, 1, 4, argv, NULL, rebuild_cb, c);
    if (rc < 0)
        free(c);
    return rc;
}
