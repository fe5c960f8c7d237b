/* reaper.h - hands the claims of instances whose lease lapsed back to due.
 *
 * Every live instance runs it (every lease_ttl/2); several running at once
 * is safe: each step is one atomic script on one partition, and a claim is
 * handed back once (the second release finds the claimed set empty). A
 * timer that was firing on the dead instance counts that attempt and is
 * retried at once, with last_attempt saying the attempt was interrupted.
 *
 * reaper_run is called from the engine thread; the round then continues in
 * store callbacks (writer thread) and touches only atomics and its own
 * allocations. Free after store_free. */
#ifndef HW_REAPER_H
#define HW_REAPER_H

#include "config.h"
#include "store.h"
#include "timers.h"


typedef struct reaper reaper; /* opaque */

reaper *reaper_create(store *st, timers *tm, const config *cfg);
void reaper_free(reaper *r); /* NULL is a no-op */

/* Starts a round unless one is still running. Returns 0, or -EBUSY. */
int reaper_run(reaper *r);

/* 1 while a round is running. */
int reaper_busy(const reaper *r);


#endif
