/* oneshot.h - creates a one-shot timer that hookwheel itself decides on (a
 * watchdog lease's on_expire), the way POST /timers creates one.
 *
 * The write is create.lua, as for POST /timers: idempotent by id (the same
 * spec and `when` again answers "exists"), and when the timer is due within
 * the claim window and the engine takes claims, it is claimed for this
 * instance and handed to the engine at once, so it is not late by a sweep.
 *
 * Any thread; the callback runs on the store's writer thread. */
#ifndef HW_ONESHOT_H
#define HW_ONESHOT_H

#include <stdint.h>

#include "config.h"
#include "engine.h"
#include "spec.h"
#include "store.h"
#include "timers.h"

enum oneshot_outcome {
    ONESHOT_UNREACHABLE = -1, /* Redis did not answer: it may or may not exist */
    ONESHOT_EXISTS = 0,       /* a timer with this id and this spec exists already */
    ONESHOT_CREATED = 1,
    ONESHOT_CONFLICT = 2,     /* another spec holds the id */
};

typedef void (*oneshot_cb)(void *arg, enum oneshot_outcome outcome);

/* What a create's caller learns (the writer thread, before the engine takes
 * the timer): status as timers_create_cb's, the existing timer v
 * (TIMERS_EXISTS) or holder's state (TIMERS_CONFLICT), and the id and spec
 * as created (valid during the call). */
typedef void (*oneshot_create_cb)(void *arg, int status, const timer_view *v, const char *state, const char *id,
                                  const timer_spec *spec);

/* The one create path, for POST /timers and for timers hookwheel makes
 * itself: writes the timer `id` (a key id) from spec, with when (the due
 * time as given, which idempotency compares), rid (the creating request's
 * id, or NULL) and trace (the W3C trace context it brought, or NULL: none;
 * copied), and when it is due within the claim window and the engine takes
 * claims, holds it in this instance's wheel at once. Takes id and spec on
 * every path. Returns 0 and calls cb (may be NULL) once later, or -EAGAIN /
 * -ESHUTDOWN, and cb is not called. */
int oneshot_create(const config *cfg, engine *eng, char *id, timer_spec *spec, const char *when,
                   const char *rid, const timer_trace *trace, uint64_t now_ms, oneshot_create_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* Creates the timer `id` (a key id: "<namespace>/<id>" with API tokens) from spec (spec->fire_at_ms is its due time; when
 * is the due time as the creator gave it, "delay_ms=N", which idempotency
 * compares with the stored one). Takes id and spec on every path. Returns 0
 * and calls cb (may be NULL) once later, or -EAGAIN / -ESHUTDOWN when the
 * store refused the write, and cb is not called. */
int oneshot_create_take(const config *cfg, store *st, engine *eng, char *id, timer_spec *spec,
                        const char *when, uint64_t now_ms, oneshot_cb cb, void *arg)
    __attribute__((warn_unused_result));

#endif
