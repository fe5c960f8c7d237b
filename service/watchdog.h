/* watchdog.h - keeps Redis lease keys alive while their holder lives
 * (Redisson's lock watchdog).
 *
 * Each lease is a key holding its holder's value with a TTL; the watchdog
 * renews it every ttl/3 with a compare-and-extend script, so the key
 * outlives a holder only by at most its TTL. hookwheel's own instance lease
 * is one; user leases (/leases) will be others.
 *
 * watchdog_add/remove/run are for one thread (the engine's); renewal
 * replies arrive on the store's writer thread and only touch atomics.
 * Leases are kept until watchdog_free, which must follow store_free. */
#ifndef HW_WATCHDOG_H
#define HW_WATCHDOG_H

#include <stdint.h>

#include "store.h"

typedef struct watchdog watchdog; /* opaque */
typedef struct wlease wlease;     /* opaque */

/* Called when a release is done; reply is always NULL (the parameter keeps
 * the shape of the engine's store callbacks, which it passes here). */
typedef void (*watchdog_done_cb)(void *arg, const redisReply *reply);

watchdog *watchdog_create(store *st);

/* Frees every lease. Call after store_free. NULL is a no-op. */
void watchdog_free(watchdog *w);

/* Starts renewing key (value, ttl_ms) at the next watchdog_run. With
 * recreate set, a key found gone is set again (an instance lease after a
 * Redis restart); otherwise the lease is then lost for good (a user lock). */
wlease *watchdog_add(watchdog *w, const char *key, const char *value, uint64_t ttl_ms, int recreate);

/* Stops renewing l; with release set, deletes the key if it still holds l's
 * value (compare-and-delete), and calls cb (may be NULL) once that is done
 * or failed, on the store's writer thread (at once when it cannot be sent):
 * whether the key was still ours does not change what its caller does next. */
void watchdog_remove(watchdog *w, wlease *l, int release, watchdog_done_cb cb, void *arg);

/* Sends the renewals that are due at now_ms. Returns when the next one is
 * due (wall-clock ms), or UINT64_MAX when there is none. */
uint64_t watchdog_run(watchdog *w, uint64_t now_ms);

/* 1 once a renewal found the key held by someone else (or gone, without
 * recreate): the holder must stop acting on it. */
int watchdog_lost(const wlease *l);

/* 1 if a renewal after the first found the key gone and set it again
 * (recreate) since the last call, and clears that: the holder was silent
 * for longer than its TTL, so others may have acted as if it were gone. */
int watchdog_take_lapsed(wlease *l);

/* Wall-clock ms of the last renewal Redis confirmed (0: none yet). */
uint64_t watchdog_renewed_ms(const wlease *l);

/* 1 while the key surely holds for margin_ms more: the last renewal Redis
 * confirmed was sent less than its TTL minus margin_ms ago (monotonic
 * clock). 0 before the first renewal answered, and once renewals went
 * unanswered for that long: the key may have lapsed in Redis, and others
 * may act as if its holder were gone. Any thread. */
int watchdog_held(const wlease *l, uint64_t margin_ms);

/* 1 when a renewal found the key gone and made it again less than ms ago
 * (monotonic clock): an instance that saw it gone may still be acting on
 * that. Any thread. */
int watchdog_remade_within(const wlease *l, uint64_t ms);

#endif
