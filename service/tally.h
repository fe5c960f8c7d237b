/* tally.h - the per-namespace, per-minute delivery figures of GET /stats,
 * counted in memory and added to Redis once a second.
 *
 * The engine thread records events (tally_delivered, tally_failed,
 * tally_attempt, tally_attempt_failed, tally_lateness_us): each is one
 * relaxed atomic add on the namespace's counters; nothing is sent to Redis per event. A flusher
 * thread (tally_start) takes the counts every second and adds them to
 * Redis (persistence/stats.h: one write per namespace-minute that has
 * anything to add), where every instance sharing the Redis adds its own,
 * so GET /stats reads the deployment's figures. A write that fails (Redis
 * unreachable) keeps its counts and is tried again the next second;
 * counts of a minute more than TALLY_KEEP_MINUTES old are dropped then,
 * with one log line saying how many events were lost. tally_stop writes
 * what is left (graceful stop).
 *
 * Namespaces: a timer's namespace is the part of its key id before '/'
 * ("" without one: the API runs open). The first TALLY_MAX_NAMESPACES
 * namespaces the engine sees are counted; events of later ones are not
 * (one log line per second says how many were not).
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

#define TALLY_MAX_NAMESPACES 1024
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

/* Engine thread only: the slot of the namespace of timer key id `id`
 * (-1: past TALLY_MAX_NAMESPACES, not counted). Cheap: a hash lookup. */
int tally_ns(tally *t, const char *id);

/* Engine thread: one event of namespace slot ns (from tally_ns; -1 counts
 * nothing) now. t NULL is a no-op. */
void tally_delivered(tally *t, int ns); /* a run delivered */
void tally_failed(tally *t, int ns);    /* a timer ended failed */
void tally_attempt(tally *t, int ns);   /* an attempt started */
void tally_attempt_failed(tally *t, int ns); /* an attempt ended without a 2xx */
void tally_lateness_us(tally *t, int ns, uint64_t us); /* a run's first attempt started us late */

/* The bucket of a lateness of us microseconds. Pure. */
int tally_bucket(uint64_t us);

/* The q-quantile (0 < q < 1) in milliseconds of the lateness buckets b
 * (STATS_BUCKETS counts), interpolated linearly inside its bucket (the
 * first starts at 0; a quantile in the last, open bucket is its lower
 * bound). Returns -1 when the buckets are all 0. Pure. */
double tally_quantile_ms(const uint64_t *b, double q);

#endif
