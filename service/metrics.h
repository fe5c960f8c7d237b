/* metrics.h - hookwheel's own metrics, rendered for GET /metrics in the
 * Prometheus text exposition format, version 0.0.4.
 *
 * Any thread. The recording calls (metrics_count, metrics_attempt,
 * metrics_observe_us, metrics_gauge_add) are what the hot paths call: each
 * finds the queue's slot without a lock and does one relaxed atomic add on
 * arrays allocated at metrics_create. Nothing is allocated per event; the
 * first sighting of a queue name allocates its label once. Every recording
 * call is a no-op when m is NULL, so a module can run without metrics.
 *
 * Rendering runs on the scraping thread and only reads atomics, so a scrape
 * never waits for the engine thread, nor makes it wait. The gauges owned by
 * other modules (engine, store, watchdog) come in a metrics_gauges the
 * caller fills from their own lock-free accessors.
 *
 * Queue labels are bounded. Queue names are chosen by clients, so each
 * distinct name cannot be a series of its own for ever: the first
 * METRICS_MAX_QUEUES distinct names seen since the process started get a
 * label of their own, and every later name is counted under
 * queue="_other" (as is a queue literally named "_other"). The queue
 * "default" has its label from the start. */
#ifndef HW_METRICS_H
#define HW_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define METRICS_MAX_QUEUES 64
#define METRICS_OTHER_QUEUE "_other"
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef struct metrics metrics; /* opaque */

/* What happened to a timer, counted per queue once Redis confirmed it. */
enum metrics_timer_event {
    MT_CREATED,   /* a new timer was written (not: an idempotent repeat, a callback or on_expire timer) */
    MT_CANCELLED, /* DELETE or a bulk cancel cancelled it (a repeat is not counted) */
    MT_DELIVERED, /* an attempt answered 2xx (a recurring timer: per run) */
    MT_RETRIED,   /* an attempt failed and another one is scheduled */
    MT_FAILED,    /* an attempt failed for good: the timer is a dead letter */
    MT_STOPPED,   /* a recurring timer's run answered 410 Gone: it stopped */
    MT_COUNT
};

/* How an HTTP attempt ended. */
enum metrics_attempt_class {
    MA_2XX, MA_3XX, MA_4XX, MA_5XX,
    MA_TIMEOUT,       /* no complete answer within the timer's timeout */
    MA_CONNECT_ERROR, /* the name did not resolve or the connection was refused */
    MA_REFUSED,       /* the destination policy refused the address (SSRF) */
    MA_OTHER,         /* any other transport error, or a status outside 200-599 */
    MA_COUNT
};

enum metrics_histogram {
    MH_LATENESS, /* due time -> start of the HTTP attempt */
    MH_DURATION, /* start -> end of the HTTP attempt */
    MH_COUNT
};

/* Per-queue gauges the engine moves up and down. */
enum metrics_queue_gauge {
    MG_READY,     /* due, waiting in the limiter for a dispatch slot */
    MG_IN_FLIGHT, /* HTTP attempts in progress */
    MG_COUNT
};

/* The deployment's counts per queue (every namespace's summed under the
 * queue's name), as persistence/counts.h reads them from Redis. */
enum metrics_queue_count {
    MQ_SCHEDULED, MQ_RETRYING, MQ_PAUSED, /* timers in each counted state (persistence/counts.h) */
    MQ_DUE,                                          /* waiting timers due, not begun */
    MQ_COUNT
};
typedef struct metrics_queue_counts {
    const char *queue;
    uint64_t n[MQ_COUNT];
    int64_t oldest_due_ms; /* due time of the oldest due timer; 0: none */
} metrics_queue_counts;

/* Gauges owned by other modules, read by the scraping thread just before
 * rendering. */
typedef struct metrics_gauges {
    double claimed;             /* timers this instance holds in memory (claimed in Redis) */
    double in_wheel;            /* of those, waiting in the wheel */
    double redis_queued_writes; /* commands waiting for the store's writer */
    double redis_up;            /* 1: the last contact with Redis succeeded */
    double redis_refusing;      /* 1: Redis refuses writes (store_refusing_writes) */
    double lease_age_s;         /* seconds since the instance lease was last renewed */
    double lease_ttl_s;         /* the instance lease's TTL */
    double redis_masters;       /* masters the store routes to */
    double redis_moved, redis_ask, redis_tryagain, redis_map_refreshes; /* counters (store_stats) */
    double redis_replica_ack_timeouts;
} metrics_gauges;

/* Creates the metrics, all zero. Never NULL (aborts on out-of-memory). */
metrics *metrics_create(void);

/* Frees m. Call after every thread that records into it has stopped. NULL
 * is a no-op. */
void metrics_free(metrics *m);

/* Counts one timer event on queue's label. */
void metrics_count(metrics *m, const char *queue, enum metrics_timer_event ev);
/* n events at once (a batch's items of one queue). */
void metrics_count_n(metrics *m, const char *queue, enum metrics_timer_event ev, uint64_t n);

/* Counts one finished HTTP attempt on queue's label. */
void metrics_attempt(metrics *m, const char *queue, enum metrics_attempt_class c);

/* Adds one observation of us microseconds to histogram h. */
void metrics_observe_us(metrics *m, enum metrics_histogram h, uint64_t us);

/* Moves a per-queue gauge by delta. */
void metrics_gauge_add(metrics *m, const char *queue, enum metrics_queue_gauge g, int64_t delta);

/* Replaces the counts with rows (n of them; a queue absent has none), read
 * at at_ms. Any thread; a scrape meanwhile may see some queues old and some
 * new. Until the first call nothing of them is rendered. */
void metrics_set_queue_counts(metrics *m, const metrics_queue_counts *rows, size_t n);

/* The class of an attempt that got HTTP status `status` (0: no response),
 * ended with curl code `curl_code`, and was or was not refused by the
 * destination policy. Pure. */
enum metrics_attempt_class metrics_attempt_class_of(long status, int curl_code, int refused_by_policy);

/* The whole exposition: every metric of m plus the gauges g. Returns
 * malloc'd text (*len set) for the caller to free. Any thread; reads only
 * atomics, so counters moving meanwhile are seen either before or after. */
char *metrics_render(metrics *m, const metrics_gauges *g, size_t *len);

#endif
