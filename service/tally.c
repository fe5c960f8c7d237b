/* tally.c - per-(namespace, queue), per-minute counters and their flusher.
 *
 * Design. Each (namespace, queue) the engine sees gets a slot (an
 * open-addressing table by the two names, FNV-1a, written by the engine
 * thread only) and a counter
 * array per minute parity: an event of minute m adds to parity m & 1. The
 * flusher wakes half a second past every second; during minute M it takes
 * (atomic exchange with 0) parity M & 1 as minute M and parity (M-1) & 1
 * as minute M-1. Since it runs every second and never within half a
 * second of a minute's edge, an event is always taken as the minute it was
 * recorded in: a late add to minute M-1 is taken by a later flush of
 * minute M, and parity (M-1) & 1 holds nothing of minute M+1 until then.
 * (A flusher stalled for a whole minute would file an event a minute off;
 * nothing here blocks that long.)
 *
 * What was taken goes to the pending list (slot, minute, counts),
 * under a mutex shared with the writes' callbacks on the store's writer
 * thread. Each flush sends every pending entry and removes it: one write
 * per namespace-minute (its key), with up to STATS_ADD_MAX queues' entries
 * in it; a write that fails puts each of its entries back (merged with
 * anything newer of that minute), unless its minute is past TALLY_KEEP_MINUTES, when they
 * are dropped and counted for the log. So memory is bounded by the
 * slots' minutes kept, and a count is written once or, when a reply
 * is lost after Redis applied the write, possibly twice (store.h). */
#include "tally.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "keys.h"
#include "log.h"
#include "xalloc.h"

#define NS_NAME_MAX 64                       /* auth.h: namespaces are 1..64 characters */
#define QUEUE_NAME_MAX 64                    /* spec.h: queue names are 1..64 characters */
#define TABLE_SIZE (2 * TALLY_MAX_SLOTS)      /* a power of two, at most half full */
#define MINUTE_MS 60000

const uint64_t tally_bounds_us[STATS_BUCKETS - 1] = {
    250,    500,    1000,   2000,    3000,    5000,    7500,     10000,    15000,   25000,
    50000,  100000, 250000, 500000,  1000000, 2500000, 5000000, 10000000, 60000000,
};

typedef struct ns_counters {
    atomic_uint_fast64_t v[2][STATS_FIELDS]; /* by minute parity */
} ns_counters;

typedef struct entry {
    int slot;
    int64_t minute;
    stats_minute m;
} entry;

typedef struct write_call {
    tally *t;
    size_t n;
    entry e[]; /* one namespace-minute's queues, n of them */
} write_call;

struct tally {
    store *st;
    /* engine thread writes; the flusher reads slots below `count` */
    atomic_int count;
    char names[TALLY_MAX_SLOTS][NS_NAME_MAX + 1];     /* the slot's namespace */
    char queues[TALLY_MAX_SLOTS][QUEUE_NAME_MAX + 1]; /* the slot's queue */
    ns_counters *ctr[TALLY_MAX_SLOTS];
    int table[TABLE_SIZE]; /* slot + 1; 0: empty (engine thread only) */
    atomic_uint_fast64_t uncounted; /* events of slots past the cap */

    pthread_mutex_t mu; /* guards what follows */
    pthread_cond_t cv;
    int stopping, started;
    entry *pending;
    size_t npending, cap;
    uint64_t dropped; /* events dropped since the last log line */
    pthread_t thread;
};

/* ---- recording (engine thread) ---- */

static uint32_t fnv1a(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static int same(const char *name, const char *s, size_t n)
{
    return strlen(name) == n && memcmp(name, s, n) == 0;
}

int tally_slot(tally *t, const char *id, const char *queue)
{
    if (!t)
        return -1;
    size_t n = keys_ns_len(id), qn = strlen(queue);
    if (n > NS_NAME_MAX || qn > QUEUE_NAME_MAX)
        return -1;
    int count = atomic_load_explicit(&t->count, memory_order_relaxed);
    uint32_t h = (fnv1a(id, n) * 31u) ^ fnv1a(queue, qn);
    for (uint32_t i = h & (TABLE_SIZE - 1);; i = (i + 1) & (TABLE_SIZE - 1)) {
        int s = t->table[i] - 1;
        if (s >= 0 && same(t->names[s], id, n) && same(t->queues[s], queue, qn))
            return s;
        if (s >= 0)
            continue;
        if (count == TALLY_MAX_SLOTS)
            return -1;
        memcpy(t->names[count], id, n);
        t->names[count][n] = 0;
        memcpy(t->queues[count], queue, qn + 1);
        t->ctr[count] = xcalloc(1, sizeof *t->ctr[count]);
        t->table[i] = count + 1;
        atomic_store_explicit(&t->count, count + 1, memory_order_release); /* publishes names and ctr */
        return count;
    }
}

static void add(tally *t, int slot, int field)
{
    if (!t)
        return;
    if (slot < 0) {
        atomic_fetch_add_explicit(&t->uncounted, 1, memory_order_relaxed);
        return;
    }
    uint64_t minute = clock_now_ms() / MINUTE_MS;
    atomic_fetch_add_explicit(&t->ctr[slot]->v[minute & 1][field], 1, memory_order_relaxed);
}

void tally_delivered(tally *t, int slot) { add(t, slot, STATS_DELIVERED); }
void tally_failed(tally *t, int slot) { add(t, slot, STATS_FAILED); }
void tally_attempt(tally *t, int slot) { add(t, slot, STATS_ATTEMPTS); }
void tally_attempt_failed(tally *t, int slot) { add(t, slot, STATS_FAILED_ATTEMPTS); }
void tally_lateness_us(tally *t, int slot, uint64_t us) { add(t, slot, STATS_LATENESS + tally_bucket(us)); }

int tally_bucket(uint64_t us)
{
    int b = 0;
    while (b < STATS_BUCKETS - 1 && us > tally_bounds_us[b])
        b++;
    return b;
}

double tally_quantile_ms(const uint64_t *b, double q)
{
    uint64_t total = 0;
    for (int i = 0; i < STATS_BUCKETS; i++)
        total += b[i];
    if (!total)
        return -1;
    double rank = q * (double)total, below = 0;
    for (int i = 0; i < STATS_BUCKETS; i++) {
        double lo = i ? (double)tally_bounds_us[i - 1] : 0;
        if (!b[i] || below + (double)b[i] < rank) {
            below += (double)b[i];
            continue;
        }
        if (i == STATS_BUCKETS - 1) /* the open bucket: at least its lower bound */
            return lo / 1000.0;
        double hi = (double)tally_bounds_us[i];
        return (lo + (hi - lo) * (rank - below) / (double)b[i]) / 1000.0;
    }
    return (double)tally_bounds_us[STATS_BUCKETS - 2] / 1000.0; /* not reached: rank <= total */
}

/* ---- the pending list (under mu) ---- */

static uint64_t events(const stats_minute *m)
{
    uint64_t n = 0;
    for (int f = 0; f < STATS_LATENESS; f++) /* lateness buckets count attempts already counted */
        n += m->v[f];
    return n;
}

static int empty(const stats_minute *m)
{
    for (int f = 0; f < STATS_FIELDS; f++)
        if (m->v[f])
            return 0;
    return 1;
}

/* Adds m to the pending entry of (slot, minute), made when new. */
static void merge(tally *t, int slot, int64_t minute, const stats_minute *m)
{
    entry *e = NULL;
    for (size_t i = 0; i < t->npending && !e; i++)
        if (t->pending[i].slot == slot && t->pending[i].minute == minute)
            e = &t->pending[i];
    if (!e) {
        if (t->npending == t->cap) {
            t->cap = t->cap ? 2 * t->cap : 16;
            t->pending = xrealloc(t->pending, t->cap * sizeof *t->pending);
        }
        e = &t->pending[t->npending++];
        *e = (entry){.slot = slot, .minute = minute};
    }
    for (int f = 0; f < STATS_FIELDS; f++)
        e->m.v[f] += m->v[f];
}

/* Takes parity `minute & 1` of every slot as minute `minute`. */
static void take(tally *t, int64_t minute)
{
    int count = atomic_load_explicit(&t->count, memory_order_acquire);
    for (int slot = 0; slot < count; slot++) {
        stats_minute m;
        for (int f = 0; f < STATS_FIELDS; f++)
            m.v[f] = atomic_exchange_explicit(&t->ctr[slot]->v[minute & 1][f], 0, memory_order_relaxed);
        if (!empty(&m))
            merge(t, slot, minute, &m);
    }
}

/* ---- writes ---- */

static void written_cb(void *arg, int ok)
{
    write_call *c = arg;
    tally *t = c->t;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < c->n && !ok; i++) {
        if (c->e[i].minute >= (int64_t)(clock_now_ms() / MINUTE_MS) - TALLY_KEEP_MINUTES)
            merge(t, c->e[i].slot, c->e[i].minute, &c->e[i].m);
        else
            t->dropped += events(&c->e[i].m);
    }
    pthread_mutex_unlock(&t->mu);
    free(c);
}

/* qsort's order for flush: by namespace, then minute (the slots' names
 * are read through tally_sorting: only the flusher sorts, one at a time). */
static _Thread_local const tally *tally_sorting;

static int by_namespace_minute(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    int c = strcmp(tally_sorting->names[x->slot], tally_sorting->names[y->slot]);
    return c ? c : (x->minute > y->minute) - (x->minute < y->minute);
}

/* One flush: takes the last two minutes' counts, drops what is too old,
 * and sends every pending entry (each leaves the list until its write
 * fails). */
static void flush(tally *t, uint64_t now_ms)
{
    int64_t minute = (int64_t)(now_ms / MINUTE_MS);
    pthread_mutex_lock(&t->mu);
    take(t, minute - 1);
    take(t, minute);
    size_t n = t->npending;
    entry *send = t->pending;
    t->pending = NULL;
    t->npending = t->cap = 0;
    uint64_t dropped = t->dropped;
    t->dropped = 0;
    pthread_mutex_unlock(&t->mu);

    /* One write per namespace-minute (at most STATS_ADD_MAX queues each):
     * sorted, a namespace's queues of one minute are next to each other. */
    tally_sorting = t;
    if (n > 1) /* (send is NULL when nothing is pending) */
        qsort(send, n, sizeof *send, by_namespace_minute);
    for (size_t i = 0; i < n;) {
        if (send[i].minute < minute - TALLY_KEEP_MINUTES) {
            dropped += events(&send[i++].m);
            continue;
        }
        size_t j = i + 1;
        while (j < n && j - i < STATS_ADD_MAX && send[j].minute == send[i].minute &&
               strcmp(t->names[send[j].slot], t->names[send[i].slot]) == 0)
            j++;
        write_call *c = xmalloc(sizeof *c + (j - i) * sizeof c->e[0]);
        c->t = t;
        c->n = j - i;
        stats_queue_add q[STATS_ADD_MAX];
        for (size_t k = 0; k < c->n; k++) {
            c->e[k] = send[i + k];
            q[k] = (stats_queue_add){t->queues[c->e[k].slot], &c->e[k].m};
        }
        if (stats_add(t->st, t->names[send[i].slot], send[i].minute, q, c->n, written_cb, c) < 0)
            written_cb(c, 0); /* not queued: kept for the next flush */
        i = j;
    }
    free(send);
    uint64_t uncounted = atomic_exchange_explicit(&t->uncounted, 0, memory_order_relaxed);
    if (dropped)
        LOG(LOG_WARN, "per-minute figures dropped: Redis did not take them within minutes",
            "\"events\":%" PRIu64 ",\"keep_minutes\":%d", dropped, TALLY_KEEP_MINUTES);
    if (uncounted)
        LOG(LOG_WARN, "per-minute figures not counted: too many namespace-queue pairs",
            "\"events\":%" PRIu64 ",\"max_slots\":%d", uncounted, TALLY_MAX_SLOTS);
}

static void *flusher_main(void *arg)
{
    tally *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stopping) {
        uint64_t now = clock_now_ms(), next = (now - 500) / 1000 * 1000 + 1500; /* the next x.500 s */
        struct timespec ts = {.tv_sec = (time_t)(next / 1000), .tv_nsec = (long)(next % 1000) * 1000000L};
        int rc = 0;
        while (!t->stopping && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        if (t->stopping)
            break;
        pthread_mutex_unlock(&t->mu);
        flush(t, clock_now_ms());
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* ---- life ---- */

tally *tally_create(store *st)
{
    tally *t = xcalloc(1, sizeof *t);
    t->st = st;
    atomic_init(&t->count, 0);
    atomic_init(&t->uncounted, 0);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    return t;
}

int tally_start(tally *t)
{
    int rc = pthread_create(&t->thread, NULL, flusher_main, t);
    if (rc)
        return -rc;
    t->started = 1;
    return 0;
}

void tally_stop(tally *t)
{
    if (!t)
        return;
    if (t->started) {
        pthread_mutex_lock(&t->mu);
        t->stopping = 1;
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thread, NULL);
        t->started = 0;
    }
    flush(t, clock_now_ms()); /* the engine has stopped: nothing records meanwhile */
}

void tally_free(tally *t)
{
    if (!t)
        return;
    int count = atomic_load(&t->count);
    for (int i = 0; i < count; i++)
        free(t->ctr[i]);
    free(t->pending);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}
