/* oneshot.c - timers_create for timers hookwheel makes itself; the same write
 * and the same claim decision as api/timers.c's POST /timers. */
#include "oneshot.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "xalloc.h"

typedef struct ctx {
    engine *eng;
    char *id;
    timer_spec *spec;
    int claim;
    oneshot_create_cb cb;
    oneshot_cb simple_cb; /* oneshot_create_take's */
    void *arg;
    char *rid;            /* the creating request's id, or NULL */
    char *traceparent;    /* the trace context it brought, or NULL */
    char *tracestate;
} ctx;

static void ctx_free(ctx *c)
{
    free(c->id);
    free(c->rid);
    free(c->traceparent);
    free(c->tracestate);
    spec_free(c->spec);
    free(c);
}

/* Hands the timer to the engine; a claimed timer is this instance's to fire. */
static void hold(ctx *c)
{
    timer_trace tr = {c->traceparent, c->traceparent ? strlen(c->traceparent) : 0, c->tracestate,
                      c->tracestate ? strlen(c->tracestate) : 0};
    /* a new timer: version 0 */
    engine_add_take(c->eng, c->id, c->spec, (uint64_t)c->spec->fire_at_ms, 0, 0, c->rid, &tr);
    c->id = NULL;
    c->spec = NULL;
}

static void created_cb(void *arg, int status, const timer_view *v, const char *state)
{
    ctx *c = arg;
    int unsent = status == TIMERS_UNREACHABLE && store_call_unsent(); /* (read before the callback runs) */
    if (c->cb)
        c->cb(c->arg, status, v, state, c->id, c->spec);
    /* A lost reply may still have claimed the timer for us; if it was not
     * written, its begin step finds nothing and drops it. A call never sent
     * wrote nothing: its room goes back at once, so creates refused while
     * Redis is away never fill HOOKWHEEL_MAX_RESIDENT. */
    if (c->claim && (status == TIMERS_OK || (status == TIMERS_UNREACHABLE && !unsent)))
        hold(c);
    else if (c->claim)
        engine_unreserve(c->eng, c->id, 1);
    ctx_free(c);
}

int oneshot_create(const config *cfg, engine *eng, char *id, timer_spec *spec, const char *when,
                   const char *rid, const timer_trace *trace, uint64_t now_ms, oneshot_create_cb cb, void *arg)
{
    ctx *c = xcalloc(1, sizeof *c);
    *c = (ctx){.eng = eng, .id = id, .spec = spec, .cb = cb, .arg = arg, .rid = rid && *rid ? xstrdup(rid) : NULL};
    c->claim = (uint64_t)spec->fire_at_ms <= now_ms + cfg->window_ms && engine_reserve(eng, id, 1) == 1;
    int traced = trace && trace->parent_len;
    timer_new n = {id,           spec->stored, spec->stored_len, when, spec->fire_at_ms,
                   spec->cron_x ? TIMERS_CALENDAR : spec->every_ms, spec->queue, rid, now_ms, c->claim,
                   spec->labels, spec->nlabels, spec->has_callbacks, traced ? *trace : (timer_trace){0}};
    if (traced) {
        c->traceparent = xstrndup(trace->parent, trace->parent_len);
        c->tracestate = trace->state_len ? xstrndup(trace->state, trace->state_len) : NULL;
    }
    int rc = timers_create(engine_timers(eng), &n, created_cb, c);
    if (rc < 0) {
        if (c->claim)
            engine_unreserve(eng, id, 1);
        ctx_free(c);
    }
    return rc;
}

static void simple_cb(void *arg, int status, const timer_view *v, const char *state, const char *id,
                      const timer_spec *spec)
{
    ctx *c = arg;
    (void)v, (void)state, (void)id, (void)spec;
    enum oneshot_outcome o = status == TIMERS_OK         ? ONESHOT_CREATED
                             : status == TIMERS_EXISTS   ? ONESHOT_EXISTS
                             : status == TIMERS_CONFLICT ? ONESHOT_CONFLICT
                                                         : ONESHOT_UNREACHABLE;
    if (c->simple_cb)
        c->simple_cb(c->arg, o);
    free(c);
}

int oneshot_create_take(const config *cfg, store *st, engine *eng, char *id, timer_spec *spec,
                        const char *when, uint64_t now_ms, oneshot_cb cb, void *arg)
{
    (void)st;
    ctx *c = xcalloc(1, sizeof *c);
    c->simple_cb = cb;
    c->arg = arg;
    int rc = oneshot_create(cfg, eng, id, spec, when, NULL, NULL, now_ms, simple_cb, c);
    if (rc < 0)
        free(c);
    return rc;
}
