/* metrics.c - counters, gauges and histograms as arrays of atomics, and
 * their Prometheus text rendering.
 *
 * Design. Every per-queue metric is an array indexed by a queue slot:
 * METRICS_MAX_QUEUES slots for named queues plus one for "_other". A queue
 * name finds its slot in a fixed open-addressing table (FNV-1a, linear
 * probing) of pointers that only ever go from NULL to a label that is never
 * changed or freed before metrics_free. A thread that sees a new name
 * allocates its label and publishes it with one compare-and-swap on the
 * first empty slot of the name's probe sequence; a thread that loses the
 * race frees its copy and reads the winner's. Because slots never empty
 * again and every thread probes a name in the same order, a name can never
 * end up in two slots, so the exposition never holds a series twice. A
 * name that finds the table full goes to "_other".
 *
 * Recording is one relaxed fetch-add. Relaxed is enough: each counter is
 * monotonic on its own and a scrape needs no ordering between counters.
 * The arrays are laid out counter-major (all queues' "created" together),
 * so the counters the store's writer thread bumps (created, cancelled) and
 * the ones the engine thread bumps share at most a cache line at a border.
 *
 * Histograms keep non-cumulative bucket counts and the sum in microseconds
 * (an integer, so it can be a fetch-add); rendering accumulates them, so
 * the buckets a scrape sees are monotonic in le and _count equals the +Inf
 * bucket exactly. The sum is read separately and may be one observation
 * ahead or behind, as in the Prometheus client libraries. */
#include "metrics.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "clock.h"
#include "config.h"
#include "xalloc.h"

#define QSLOTS (METRICS_MAX_QUEUES + 1)
#define OTHER_SLOT METRICS_MAX_QUEUES
_Static_assert((METRICS_MAX_QUEUES & (METRICS_MAX_QUEUES - 1)) == 0, "a power of two");

typedef struct qname {
    uint32_t hash;
    char name[]; /* owned copy */
} qname;

/* Bucket upper bounds (le, inclusive): they resolve milliseconds and reach
 * the longest timeouts. The rendered le text is kept here, so it is exact. */
static const struct {
    uint64_t us;
    const char *le;
} bounds[] = {
    {1000, "0.001"},     {2000, "0.002"},     {5000, "0.005"},     {10000, "0.01"},   {25000, "0.025"},
    {50000, "0.05"},     {100000, "0.1"},     {250000, "0.25"},    {500000, "0.5"},   {1000000, "1"},
    {2500000, "2.5"},    {5000000, "5"},      {10000000, "10"},    {30000000, "30"},
};
#define NBOUNDS (sizeof bounds / sizeof bounds[0])

typedef struct histogram {
    atomic_uint_fast64_t bucket[NBOUNDS + 1]; /* not cumulative; the last is past every bound */
    atomic_uint_fast64_t sum_us;
} histogram;

struct metrics {
    _Atomic(qname *) names[METRICS_MAX_QUEUES];
    atomic_int other_used; /* "_other" is rendered once something was counted there */
    atomic_uint_fast64_t events[MT_COUNT][QSLOTS];
    atomic_uint_fast64_t attempts[MA_COUNT][QSLOTS];
    atomic_int_fast64_t gauges[MG_COUNT][QSLOTS];
    atomic_int_fast64_t counts[MQ_COUNT][QSLOTS]; /* metrics_set_queue_counts */
    atomic_int_fast64_t oldest_due_ms[QSLOTS];   /* 0: nothing due */
    atomic_int counts_set;
    histogram hist[MH_COUNT];
};

/* ---- names and help: one table per family ---- */

static const struct {
    const char *name, *help;
} event_families[MT_COUNT] = {
    [MT_CREATED] = {"hookwheel_timers_created_total",
                    "Timers created: Redis confirmed the write of a new timer (idempotent repeats are not counted)."},
    [MT_CANCELLED] = {"hookwheel_timers_cancelled_total",
                      "Timers cancelled by DELETE or POST /timers/cancel, counted once (a repeat is not counted)."},
    [MT_DELIVERED] = {"hookwheel_timers_delivered_total",
                      "Attempts that answered 2xx and whose outcome Redis recorded (a recurring timer counts each run)."},
    [MT_RETRIED] = {"hookwheel_timers_retried_total",
                    "Attempts that failed with a retry scheduled, as recorded in Redis."},
    [MT_FAILED] = {"hookwheel_timers_failed_total",
                   "Timers that failed for good (dead letters), as recorded in Redis."},
    [MT_STOPPED] = {"hookwheel_timers_stopped_total",
                    "Recurring timers stopped by a 410 Gone answer, as recorded in Redis."},
};

static const char *const class_names[MA_COUNT] = {
    [MA_2XX] = "2xx", [MA_3XX] = "3xx", [MA_4XX] = "4xx", [MA_5XX] = "5xx",
    [MA_TIMEOUT] = "timeout", [MA_CONNECT_ERROR] = "connect_error", [MA_REFUSED] = "refused",
    [MA_OTHER] = "other",
};

static const struct {
    const char *name, *help;
} histogram_families[MH_COUNT] = {
    [MH_LATENESS] = {"hookwheel_firing_lateness_seconds",
                     "Time from a timer's due time to the start of its HTTP attempt."},
    [MH_DURATION] = {"hookwheel_attempt_duration_seconds",
                     "Time from the start to the end of an HTTP attempt."},
};

static const struct {
    const char *name, *help;
} queue_gauge_families[MG_COUNT] = {
    [MG_READY] = {"hookwheel_timers_ready", "Due timers waiting for a dispatch slot of their queue or of the global cap."},
    [MG_IN_FLIGHT] = {"hookwheel_attempts_in_flight", "HTTP attempts in progress."},
};

static const struct {
    const char *name, *type, *help;
    size_t offset;
} gauge_families[] = {
    {"hookwheel_timers_claimed", "gauge",
     "Timers this instance holds in memory, claimed in Redis, in any phase, and the room creates in flight took.",
     offsetof(metrics_gauges, claimed)},
    {"hookwheel_timers_in_wheel", "gauge", "Claimed timers waiting in the timing wheel for their due time.",
     offsetof(metrics_gauges, in_wheel)},
    {"hookwheel_redis_queued_writes", "gauge", "Redis commands waiting for the store's writer (429 past max-queued-writes).",
     offsetof(metrics_gauges, redis_queued_writes)},
    {"hookwheel_redis_up", "gauge", "1 when the last contact with Redis succeeded and the scripts are loaded, else 0.",
     offsetof(metrics_gauges, redis_up)},
    {"hookwheel_redis_refusing_writes", "gauge",
     "1 while Redis refuses writes (maxmemory: new work only; a failed AOF or RDB write, too few replicas: all), else 0.",
     offsetof(metrics_gauges, redis_refusing)},
    {"hookwheel_instance_lease_age_seconds", "gauge",
     "Seconds since Redis last confirmed a renewal of this instance's lease (since the start when none did).",
     offsetof(metrics_gauges, lease_age_s)},
    {"hookwheel_instance_lease_ttl_seconds", "gauge",
     "TTL of this instance's lease: its claims are taken over when its age passes this.",
     offsetof(metrics_gauges, lease_ttl_s)},
    {"hookwheel_redis_masters", "gauge", "Redis masters the store routes to (1 for one Redis; a Cluster's masters).",
     offsetof(metrics_gauges, redis_masters)},
    {"hookwheel_redis_moved_total", "counter", "Redis Cluster MOVED redirections followed (a slot changed master).",
     offsetof(metrics_gauges, redis_moved)},
    {"hookwheel_redis_ask_total", "counter", "Redis Cluster ASK redirections followed (a slot in migration).",
     offsetof(metrics_gauges, redis_ask)},
    {"hookwheel_redis_tryagain_total", "counter",
     "Redis Cluster TRYAGAIN replies waited out (a call met a slot half migrated).",
     offsetof(metrics_gauges, redis_tryagain)},
    {"hookwheel_redis_slot_map_refreshes_total", "counter", "Redis Cluster slot maps learned (CLUSTER SLOTS).",
     offsetof(metrics_gauges, redis_map_refreshes)},
    {"hookwheel_redis_replica_ack_timeouts_total", "counter",
     "Batches of writes fewer replicas acknowledged than HOOKWHEEL_REDIS_MIN_REPLICAS_ACK in time (answered 503).",
     offsetof(metrics_gauges, redis_replica_ack_timeouts)},
};
#define NGAUGES (sizeof gauge_families / sizeof gauge_families[0])

/* ---- queue slots ---- */

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static qname *qname_new(const char *name, uint32_t hash)
{
    size_t len = strlen(name);
    qname *q = xmalloc(sizeof *q + len + 1);
    q->hash = hash;
    memcpy(q->name, name, len + 1);
    return q;
}

static int other_slot(metrics *m)
{
    if (!atomic_load_explicit(&m->other_used, memory_order_relaxed))
        atomic_store_explicit(&m->other_used, 1, memory_order_relaxed);
    return OTHER_SLOT;
}

/* The slot of queue `name`, taking a free one on its first sighting. */
static int slot_of(metrics *m, const char *name)
{
    if (strcmp(name, METRICS_OTHER_QUEUE) == 0)
        return other_slot(m);
    uint32_t h = name_hash(name);
    for (uint32_t i = 0; i < METRICS_MAX_QUEUES; i++) {
        uint32_t k = (h + i) & (METRICS_MAX_QUEUES - 1);
        qname *q = atomic_load_explicit(&m->names[k], memory_order_acquire);
        if (!q) {
            qname *mine = qname_new(name, h);
            if (atomic_compare_exchange_strong_explicit(&m->names[k], &q, mine, memory_order_acq_rel,
                                                        memory_order_acquire))
                return (int)k;
            free(mine); /* another thread took the slot: q is its label */
        }
        if (q->hash == h && strcmp(q->name, name) == 0)
            return (int)k;
    }
    return other_slot(m);
}

/* ---- recording ---- */

metrics *metrics_create(void)
{
    metrics *m = xcalloc(1, sizeof *m); /* all-zero bytes are valid zero atomics here */
    slot_of(m, "default");              /* the queue of timers that name none: always listed */
    return m;
}

void metrics_free(metrics *m)
{
    if (!m)
        return;
    for (int i = 0; i < METRICS_MAX_QUEUES; i++)
        free(atomic_load(&m->names[i]));
    free(m);
}

void metrics_count(metrics *m, const char *queue, enum metrics_timer_event ev) { metrics_count_n(m, queue, ev, 1); }

void metrics_count_n(metrics *m, const char *queue, enum metrics_timer_event ev, uint64_t n)
{
    if (m && n)
        atomic_fetch_add_explicit(&m->events[ev][slot_of(m, queue)], n, memory_order_relaxed);
}

void metrics_attempt(metrics *m, const char *queue, enum metrics_attempt_class c)
{
    if (m)
        atomic_fetch_add_explicit(&m->attempts[c][slot_of(m, queue)], 1, memory_order_relaxed);
}

void metrics_set_queue_counts(metrics *m, const metrics_queue_counts *rows, size_t n)
{
    if (!m)
        return;
    int64_t sum[MQ_COUNT][QSLOTS] = {{0}}, oldest[QSLOTS] = {0};
    for (size_t i = 0; i < n; i++) {
        int k = slot_of(m, rows[i].queue); /* a new name takes a slot; past METRICS_MAX_QUEUES, "_other" */
        for (int c = 0; c < MQ_COUNT; c++)
            sum[c][k] += (int64_t)rows[i].n[c];
        if (rows[i].oldest_due_ms > 0 && (!oldest[k] || rows[i].oldest_due_ms < oldest[k]))
            oldest[k] = rows[i].oldest_due_ms;
    }
    for (int k = 0; k < QSLOTS; k++) {
        for (int c = 0; c < MQ_COUNT; c++)
            atomic_store_explicit(&m->counts[c][k], sum[c][k], memory_order_relaxed);
        atomic_store_explicit(&m->oldest_due_ms[k], oldest[k], memory_order_relaxed);
    }
    atomic_store_explicit(&m->counts_set, 1, memory_order_release);
}

void metrics_gauge_add(metrics *m, const char *queue, enum metrics_queue_gauge g, int64_t delta)
{
    if (m)
        atomic_fetch_add_explicit(&m->gauges[g][slot_of(m, queue)], delta, memory_order_relaxed);
}

void metrics_observe_us(metrics *m, enum metrics_histogram h, uint64_t us)
{
    if (!m)
        return;
    size_t b = 0;
    while (b < NBOUNDS && us > bounds[b].us)
        b++;
    atomic_fetch_add_explicit(&m->hist[h].bucket[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->hist[h].sum_us, us, memory_order_relaxed);
}

enum metrics_attempt_class metrics_attempt_class_of(long status, int curl_code, int refused_by_policy)
{
    static const enum metrics_attempt_class by_hundred[] = {MA_OTHER, MA_OTHER, MA_2XX, MA_3XX, MA_4XX, MA_5XX};
    if (refused_by_policy)
        return MA_REFUSED;
    if (status >= 200 && status < 600)
        return by_hundred[status / 100];
    if (status > 0)
        return MA_OTHER;
    if (curl_code == CURLE_OPERATION_TIMEDOUT)
        return MA_TIMEOUT;
    if (curl_code == CURLE_COULDNT_CONNECT || curl_code == CURLE_COULDNT_RESOLVE_HOST)
        return MA_CONNECT_ERROR;
    return MA_OTHER;
}

/* ---- rendering ---- */

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        b->cap = 2 * b->cap + (n > 0 ? (size_t)n : 0);
        b->p = xrealloc(b->p, b->cap);
    }
}

/* A label value, escaped as the format asks: backslash, double quote and
 * newline become \\, \" and \n. */
static void put_label_value(buf *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            put(b, "\\\\");
        else if (*v == '"')
            put(b, "\\\"");
        else if (*v == '\n')
            put(b, "\\n");
        else
            put(b, "%c", *v);
    }
}

static void put_family(buf *b, const char *name, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The queues that have a label now, taken once per scrape so that every
 * family lists the same ones. */
typedef struct qlist {
    int n;
    int slot[QSLOTS];
    const char *name[QSLOTS];
} qlist;

static void queues_snapshot(metrics *m, qlist *ql)
{
    ql->n = 0;
    for (int i = 0; i < METRICS_MAX_QUEUES; i++) {
        qname *q = atomic_load_explicit(&m->names[i], memory_order_acquire);
        if (q) {
            ql->slot[ql->n] = i;
            ql->name[ql->n++] = q->name;
        }
    }
    if (atomic_load_explicit(&m->other_used, memory_order_relaxed)) {
        ql->slot[ql->n] = OTHER_SLOT;
        ql->name[ql->n++] = METRICS_OTHER_QUEUE;
    }
}

static void put_sample_start(buf *b, const char *name, const char *queue)
{
    put(b, "%s{queue=\"", name);
    put_label_value(b, queue);
    put(b, "\"");
}

static void render_events(buf *b, metrics *m, const qlist *ql)
{
    for (int ev = 0; ev < MT_COUNT; ev++) {
        put_family(b, event_families[ev].name, "counter", event_families[ev].help);
        for (int i = 0; i < ql->n; i++) {
            put_sample_start(b, event_families[ev].name, ql->name[i]);
            put(b, "} %" PRIuFAST64 "\n", atomic_load_explicit(&m->events[ev][ql->slot[i]], memory_order_relaxed));
        }
    }
}

static void render_attempts(buf *b, metrics *m, const qlist *ql)
{
    put_family(b, "hookwheel_attempts_total", "counter",
               "HTTP attempts by how they ended: status class, timeout, connect_error, refused (destination "
               "policy) or other.");
    for (int i = 0; i < ql->n; i++)
        for (int c = 0; c < MA_COUNT; c++) {
            put_sample_start(b, "hookwheel_attempts_total", ql->name[i]);
            put(b, ",class=\"%s\"} %" PRIuFAST64 "\n", class_names[c],
                atomic_load_explicit(&m->attempts[c][ql->slot[i]], memory_order_relaxed));
        }
}

static void render_queue_gauges(buf *b, metrics *m, const qlist *ql)
{
    for (int g = 0; g < MG_COUNT; g++) {
        put_family(b, queue_gauge_families[g].name, "gauge", queue_gauge_families[g].help);
        for (int i = 0; i < ql->n; i++) {
            put_sample_start(b, queue_gauge_families[g].name, ql->name[i]);
            put(b, "} %" PRIdFAST64 "\n", atomic_load_explicit(&m->gauges[g][ql->slot[i]], memory_order_relaxed));
        }
    }
}

static const char *const count_states[MQ_DUE] = {"scheduled", "retrying", "paused"};

/* The counts of metrics_set_queue_counts, once it was called. */
static void render_queue_counts(buf *b, metrics *m, const qlist *ql)
{
    if (!atomic_load_explicit(&m->counts_set, memory_order_acquire))
        return;
    put_family(b, "hookwheel_queue_timers", "gauge",
               "Timers of the queue (all namespaces) in each state, as Redis counts them (refreshed by scrapes).");
    for (int i = 0; i < ql->n; i++)
        for (int s = 0; s < MQ_DUE; s++) {
            put_sample_start(b, "hookwheel_queue_timers", ql->name[i]);
            put(b, ",state=\"%s\"} %" PRIdFAST64 "\n", count_states[s],
                atomic_load_explicit(&m->counts[s][ql->slot[i]], memory_order_relaxed));
        }
    put_family(b, "hookwheel_queue_due_backlog", "gauge",
               "Waiting timers of the queue whose due time passed and whose attempt has not begun.");
    for (int i = 0; i < ql->n; i++) {
        put_sample_start(b, "hookwheel_queue_due_backlog", ql->name[i]);
        put(b, "} %" PRIdFAST64 "\n", atomic_load_explicit(&m->counts[MQ_DUE][ql->slot[i]], memory_order_relaxed));
    }
    put_family(b, "hookwheel_queue_oldest_due_age_seconds", "gauge",
               "How long ago the oldest due timer of the queue that has not begun fell due; 0 when none.");
    int64_t now = (int64_t)clock_now_ms();
    for (int i = 0; i < ql->n; i++) {
        int64_t oldest = atomic_load_explicit(&m->oldest_due_ms[ql->slot[i]], memory_order_relaxed);
        put_sample_start(b, "hookwheel_queue_oldest_due_age_seconds", ql->name[i]);
        put(b, "} %.3f\n", oldest > 0 && now > oldest ? (double)(now - oldest) / 1000.0 : 0.0);
    }
}

static void render_histogram(buf *b, const histogram *h, const char *name, const char *help)
{
    uint64_t cum = 0;
    put_family(b, name, "histogram", help);
    for (size_t i = 0; i <= NBOUNDS; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        put(b, "%s_bucket{le=\"%s\"} %" PRIu64 "\n", name, i < NBOUNDS ? bounds[i].le : "+Inf", cum);
    }
    uint64_t sum = atomic_load_explicit(&h->sum_us, memory_order_relaxed);
    put(b, "%s_sum %" PRIu64 ".%06" PRIu64 "\n", name, sum / 1000000u, sum % 1000000u);
    put(b, "%s_count %" PRIu64 "\n", name, cum);
}

static void render_gauges(buf *b, const metrics_gauges *g)
{
    for (size_t i = 0; i < NGAUGES; i++) {
        put_family(b, gauge_families[i].name, gauge_families[i].type, gauge_families[i].help);
        put(b, "%s %.15g\n", gauge_families[i].name, *(const double *)((const char *)g + gauge_families[i].offset));
    }
    put_family(b, "hookwheel_build_info", "gauge", "Always 1; the version label says which hookwheel runs.");
    put(b, "hookwheel_build_info{version=\"%s\"} 1\n", HOOKWHEEL_VERSION);
}

char *metrics_render(metrics *m, const metrics_gauges *g, size_t *len)
{
    buf b = {xmalloc(16384), 0, 16384};
    qlist ql;
    queues_snapshot(m, &ql);
    render_events(&b, m, &ql);
    render_attempts(&b, m, &ql);
    for (int h = 0; h < MH_COUNT; h++)
        render_histogram(&b, &m->hist[h], histogram_families[h].name, histogram_families[h].help);
    render_queue_gauges(&b, m, &ql);
    render_queue_counts(&b, m, &ql);
    render_gauges(&b, g);
    *len = b.len;
    return b.p;
}
