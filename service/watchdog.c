/* watchdog.c - lease renewal every ttl/3.
 *
 * Why ttl/3: a renewal can be late by a slow round trip or a missed tick and
 * still land before the key expires; two consecutive failures leave a third
 * of the TTL to spare. A renewal is not sent while the previous one is still
 * in flight, so a slow Redis is not flooded. */
#include "watchdog.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "clock.h"
#include "log.h"
#include "persistence/leases.h"
#include "xalloc.h"

struct wlease {
    wlease *next;
    char *key, *value;
    uint64_t ttl_ms;
    int recreate;
    int removed;             /* owner thread */
    uint64_t next_ms;        /* owner thread: when the next renewal is due */
    atomic_int inflight;     /* a renewal is waiting for its reply */
    atomic_int lost;
    atomic_int lapsed;       /* a renewal found the key gone and set it again */
    atomic_int failed;       /* a renewal got no answer: the next one follows soon */
    atomic_uint_fast64_t renewed_ms;
    atomic_uint_fast64_t sent_mono_ms; /* the renewal in flight was sent then (monotonic) */
    atomic_uint_fast64_t held_mono_ms; /* the last renewal Redis confirmed was sent then; 0: none */
    atomic_uint_fast64_t remade_mono_ms; /* a renewal found the key gone and made it again then; 0: never */
};

/* After a renewal that got no answer (Redis out of reach, or slow past its
 * timeout) the next is sent this soon, not a period later: once Redis
 * answers again the lease is renewed at once, before it lapses if it can. */
#define WATCHDOG_RETRY_MS 100

struct watchdog {
    store *st;
    wlease *leases;
};

watchdog *watchdog_create(store *st)
{
    watchdog *w = xcalloc(1, sizeof *w);
    w->st = st;
    return w;
}

void watchdog_free(watchdog *w)
{
    if (!w)
        return;
    while (w->leases) {
        wlease *l = w->leases;
        w->leases = l->next;
        free(l->key);
        free(l->value);
        free(l);
    }
    free(w);
}

wlease *watchdog_add(watchdog *w, const char *key, const char *value, uint64_t ttl_ms, int recreate)
{
    wlease *l = xcalloc(1, sizeof *l);
    l->key = xstrdup(key);
    l->value = xstrdup(value);
    l->ttl_ms = ttl_ms;
    l->recreate = recreate;
    atomic_init(&l->inflight, 0);
    atomic_init(&l->lost, 0);
    atomic_init(&l->lapsed, 0);
    atomic_init(&l->failed, 0);
    atomic_init(&l->renewed_ms, 0);
    atomic_init(&l->sent_mono_ms, 0);
    atomic_init(&l->held_mono_ms, 0);
    atomic_init(&l->remade_mono_ms, 0);
    l->next = w->leases;
    w->leases = l;
    return l;
}

static void renew_cb(void *arg, const lease_reply *r)
{
    wlease *l = arg;
    if (r->outcome == LEASE_RENEWED || r->outcome == LEASE_RECREATED) {
        /* The first renewal makes the key: only one after a renewal lapsed */
        if (r->outcome == LEASE_RECREATED && atomic_exchange(&l->renewed_ms, clock_now_ms()) != 0) {
            atomic_store(&l->remade_mono_ms, clock_mono_ms());
            atomic_store(&l->lapsed, 1);
        } else
            atomic_store(&l->renewed_ms, clock_now_ms());
        /* Redis ran it after it was sent: the key holds at least a TTL from then */
        atomic_store(&l->held_mono_ms, atomic_load(&l->sent_mono_ms));
    } else if (r->outcome == LEASE_LOST) {
        if (!atomic_exchange(&l->lost, 1))
            LOG(LOG_WARN, "lease lost", "\"key\":\"%.200s\"", l->key);
    } else {
        atomic_store(&l->failed, 1); /* Redis did not answer, or failed: retried soon */
    }
    atomic_store(&l->inflight, 0);
}

static void renew(watchdog *w, wlease *l)
{
    atomic_store(&l->inflight, 1);
    atomic_store(&l->sent_mono_ms, clock_mono_ms());
    if (leases_extend(w->st, l->key, l->value, l->ttl_ms, l->recreate, renew_cb, l) < 0) {
        atomic_store(&l->failed, 1);
        atomic_store(&l->inflight, 0);
    }
}

uint64_t watchdog_run(watchdog *w, uint64_t now_ms)
{
    uint64_t next = UINT64_MAX;
    for (wlease *l = w->leases; l; l = l->next) {
        if (l->removed || atomic_load(&l->lost))
            continue;
        uint64_t period = l->ttl_ms / 3 ? l->ttl_ms / 3 : 1;
        if (atomic_exchange(&l->failed, 0) && l->next_ms > now_ms + WATCHDOG_RETRY_MS)
            l->next_ms = now_ms + WATCHDOG_RETRY_MS;
        /* (a next renewal more than a period away: the wall clock stepped
         * back, and the key's PX does not wait for it to catch up) */
        if ((now_ms >= l->next_ms || l->next_ms > now_ms + period) && !atomic_load(&l->inflight)) {
            renew(w, l);
            l->next_ms = now_ms + period;
        }
        if (l->next_ms < next)
            next = l->next_ms;
    }
    return next;
}

/* The release's callback and its argument, until the unlock answers. */
typedef struct unlock_ctx {
    watchdog_done_cb cb;
    void *arg;
} unlock_ctx;

static void unlocked_cb(void *arg, const lease_reply *r)
{
    unlock_ctx *u = arg;
    (void)r;
    u->cb(u->arg, NULL);
    free(u);
}

void watchdog_remove(watchdog *w, wlease *l, int release, watchdog_done_cb cb, void *arg)
{
    l->removed = 1;
    if (!release)
        return;
    unlock_ctx *u = NULL;
    if (cb) {
        u = xmalloc(sizeof *u);
        *u = (unlock_ctx){cb, arg};
    }
    if (leases_unlock(w->st, l->key, l->value, u ? unlocked_cb : NULL, u) < 0) {
        free(u);
        if (cb)
            cb(arg, NULL);
    }
}

int watchdog_lost(const wlease *l) { return atomic_load(&l->lost); }

int watchdog_take_lapsed(wlease *l) { return atomic_exchange(&l->lapsed, 0); }

uint64_t watchdog_renewed_ms(const wlease *l) { return atomic_load(&l->renewed_ms); }

int watchdog_held(const wlease *l, uint64_t margin_ms)
{
    uint64_t sent = atomic_load(&l->held_mono_ms);
    return sent && clock_mono_ms() + margin_ms < sent + l->ttl_ms;
}

int watchdog_remade_within(const wlease *l, uint64_t ms)
{
    uint64_t at = atomic_load(&l->remade_mono_ms);
    return at && clock_mono_ms() < at + ms;
}
