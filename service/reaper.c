/* reaper.c - one round: list the registry; for every other instance, ask
 * whether its lease is alive; for each lease that is gone, release its
 * claims in every partition, then forget it, and put it back if its lease
 * was made again meanwhile (persistence/instances.h, persistence/timers.h). */
#include "reaper.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "instances.h"
#include "log.h"
#include "xalloc.h"

struct reaper {
    store *st;
    timers *tm;
    const config *cfg;
    atomic_int steps; /* commands of the current round still waiting for a reply */
};

typedef struct dead {
    reaper *r;
    char id[136];
    atomic_int left;       /* partitions still to release */
    atomic_llong handed;   /* timers handed back */
    atomic_int failed;     /* a partition's release was not sent or did not end */
} dead;


reaper *reaper_create(store *st, timers *tm, const config *cfg)
{
    reaper *r = xcalloc(1, sizeof *r);
    r->st = st;
    r->tm = tm;
    r->cfg = cfg;
    atomic_init(&r->steps, 0);
    return r;
}

void reaper_free(reaper *r) { free(r); }

int reaper_busy(const reaper *r) { return atomic_load(&r->steps) > 0; }

static void step_done(reaper *r) { atomic_fetch_sub(&r->steps, 1); }

/* Counts a step of the round when its verb was queued (rc 0): the verb's
 * callback ends it. */
static int step(reaper *r, int rc)
{
    if (rc < 0)
        step_done(r);
    return rc;
}

static void step_done_cb(void *arg, int ok)
{
    (void)ok;
    step_done(arg);
}

/* After the forget: a lapsed instance that woke in between (a pause, not a
 * crash) made its lease again and may have registered again before our
 * forget took it out. Its later claims must stay findable, so it goes back
 * in. (Its own registration follows its lease, so one of the two sees the
 * other.) */
static void rechecked_cb(void *arg, int alive)
{
    dead *d = arg;
    reaper *r = d->r;
    if (alive == 1) {
        LOG(LOG_INFO, "a lapsed instance is alive again; it stays in the registry", "\"instance\":\"%s\"", d->id);
        atomic_fetch_add(&r->steps, 1);
        (void)step(r, instances_register(r->st, d->id, step_done_cb, r));
    }
    free(d);
    step_done(r);
}

static void forgotten_cb(void *arg, int ok)
{
    dead *d = arg;
    reaper *r = d->r;
    (void)ok;
    atomic_fetch_add(&r->steps, 1);
    if (step(r, instances_alive(r->st, d->id, rechecked_cb, d)) < 0)
        free(d);
    step_done(r);
}

static void released_cb(void *arg, int status, long long n)
{
    dead *d = arg;
    reaper *r = d->r;
    if (n > 0)
        atomic_fetch_add(&d->handed, n);
    if (status != TIMERS_OK)
        atomic_store(&d->failed, 1);
    if (atomic_fetch_sub(&d->left, 1) == 1) {
        long long total = atomic_load(&d->handed);
        if (atomic_load(&d->failed)) {
            /* Forgotten, its claims left in a partition would be no one's
             * to hand back: it stays in the registry, and the next round
             * releases again (what was handed back is not again). */
            LOG(LOG_WARN, "could not take over all the claims of a lapsed instance; the next round tries again",
                "\"instance\":\"%s\",\"timers\":%lld", d->id, total);
            free(d);
            step_done(r);
            return;
        }
        if (total > 0)
            LOG(LOG_INFO, "took over the claims of a lapsed instance", "\"instance\":\"%s\",\"timers\":%lld",
                d->id, total);
        else /* it held nothing: most often an instance that stopped cleanly, having handed its claims back */
            LOG(LOG_DEBUG, "forgot a lapsed instance that held no claims", "\"instance\":\"%s\"", d->id);
        atomic_fetch_add(&r->steps, 1);
        if (step(r, instances_forget(r->st, d->id, forgotten_cb, d)) < 0)
            free(d);
    }
    step_done(r);
}

static void release_dead(reaper *r, dead *d)
{
    char why[200];
    snprintf(why, sizeof why, "instance %s stopped without handing its timers back", d->id);
    uint32_t parts = (uint32_t)r->cfg->partitions;
    /* Count every step up front: replies may only come after this returns
     * (they run on this same writer thread), so nothing frees d meanwhile. */
    atomic_store(&d->left, (int)parts);
    atomic_fetch_add(&r->steps, (int)parts);
    uint32_t sent = timers_release(r->tm, d->id, why, clock_now_ms(), released_cb, d);
    atomic_fetch_sub(&r->steps, (int)(parts - sent));
    if (sent == 0) {
        free(d); /* this round gives up; the next one retries */
    } else if (sent < parts) {
        atomic_store(&d->failed, 1);
        atomic_fetch_sub(&d->left, (int)(parts - sent));
    }
}

static void alive_cb(void *arg, int alive)
{
    dead *d = arg;
    reaper *r = d->r;
    if (alive == 0)
        release_dead(r, d);
    else
        free(d); /* alive, or Redis did not answer */
    step_done(r);
}

static void members_cb(void *arg, size_t n, const char *const *ids)
{
    reaper *r = arg;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ids[i], r->cfg->instance_id) == 0 || strlen(ids[i]) >= sizeof ((dead *)0)->id)
            continue;
        dead *d = xcalloc(1, sizeof *d);
        d->r = r;
        snprintf(d->id, sizeof d->id, "%s", ids[i]);
        atomic_init(&d->left, 0);
        atomic_init(&d->handed, 0);
        atomic_init(&d->failed, 0);
        atomic_fetch_add(&r->steps, 1);
        if (step(r, instances_alive(r->st, d->id, alive_cb, d)) < 0)
            free(d);
    }
    step_done(r);
}

int reaper_run(reaper *r)
{
    if (reaper_busy(r))
        return -EBUSY;
    atomic_fetch_add(&r->steps, 1);
    return step(r, instances_list(r->st, members_cb, r));
}
