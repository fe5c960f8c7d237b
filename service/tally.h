/* tally.h - the per-(namespace, queue), per-minute delivery figures of GET /stats,
 * counted in memory and added to Redis once a second.
 *
 * The engine thread records events (tally_delivered, tally_failed,
 * tally_attempt, tally_attempt_failed, tally_lateness_us): each is one
 * relaxed atomic add on the (namespace, queue) slot's counters; nothing is sent to Redis per event. A flusher
 * thread (tally_start) takes the counts every second and adds them to
 * Redis (persistence/stats.h: one write per namespace-minute that has
 * anything to add, up to STATS_ADD_MAX queues a write), where every instance sharing the Redis adds its own,
 * so GET /stats reads the deployment's figures. A write that fails (Redis
 * unreachable) keeps its counts and is tried again the next second;
 * counts of a minute more than TALLY_KEEP_MINUTES old are dropped then,
 * with one log line saying how many events were lost. tally_stop writes
 * what is left (graceful stop).
 *
 * Slots: a timer's namespace is the part of its key id before '/' ("" without
 * one: the API runs open); its queue is its spec's. The first
 * TALLY_MAX_SLOTS (namespace, queue) pairs the engine sees are counted;
 * events of later pairs are dropped, not counted even in their namespace's
 * total (one log line per second says how many were not). A pair's slot is
 * kept for the process's life: queues come and go far slower than this cap.
 *
 * Lateness is counted in STATS_BUCKETS buckets of microseconds (bounds
 * below, upper bounds inclusive); tally_quantile_ms estimates a quantile
 * from them by linear interpolation inside the bucket where it falls, so
 * its resolution is that bucket's width (e.g. 2 to 3 ms, 25 to 50 ms). */
#ifndef HW_TALLY_H
#define HW_TALLY_H

#include <stdint.h>

#include "persistence/stats.h"
#include "store.h"

#define TALLY_MAX_SLOTS 4096 /* distinct (namespace, queue) pairs counted */
#define TALLY_KEEP_MINUTES 5 /* unwritten counts older than this many minutes are dropped */

/* The upper bound (us, inclusive) of each lateness bucket but the last,
 * which holds everything above the last bound. */
extern const uint64_t tally_bounds_us[STATS_BUCKETS - 1];

typedef struct tally tally; /* opaque */

/* Creates the counters (all zero), for store st, which must outlive the
 * tally's flushes (tally_stop before store_free). Never NULL. */
tally *tally_create(store *st);

/* Starts the flusher thread. Returns 0 or -errno. */
int tally_start(tally *t) __attribute__((warn_unused_result));

/* Stops the flusher and writes every count not yet written (its writes are
 * queued on the store; store_free sends them). Call after the engine has
 * stopped recording. */
void tally_stop(tally *t);

/* Frees t. After tally_stop and store_free (no write's callback is left to
 * run). NULL is a no-op. */
void tally_free(tally *t);

/* Engine thread only: the slot of the namespace of timer key id `id` and
 * queue `queue` (-1: past TALLY_MAX_SLOTS, or a name too long; not
 * counted). Cheap: a hash lookup. */
int tally_slot(tally *t, const char *id, const char *queue);

/* Engine thread: one event of slot (from tally_slot; -1 counts nothing)
 * now. t NULL is a no-op. */
void tally_delivered(tally *t, int slot); /* a run delivered */
void tally_failed(tally *t, int slot);    /* a timer ended failed */
void tally_attempt(tally *t, int slot);   /* an attempt started */
void tally_attempt_failed(tally *t, int slot); /* an attempt ended without a 2xx */
void tally_lateness_us(tally *t, int slot, uint64_t us); /* a run's first attempt started us late */

/* The bucket of a lateness of us microseconds. Pure. */
int tally_bucket(uint64_t us);

/* The q-quantile (0 < q < 1) in milliseconds of the lateness buckets b
 * (STATS_BUCKETS counts), interpolated linearly inside its bucket (the
 * first starts at 0; a quantile in the last, open bucket is its lower
 * bound). Returns -1 when the buckets are all 0. Pure. */
double tally_quantile_ms(const uint64_t *b, double q);

#endif
