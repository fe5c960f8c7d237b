/* wheel.h - hashed timing wheel for timers due within the claim window.
 *
 * Engine thread only; no locks. The wheel links the caller's wtimer through
 * its embedded node; it never copies, allocates or frees a wtimer, so insert,
 * cancel and expiry allocate nothing (Netty's HashedWheelTimer, with the
 * placement done at insert time).
 *
 * Time is cut into ticks of tick_ms. A timer due at d belongs to tick
 * ceil(d / tick_ms): it expires when the wheel has advanced to that tick, that
 * is at a time >= d, so it is never early. A timer added with a due time whose
 * tick was already passed expires at the next advance. */
#ifndef HW_WHEEL_H
#define HW_WHEEL_H

#include <stddef.h>
#include <stdint.h>

#include "list.h"

typedef struct wheel wheel; /* opaque */

typedef struct wtimer {
    struct list_node node; /* private: slot link; self-linked when not in the wheel */
    uint64_t due_ms;       /* set by the caller before wheel_add; read-only while added */
    uint64_t tick;         /* private: absolute expiry tick */
} wtimer;

/* Creates a wheel of `slots` slots (a power of two >= 2) of tick_ms (>= 1)
 * each, whose clock starts at now_ms. Returns NULL on invalid arguments. */
wheel *wheel_create(uint32_t slots, uint32_t tick_ms, uint64_t now_ms);

/* Frees the wheel; timers still linked are simply forgotten. NULL is a no-op. */
void wheel_free(wheel *w);

/* Initialises t's node so that wheel_cancel on it is a safe no-op. */
void wtimer_init(wtimer *t);

/* Links t (t->due_ms set by the caller) into its slot. O(1). t must not be
 * linked already. */
void wheel_add(wheel *w, wtimer *t);

/* Unlinks t if it is linked; a no-op otherwise. O(1). */
void wheel_cancel(wheel *w, wtimer *t);

/* Follows the wall clock back when it stepped back to before the wheel's
 * last advance (NTP, an operator's date): timers added from now on expire at
 * their own due time, not once the clock has caught up again. A no-op
 * otherwise; wheel_advance does it too. O(1). */
void wheel_rewind(wheel *w, uint64_t now_ms);

/* Advances the wheel to now_ms, moving every timer whose tick is at or before
 * floor(now_ms / tick_ms) to the tail of `expired`, in tick order and, within
 * a tick, in insertion order (FIFO). Returns the number moved. */
size_t wheel_advance(wheel *w, uint64_t now_ms, struct list_node *expired);

/* wheel_advance, moving at most max timers: when more are due, the wheel
 * stays before the tick it stopped in, and the next call goes on with the
 * rest, in the same order. (A jump of a full turn or more, after a stall,
 * moves everything due at once.) */
size_t wheel_advance_max(wheel *w, uint64_t now_ms, struct list_node *expired, size_t max);

/* Milliseconds from now_ms until the next tick that holds a timer (0 if one
 * is already due), or -1 if the wheel is empty. Used to sleep exactly until
 * there is work; may return an earlier tick than strictly needed (a slot
 * holding only timers of later rounds), never a later one. */
int64_t wheel_next_ms(const wheel *w, uint64_t now_ms);

/* Number of timers linked. */
size_t wheel_count(const wheel *w);

#endif
