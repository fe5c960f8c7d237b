/* engine.h - the engine thread: the wheel, the loader, the limiting
 * dispatcher and the outcome writes, on one epoll loop.
 *
 * Only the engine thread touches the wheel, the limiter and the dispatcher,
 * so none of them needs a lock. Other threads hand it work through its inbox
 * (engine_add_take), and store callbacks post their results the same way.
 *
 * Life of a claimed timer: inbox -> wheel -> (due) limiter FIFO -> (slot)
 * begin-attempt script -> HTTP attempt -> outcome script -> gone, or back
 * into the wheel for a retry due within the window. */
#ifndef HW_ENGINE_H
#define HW_ENGINE_H

#include <stdint.h>

#include "config.h"
#include "metrics.h"
#include "netpolicy.h"
#include "sign.h"
#include "spec.h"
#include "store.h"
#include "tally.h"
#include "timers.h"

typedef struct engine engine; /* opaque */

/* Creates the engine for cfg (which must outlive it) on store st; sign (may
 * be NULL) signs every request; policy (may be NULL: none) decides which
 * addresses an attempt may connect to. Both must outlive the engine. Returns NULL after logging when the wheel or
 * the epoll loop cannot be set up. */
engine *engine_create(const config *cfg, store *st, const signer *sign, const netpolicy *policy);

/* Starts the engine thread: it first hands back claims a previous process
 * with this instance id left behind, then sweeps for due timers every
 * window/2. Returns 0 or -errno. */
int engine_start(engine *e) __attribute__((warn_unused_result));

/* Any thread: hands the engine a timer this instance has claimed in Redis
 * in a unit of room engine_reserve took for it, due at fire_ms, with
 * `attempts` attempts made so far in its run, claimed under the run line's
 * `version`, created by the request with id `rid` (NULL or "": none;
 * copied, for the timer's log lines) and carrying the trace context `trace`
 * (NULL: none; copied, sent with every attempt). Takes ownership of id and
 * spec. */
void engine_add_take(engine *e, char *id, timer_spec *spec, uint64_t fire_ms, uint32_t attempts,
                     uint64_t version, const char *rid, const timer_trace *trace);

/* Any thread: timers were made due within the claim window in Redis and
 * no instance holds them (a selector's reschedule or resume, a bulk replay
 * of dead letters): the engine sweeps for them soon (within
 * SWEEP_SOON_GAP_MS of its last sweep) rather than at its next sweep,
 * window/2 away. NULL is a no-op. */
void engine_sweep_soon(engine *e);

/* Any thread: takes room for up to want timers of id's namespace that a
 * create, a batch or an instruction is about to claim for this instance
 * in Redis, and returns how many it took (0 … want): as many as there is
 * room for in memory (max_resident) and under the namespace's cap
 * (HOOKWHEEL_MAX_RESIDENT_PER_NAMESPACE); 0 when stopping. The room counts
 * as held from now, so requests that race cannot each take the same; each
 * unit goes with engine_add_take, or back with engine_unreserve when the
 * timer was not claimed. */
long engine_reserve(engine *e, const char *id, long want);

/* Any thread: gives back n units of id's namespace's room that
 * engine_reserve took and no timer was handed over in. */
void engine_unreserve(engine *e, const char *id, long n);

/* Any thread: 0 once the engine is stopping. */
int engine_running(const engine *e);

/* Counts timer events, attempts and lateness into m (NULL: nowhere); m
 * must outlive the engine. Call before engine_start. */
void engine_set_metrics(engine *e, metrics *m);

/* Counts deliveries, failures, attempts and first-attempt lateness per
 * namespace and minute into t (NULL: nowhere; GET /stats); t must outlive
 * the engine's thread. Call before engine_start. */
void engine_set_tally(engine *e, tally *t);

/* Requests built from now on are signed with sign (dispatch_set_signer);
 * the caller keeps the earlier signer until engine_free. Any thread. */
void engine_set_signer(engine *e, const signer *sign);

/* The engine's timer verbs (persistence/timers.h), for callers that create
 * timers the engine may hold (oneshot.c). Any thread. */
timers *engine_timers(engine *e);

/* What the engine holds, for GET /metrics. */
typedef struct engine_gauges {
    uint64_t claimed;          /* timers held in memory, claimed in Redis, in any phase */
    uint64_t in_wheel;         /* of those, in the wheel (as of the engine's last sleep) */
    uint64_t lease_renewed_ms; /* wall clock of the last confirmed lease renewal; 0: none yet */
    uint64_t started_ms;       /* wall clock of engine_start; 0: not started */
} engine_gauges;

/* Any thread: fills g. Reads only atomics, so it never waits for the engine
 * thread nor holds it up. */
void engine_read_gauges(const engine *e, engine_gauges *g);

/* Graceful stop (SIGTERM): stop claiming, drop unstarted timers from memory,
 * let attempts in flight finish up to the configured grace period, hand every
 * claim of this instance back to Redis, and join the thread. */
void engine_stop(engine *e);

/* Frees the engine and every job it still holds. Call after store_free, so
 * that no store callback can still post to it. NULL is a no-op. */
void engine_free(engine *e);

#endif
