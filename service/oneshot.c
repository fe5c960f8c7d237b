/* oneshot.c - create.lua for timers hookwheel makes itself; the same write
 * and the same claim decision as api/timers.c's POST /timers. */
#include "oneshot.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "log.h"
#include "xalloc.h"

typedef struct ctx {
    engine *eng;
    char *id;
    timer_spec *spec;
    int claim;
    oneshot_cb cb;
    void *arg;
} ctx;

static void ctx_free(ctx *c)
{
    free(c->id);
    spec_free(c->spec);
    free(c);
}

/* Hands the timer to the engine; a claimed timer is this instance's to fire. */
static void hold(ctx *c)
{
    engine_add_take(c->eng, c->id, c->spec, (uint64_t)c->spec->fire_at_ms, 0, 0, NULL); /* a new timer: version 0 */
    c->id = NULL;
    c->spec = NULL;
}

static void created_cb(void *arg, const redisReply *reply)
{
    ctx *c = arg;
    long long code = store_reply_int(reply, 0, -1);
    enum oneshot_outcome o = code == 1   ? ONESHOT_CREATED
                             : code == 0 ? ONESHOT_EXISTS
                             : code == 2 ? ONESHOT_CONFLICT
                                         : ONESHOT_UNREACHABLE;
    if (reply && reply->type == REDIS_REPLY_ERROR)
        LOG(LOG_ERROR, "create failed", "\"timer\":\"%s\",\"error\":\"%.200s\"", c->id, reply->str);
    /* As POST /timers: a lost reply may still have claimed the timer for us;
     * if it was not written, its begin step finds nothing and drops it. */
    if (c->claim && (o == ONESHOT_CREATED || !reply))
        hold(c);
    if (c->cb)
        c->cb(c->arg, o);
    ctx_free(c);
}

int oneshot_create_take(const config *cfg, store *st, engine *eng, char *id, timer_spec *spec,
                        const char *when, uint64_t now_ms, oneshot_cb cb, void *arg)
{
    ctx *c = xcalloc(1, sizeof *c);
    *c = (ctx){eng, id, spec, 0, cb, arg};
    uint32_t p = keys_partition(id, (uint32_t)cfg->partitions);
    char tk[KEYS_MAX], fire[24], now[24];
    keys_timer(tk, p, id);
    snprintf(fire, sizeof fire, "%" PRId64, spec->fire_at_ms);
    snprintf(now, sizeof now, "%" PRIu64, now_ms);
    c->claim = engine_accepting(eng) && (uint64_t)spec->fire_at_ms <= now_ms + cfg->window_ms;
    const char *argv[] = {tk, id, spec->stored, fire, now, c->claim ? "1" : "0", cfg->instance_id, when, ""};
    size_t lens[9];
    for (int i = 0; i < 9; i++)
        lens[i] = i == 2 ? spec->stored_len : strlen(argv[i]);
    int rc = store_eval(st, SCRIPT_CREATE, 1, 9, argv, lens, created_cb, c);
    if (rc < 0)
        ctx_free(c);
    return rc;
}
