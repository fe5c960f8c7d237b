/* reaper.c - one round: SMEMBERS the registry; for every other instance,
 * EXISTS its lease key; for each lease that is gone, run release on its
 * claimed set in every partition, then SREM it from the registry. */
#include "reaper.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "keys.h"
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
} dead;

void reaper_lease_key(char *buf, const char *id)
{
    snprintf(buf, KEYS_MAX, "hw:instance:%s", id);
}

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

/* Submits one command of the round; on a synchronous failure the step is
 * not counted and cb is not called. */
static int submit_eval(reaper *r, enum store_script s, int nkeys, int argc, const char **argv, store_reply_cb cb,
                       void *arg)
{
    atomic_fetch_add(&r->steps, 1);
    int rc = s == SCRIPT_COUNT ? store_command(r->st, argc, argv, NULL, cb, arg)
                               : store_eval(r->st, s, nkeys, argc, argv, NULL, cb, arg);
    if (rc < 0)
        step_done(r);
    return rc;
}

static void forgotten_cb(void *arg, const redisReply *reply)
{
    (void)reply;
    step_done(arg);
}

static void released_cb(void *arg, int status, long long n)
{
    dead *d = arg;
    reaper *r = d->r;
    (void)status;
    if (n > 0)
        atomic_fetch_add(&d->handed, n);
    if (atomic_fetch_sub(&d->left, 1) == 1) {
        long long total = atomic_load(&d->handed);
        LOG(LOG_INFO, "took over the claims of a lapsed instance", "\"instance\":\"%s\",\"timers\":%lld", d->id,
            total);
        const char *argv[] = {"SREM", REAPER_REGISTRY, d->id};
        submit_eval(r, SCRIPT_COUNT, 0, 3, argv, forgotten_cb, r);
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
    if (sent == 0)
        free(d); /* this round gives up; the next one retries */
    else
        atomic_fetch_sub(&d->left, (int)(parts - sent));
}

static void exists_cb(void *arg, const redisReply *reply)
{
    dead *d = arg;
    reaper *r = d->r;
    if (store_reply_int(reply, -1, -1) == 0)
        release_dead(r, d);
    else
        free(d); /* alive, or Redis did not answer */
    step_done(r);
}

static void members_cb(void *arg, const redisReply *reply)
{
    reaper *r = arg;
    for (size_t i = 0; reply && reply->type == REDIS_REPLY_ARRAY && i < reply->elements; i++) {
        const char *id = store_reply_str(reply, (int)i, NULL);
        if (!id || strcmp(id, r->cfg->instance_id) == 0 || strlen(id) >= sizeof ((dead *)0)->id)
            continue;
        dead *d = xcalloc(1, sizeof *d);
        d->r = r;
        snprintf(d->id, sizeof d->id, "%s", id);
        atomic_init(&d->left, 0);
        atomic_init(&d->handed, 0);
        char lk[KEYS_MAX];
        reaper_lease_key(lk, id);
        const char *argv[] = {"EXISTS", lk};
        if (submit_eval(r, SCRIPT_COUNT, 0, 2, argv, exists_cb, d) < 0)
            free(d);
    }
    step_done(r);
}

int reaper_run(reaper *r)
{
    if (reaper_busy(r))
        return -EBUSY;
    const char *argv[] = {"SMEMBERS", REAPER_REGISTRY};
    return submit_eval(r, SCRIPT_COUNT, 0, 2, argv, members_cb, r);
}
