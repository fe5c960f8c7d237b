/* stats.c - the stats verbs (stats.h): stats.lua's argument vector, and the
 * minutes' HSCAN replies decoded into counters, per queue and summed. */
#include "stats.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc.h"

/* The field name of each counter; lateness buckets are l0, l1, ... */
static const char *const field_names[STATS_LATENESS] = {
    [STATS_DELIVERED] = "d", [STATS_FAILED] = "f", [STATS_ATTEMPTS] = "a", [STATS_FAILED_ATTEMPTS] = "fa"};

static void field_name(char *buf, size_t size, int f)
{
    if (f < STATS_LATENESS)
        snprintf(buf, size, "%s", field_names[f]);
    else
        snprintf(buf, size, "l%d", f - STATS_LATENESS);
}

/* The counter of field name s (len bytes), or -1 when it is none of ours. */
static int field_of(const char *s, size_t len)
{
    if (len >= 2 && len <= 3 && s[0] == 'l' && s[1] >= '0' && s[1] <= '9' && (len == 2 || s[1] != '0')) {
        int b = 0; /* l<bucket>, as field_name writes it: no leading zero */
        for (size_t i = 1; i < len; i++) {
            if (s[i] < '0' || s[i] > '9')
                return -1;
            b = b * 10 + (s[i] - '0');
        }
        return b < STATS_BUCKETS ? STATS_LATENESS + b : -1;
    }
    for (int f = 0; f < STATS_LATENESS; f++)
        if (strlen(field_names[f]) == len && memcmp(field_names[f], s, len) == 0)
            return f;
    return -1;
}

void stats_key(char *buf, const char *ns, int64_t minute)
{
    snprintf(buf, STATS_KEY_MAX, "hw:stats:{ns:%s}:%" PRId64, ns, minute);
}

/* ---- stats_add ---- */

typedef struct add_call {
    stats_add_cb cb;
    void *arg;
} add_call;

static void add_cb(void *arg, const redisReply *r)
{
    add_call *c = arg;
    c->cb(c->arg, r && r->type != REDIS_REPLY_ERROR);
    free(c);
}

int stats_add(store *st, const char *ns, int64_t minute, const stats_queue_add *q, size_t n, stats_add_cb cb,
              void *arg)
{
    if (n < 1 || n > STATS_ADD_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (strlen(q[i].queue) > STATS_QUEUE_MAX)
            return -EINVAL;
    /* names and values of every field sent, one slot each */
    enum { NAME = STATS_QUEUE_MAX + 8, VALUE = 24 };
    char key[STATS_KEY_MAX], ttl[16];
    char (*names)[NAME] = xmalloc(n * STATS_FIELDS * sizeof *names);
    char (*values)[VALUE] = xmalloc(n * STATS_FIELDS * sizeof *values);
    const char **argv = xmalloc((2 + 2 * n * STATS_FIELDS) * sizeof *argv);
    int argc = 0, k = 0;
    stats_key(key, ns, minute);
    snprintf(ttl, sizeof ttl, "%d", STATS_TTL_S);
    argv[argc++] = key;
    argv[argc++] = ttl;
    for (size_t i = 0; i < n; i++) {
        for (int f = 0; f < STATS_FIELDS; f++, k++) {
            if (!q[i].m->v[f])
                continue;
            char field[8];
            field_name(field, sizeof field, f);
            snprintf(names[k], NAME, "%s/%s", q[i].queue, field);
            snprintf(values[k], VALUE, "%" PRIu64, q[i].m->v[f]);
            argv[argc++] = names[k];
            argv[argc++] = values[k];
        }
    }
    add_call *c = xmalloc(sizeof *c);
    *c = (add_call){cb, arg};
    int rc = store_eval(st, SCRIPT_STATS, 1, argc, argv, NULL, add_cb, c);
    if (rc < 0)
        free(c);
    free(argv);
    free(values);
    free(names);
    return rc;
}

/* ---- stats_read ---- */

/* A read in progress: the minutes' hashes scanned one after the other, one
 * HSCAN in flight (callbacks run on the writer thread, one at a time). */
typedef struct read_call {
    store *st;
    stats_read_cb cb;
    void *arg;
    char key[STATS_KEY_MAX];         /* the ns's key of minute 0; the minute is appended */
    size_t key_len;                  /* of key without the minute */
    char queue[STATS_QUEUE_MAX + 1]; /* the minutes' queue; "" with all_queues */
    int all_queues;
    size_t i;                        /* the minute being scanned */
    char cursor[24];                 /* its HSCAN cursor; "0" before the first call */
    stats_reply *out;
    size_t cap;          /* of out->queues */
    uint32_t *slots;     /* open addressing over out->queues by name: index + 1, 0 empty */
    size_t nslots;       /* a power of two, more than twice out->nqueues */
} read_call;

void stats_reply_free(stats_reply *r)
{
    if (!r)
        return;
    free(r->minutes);
    free(r->queues);
    free(r);
}

static void finish_read(read_call *c, int ok)
{
    c->out->ok = ok;
    stats_read_cb cb = c->cb;
    void *arg = c->arg;
    stats_reply *out = c->out;
    free(c->slots);
    free(c);
    cb(arg, out);
}

static size_t name_hash(const char *q, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)q[i]) * 16777619u;
    return h;
}

/* The slot of queue q (len bytes) in c->slots: its own, or the empty one
 * where it would go. */
static size_t slot_of(const read_call *c, const char *q, size_t len)
{
    size_t i = name_hash(q, len) & (c->nslots - 1);
    while (c->slots[i]) {
        const char *name = c->out->queues[c->slots[i] - 1].name;
        if (strlen(name) == len && memcmp(name, q, len) == 0)
            break;
        i = (i + 1) & (c->nslots - 1);
    }
    return i;
}

/* Doubles the slots and places every queue again. */
static void grow_slots(read_call *c)
{
    free(c->slots);
    c->nslots = c->nslots ? 2 * c->nslots : 16;
    c->slots = xcalloc(c->nslots, sizeof *c->slots);
    for (size_t i = 0; i < c->out->nqueues; i++) {
        const char *name = c->out->queues[i].name;
        c->slots[slot_of(c, name, strlen(name))] = (uint32_t)i + 1;
    }
}

/* The totals of queue q (len bytes) in c, added when new; NULL for a name
 * that is too long to be a queue's. Found by hash, not by a look at every
 * queue: a minute's hash holds a field for each figure of each queue, and
 * a namespace may have thousands of queues, so a scan per field cost the
 * writer thread, which every namespace's requests share, 190 ms a read of
 * 5,000 queues. */
static stats_queue *queue_of(read_call *c, const char *q, size_t len)
{
    if (len < 1 || len > STATS_QUEUE_MAX)
        return NULL;
    stats_reply *o = c->out;
    if (2 * (o->nqueues + 1) > c->nslots)
        grow_slots(c);
    size_t slot = slot_of(c, q, len);
    if (c->slots[slot])
        return &o->queues[c->slots[slot] - 1];
    if (o->nqueues == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 8;
        o->queues = xrealloc(o->queues, c->cap * sizeof *o->queues);
    }
    stats_queue *e = &o->queues[o->nqueues++];
    memset(e, 0, sizeof *e);
    memcpy(e->name, q, len);
    c->slots[slot] = (uint32_t)o->nqueues;
    return e;
}

/* Adds one field of a minute's hash: "<queue>/<counter>" to its queue's
 * totals, and to the minute when the read is of every queue or of that
 * queue; an un-prefixed "<counter>" (the previous layout) to the minute of
 * an all-queues read only. */
static void decode_field(read_call *c, stats_minute *m, const char *k, size_t len, uint64_t n)
{
    const char *slash = memchr(k, '/', len);
    size_t qlen = slash ? (size_t)(slash - k) : 0, flen = slash ? len - qlen - 1 : len;
    int f = field_of(slash ? slash + 1 : k, flen);
    if (f < 0)
        return;
    if (!slash) {
        if (c->all_queues)
            m->v[f] += n;
        return;
    }
    stats_queue *q = queue_of(c, k, qlen);
    if (!q)
        return;
    q->total.v[f] += n;
    if (c->all_queues || strcmp(q->name, c->queue) == 0)
        m->v[f] += n;
}

/* Adds one HSCAN reply's fields (r: the array of names and values). */
static void decode_chunk(read_call *c, stats_minute *m, const redisReply *r)
{
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        long long n = strtoll(v->str, NULL, 10);
        if (n > 0)
            decode_field(c, m, k->str, k->len, (uint64_t)n);
    }
}

static int scan_next(read_call *c);

/* An HSCAN's reply: its fields added, then the next call of the minute, or
 * of the next minute, or the answer. */
static void chunk_cb(void *arg, const redisReply *r)
{
    read_call *c = arg;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[0]->len >= sizeof c->cursor || r->element[1]->type != REDIS_REPLY_ARRAY) {
        finish_read(c, 0);
        return;
    }
    decode_chunk(c, &c->out->minutes[c->i], r->element[1]);
    memcpy(c->cursor, r->element[0]->str, r->element[0]->len + 1);
    if (strcmp(c->cursor, "0") == 0) {
        c->i++;
        if (c->i == c->out->n) {
            finish_read(c, 1);
            return;
        }
    }
    if (scan_next(c) < 0) /* the queue is full or the store stops: no answer to wait for */
        finish_read(c, 0);
}

/* Sends the HSCAN of minute c->i from c->cursor. */
static int scan_next(read_call *c)
{
    snprintf(c->key + c->key_len, sizeof c->key - c->key_len, "%" PRId64, c->out->first + (int64_t)c->i);
    const char *argv[] = {"HSCAN", c->key, c->cursor, "COUNT", STATS_SCAN_COUNT_TEXT};
    return store_command(c->st, 5, argv, NULL, chunk_cb, c);
}

int stats_read(store *st, const char *ns, const char *queue, int64_t first, size_t n, stats_read_cb cb,
               void *arg)
{
    if (n < 1 || n > STATS_MAX_MINUTES || (queue && strlen(queue) > STATS_QUEUE_MAX))
        return -EINVAL;
    read_call *c = xcalloc(1, sizeof *c);
    c->st = st;
    c->all_queues = !queue;
    if (queue)
        strcpy(c->queue, queue);
    c->cb = cb;
    c->arg = arg;
    stats_key(c->key, ns, 0);
    c->key_len = strlen(c->key) - 1; /* without the "0" */
    strcpy(c->cursor, "0");
    c->out = xcalloc(1, sizeof *c->out);
    c->out->first = first;
    c->out->n = n;
    c->out->minutes = xcalloc(n, sizeof *c->out->minutes);
    int rc = scan_next(c);
    if (rc < 0) {
        stats_reply_free(c->out);
        free(c);
    }
    return rc;
}
