/* limiter.h - accounting of the limiting dispatcher.
 *
 * Engine thread only. A global cap on attempts in flight and a parallelism
 * cap per named queue (Kotlin's LimitingDispatcher): a ready job that cannot
 * start waits in its queue's FIFO and starts as slots free up. Queues that
 * have waiting jobs and free parallelism take turns for free global slots
 * (round robin), so one busy queue cannot starve the others; a group of
 * queues (a namespace) may have a cap of its own. Pure
 * bookkeeping: no I/O, no clock; the caller embeds an ljob in its job. */
#ifndef HW_LIMITER_H
#define HW_LIMITER_H

#include <stddef.h>
#include <stdint.h>

#include "list.h"

typedef struct limiter limiter; /* opaque */
typedef struct lqueue lqueue;   /* opaque: one named queue, owned by the limiter */

typedef struct ljob {
    struct list_node node; /* private: queue FIFO link */
    lqueue *q;             /* private */
    int running;           /* private: 1 while counted in flight */
} ljob;

/* Creates a limiter allowing global_cap (>= 1) jobs in flight, with queues
 * created on demand with parallelism default_queue_cap (>= 1). */
limiter *limiter_create(uint32_t global_cap, uint32_t default_queue_cap);

/* Caps the jobs in flight of each group of queues at cap (>= 1): a queue
 * named "a/b" is in group "a" (its namespace), one without '/' in group "".
 * A group at its cap starts nothing more until one of its jobs is done,
 * whatever the free global slots; its queues then take their turns again.
 * A cap at or above the global cap is no cap (the default). Call before the
 * first limiter_queue; returns -1 (and changes nothing) after it, or for 0. */
int limiter_set_group_cap(limiter *l, uint32_t cap);

/* Calls fn for every group whose cap held a queue's jobs back since the
 * last call (holds: how many times a queue of it was set aside for it), and
 * starts counting again. O(groups). fn must not change the limiter. */
void limiter_report_holds(limiter *l, void (*fn)(const char *group, uint32_t cap, uint32_t holds, void *arg),
                          void *arg);

/* Frees the limiter and its queues; jobs are the caller's. NULL is a no-op. */
void limiter_free(limiter *l);

/* Returns the queue named `name`, creating it (with the defaults) when the
 * limiter has none. The limiter keeps its own copy of the name. A queue is
 * kept while it has jobs waiting or in flight, is configured or has other
 * controls than the defaults; limiter_drop_idle frees the others, so an
 * lqueue pointer is valid until the next limiter_drop_idle call. */
lqueue *limiter_queue(limiter *l, const char *name);

/* Marks q configured (it holds stored controls: kept while idle) with mark
 * (0 counts as 1), for limiter_reset_unmarked. */
void limiter_configure_queue(limiter *l, lqueue *q, uint32_t mark);

/* Gives q the defaults again (the creation parallelism, not paused, no
 * rate limit) and unmarks it (limiter_drop_idle may then free it). */
void limiter_reset_queue(limiter *l, lqueue *q, uint64_t now_us);

/* Frees every queue that became idle since the last call (no job waiting or
 * in flight, not configured, the defaults) and still is; every lqueue
 * pointer the caller held is then void. Cost: the queues that became idle.
 * Returns how many it freed. */
size_t limiter_drop_idle(limiter *l);

/* limiter_reset_queue on every configured queue whose mark is not `mark`
 * (after a full read of the stored controls marked each queue found).
 * O(queues). Returns how many it reset. */
size_t limiter_reset_unmarked(limiter *l, uint32_t mark, uint64_t now_us);

/* Changes a queue's parallelism (>= 1). Lowering it never stops running jobs. */
void limiter_set_queue_cap(limiter *l, lqueue *q, uint32_t cap);

/* A shared queue's permits (its limits hold for the deployment, and this
 * instance holds `grant` of them): at most min(cap, grant) of its jobs in
 * flight; UINT32_MAX: not shared (the cap alone). limiter_reset_queue
 * unshares. Lowering it never stops running jobs. */
void limiter_set_queue_grant(limiter *l, lqueue *q, uint32_t grant);
uint32_t limiter_queue_grant(const lqueue *q);

/* Calls fn on every shared queue (grant != UINT32_MAX); fn may change the
 * queue's grant. */
void limiter_each_shared(limiter *l, void (*fn)(lqueue *q, void *arg), void *arg);

/* Pauses (1) or resumes (0) a queue: a paused queue starts nothing; its
 * jobs wait in order. */
void limiter_set_queue_paused(limiter *l, lqueue *q, int paused);

#define LIMITER_MAX_RATE 1e9                      /* starts per second; higher rates are clamped */
#define LIMITER_MAX_WAIT_US (3600ull * 1000000u)  /* limiter_tick never looks further ahead */

/* Limits a queue to per_s starts per second (0 or NaN: no limit; clamped to
 * LIMITER_MAX_RATE), paced evenly (see limiter_tick for the bucket's size).
 * now_us is the caller's clock. A change from one limit to another keeps
 * the bucket's tokens (at most one), so a shared queue's share may change
 * often without bursts or stalls; so does a change through 0 (no limit, or
 * a shared queue's permits given back): the bucket then gains only what the
 * time since it was last refilled brings, up to one token. */
void limiter_set_queue_rate(limiter *l, lqueue *q, double per_s, uint64_t now_us);

/* Refills the rate-limited queues' buckets up to now_us. Call before
 * limiter_pop_ready. period_us is how often, at most, the caller calls again
 * (the engine's tick): a bucket holds max(1, rate x period) tokens, so a rate
 * above one start per period still holds on average. Returns when a waiting
 * rate-limited queue gets its next token (same clock), at least period_us
 * and at most LIMITER_MAX_WAIT_US after now_us, whatever the rate; or
 * UINT64_MAX when none waits for one. */
uint64_t limiter_tick(limiter *l, uint64_t now_us, uint64_t period_us);

int limiter_queue_paused(const lqueue *q);
int limiter_queue_configured(const lqueue *q);
uint32_t limiter_queue_cap(const lqueue *q);
double limiter_queue_rate(const lqueue *q);
uint32_t limiter_queue_count(const limiter *l); /* queues held: configured or busy */

/* Initialises j so that limiter_remove on it is a safe no-op. */
void ljob_init(ljob *j);

/* The queue j was last pushed to (NULL: never pushed). */
const lqueue *ljob_queue(const ljob *j);

/* Appends a ready job to q's FIFO. It starts when limiter_pop_ready hands it out. */
void limiter_push(limiter *l, lqueue *q, ljob *j);

/* Returns the next waiting job that may start now, counting it in flight
 * (global and its queue), or NULL when none may. Call until NULL after every
 * push and done. */
ljob *limiter_pop_ready(limiter *l);

/* A job handed out by limiter_pop_ready has finished: uncount it. */
void limiter_done(limiter *l, ljob *j);

/* Removes a waiting (not running) job from its FIFO. Returns 1 if it was
 * waiting, 0 otherwise (running or not pushed). */
int limiter_remove(limiter *l, ljob *j);

uint32_t limiter_inflight(const limiter *l);
uint32_t limiter_waiting(const limiter *l);
uint32_t limiter_queue_inflight(const lqueue *q);
uint32_t limiter_queue_waiting(const lqueue *q);
/* Of q's waiting jobs, how many its group's cap would let start now (all of
 * them without a group cap); the queue's own caps are not counted. */
uint32_t limiter_queue_startable(const limiter *l, const lqueue *q);
const char *limiter_queue_name(const lqueue *q);

#endif
