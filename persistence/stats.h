/* stats.h - the durable format of the per-minute delivery figures that
 * GET /stats reads: how many runs were delivered, how many timers failed,
 * how many attempts started and failed, and a histogram of lateness, per
 * namespace, queue and minute, summed over every instance sharing the Redis.
 *
 * Redis layout: one hash per namespace and minute,
 *   hw:stats:{ns:<namespace>}:<minute>       (<minute> = epoch ms / 60000)
 * fields <queue>/d (delivered), <queue>/f (failed), <queue>/a (attempts),
 * <queue>/fa (failed attempts) and <queue>/l0 .. <queue>/l<STATS_BUCKETS-1>
 * (lateness bucket counts; service/tally.h says what the buckets hold), for
 * each queue with figures in that minute (queue names have no '/'); a field
 * that is 0 is absent. Fields without a '/' (d, f, ..., written by builds
 * before queues were counted) are read into the all-queues figures only.
 * Each write adds one instance's counts of one queue and minute with HINCRBY (stats.lua, so the write is
 * whole or not at all) and sets the key's expiry to STATS_TTL_S, so a
 * minute is kept about an hour after its last write. The hash tag is the
 * namespace: on a Redis Cluster a namespace's minutes share one slot, and
 * every call touches one key.
 *
 * Threads and ownership: any thread may call a verb. A verb that returns 0
 * calls its callback exactly once, later, on the store's writer thread; one
 * that returns a negative errno (-EAGAIN: the queue is full, -ESHUTDOWN:
 * the store is stopping) never calls it. stats_read's reply is the
 * callback's (stats_reply_free). */
#ifndef HW_PERSISTENCE_STATS_H
#define HW_PERSISTENCE_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define STATS_BUCKETS 20      /* lateness buckets (service/tally.h: their bounds) */
#define STATS_TTL_S (65 * 60) /* a minute's hash lives this long after its last write */
#define STATS_MAX_MINUTES 60  /* a read covers at most this many minutes */

/* The counters of one namespace-minute, in the order of their fields. */
enum stats_field {
    STATS_DELIVERED,       /* runs delivered (each run of a recurring timer) */
    STATS_FAILED,          /* timers that ended failed */
    STATS_ATTEMPTS,        /* attempts started */
    STATS_FAILED_ATTEMPTS, /* attempts that got no 2xx */
    STATS_LATENESS,        /* the first of STATS_BUCKETS lateness buckets */
    STATS_FIELDS = STATS_LATENESS + STATS_BUCKETS
};

typedef struct stats_minute {
    uint64_t v[STATS_FIELDS];
} stats_minute;

/* A write's outcome: ok 1 when Redis applied it; 0 when Redis did not
 * answer (nothing is known written: the counts may be sent again) or
 * answered an error (nothing was written). */
typedef void (*stats_add_cb)(void *arg, int ok);

#define STATS_QUEUE_MAX 64 /* spec.h: a queue name's length */

/* One queue's figures of a minute, for stats_add. */
typedef struct stats_queue_add {
    const char *queue; /* a valid queue name (no '/'), at most STATS_QUEUE_MAX characters */
    const stats_minute *m;
} stats_queue_add;

#define STATS_ADD_MAX 32 /* queues in one stats_add: at most 32 * STATS_FIELDS increments a call */

/* Adds the n (1..STATS_ADD_MAX) queues' figures to namespace ns's minute
 * `minute` and renews the minute's expiry: one stats.lua call on one key,
 * whole or not at all. Fields that are 0 are not sent. Returns -EINVAL for
 * n out of range or a queue name longer than STATS_QUEUE_MAX. */
int stats_add(store *st, const char *ns, int64_t minute, const stats_queue_add *q, size_t n, stats_add_cb cb,
              void *arg) __attribute__((warn_unused_result));

/* One queue's figures summed over the minutes read. */
typedef struct stats_queue {
    char name[STATS_QUEUE_MAX + 1];
    stats_minute total;
} stats_queue;

/* A read's answer, the callback's to keep: it frees it with
 * stats_reply_free (any thread). */
typedef struct stats_reply {
    int ok;                 /* 0: a minute's read got no answer or an error */
    int64_t first;          /* the first minute read */
    size_t n;               /* minutes read */
    stats_minute *minutes;  /* n of them, oldest first; zeros where nothing was kept;
                               the read's queue only, or all queues summed */
    size_t nqueues;         /* queues with figures in these minutes */
    stats_queue *queues;    /* nqueues of them, whatever the filter, in no order (sorting
                               20,000 names is the caller's, off the writer thread) */
} stats_reply;

void stats_reply_free(stats_reply *r);

typedef void (*stats_read_cb)(void *arg, stats_reply *r);

/* Fields an HSCAN of a minute's hash asks for: about 0.4 ms of Redis and
 * as little of the writer thread, so a namespace with 20,000 queues (60,000
 * fields a minute) never holds either for long (one HGETALL of such a minute
 * held Redis 21 ms, and decoding it and building the answer the writer
 * thread, which every namespace's creates and attempts share, 150 ms). */
#define STATS_SCAN_COUNT_TEXT "512"

/* Reads namespace ns's minutes first .. first+n-1 (n 1..STATS_MAX_MINUTES):
 * each minute's hash with HSCAN, one call in flight, minute after minute.
 * A minute's hash only gains fields (none is deleted while it lives), and
 * a growing hash's scan returns each field once. A read whose HSCAN is
 * in flight when the connection is lost answers ok 0; one that goes on
 * with another master's copy of a minute (a failover between two of its
 * calls) may count a field twice or miss one. The reply's minutes are queue
 * `queue`'s (copied; NULL: every queue summed, with fields of the previous
 * layout). */
int stats_read(store *st, const char *ns, const char *queue, int64_t first, size_t n, stats_read_cb cb,
               void *arg) __attribute__((warn_unused_result));

/* The key of ns's minute (buf: room for STATS_KEY_MAX bytes). Pure. */
#define STATS_KEY_MAX 128
void stats_key(char *buf, const char *ns, int64_t minute);

#endif
