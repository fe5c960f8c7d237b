/* watchdog.c - lease renewal every ttl/3.
 *
 * Why ttl/3: a renewal can be late by a slow round trip or a missed tick and
 * still land before the key expires; two consecutive failures leave a third
 * of the TTL to spare. A renewal is not sent while the previous one is still
 * in flight, so a slow Redis is not flooded. */
#include "watchdog.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "log.h"
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
    atomic_uint_fast64_t renewed_ms;
};

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
    atomic_init(&l->renewed_ms, 0);
    l->next = w->leases;
    w->leases = l;
    return l;
}

static void renew_cb(void *arg, const redisReply *r)
{
    wlease *l = arg;
    long long v = store_reply_int(r, -1, -1);
    if (v == 1) {
        atomic_store(&l->renewed_ms, clock_now_ms());
    } else if (v == 0 && !atomic_exchange(&l->lost, 1)) {
        LOG(LOG_WARN, "lease lost", "\"key\":\"%.200s\"", l->key);
    }
    atomic_store(&l->inflight, 0); /* v == -1: Redis unreachable; the next tick retries */
}

static void renew(watchdog *w, wlease *l)
{
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%" PRIu64, l->ttl_ms);
    const char *argv[] = {l->key, l->value, ttl, l->recreate ? "1" : "0"};
    atomic_store(&l->inflight, 1);
    if (store_eval(w->st, SCRIPT_RENEW, 1, 4, argv, NULL, renew_cb, l) < 0)
        atomic_store(&l->inflight, 0);
}

uint64_t watchdog_run(watchdog *w, uint64_t now_ms)
{
    uint64_t next = UINT64_MAX;
    for (wlease *l = w->leases; l; l = l->next) {
        if (l->removed || atomic_load(&l->lost))
            continue;
        if (now_ms >= l->next_ms && !atomic_load(&l->inflight)) {
            renew(w, l);
            l->next_ms = now_ms + (l->ttl_ms / 3 ? l->ttl_ms / 3 : 1);
        }
        if (l->next_ms < next)
            next = l->next_ms;
    }
    return next;
}

static void ignore_cb(void *arg, const redisReply *r)
{
    (void)arg;
    (void)r;
}

void watchdog_remove(watchdog *w, wlease *l, int release, store_reply_cb cb, void *arg)
{
    l->removed = 1;
    if (!release)
        return;
    const char *argv[] = {l->key, l->value};
    if (store_eval(w->st, SCRIPT_UNLOCK, 1, 2, argv, NULL, cb ? cb : ignore_cb, arg) < 0 && cb)
        cb(arg, NULL);
}

int watchdog_lost(const wlease *l) { return atomic_load(&l->lost); }

uint64_t watchdog_renewed_ms(const wlease *l) { return atomic_load(&l->renewed_ms); }
