/* test_timers.c - the timer verbs (persistence/timers.h) against a real
 * redis-server: each verb's decoded reply, batches of mixed results, the
 * lost-reply rules (a begin or finish sent again answers as the first did),
 * the record layout as _record.lua writes it, and the trace context kept
 * beside the request id.
 *
 * Each test starts its own redis-server (the embedded child, on a unix
 * socket in a fresh directory) and a store on it; callbacks run on the
 * store's writer thread and hand their result to the test through a
 * mutex-protected slot. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <inttypes.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "clock.h"
#include "counts.h"
#include "keys.h"
#include "log.h"
#include "redis_child.h"
#include "store.h"
#include "timers.h"

#define LONG_BUDGET_US 60000000u

typedef struct fixture {
    char dir[64];
    redis_child *rc;
    store *st;
    timers *a, *b; /* two instances on the same Redis */
} fixture;

/* ---- waiting for a callback ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int done;

typedef struct result {
    int status, flag, more;
    size_t n;
    char state[16];
    timer_view v;
    char spec[512], history[2048];
    char rid[256], parent[256], tstate[256]; /* of v, or of the first timer claimed */
    int32_t begun[TIMERS_BATCH_MAX];
    uint32_t run[TIMERS_BATCH_MAX];
    int64_t run_due[TIMERS_BATCH_MAX];
    timer_finished fin[TIMERS_BATCH_MAX];
    timer_claimed claimed[64];
    char ids[64][64];
    size_t nrev;
    timer_revoked rev[8];
    char rev_ids[8][64];
    long long count;
    int created[16];
    char cstate[16][16];
    timer_held held[8]; /* timers_held (ids in ids) */
    uint64_t next;
} result;

static result res;

static void signal_done(void)
{
    pthread_mutex_lock(&mu);
    done = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
}

/* Waits for the callback; one that never comes fails the test (60 s)
 * rather than hanging the suite. */
static void wait_done(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&mu);
    int rc = 0;
    while (!done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&cv, &mu, &until);
    int got = done;
    done = 0;
    pthread_mutex_unlock(&mu);
    if (!got)
        fail_msg("no callback within 60 s");
}

static void keep_view(const timer_view *v)
{
    if (!v)
        return;
    res.v = *v;
    snprintf(res.spec, sizeof res.spec, "%.*s", (int)v->spec_len, v->spec);
    snprintf(res.history, sizeof res.history, "%.*s", (int)v->history_len, v->history);
    res.v.spec = res.spec;
    res.v.history = res.history;
    res.v.request_id = res.v.queue = NULL; /* point into the reply */
    snprintf(res.rid, sizeof res.rid, "%.*s", (int)v->request_id_len, v->request_id);
    snprintf(res.parent, sizeof res.parent, "%.*s", (int)v->trace.parent_len, v->trace.parent ? v->trace.parent : "");
    snprintf(res.tstate, sizeof res.tstate, "%.*s", (int)v->trace.state_len, v->trace.state ? v->trace.state : "");
    res.v.trace = (timer_trace){0};
}

static void create_cb(void *arg, int status, const timer_view *v, const char *state)
{
    (void)arg;
    memset(&res, 0, sizeof res);
    res.status = status;
    keep_view(v);
    snprintf(res.state, sizeof res.state, "%s", state ? state : "");
    signal_done();
}

static void create_batch_cb(void *arg, int status, size_t n, const timer_created *r)
{
    (void)arg;
    memset(&res, 0, sizeof res);
    res.status = status;
    res.n = n;
    for (size_t i = 0; i < n && i < 16; i++) {
        res.created[i] = r[i].status;
        snprintf(res.cstate[i], sizeof res.cstate[i], "%s", r[i].state ? r[i].state : "(null)");
    }
    signal_done();
}

static void view_cb(void *arg, int status, const timer_view *v, int flag)
{
    (void)arg;
    memset(&res, 0, sizeof res);
    res.status = status;
    res.flag = flag;
    keep_view(v);
    signal_done();
}

static void begin_cb(void *arg, int status, size_t n, const timer_begun *r)
{
    (void)arg;
    memset(&res, 0, sizeof res);
    res.status = status;
    res.n = n;
    for (size_t i = 0; i < n; i++) {
        res.begun[i] = r[i].attempt;
        res.run[i] = r[i].run;
        res.run_due[i] = r[i].run_due_ms;
    }
    signal_done();
}

static void finish_cb(void *arg, int status, size_t n, const timer_finished *r)
{
    (void)arg;
    memset(&res, 0, sizeof res);
    res.status = status;
    res.n = n;
    memcpy(res.fin, r, n * sizeof *r);
    signal_done();
}

static void claim_cb(void *arg, int status, size_t n, const timer_claimed *items, size_t nrev,
                     const timer_revoked *rev, int more)
{
    (void)arg;
    memset(&res, 0, sizeof res);
    res.status = status;
    res.n = n;
    res.more = more;
    res.nrev = nrev;
    for (size_t i = 0; i < nrev && i < 8; i++) {
        snprintf(res.rev_ids[i], sizeof res.rev_ids[i], "%s", rev[i].id);
        res.rev[i] = (timer_revoked){res.rev_ids[i], rev[i].version};
    }
    for (size_t i = 0; i < n && i < 64; i++) {
        snprintf(res.ids[i], sizeof res.ids[i], "%s", items[i].id);
        res.claimed[i] = items[i];
        res.claimed[i].id = res.ids[i];
        res.claimed[i].spec = res.claimed[i].request_id = NULL;
        res.claimed[i].trace = (timer_trace){0};
    }
    if (n) {
        const timer_claimed *c = &items[0];
        snprintf(res.rid, sizeof res.rid, "%.*s", (int)c->request_id_len, c->request_id);
        snprintf(res.parent, sizeof res.parent, "%.*s", (int)c->trace.parent_len,
                 c->trace.parent ? c->trace.parent : "");
        snprintf(res.tstate, sizeof res.tstate, "%.*s", (int)c->trace.state_len,
                 c->trace.state ? c->trace.state : "");
    }
    signal_done();
}

static void release_cb(void *arg, int status, long long n)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    if (status == TIMERS_OK)
        res.count += n;
    res.n++;
    pthread_mutex_unlock(&mu);
}

/* Waits (up to 5 s) until n of release_cb's calls came. */
static void wait_releases(size_t n)
{
    for (int i = 0; i < 2500; i++) {
        pthread_mutex_lock(&mu);
        size_t got = res.n;
        pthread_mutex_unlock(&mu);
        if (got == n)
            break;
        usleep(2000);
    }
    assert_int_equal(res.n, n);
}

static void held_cb(void *arg, int status, uint64_t next, size_t n, const timer_held *items)
{
    (void)arg;
    res.status = status;
    res.next = next;
    res.n = n;
    for (size_t i = 0; i < n && i < 8; i++) {
        res.held[i] = items[i];
        snprintf(res.ids[i], sizeof res.ids[i], "%s", items[i].id);
        res.held[i].id = res.ids[i];
    }
    signal_done();
}

static void handed_cb(void *arg, int status, size_t n, const timer_handed *r)
{
    (void)arg;
    res.status = status;
    res.n = n;
    for (size_t i = 0; i < n && i < 16; i++) {
        res.created[i] = r[i].handed;
        snprintf(res.cstate[i], sizeof res.cstate[i], "%s", r[i].state);
    }
    signal_done();
}

/* ---- set-up ---- */

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/hw_test_timers_XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    f->rc = redis_child_start(f->dir, "redis-server", 10000);
    if (!f->rc)
        return -1;
    char url[128];
    snprintf(url, sizeof url, "unix://%s", redis_child_socket(f->rc));
    f->st = store_create(url, 2000, 1000);
    if (!f->st || store_start(f->st) < 0)
        return -1;
    /* calls with a budget of a minute: the tests that count what one call
     * takes do not depend on how busy the machine is (the budget's own
     * test makes a handle with a budget of 1 us) */
    timers_config ca = {16, "box-a", 60000, 3, LONG_BUDGET_US}, cb = {16, "box-b", 60000, 3, LONG_BUDGET_US};
    f->a = timers_new(f->st, &ca);
    f->b = timers_new(f->st, &cb);
    *state = f;
    return 0;
}

static int rm_cb(const char *p, const struct stat *s, int fl, struct FTW *w)
{
    (void)s, (void)fl, (void)w;
    return remove(p);
}

static int teardown(void **state)
{
    fixture *f = *state;
    store_free(f->st); /* first: a create's callback may still be taking the next batch (timers_free) */
    timers_free(f->a);
    timers_free(f->b);
    redis_child_stop(f->rc);
    nftw(f->dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

static const char SPEC[] = "{\"body\":\"hello\",\"url\":\"http://127.0.0.1:9/x\"}";

/* Creates id due at fire_ms (when: as given), by request rid with the
 * trace context (parent, tstate; NULL: none), and expects status expect. */
static void create_by(timers *t, const char *id, int64_t fire_ms, const char *rid, const char *parent,
                      const char *tstate, int expect)
{
    timer_new n = {id, SPEC, strlen(SPEC), "delay_ms=60000", fire_ms, 0, "q7", rid, clock_now_ms(), 0,
                   .trace = {parent, parent ? strlen(parent) : 0, tstate, tstate ? strlen(tstate) : 0}};
    assert_int_equal(timers_create(t, &n, create_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.status, expect);
}

static void create(timers *t, const char *id, int64_t fire_ms, int hold, const char *when, int expect)
{
    timer_new n = {id, SPEC, strlen(SPEC), when ? when : "fire_at_ms=0", fire_ms, 0, "q7", "req-1",
                   clock_now_ms(), hold, .trace = {0}};
    assert_int_equal(timers_create(t, &n, create_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.status, expect);
}

static void get(timers *t, const char *id)
{
    assert_int_equal(timers_get(t, id, view_cb, NULL), 0);
    wait_done();
}

/* A due time for a begin whose item is not about it: no timer is due later
 * (begin.lua refuses a job that holds an earlier due time than the timer's). */
#define DUE_ANY ((uint64_t)1 << 52)

static void begin(timers *t, size_t n, const timer_begin *items)
{
    assert_int_equal(timers_begin(t, timers_partition(t, items[0].id), n, items, begin_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.status, TIMERS_OK);
    assert_int_equal(res.n, n);
}

static void finish(timers *t, size_t n, const timer_finish *items)
{
    uint64_t now = clock_now_ms();
    assert_int_equal(timers_finish(t, timers_partition(t, items[0].id), now, now + 5000, n, items, finish_cb, NULL),
                     0);
    wait_done();
    assert_int_equal(res.status, TIMERS_OK);
    assert_int_equal(res.n, n);
}

/* Three ids of one partition, so one batch may hold them. */
static void same_partition(timers *t, char ids[][16], int n)
{
    uint32_t want = timers_partition(t, "p-0");
    int k = 0;
    for (int i = 0; k < n; i++) {
        char id[16];
        snprintf(id, sizeof id, "p-%d", i);
        if (timers_partition(t, id) == want)
            snprintf(ids[k++], 16, "%s", id);
    }
}

/* ---- tests ---- */

static void test_a_created_timer_reads_back_as_it_was_written(void **state)
{
    fixture *f = *state;
    int64_t fire = (int64_t)clock_now_ms() + 60000;
    create(f->a, "t-1", fire, 0, "delay_ms=60000", TIMERS_OK);
    get(f->a, "t-1");
    assert_int_equal(res.status, TIMERS_OK);
    assert_string_equal(res.v.state, "scheduled");
    assert_int_equal(res.v.fire_ms, fire);
    assert_int_equal(res.v.attempts, 0);
    assert_int_equal(res.v.version, 0);
    assert_string_equal(res.spec, SPEC);
    assert_string_equal(res.history, "");
    get(f->a, "no-such-timer");
    assert_int_equal(res.status, TIMERS_UNKNOWN);
}

static void test_the_same_create_again_is_an_idempotent_repeat_and_another_spec_conflicts(void **state)
{
    fixture *f = *state;
    int64_t fire = (int64_t)clock_now_ms() + 60000;
    create(f->a, "t-2", fire, 0, "delay_ms=60000", TIMERS_OK);
    /* the same delay asked later (another due instant): the same timer */
    create(f->a, "t-2", fire + 5, 0, "delay_ms=60000", TIMERS_EXISTS);
    assert_int_equal(res.v.fire_ms, fire);
    create(f->a, "t-2", fire, 0, "delay_ms=60001", TIMERS_CONFLICT);
    assert_string_equal(res.state, "scheduled");
}

static void test_a_batch_begin_answers_each_timer_begun_cancelled_or_held_elsewhere(void **state)
{
    fixture *f = *state;
    char ids[3][16];
    same_partition(f->a, ids, 3);
    int64_t fire = (int64_t)clock_now_ms() + 1000;
    create(f->a, ids[0], fire, 1, NULL, TIMERS_OK); /* held by a */
    create(f->a, ids[1], fire, 1, NULL, TIMERS_OK); /* held by a, then cancelled */
    create(f->b, ids[2], fire, 1, NULL, TIMERS_OK); /* held by b */
    assert_int_equal(timers_cancel(f->a, ids[1], clock_now_ms(), view_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.status, TIMERS_OK);
    assert_int_equal(res.flag, 1);
    timer_begin items[3] = {{ids[0], 0, 11, 0, DUE_ANY}, {ids[1], 0, 12, 0, DUE_ANY}, {ids[2], 0, 13, 0, DUE_ANY}};
    begin(f->a, 3, items);
    assert_int_equal(res.begun[0], 1);
    assert_int_equal(res.begun[1], TIMERS_NOT_WAITING);
    assert_int_equal(res.begun[2], TIMERS_NOT_OURS);
    /* a begin whose reply was lost, sent again by the same job: the same
     * attempt; by another job of the same timer: refused */
    begin(f->a, 1, items);
    assert_int_equal(res.begun[0], 1);
    timer_begin other = {ids[0], 0, 99, 0, DUE_ANY};
    begin(f->a, 1, &other);
    assert_int_equal(res.begun[0], TIMERS_NOT_WAITING);
    /* the cancel that comes after the begin is too late */
    assert_int_equal(timers_cancel(f->a, ids[0], clock_now_ms(), view_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.status, TIMERS_TOO_LATE);
    assert_string_equal(res.v.state, "firing");
}

static void test_a_begin_under_an_older_version_is_refused_as_moved(void **state)
{
    fixture *f = *state;
    create(f->a, "t-moved", (int64_t)clock_now_ms() + 1000, 1, NULL, TIMERS_OK);
    assert_int_equal(timers_control(f->a, "t-moved", "reschedule", clock_now_ms(), (int64_t)clock_now_ms() + 2000,
                                    clock_now_ms() + 5000, view_cb, NULL),
                     0);
    wait_done();
    assert_int_equal(res.status, TIMERS_OK);
    assert_int_equal(res.flag, 1); /* due within the horizon: held again */
    assert_int_equal(res.v.version, 1);
    timer_begin old = {"t-moved", 0, 5, 0, DUE_ANY}, cur = {"t-moved", 1, 6, 0, DUE_ANY};
    begin(f->a, 1, &old);
    assert_int_equal(res.begun[0], TIMERS_MOVED);
    begin(f->a, 1, &cur);
    assert_int_equal(res.begun[0], 1);
}

static void test_a_begin_by_a_job_that_holds_an_earlier_due_time_is_refused_as_not_due(void **state)
{
    /* The job of a create whose write a failover lost, while the timer was
     * made again under its id, due later, and claimed by the same instance:
     * same owner, same version, but not due yet. */
    fixture *f = *state;
    int64_t lost = (int64_t)clock_now_ms() - 5, again = (int64_t)clock_now_ms() + 3000;
    create(f->a, "t-again", again, 1, NULL, TIMERS_OK);
    timer_begin stale = {"t-again", 0, 8, 0, (uint64_t)lost}, own = {"t-again", 0, 9, 0, (uint64_t)again};
    begin(f->a, 1, &stale);
    assert_int_equal(res.begun[0], TIMERS_NOT_DUE);
    assert_int_equal(res.run_due[0], again); /* when it is due: the job waits for it */
    get(f->a, "t-again");
    assert_string_equal(res.v.state, "scheduled"); /* nothing changed */
    assert_int_equal(res.v.attempts, 0);
    begin(f->a, 1, &own);
    assert_int_equal(res.begun[0], 1);
}

static void test_a_batch_finish_records_each_outcome_and_a_repeat_answers_the_same(void **state)
{
    fixture *f = *state;
    char ids[3][16];
    same_partition(f->a, ids, 3);
    int64_t fire = (int64_t)clock_now_ms();
    for (int i = 0; i < 3; i++)
        create(f->a, ids[i], fire, 1, NULL, TIMERS_OK);
    timer_begin b[3] = {{ids[0], 0, 1, 0, DUE_ANY}, {ids[1], 0, 2, 0, DUE_ANY}, {ids[2], 0, 3, 0, DUE_ANY}};
    begin(f->a, 3, b);
    int64_t retry_at = (int64_t)clock_now_ms() + 600000; /* beyond the horizon: back to the index */
    timer_finish fin[3] = {
        {ids[0], TIMER_DELIVERED, "{\"n\":0}", 0, 1, 0, 0, 0, -1},
        {ids[1], TIMER_RETRY, "{\"n\":1}", retry_at, 1, 0, 0, 0, -1},
        {ids[2], TIMER_FAILED, "{\"n\":2}", 0, 1, 0, 0, 0, -1},
    };
    finish(f->a, 3, fin);
    for (int i = 0; i < 3; i++)
        assert_int_equal(res.fin[i].ok, 1);
    assert_int_equal(res.fin[1].fire_ms, retry_at);
    assert_int_equal(res.fin[1].kept, 0);
    get(f->a, ids[0]);
    assert_string_equal(res.v.state, "delivered");
    assert_string_equal(res.history, "{\"n\":0}");
    get(f->a, ids[1]);
    assert_string_equal(res.v.state, "retrying");
    assert_int_equal(res.v.attempts, 1);
    get(f->a, ids[2]);
    assert_string_equal(res.v.state, "failed");
    /* the same finish again (its reply was lost): the same answers */
    finish(f->a, 3, fin);
    for (int i = 0; i < 3; i++)
        assert_int_equal(res.fin[i].ok, 1);
    assert_int_equal(res.fin[1].fire_ms, retry_at);
    /* a finish for an attempt that is not this instance's: refused */
    timer_finish stray = {ids[1], TIMER_DELIVERED, "{\"n\":9}", 0, 1, 0, 0, 0, -1};
    finish(f->b, 1, &stray);
    assert_int_equal(res.fin[0].ok, 0);
}

static void test_an_attempt_that_never_left_is_requeued_without_counting(void **state)
{
    fixture *f = *state;
    create(f->a, "t-requeue", (int64_t)clock_now_ms(), 1, NULL, TIMERS_OK);
    timer_begin b = {"t-requeue", 0, 31, 0, DUE_ANY};
    begin(f->a, 1, &b);
    assert_int_equal(res.begun[0], 1);
    int64_t again = (int64_t)clock_now_ms() + 1500;
    timer_finish fin = {"t-requeue", TIMER_REQUEUE, "{\"error\":\"no socket\"}", again, 1, 0, 0, 0, -1};
    finish(f->a, 1, &fin);
    assert_int_equal(res.fin[0].ok, 1);
    assert_int_equal(res.fin[0].kept, 1);
    assert_int_equal(res.fin[0].attempts, 0);
    assert_int_equal(res.fin[0].fire_ms, again);
    get(f->a, "t-requeue");
    assert_string_equal(res.v.state, "scheduled");
    assert_int_equal(res.v.attempts, 0);
    assert_int_equal(res.v.runs, 0);
    b.token = 32;
    begin(f->a, 1, &b);
    assert_int_equal(res.begun[0], 1); /* the next attempt is attempt 1 again */
}

static void test_a_dead_letter_retried_runs_again_as_the_run_it_failed_in(void **state)
{
    fixture *f = *state;
    int64_t due = (int64_t)clock_now_ms() - 5;
    create(f->a, "t-run", due, 1, NULL, TIMERS_OK);
    timer_begin b = {"t-run", 0, 41, 0, DUE_ANY};
    begin(f->a, 1, &b);
    assert_int_equal(res.begun[0], 1);
    assert_int_equal(res.run[0], 1);
    assert_int_equal(res.run_due[0], due); /* a retry's deadline counts from here */
    timer_finish fin = {"t-run", TIMER_FAILED, "{\"status\":500}", 0, 1, 0, 0, 0, -1};
    finish(f->a, 1, &fin);
    assert_int_equal(timers_control(f->a, "t-run", "retry", clock_now_ms(), 0, clock_now_ms() + 5000, view_cb, NULL),
                     0);
    wait_done();
    assert_int_equal(res.status, TIMERS_OK);
    get(f->a, "t-run");
    b.version = res.v.version;
    b.token = 42;
    begin(f->a, 1, &b);
    assert_int_equal(res.begun[0], 1);
    assert_int_equal(res.run[0], 1); /* the same run again, not a second one */
    assert_true(res.run_due[0] > due);
}

static void test_the_holder_skips_a_missed_slot_under_its_version_and_the_count_is_kept(void **state)
{
    fixture *f = *state;
    int64_t slot = (int64_t)clock_now_ms() - 10000, next = (int64_t)clock_now_ms() + 1000;
    create(f->a, "t-skip", slot, 1, "cron", TIMERS_OK);
    get(f->a, "t-skip");
    uint64_t ver = res.v.version;
    assert_false(res.v.with_skipped && res.v.skipped);
    /* under another version: refused, nothing moves */
    assert_int_equal(timers_skip(f->a, "t-skip", ver + 1, clock_now_ms(), next, 4, clock_now_ms() + 5000, view_cb, NULL),
                     0);
    wait_done();
    assert_int_equal(res.status, TIMERS_TOO_LATE);
    /* by another instance: refused */
    assert_int_equal(timers_skip(f->b, "t-skip", ver, clock_now_ms(), next, 4, clock_now_ms() + 5000, view_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.status, TIMERS_TOO_LATE);
    assert_int_equal(timers_skip(f->a, "t-skip", ver, clock_now_ms(), next, 4, clock_now_ms() + 5000, view_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.status, TIMERS_OK);
    assert_int_equal(res.flag, 1); /* due within the horizon: still held by a */
    assert_int_equal(res.v.fire_ms, next);
    assert_int_equal(res.v.version, ver + 1);
    assert_int_equal(timers_skip(f->a, "t-skip", ver + 1, clock_now_ms(), next + 1000, 3, 0, view_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.flag, 0); /* no horizon: back in the index for any sweep */
    get(f->a, "t-skip");
    assert_int_equal(res.v.with_skipped, 1);
    assert_int_equal(res.v.skipped, 7);
    assert_string_equal(res.v.state, "scheduled");
    /* the count goes with the timer */
    assert_int_equal(timers_cancel(f->a, "t-skip", clock_now_ms(), view_cb, NULL), 0);
    wait_done();
    get(f->a, "t-skip");
    assert_int_equal(res.v.skipped, 0);
}

static void test_the_history_keeps_the_newest_attempts_only(void **state)
{
    fixture *f = *state; /* the fixture keeps 3 attempts */
    create(f->a, "t-hist", (int64_t)clock_now_ms(), 1, NULL, TIMERS_OK);
    char json[5][16];
    for (uint32_t i = 0; i < 5; i++) {
        timer_begin b = {"t-hist", 0, 100 + i, 0, DUE_ANY};
        begin(f->a, 1, &b);
        assert_int_equal(res.begun[0], (int32_t)i + 1);
        assert_int_equal(res.run[0], 1); /* the retries of one run */
        snprintf(json[i], sizeof json[i], "{\"a\":%u}", i);
        timer_finish fin = {"t-hist", TIMER_RETRY, json[i], (int64_t)clock_now_ms(), 1, 0, 0, 0, -1};
        finish(f->a, 1, &fin);
        assert_int_equal(res.fin[0].kept, 1);
    }
    get(f->a, "t-hist");
    assert_string_equal(res.history, "{\"a\":4}\t{\"a\":3}\t{\"a\":2}");
    assert_int_equal(res.v.attempts, 5);
}

static void test_a_claim_takes_due_timers_soonest_first_and_release_hands_them_back(void **state)
{
    fixture *f = *state;
    int64_t now = (int64_t)clock_now_ms();
    create(f->a, "c-late", now + 3000, 0, NULL, TIMERS_OK);
    create(f->a, "c-early", now + 1000, 0, NULL, TIMERS_OK);
    create(f->a, "c-far", now + 600000, 0, NULL, TIMERS_OK);
    size_t got = 0;
    char seen[3][16];
    for (uint32_t p = 0; p < 16; p++) {
        assert_int_equal(timers_claim(f->b, p, (uint64_t)now + 5000, 10, 0, 0, "", claim_cb, NULL), 0);
        wait_done();
        assert_int_equal(res.status, TIMERS_OK);
        for (size_t i = 0; i < res.n; i++)
            snprintf(seen[got++], 16, "%s", res.ids[i]);
    }
    assert_int_equal(got, 2);
    assert_true((!strcmp(seen[0], "c-late") && !strcmp(seen[1], "c-early")) ||
                (!strcmp(seen[1], "c-late") && !strcmp(seen[0], "c-early")));
    /* held by b: a's begin is refused; after b's release, a's sweep gets them */
    timer_begin x = {"c-early", 0, 7, 0, DUE_ANY};
    begin(f->a, 1, &x);
    assert_int_equal(res.begun[0], TIMERS_NOT_OURS);
    memset(&res, 0, sizeof res);
    assert_int_equal(timers_release(f->b, "box-b", "test", clock_now_ms(), release_cb, NULL), 16);
    wait_releases(16);
    assert_int_equal(res.count, 2);
    uint32_t p = timers_partition(f->a, "c-early");
    assert_int_equal(timers_claim(f->a, p, (uint64_t)now + 5000, 10, 0, 0, "", claim_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.n, 1);
    assert_string_equal(res.ids[0], "c-early");
    assert_int_equal(res.claimed[0].fire_ms, now + 1000);
}

/* Writes into id an id of namespace ns ("ns/<prefix><k>") in partition p,
 * counting k up from *k. */
static void id_in(timers *t, char *id, size_t size, const char *ns, const char *prefix, uint32_t p, int *k)
{
    do
        snprintf(id, size, "%s/%s%d", ns, prefix, (*k)++);
    while (timers_partition(t, id) != p);
}

static void test_a_claim_gives_each_namespace_a_share_before_the_soonest_of_another(void **state)
{
    fixture *f = *state;
    int64_t now = (int64_t)clock_now_ms();
    char id[64];
    int k = 0;
    uint32_t p = 0; /* every timer of the test in one partition */
    /* a: 12 due at now + 1000; b: 3 due just after them */
    for (int i = 0; i < 12; i++) {
        id_in(f->a, id, sizeof id, "a", "flood", p, &k);
        create(f->a, id, now + 1000, 0, NULL, TIMERS_OK);
    }
    for (int i = 0; i < 3; i++) {
        id_in(f->a, id, sizeof id, "b", "after", p, &k);
        create(f->a, id, now + 1100 + i, 0, NULL, TIMERS_OK);
    }
    /* a call of 4: two of each namespace (the share), not a's four */
    assert_int_equal(timers_claim(f->a, p, (uint64_t)now + 5000, 4, 0, 0, "", claim_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.n, 4);
    int of_b = 0;
    for (size_t i = 0; i < res.n; i++)
        of_b += !strncmp(res.ids[i], "b/after", 7);
    assert_int_equal(of_b, 2);
    /* a call of 9: four and a half each; b has one left, a gets the rest */
    assert_int_equal(timers_claim(f->a, p, (uint64_t)now + 5000, 9, 0, 0, "", claim_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.n, 9);
    of_b = 0;
    for (size_t i = 0; i < res.n; i++)
        of_b += !strncmp(res.ids[i], "b/after", 7);
    assert_int_equal(of_b, 1);
    /* one namespace left: a's last two */
    assert_int_equal(timers_claim(f->a, p, (uint64_t)now + 5000, 9, 0, 0, "", claim_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.n, 2);
    assert_int_equal(strncmp(res.ids[0], "a/flood", 7) | strncmp(res.ids[1], "a/flood", 7), 0);
}

static void claim(timers *t, const char *id, uint32_t limit)
{
    assert_int_equal(timers_claim(t, timers_partition(t, id), clock_now_ms() + 5000, limit, 0, 0, "", claim_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.status, TIMERS_OK);
}

static void test_the_holder_learns_at_its_next_claim_which_held_timers_were_taken_away(void **state)
{
    fixture *f = *state;
    char ids[4][16];
    same_partition(f->a, ids, 4);
    int64_t soon = (int64_t)clock_now_ms() + 1000;
    uint64_t ver[4];
    for (int i = 0; i < 4; i++) {
        create(f->b, ids[i], soon, 1, NULL, TIMERS_OK); /* held by b */
        ver[i] = res.v.version;
    }
    /* a cancels one, reschedules one and pauses one of b's; the fourth stays b's */
    assert_int_equal(timers_cancel(f->a, ids[0], clock_now_ms(), view_cb, NULL), 0);
    wait_done();
    assert_int_equal(timers_control(f->a, ids[1], "reschedule", clock_now_ms(), soon + 600000, 0, view_cb, NULL), 0);
    wait_done();
    assert_int_equal(timers_control(f->a, ids[2], "pause", clock_now_ms(), 0, 0, view_cb, NULL), 0);
    wait_done();
    claim(f->a, ids[0], 10); /* a held none of them: nothing for a */
    assert_int_equal(res.nrev, 0);
    claim(f->b, ids[0], 0); /* limit 0: only the revocations */
    assert_int_equal(res.n, 0);
    assert_int_equal(res.nrev, 3);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(res.rev[i].id, ids[i]);
        assert_int_equal(res.rev[i].version, ver[i]); /* the version b holds the job under */
    }
    claim(f->b, ids[0], 10); /* handed over once */
    assert_int_equal(res.nrev, 0);
    /* a release deletes what its instance was still to learn */
    assert_int_equal(timers_cancel(f->a, ids[3], clock_now_ms(), view_cb, NULL), 0);
    wait_done();
    memset(&res, 0, sizeof res);
    assert_int_equal(timers_release(f->b, "box-b", "test", clock_now_ms(), release_cb, NULL), 16);
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&mu);
        size_t n = res.n;
        pthread_mutex_unlock(&mu);
        if (n == 16)
            break;
        usleep(2000);
    }
    claim(f->b, ids[0], 10);
    assert_int_equal(res.nrev, 0);
}

/* ---- batch creates ---- */

/* A plain hiredis connection to the fixture's Redis, for what no verb reads. */
static redisContext *raw(fixture *f)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectUnixWithTimeout(redis_child_socket(f->rc), tv);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    return c;
}

static long long raw_int(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer
                  : r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10)
                  : r->type == REDIS_REPLY_NIL    ? -1
                                                  : -2;
    freeReplyObject(r);
    return v;
}

/* FCALLs Redis ran since its last CONFIG RESETSTAT. */
static long fcall_calls(redisContext *c)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    assert_non_null(r);
    const char *at = r->type == REDIS_REPLY_STRING ? strstr(r->str, "cmdstat_fcall:calls=") : NULL;
    long n = at ? strtol(at + strlen("cmdstat_fcall:calls="), NULL, 10) : 0;
    freeReplyObject(r);
    return n;
}

/* With a budget of 1 us every batch call stops after its first few timers
 * (BUDGET_EVERY in _record.lua): a claim says more may be due, and a begin
 * or finish of many timers is answered whole, in order, over several calls. */
static void test_calls_whose_time_budget_runs_out_answer_every_timer_over_several_calls(void **state)
{
    fixture *f = *state;
    timers_config c = {16, "box-a", 60000, 3, .call_budget_us = 1};
    timers *t = timers_new(f->st, &c);
    enum { N = 40 };
    char ids[N][16];
    same_partition(t, ids, N);
    int64_t fire = (int64_t)clock_now_ms();
    for (int i = 0; i < N; i++)
        create(t, ids[i], fire + i, 0, NULL, TIMERS_OK);
    uint32_t p = timers_partition(t, ids[0]);
    /* the claims: each takes some, says more until none is left */
    size_t claimed = 0, calls = 0;
    int more = 1;
    while (more && calls < 100) {
        assert_int_equal(timers_claim(t, p, (uint64_t)fire + 60000, 400, 0, 0, "", claim_cb, NULL), 0);
        wait_done();
        assert_int_equal(res.status, TIMERS_OK);
        for (size_t i = 0; i < res.n; i++) /* soonest first, across the calls */
            assert_string_equal(res.ids[i], ids[claimed + i]);
        claimed += res.n;
        more = res.more;
        calls++;
    }
    assert_int_equal(claimed, N);
    assert_true(calls > 2);
    /* one begin of all of them, answered whole in order */
    timer_begin b[N];
    for (int i = 0; i < N; i++)
        b[i] = (timer_begin){ids[i], 0, (uint32_t)(100 + i), 0, DUE_ANY};
    enum { CANCELLED = N - 5 }; /* one of a later call's timers, cancelled meanwhile */
    assert_int_equal(timers_cancel(t, ids[CANCELLED], clock_now_ms(), view_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.status, TIMERS_OK);
    redisContext *rc = raw(f);
    freeReplyObject(redisCommand(rc, "CONFIG RESETSTAT"));
    begin(t, N, b);
    assert_true(fcall_calls(rc) >= 3); /* one begin, in parts */
    for (int i = 0; i < N; i++)
        assert_int_equal(res.begun[i], i == CANCELLED ? TIMERS_NOT_WAITING : 1);
    /* one finish of the begun ones, answered whole in order */
    timer_finish fin[N];
    size_t k = 0;
    for (int i = 0; i < N; i++)
        if (i != CANCELLED)
            fin[k++] = (timer_finish){ids[i], i % 2 ? TIMER_FAILED : TIMER_DELIVERED, "{\"n\":1}", 0, 0, 0, 0, 0, -1};
    freeReplyObject(redisCommand(rc, "CONFIG RESETSTAT"));
    finish(t, k, fin);
    assert_true(fcall_calls(rc) >= 3); /* one finish, in parts */
    redisFree(rc);
    for (size_t i = 0; i < k; i++) {
        assert_int_equal(res.fin[i].ok, 1);
        assert_int_equal(res.fin[i].attempts, 1);
    }
    for (int i = 0; i < N; i++) {
        get(t, ids[i]);
        assert_string_equal(res.v.state, i == CANCELLED ? "cancelled" : i % 2 ? "failed" : "delivered");
    }
    timers_free(t);
}


static void test_a_release_of_more_claims_than_a_call_takes_hands_them_all_back(void **state)
{
    fixture *f = *state;
    int64_t now = (int64_t)clock_now_ms();
    char id[64];
    int k = 0;
    uint32_t p = 0; /* every timer of the test in one partition */
    for (int i = 0; i < 300; i++) { /* held by b: more than two calls of release.lua */
        id_in(f->b, id, sizeof id, "r", "held", p, &k);
        create(f->b, id, now + 1000, 1, NULL, TIMERS_OK);
    }
    redisContext *c = raw(f);
    freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    memset(&res, 0, sizeof res);
    assert_int_equal(timers_release(f->b, "box-b", "test", clock_now_ms(), release_cb, NULL), 16);
    wait_releases(16);
    assert_int_equal(res.count, 300);
    char tag[17], key[KEYS_MAX];
    keys_owner_tag(tag, "box-b");
    keys_claimed(key, p, tag);
    assert_int_equal(raw_int(c, "EXISTS %s", key), 0);
    /* in calls of 128 at most: three in p, one in each other partition */
    assert_int_equal(fcall_calls(c), 15 + 3);
    redisFree(c);
    /* all back in their index: a's claim gets them */
    assert_int_equal(timers_claim(f->a, p, (uint64_t)now + 5000, 400, 0, 0, "", claim_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.n, 300);
}

/* A batch item due at fire (as given: "fire_at_ms=<fire>", written into when). */
static timer_new batch_item(const char *id, int64_t fire, int hold, char when[32])
{
    snprintf(when, 32, "fire_at_ms=%lld", (long long)fire);
    return (timer_new){id, SPEC, strlen(SPEC), when, fire, 0, "q7", "req-b", clock_now_ms(), hold, .trace = {0}};
}

/* Writes n items as one call and expects status TIMERS_OK. */
static void create_batch(timers *t, size_t n, const timer_new *items, int atomic)
{
    assert_int_equal(timers_create_batch(t, timers_partition(t, items[0].id), n, items, atomic, create_batch_cb, NULL),
                     0);
    wait_done();
    assert_int_equal(res.status, TIMERS_OK);
    assert_int_equal(res.n, n);
}

static void test_a_batch_create_answers_each_item_in_order_however_it_is_written(void **state)
{
    fixture *f = *state;
    redisContext *c = raw(f);
    char ids[12][16];
    same_partition(f->a, ids, 12);
    uint32_t p = timers_partition(f->a, ids[0]);
    char cn[KEYS_MAX], ix[KEYS_MAX], cl[KEYS_MAX], tag[17];
    snprintf(cn, sizeof cn, "hw:{%u}:cn", p);
    keys_index(ix, p, "", "scheduled");
    keys_owner_tag(tag, "box-a");
    keys_claimed(cl, p, tag);
    int64_t fire = (int64_t)clock_now_ms() + 60000;

    /* all new, held and not held mixed (a plain call: one MSETNX) */
    int hold[6] = {0, 1, 0, 0, 1, 0};
    timer_new items[6];
    char when[6][32];
    for (int i = 0; i < 6; i++)
        items[i] = batch_item(ids[i], fire + i, hold[i], when[i]);
    create_batch(f->a, 6, items, 0);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(res.created[i], TIMERS_OK);
        assert_string_equal(res.cstate[i], "");
    }
    for (int i = 0; i < 6; i++) {
        get(f->a, ids[i]);
        assert_int_equal(res.status, TIMERS_OK);
        assert_string_equal(res.v.state, "scheduled");
        assert_int_equal(res.v.fire_ms, fire + i);
        assert_string_equal(res.spec, SPEC);
        /* each in the zset of who holds it, at its due time */
        assert_int_equal(raw_int(c, "ZSCORE %s %s", hold[i] ? cl : ix, ids[i]), fire + i);
        assert_int_equal(raw_int(c, "ZSCORE %s %s", hold[i] ? ix : cl, ids[i]), -1);
    }
    /* counted where create counts: one create more makes 7 */
    assert_int_equal(raw_int(c, "HGET %s %s", cn, "/sq7"), 6);
    create(f->a, ids[6], fire, 0, NULL, TIMERS_OK);
    assert_int_equal(raw_int(c, "HGET %s %s", cn, "/sq7"), 7);
    assert_int_equal(raw_int(c, "SISMEMBER hw:{%u}:nss %s", p, ""), 1);
    assert_int_equal(raw_int(c, "SISMEMBER hw:{%u}:holders %s", p, tag), 1);

    /* taken ids among new ones: each answered on its own, in order */
    char mix[5][16];
    memcpy(mix[0], ids[7], 16);
    memcpy(mix[1], ids[0], 16); /* the same spec and due time: a repeat */
    memcpy(mix[2], ids[8], 16);
    memcpy(mix[3], ids[4], 16); /* another due time: a conflict */
    memcpy(mix[4], ids[9], 16);
    int hold2[5] = {1, 0, 0, 1, 0};
    int64_t due[5] = {fire, fire + 0, fire, fire + 99, fire};
    for (int i = 0; i < 5; i++)
        items[i] = batch_item(mix[i], due[i], hold2[i], when[i]);
    /* atomic: the conflict keeps every new one out */
    create_batch(f->a, 5, items, 1);
    int want_atomic[5] = {TIMERS_NOT_STORED, TIMERS_EXISTS, TIMERS_NOT_STORED, TIMERS_CONFLICT, TIMERS_NOT_STORED};
    for (int i = 0; i < 5; i++)
        assert_int_equal(res.created[i], want_atomic[i]);
    assert_string_equal(res.cstate[3], "scheduled");
    get(f->a, ids[7]);
    assert_int_equal(res.status, TIMERS_UNKNOWN);
    /* not atomic: the new ones are written */
    create_batch(f->a, 5, items, 0);
    int want[5] = {TIMERS_OK, TIMERS_EXISTS, TIMERS_OK, TIMERS_CONFLICT, TIMERS_OK};
    for (int i = 0; i < 5; i++)
        assert_int_equal(res.created[i], want[i]);
    assert_int_equal(raw_int(c, "ZSCORE %s %s", cl, ids[7]), fire);
    assert_int_equal(raw_int(c, "ZSCORE %s %s", ix, ids[8]), fire);
    assert_int_equal(raw_int(c, "HGET %s %s", cn, "/sq7"), 10);

    /* an id twice in one call: the second repeats the first */
    char twice[3][16];
    memcpy(twice[0], ids[10], 16);
    memcpy(twice[1], ids[11], 16);
    memcpy(twice[2], ids[10], 16);
    for (int i = 0; i < 3; i++)
        items[i] = batch_item(twice[i], fire, 0, when[i]);
    create_batch(f->a, 3, items, 0);
    assert_int_equal(res.created[0], TIMERS_OK);
    assert_int_equal(res.created[1], TIMERS_OK);
    assert_int_equal(res.created[2], TIMERS_EXISTS);
    assert_int_equal(raw_int(c, "HGET %s %s", cn, "/sq7"), 12);
    redisFree(c);
}

/* Counts create callbacks (any thread), each one's status in order. */
static pthread_mutex_t many_mu = PTHREAD_MUTEX_INITIALIZER;
static int many_status[64], many_done;
static char many_state[64][16];
static int64_t many_fire[64];

static void many_cb(void *arg, int status, const timer_view *v, const char *state)
{
    int i = (int)(intptr_t)arg;
    pthread_mutex_lock(&many_mu);
    many_status[i] = status;
    many_fire[i] = v ? v->fire_ms : -1;
    snprintf(many_state[i], sizeof many_state[i], "%s", state ? state : "");
    if (++many_done == 40)
        signal_done();
    pthread_mutex_unlock(&many_mu);
}

static long long fcalls(redisContext *c)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    assert_non_null(r);
    const char *at = strstr(r->str, "cmdstat_fcall:calls=");
    long long n = at ? strtoll(at + 20, NULL, 10) : 0;
    freeReplyObject(r);
    return n;
}

static void test_creates_of_a_partition_that_come_while_its_call_is_in_flight_go_as_one_call(void **state)
{
    fixture *f = *state;
    redisContext *c = raw(f);
    char ids[40][16];
    same_partition(f->a, ids, 40);
    int64_t fire = (int64_t)clock_now_ms() + 60000;
    create(f->a, ids[0], fire, 0, "delay_ms=60000", TIMERS_OK);
    create(f->a, ids[1], fire, 0, "delay_ms=60000", TIMERS_OK);
    freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    /* Redis holds writes for 300 ms: the first create's call waits there,
     * and the 39 that come meanwhile wait for it */
    freeReplyObject(redisCommand(c, "CLIENT PAUSE 300 WRITE"));
    many_done = 0;
    for (int i = 0; i < 40; i++) {
        /* ids[0]: a repeat (the same spec and delay); ids[1]: another delay */
        timer_new n = {ids[i], SPEC,           strlen(SPEC), i == 1 ? "delay_ms=60001" : "delay_ms=60000",
                       fire,   0,              "q7",         "req-1",
                       clock_now_ms(),         i % 3 == 0,   .trace = {0}};
        assert_int_equal(timers_create(f->a, &n, many_cb, (void *)(intptr_t)i), 0);
    }
    wait_done();
    /* one call for the first, one for the 39 that waited, and create.lua for
     * each of the two taken ids (a repeat is answered with its timer): 4.
     * Or 3: when the writer thread had not yet marked the partition idle
     * after the create before the loop (its callback runs first), the first
     * waits too and all 40 go as one call. More would mean creates that
     * came while a call was in flight went as calls of their own. */
    long long n = fcalls(c);
    if (n != 3 && n != 4)
        fail_msg("%lld calls for 40 creates of one partition", n);
    assert_int_equal(many_status[0], TIMERS_EXISTS);
    assert_int_equal(many_fire[0], fire);
    assert_int_equal(many_status[1], TIMERS_CONFLICT);
    assert_string_equal(many_state[1], "scheduled");
    for (int i = 2; i < 40; i++) {
        assert_int_equal(many_status[i], TIMERS_OK);
        get(f->a, ids[i]);
        assert_int_equal(res.status, TIMERS_OK);
        assert_string_equal(res.v.state, "scheduled");
    }
    char cn[KEYS_MAX];
    snprintf(cn, sizeof cn, "hw:{%u}:cn", timers_partition(f->a, ids[0]));
    assert_int_equal(raw_int(c, "HGET %s %s", cn, "/sq7"), 40);
    redisFree(c);
}

/* On one Redis the creates of every partition that come while a create
 * call is in flight wait in one queue and go as one call; each is written,
 * indexed (or held) and counted in its own partition. taken: one of them
 * (ids[7], in another partition than ids[0]) exists already with the same
 * spec, so the call is written item by item and that one is sent again
 * alone, to its own partition, and answered as a repeat. */
static void creates_across_partitions(fixture *f, const char *prefix, int labelled, int taken)
{
    redisContext *c = raw(f);
    char ids[40][16], tag[17], *labels[] = {"team:a"};
    keys_owner_tag(tag, "box-a");
    int64_t fire = (int64_t)clock_now_ms() + 60000;
    long long per[16] = {0};
    int parts = 0;
    for (int i = 0; i < 40; i++) {
        snprintf(ids[i], sizeof ids[i], "%s-%d", prefix, i);
        uint32_t p = timers_partition(f->a, ids[i]);
        parts += per[p]++ == 0;
    }
    assert_true(parts >= 8); /* (the ids spread over the partitions) */
    if (taken) {
        assert_true(timers_partition(f->a, ids[7]) != timers_partition(f->a, ids[0]));
        create(f->a, ids[7], fire, 0, "delay_ms=60000", TIMERS_OK);
    }
    freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    freeReplyObject(redisCommand(c, "CLIENT PAUSE 300 WRITE"));
    many_done = 0;
    for (int i = 0; i < 40; i++) {
        timer_new n = {ids[i], SPEC, strlen(SPEC), "delay_ms=60000", fire, 0, "q7", "req-1", clock_now_ms(),
                       i % 3 == 0, labelled && i % 4 == 1 ? labels : NULL, labelled && i % 4 == 1, .trace = {0}};
        assert_int_equal(timers_create(f->a, &n, many_cb, (void *)(intptr_t)i), 0);
    }
    wait_done();
    /* the first create's call, then one for the 39 that waited (or one for
     * all 40: see the test of one partition above), and create.lua for the
     * taken id */
    long long calls = fcalls(c) - taken;
    if (calls != 1 && calls != 2)
        fail_msg("%lld calls for 40 creates that came during one call", calls + taken);
    for (int i = 0; i < 40; i++) {
        assert_int_equal(many_status[i], taken && i == 7 ? TIMERS_EXISTS : TIMERS_OK);
        if (taken && i == 7)
            assert_int_equal(many_fire[i], fire);
        uint32_t p = timers_partition(f->a, ids[i]);
        get(f->a, ids[i]);
        assert_int_equal(res.status, TIMERS_OK);
        assert_string_equal(res.v.state, "scheduled");
        /* held at once in this instance's claims, else in its partition's index */
        char held[KEYS_MAX], ix[KEYS_MAX];
        snprintf(held, sizeof held, "hw:{%u}:cl:%s", p, tag);
        snprintf(ix, sizeof ix, "hw:{%u}:ix::scheduled", p);
        assert_int_equal(raw_int(c, "ZSCORE %s %s", i % 3 == 0 ? held : ix, ids[i]), fire);
        assert_int_equal(raw_int(c, "ZSCORE %s %s", i % 3 == 0 ? ix : held, ids[i]), -1);
        assert_int_equal(raw_int(c, "SISMEMBER hw:{%u}:%s %s", p, i % 3 == 0 ? "holders" : "nss",
                                 i % 3 == 0 ? tag : ""), 1);
    }
    for (uint32_t p = 0; p < 16; p++)
        assert_int_equal(raw_int(c, "HGET hw:{%u}:cn /sq7", p), per[p] ? per[p] : -1); /* (-1: none) */
    redisFree(c);
}

static void test_creates_of_many_partitions_that_come_during_one_call_go_as_one_call(void **state)
{
    fixture *f = *state;
    /* a plain call (no labels), then one each item of which is written on its own */
    creates_across_partitions(f, "wide", 0, 0);
    redisContext *c = raw(f);
    freeReplyObject(redisCommand(c, "FLUSHALL"));
    creates_across_partitions(f, "lab", 1, 0);
    freeReplyObject(redisCommand(c, "FLUSHALL"));
    creates_across_partitions(f, "wide", 0, 1); /* one id taken */
    redisFree(c);
}

/* ---- creates from many threads at once ---- */

#define RACE_THREADS 4
#define RACE_EACH 600
#define RACE_IDS 300

static atomic_int race_calls[RACE_THREADS * RACE_EACH];
static atomic_int race_ok[RACE_IDS], race_exists[RACE_IDS], race_other, race_left, race_refused;

typedef struct race_arg {
    timers *t;
    int thread;
} race_arg;

static void race_cb(void *arg, int status, const timer_view *v, const char *state)
{
    (void)v, (void)state;
    int k = (int)(intptr_t)arg, id = k % RACE_IDS;
    atomic_fetch_add(&race_calls[k], 1);
    if (status == TIMERS_OK)
        atomic_fetch_add(&race_ok[id], 1);
    else if (status == TIMERS_EXISTS)
        atomic_fetch_add(&race_exists[id], 1);
    else
        atomic_fetch_add(&race_other, 1);
    if (atomic_fetch_sub(&race_left, 1) == 1)
        signal_done();
}

static void *race_thread(void *p)
{
    race_arg *a = p;
    int64_t fire = 4102444800000; /* 2100: none falls due during the test */
    for (int i = 0; i < RACE_EACH; i++) {
        int k = a->thread * RACE_EACH + i;
        char id[16];
        snprintf(id, sizeof id, "race-%d", k % RACE_IDS);
        timer_new n = {id, SPEC, strlen(SPEC), "fire_at_ms=4102444800000", fire, 0, "q7", "req-1", clock_now_ms(),
                       0, .trace = {0}};
        int rc;
        while ((rc = timers_create(a->t, &n, race_cb, (void *)(intptr_t)k)) == -EAGAIN)
            usleep(100); /* (the store's queue is full: the API would answer 429) */
        if (rc != 0) { /* (no cmocka assertion off the test's thread) */
            atomic_fetch_add(&race_refused, 1);
            if (atomic_fetch_sub(&race_left, 1) == 1)
                signal_done();
        }
    }
    return NULL;
}

static void test_creates_from_many_threads_are_each_answered_once_and_each_id_created_once(void **state)
{
    fixture *f = *state;
    atomic_store(&race_left, RACE_THREADS * RACE_EACH);
    pthread_t th[RACE_THREADS];
    race_arg args[RACE_THREADS];
    for (int i = 0; i < RACE_THREADS; i++) {
        args[i] = (race_arg){f->a, i};
        assert_int_equal(pthread_create(&th[i], NULL, race_thread, &args[i]), 0);
    }
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_join(th[i], NULL);
    wait_done();
    assert_int_equal(atomic_load(&race_refused), 0);
    for (int k = 0; k < RACE_THREADS * RACE_EACH; k++)
        assert_int_equal(atomic_load(&race_calls[k]), 1);
    assert_int_equal(atomic_load(&race_other), 0);
    /* each id: one create made it, every other one is its repeat */
    for (int id = 0; id < RACE_IDS; id++) {
        assert_int_equal(atomic_load(&race_ok[id]), 1);
        assert_int_equal(atomic_load(&race_exists[id]), RACE_THREADS * RACE_EACH / RACE_IDS - 1);
    }
    redisContext *c = raw(f);
    long long counted = 0;
    for (uint32_t p = 0; p < 16; p++)
        counted += raw_int(c, "HGET hw:{%u}:cn /sq7", p) > 0 ? raw_int(c, "HGET hw:{%u}:cn /sq7", p) : 0;
    assert_int_equal(counted, RACE_IDS);
    redisFree(c);
}

static void test_a_verb_on_an_unreachable_redis_calls_back_once_unreachable(void **state)
{
    (void)state;
    store *st = store_create("redis://127.0.0.1:1", 200, 10);
    assert_non_null(st);
    assert_int_equal(store_start(st), 0);
    timers_config c = {16, "box-z", 1000, 1, 0};
    timers *t = timers_new(st, &c);
    assert_int_equal(timers_get(t, "x", view_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.status, TIMERS_UNREACHABLE);
    store_free(st);
    timers_free(t);
}

static void test_a_firing_timer_its_holder_no_longer_runs_is_listed_and_handed_back_once(void **state)
{
    fixture *f = *state;
    int64_t now = (int64_t)clock_now_ms();
    create(f->a, "hb-1", now + 1000, 0, NULL, TIMERS_OK);
    uint32_t p = timers_partition(f->a, "hb-1");
    claim(f->b, "hb-1", 10);
    timer_begin x = {"hb-1", 0, 21, 0, DUE_ANY};
    begin(f->b, 1, &x);
    assert_int_equal(res.begun[0], 1);
    /* only claims due by the bound are read */
    assert_int_equal(timers_held(f->b, p, (uint64_t)now, 0, 10, held_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.status, TIMERS_OK);
    assert_int_equal(res.n, 0);
    assert_int_equal(timers_held(f->b, p, (uint64_t)now + 2000, 0, 10, held_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.status, TIMERS_OK);
    assert_int_equal(res.n, 1);
    assert_int_equal(res.next, 0);
    assert_string_equal(res.ids[0], "hb-1");
    assert_int_equal(res.held[0].token, 21);
    assert_int_equal(res.held[0].attempt, 1);
    assert_int_equal(res.held[0].run, 1);
    timer_held h = res.held[0];
    /* another instance's hand-back leaves b's timer alone */
    assert_int_equal(timers_hand_back(f->a, p, clock_now_ms(), "lost", 1, &h, handed_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.status, TIMERS_OK);
    assert_int_equal(res.n, 1);
    assert_int_equal(res.created[0], 0);
    assert_string_equal(res.cstate[0], "");
    assert_int_equal(timers_hand_back(f->b, p, clock_now_ms(), "lost", 1, &h, handed_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.created[0], 1);
    assert_string_equal(res.cstate[0], "retrying");
    get(f->a, "hb-1");
    assert_string_equal(res.v.state, "retrying");
    assert_int_equal(res.v.fire_ms, now + 1000);
    assert_non_null(strstr(res.history, "attempt interrupted: lost"));
    assert_non_null(strstr(res.history, "box-b"));
    /* done once: the same listing again finds it moved on */
    assert_int_equal(timers_hand_back(f->b, p, clock_now_ms(), "lost", 1, &h, handed_cb, NULL), 0);
    wait_done();
    assert_int_equal(res.created[0], 0);
    /* and any sweep claims it again */
    claim(f->a, "hb-1", 10);
    assert_int_equal(res.n, 1);
}

static const char TP[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
static const char TS[] = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE";

static void test_the_trace_context_is_kept_beside_the_request_id_and_split_off_when_read(void **state)
{
    fixture *f = *state;
    int64_t now = (int64_t)clock_now_ms();
    create_by(f->a, "tr-1", now + 1000, "req-1", TP, TS, TIMERS_OK);
    get(f->a, "tr-1");
    assert_string_equal(res.rid, "req-1");
    assert_string_equal(res.parent, TP);
    assert_string_equal(res.tstate, TS);
    claim(f->b, "tr-1", 10);
    assert_int_equal(res.n, 1);
    assert_string_equal(res.ids[0], "tr-1");
    assert_string_equal(res.rid, "req-1");
    assert_string_equal(res.parent, TP);
    assert_string_equal(res.tstate, TS);
    /* a repeat by another request with another trace context is the same
     * timer: neither is compared, and the first ones stay */
    create_by(f->a, "tr-1", now + 1000, "req-2", "00-11111111111111111111111111111111-2222222222222222-00", NULL,
              TIMERS_EXISTS);
    assert_string_equal(res.rid, "req-1");
    assert_string_equal(res.parent, TP);
    /* without a request id, or without a tracestate */
    create_by(f->a, "tr-2", now + 60000, NULL, TP, NULL, TIMERS_OK);
    get(f->a, "tr-2");
    assert_string_equal(res.rid, "");
    assert_string_equal(res.parent, TP);
    assert_string_equal(res.tstate, "");
    /* without a trace context: the request id alone, as before */
    create_by(f->a, "tr-3", now + 60000, "req-3", NULL, TS, TIMERS_OK);
    get(f->a, "tr-3");
    assert_string_equal(res.rid, "req-3");
    assert_string_equal(res.parent, "");
    assert_string_equal(res.tstate, "");
}

static void test_what_does_not_fit_beside_the_request_id_is_dropped_and_the_id_kept_whole(void **state)
{
    fixture *f = *state;
    int64_t now = (int64_t)clock_now_ms() + 60000;
    char rid[256], long_state[TIMERS_TRACESTATE_MAX + 2];
    memset(long_state, 'a', sizeof long_state - 1);
    long_state[0] = 'k', long_state[1] = '=', long_state[sizeof long_state - 1] = '\0';
    memset(rid, 'r', 128);
    rid[128] = '\0';
    /* the longest request id with the longest tracestate kept: all of it */
    long_state[TIMERS_TRACESTATE_MAX] = '\0';
    create_by(f->a, "fit-1", now, rid, TP, long_state, TIMERS_OK);
    get(f->a, "fit-1");
    assert_string_equal(res.rid, rid);
    assert_string_equal(res.parent, TP);
    assert_string_equal(res.tstate, long_state);
    /* a longer tracestate is dropped; the traceparent stays */
    long_state[TIMERS_TRACESTATE_MAX] = 'a';
    create_by(f->a, "fit-2", now, rid, TP, long_state, TIMERS_OK);
    get(f->a, "fit-2");
    assert_string_equal(res.parent, TP);
    assert_string_equal(res.tstate, "");
    /* a request id that leaves no room keeps the field to itself */
    memset(rid, 'r', 230);
    rid[230] = '\0';
    create_by(f->a, "fit-3", now, rid, TP, TS, TIMERS_OK);
    get(f->a, "fit-3");
    assert_string_equal(res.rid, rid);
    assert_string_equal(res.parent, "");
    /* a traceparent with a blank would break the field's form: dropped */
    create_by(f->a, "fit-4", now, "req-4", "00-a b", NULL, TIMERS_OK);
    get(f->a, "fit-4");
    assert_string_equal(res.rid, "req-4");
    assert_string_equal(res.parent, "");
}

/* A record of this layout whose request id field is field. */
static size_t record_with_field(unsigned char *rec, const char *field)
{
    size_t n = strlen(field), at = 51;
    memset(rec, 0, 51);
    rec[0] = 178, rec[1] = 's';
    rec[at + 6] = (unsigned char)n;
    memcpy(rec + at + 7, field, n);
    at += 7 + n;
    rec[at] = 'd';
    memset(rec + at + 1, 0, 13); /* when, every_ms, no queue */
    memcpy(rec + at + 14, "{}", 2);
    return at + 16;
}

static void test_a_request_id_field_splits_at_its_blanks_only_into_whole_parts(void **state)
{
    (void)state;
    static const struct {
        const char *field, *rid, *parent, *tstate;
    } cases[] = {
        {"req-1", "req-1", "", ""},
        {"", "", "", ""},
        {"req-1 tp", "req-1", "tp", ""},
        {"req-1 tp a=1, b=2", "req-1", "tp", "a=1, b=2"},
        {" tp a=1", "", "tp", "a=1"},
        {"req-1 ", "req-1", "", ""},   /* nothing after the blank */
        {"req-1  a=1", "req-1", "", ""}, /* no traceparent: no tracestate either */
        {"req-1 tp ", "req-1", "tp", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        unsigned char rec[128];
        timer_view v;
        size_t len = record_with_field(rec, cases[i].field);
        assert_int_equal(timers_decode((const char *)rec, len, NULL, 0, &v), 0);
        char got[3][64];
        snprintf(got[0], 64, "%.*s", (int)v.request_id_len, v.request_id);
        snprintf(got[1], 64, "%.*s", (int)v.trace.parent_len, v.trace.parent ? v.trace.parent : "");
        snprintf(got[2], 64, "%.*s", (int)v.trace.state_len, v.trace.state ? v.trace.state : "");
        assert_string_equal(got[0], cases[i].rid);
        assert_string_equal(got[1], cases[i].parent);
        assert_string_equal(got[2], cases[i].tstate);
        assert_int_equal(v.spec_len, 2);
    }
}

/* A finished timer's record holds its history after its spec, past a byte 0;
 * the history key's value, when a reply carries one, is used instead. */
static void test_a_finished_record_splits_into_its_spec_and_the_history_it_holds(void **state)
{
    (void)state;
    unsigned char rec[160];
    timer_view v;
    size_t len = record_with_field(rec, "req-1");
    static const char held[] = "{\"status\":204}\t{\"status\":500}";
    rec[len] = '\0';
    memcpy(rec + len + 1, held, sizeof held - 1);
    size_t whole = len + 1 + sizeof held - 1;
    assert_int_equal(timers_decode((const char *)rec, whole, NULL, 0, &v), 0);
    assert_int_equal(v.spec_len, 2);
    assert_memory_equal(v.spec, "{}", 2);
    assert_int_equal(v.history_len, sizeof held - 1);
    assert_memory_equal(v.history, held, sizeof held - 1);
    assert_int_equal(timers_decode((const char *)rec, whole, "{\"status\":404}", 14, &v), 0);
    assert_int_equal(v.spec_len, 2);
    assert_int_equal(v.history_len, 14);
    assert_memory_equal(v.history, "{\"status\":404}", 14);
    assert_int_equal(timers_decode((const char *)rec, len, NULL, 0, &v), 0); /* none held */
    assert_int_equal(v.spec_len, 2);
    assert_int_equal(v.history_len, 0);
}

/* A reply handed to the test as it came: its type and, for an error, its
 * first word. */
static void raw_reply_cb(void *arg, const redisReply *r)
{
    (void)arg;
    memset(&res, 0, sizeof res);
    res.status = r ? r->type : -1;
    snprintf(res.state, sizeof res.state, "%s", r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    signal_done();
}

/* One partition's counts read, sent as store_eval (plain) or store_eval_read. */
static void counts_call(fixture *f, int read)
{
    char key[KEYS_MAX], prefix[KEYS_MAX], now[24];
    snprintf(key, sizeof key, "hw:{%d}:cn", 0);
    keys_timer_prefix(prefix, 0);
    snprintf(now, sizeof now, "%" PRIu64, clock_now_ms());
    const char *argv[] = {key, "read", "*", now, prefix, "100"};
    int rc = read ? store_eval_read(f->st, SCRIPT_COUNTS, 1, 6, argv, NULL, raw_reply_cb, NULL)
                  : store_eval(f->st, SCRIPT_COUNTS, 1, 6, argv, NULL, raw_reply_cb, NULL);
    assert_int_equal(rc, 0);
    wait_done();
}

/* Polls store_refusing_writes for up to 3 s until it answers want. */
static int refusing_becomes(store *st, int want)
{
    for (int i = 0; i < 150; i++) {
        (void)store_probe_writes(st, 0, NULL);
        if (store_refusing_writes(st) == want)
            return 1;
        usleep(20000);
    }
    return 0;
}

static void test_the_probe_says_whether_redis_takes_new_work_with_no_refused_call_before(void **state)
{
    fixture *f = *state;
    redisContext *c = raw(f);
    assert_int_equal(store_refusing_writes(f->st), 0);
    freeReplyObject(redisCommand(c, "CONFIG SET maxmemory-policy noeviction"));
    freeReplyObject(redisCommand(c, "CONFIG SET maxmemory 1"));
    assert_true(refusing_becomes(f->st, STORE_REFUSES_MEMORY));
    /* a create is refused, as the probe said */
    create(f->a, "t-probe", (int64_t)clock_now_ms() + 60000, 0, NULL, TIMERS_NO_MEMORY);
    assert_int_equal(store_refusing_writes(f->st), STORE_REFUSES_MEMORY);
    freeReplyObject(redisCommand(c, "CONFIG SET maxmemory 0"));
    assert_true(refusing_becomes(f->st, 0));
    create(f->a, "t-probe", (int64_t)clock_now_ms() + 60000, 0, NULL, TIMERS_OK);
    redisFree(c);
}

static void test_a_reader_redis_refuses_for_lack_of_replicas_goes_again_as_its_no_writes_twin(void **state)
{
    fixture *f = *state;
    create(f->a, "t-replicas", (int64_t)clock_now_ms() + 60000, 0, NULL, TIMERS_OK);
    redisContext *c = raw(f);
    assert_int_equal(store_refusing_writes(f->st), 0);
    /* NOREPLICAS: Redis refuses every call that may write, before it runs */
    freeReplyObject(redisCommand(c, "CONFIG SET min-replicas-to-write 1"));
    get(f->a, "t-replicas"); /* refused, then sent as get_ro: the store had seen no refusal */
    assert_int_equal(res.status, TIMERS_OK);
    assert_string_equal(res.v.state, "scheduled");
    assert_int_equal(store_refusing_writes(f->st), STORE_REFUSES_REPLICAS);
    create(f->a, "t-refused", (int64_t)clock_now_ms() + 60000, 0, NULL, TIMERS_NO_REPLICAS);
    freeReplyObject(redisCommand(c, "CONFIG SET min-replicas-to-write 0"));
    assert_true(refusing_becomes(f->st, 0));
    redisFree(c);
}

static void test_a_reader_redis_refuses_for_its_writes_goes_again_as_its_no_writes_twin(void **state)
{
    fixture *f = *state;
    create(f->a, "t-read", (int64_t)clock_now_ms() + 60000, 0, NULL, TIMERS_OK);
    redisContext *c = raw(f);
    /* at maxmemory Redis refuses counts (registered without flags) before it runs */
    freeReplyObject(redisCommand(c, "CONFIG SET maxmemory-policy noeviction"));
    freeReplyObject(redisCommand(c, "CONFIG SET maxmemory 1"));
    counts_call(f, 0);
    assert_int_equal(res.status, REDIS_REPLY_ERROR);
    assert_memory_equal(res.state, "OOM ", 4);
    freeReplyObject(redisCommand(c, "CONFIG SET maxmemory 0"));
    usleep((STORE_OOM_HOLD_MS + 100) * 1000);
    assert_int_equal(store_refusing_writes(f->st), 0);
    freeReplyObject(redisCommand(c, "CONFIG SET maxmemory 1"));
    counts_call(f, 1); /* refused, then sent as counts_ro: the store had seen no refusal */
    assert_int_equal(res.status, REDIS_REPLY_ARRAY);
    assert_int_equal(store_refusing_writes(f->st), STORE_REFUSES_MEMORY);
    counts_call(f, 1); /* the store knows: counts_ro at once */
    assert_int_equal(res.status, REDIS_REPLY_ARRAY);
    freeReplyObject(redisCommand(c, "CONFIG SET maxmemory 0"));

    /* after a failed RDB save (its child killed, as a full disk would end
     * it) Redis refuses every call that may write (MISCONF), get and list
     * too, allow-oom or not */
    usleep((STORE_OOM_HOLD_MS + 100) * 1000);
    assert_int_equal(store_refusing_writes(f->st), 0);
    long long pid = 0;
    redisReply *r = redisCommand(c, "INFO server");
    assert_non_null(r);
    const char *at = r->type == REDIS_REPLY_STRING ? strstr(r->str, "process_id:") : NULL;
    assert_non_null(at);
    pid = strtoll(at + 11, NULL, 10);
    freeReplyObject(r);
    freeReplyObject(redisCommand(c, "CONFIG SET save %s", "3600 1"));
    freeReplyObject(redisCommand(c, "CONFIG SET rdb-key-save-delay 1000000"));
    freeReplyObject(redisCommand(c, "BGSAVE"));
    char children[64];
    snprintf(children, sizeof children, "/proc/%lld/task/%lld/children", pid, pid);
    long long child = 0;
    for (int i = 0; i < 250 && !child; i++) {
        FILE *fp = fopen(children, "r");
        if (fp) {
            if (fscanf(fp, "%lld", &child) != 1)
                child = 0;
            fclose(fp);
        }
        if (!child)
            usleep(20000);
    }
    assert_true(child > 0);
    assert_int_equal(kill((pid_t)child, SIGKILL), 0);
    for (int i = 0; i < 250; i++) {
        r = redisCommand(c, "INFO persistence");
        int failed = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "rdb_last_bgsave_status:err");
        freeReplyObject(r);
        if (failed)
            break;
        usleep(20000);
    }
    r = redisCommand(c, "SET x 1");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_memory_equal(r->str, "MISCONF ", 8);
    freeReplyObject(r);
    get(f->a, "t-read"); /* refused, then sent as get_ro */
    assert_int_equal(res.status, TIMERS_OK);
    assert_string_equal(res.v.state, "scheduled");
    assert_int_equal(store_refusing_writes(f->st), STORE_REFUSES_DISK);
    get(f->a, "t-read"); /* get_ro at once */
    assert_int_equal(res.status, TIMERS_OK);
    get(f->a, "no-such-timer");
    assert_int_equal(res.status, TIMERS_UNKNOWN);
    freeReplyObject(redisCommand(c, "CONFIG SET save %s", ""));
    redisFree(c);
}

static void test_a_record_of_another_layout_does_not_decode(void **state)
{
    (void)state;
    timer_view v;
    assert_int_equal(timers_decode("scheduled\n1\n0\n", 14, NULL, 0, &v), -EINVAL);
    assert_int_equal(timers_decode("", 0, NULL, 0, &v), -EINVAL);
    unsigned char head[58] = {178, 's'};
    assert_int_equal(timers_decode((const char *)head, sizeof head, NULL, 0, &v), -EINVAL); /* cut short */
}

/* ---- bulk calls ---- */

static atomic_int seq_next;
static atomic_int list_seq[8];
static int get_seq, mid_seq, blpop_seq;

static void seq_list_cb(void *arg, int status, int more, const char *last_score, const char *last_id, size_t n,
                        const timer_listed *items)
{
    (void)status, (void)more, (void)last_score, (void)last_id, (void)n, (void)items;
    atomic_store(&list_seq[(intptr_t)arg], atomic_fetch_add(&seq_next, 1));
}

static void seq_get_cb(void *arg, int status, const timer_view *v, int flag)
{
    (void)arg, (void)status, (void)v, (void)flag;
    get_seq = atomic_fetch_add(&seq_next, 1);
    signal_done();
}

static void seq_mid_cb(void *arg, int status, const timer_view *v, int flag)
{
    (void)arg, (void)status, (void)v, (void)flag;
    mid_seq = atomic_fetch_add(&seq_next, 1);
}

static void seq_batch_cb(void *arg, int status, size_t n, const timer_created *r)
{
    (void)status, (void)n, (void)r;
    atomic_store(&list_seq[(intptr_t)arg], atomic_fetch_add(&seq_next, 1));
}

static void seq_blpop_cb(void *arg, const redisReply *r)
{
    (void)arg, (void)r;
    blpop_seq = atomic_fetch_add(&seq_next, 1);
}

/* Eight bulk calls (listing pages, or POST /timers/batch's calls when
 * batch) queued while a BLPOP holds the connection, a get among them (after
 * the fourth) and one after them: both gets are answered after two of them,
 * not after all eight, in their order, and the bulk calls answer once each
 * in theirs. */
static void bulk_then_get(fixture *f, int batch)
{
    create(f->a, "bulk-1", (int64_t)clock_now_ms() + 3600000, 0, NULL, TIMERS_OK);
    atomic_store(&seq_next, 1);
    for (int i = 0; i < 8; i++)
        atomic_store(&list_seq[i], 0);
    /* The connection is busy for 300 ms: what follows queues up meanwhile. */
    const char *blpop[] = {"BLPOP", "hw:test:nothing", "0.3"};
    assert_int_equal(store_command(f->st, 3, blpop, NULL, seq_blpop_cb, NULL), 0);
    usleep(50000);
    for (intptr_t i = 0; i < 8; i++) {
        char id[16];
        snprintf(id, sizeof id, "bb-%d", (int)i);
        timer_new n = {id, SPEC, strlen(SPEC), "fire_at_ms=0", (int64_t)clock_now_ms() + 3600000, 0, "q7", "req-1",
                       clock_now_ms(), 0, .trace = {0}};
        int rc = batch ? timers_create_batch(f->a, timers_partition(f->a, id), 1, &n, 0, seq_batch_cb, (void *)i)
                       : timers_list(f->a, (uint32_t)i % 16, "", "scheduled", 1, NULL, NULL, 100, NULL, NULL, 1000,
                                     1u << 20, seq_list_cb, (void *)i);
        assert_int_equal(rc, 0);
        if (i == 3)
            assert_int_equal(timers_get(f->a, "bulk-1", seq_mid_cb, NULL), 0);
    }
    assert_int_equal(timers_get(f->a, "bulk-1", seq_get_cb, NULL), 0);
    wait_done();
    assert_int_equal(blpop_seq, 1);
    assert_int_equal(mid_seq, 4); /* after the BLPOP and two of them */
    assert_int_equal(get_seq, 5);
    uint64_t until = clock_now_ms() + 10000; /* the rest answer, on the writer */
    while (atomic_load(&list_seq[7]) == 0 && clock_now_ms() < until)
        usleep(1000);
    for (int i = 0; i < 8; i++) /* each once, in their order */
        assert_int_equal(atomic_load(&list_seq[i]), i < 2 ? i + 2 : i + 4);
}

static void test_a_call_queued_behind_many_listing_calls_goes_with_the_next_batch(void **state)
{
    bulk_then_get(*state, 0);
}

/* A batch's creates are bulk calls; the creates of single POST /timers
 * that waited for their partition's call are not (timers_create). */
static void test_a_call_queued_behind_many_batch_calls_goes_with_the_next_batch(void **state)
{
    bulk_then_get(*state, 1);
}

/* ---- counts ---- */

static counts_answers *counted;

static void counts_cb_keep(void *arg, counts_answers *a)
{
    (void)arg;
    counted = a; /* the test's: summed and freed on the test's thread */
    signal_done();
}

/* A read's answers are summed where they are used, not in the callback:
 * counts_sum's rows and counts_find's row agree with what was created, one
 * queue's row found without the sum, a queue with no timer found as none. */
static void test_a_counts_read_is_summed_off_the_writer_and_one_queue_found_alone(void **state)
{
    fixture *f = *state;
    int64_t later = (int64_t)clock_now_ms() + 3600000;
    const char *queues[] = {"qa", "qb", "qc"};
    int made[3] = {0};
    for (int i = 0; i < 60; i++) { /* ids over every partition: each answer holds a part of each queue */
        char id[32];
        snprintf(id, sizeof id, "n1/c-%d", i);
        int q = i % 5 == 0 ? 1 : i % 3; /* uneven */
        timer_new n = {id, SPEC, strlen(SPEC), "fire_at_ms=0", later, 0, queues[q], "req-1", clock_now_ms(), 0,
                       .trace = {0}};
        assert_int_equal(timers_create(f->a, &n, create_cb, NULL), 0);
        wait_done();
        assert_int_equal(res.status, TIMERS_OK);
        made[q]++;
    }
    timer_new other = {"n2/c-0", SPEC, strlen(SPEC), "fire_at_ms=0", later, 0, "qa", "req-1", clock_now_ms(), 0,
                       .trace = {0}};
    assert_int_equal(timers_create(f->a, &other, create_cb, NULL), 0); /* another namespace's: not n1's */
    wait_done();
    assert_int_equal(counts_read(f->st, 16, "n1", clock_now_ms(), counts_cb_keep, NULL), 0);
    wait_done();
    assert_non_null(counted);
    assert_int_equal(counts_answers_status(counted), COUNTS_OK);
    counts_row one;
    assert_int_equal(counts_find(counted, "n1", "qb", &one), 1); /* before any sum */
    assert_int_equal(one.n[COUNTS_SCHEDULED], made[1]);
    assert_int_equal(counts_find(counted, "n1", "nothing", &one), 0);
    assert_int_equal(one.n[COUNTS_SCHEDULED], 0);
    assert_int_equal(counts_find(counted, "n1", "q", &one), 0); /* a prefix of a name is not the name */
    const counts_reply *sum = counts_sum(counted);
    assert_int_equal(sum->status, COUNTS_OK);
    assert_int_equal(sum->exact, counts_answers_exact(counted)); /* (0 here: no rebuild ran) */
    assert_int_equal(sum->n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(sum->rows[i].ns, "n1");
        assert_string_equal(sum->rows[i].queue, queues[i]); /* by queue */
        assert_int_equal(sum->rows[i].n[COUNTS_SCHEDULED], made[i]);
        assert_int_equal(sum->rows[i].due, 0);
        assert_int_equal(counts_find(counted, "n1", queues[i], &one), 1);
        assert_memory_equal(one.n, sum->rows[i].n, sizeof one.n);
    }
    assert_ptr_equal(counts_sum(counted), sum); /* summed once */
    counts_answers_free(counted);
    counted = NULL;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as service/main.c: a peer gone mid-write is an error, not a death */
    log_min_level = LOG_WARN;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_counts_read_is_summed_off_the_writer_and_one_queue_found_alone, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_call_queued_behind_many_listing_calls_goes_with_the_next_batch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_call_queued_behind_many_batch_calls_goes_with_the_next_batch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_created_timer_reads_back_as_it_was_written, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_same_create_again_is_an_idempotent_repeat_and_another_spec_conflicts,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_batch_begin_answers_each_timer_begun_cancelled_or_held_elsewhere, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_begin_by_a_job_that_holds_an_earlier_due_time_is_refused_as_not_due,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_begin_under_an_older_version_is_refused_as_moved, setup, teardown),
        cmocka_unit_test_setup_teardown(test_calls_whose_time_budget_runs_out_answer_every_timer_over_several_calls,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_batch_finish_records_each_outcome_and_a_repeat_answers_the_same, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_an_attempt_that_never_left_is_requeued_without_counting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_history_keeps_the_newest_attempts_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_holder_skips_a_missed_slot_under_its_version_and_the_count_is_kept,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_dead_letter_retried_runs_again_as_the_run_it_failed_in, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_claim_takes_due_timers_soonest_first_and_release_hands_them_back,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_claim_gives_each_namespace_a_share_before_the_soonest_of_another, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_release_of_more_claims_than_a_call_takes_hands_them_all_back, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_holder_learns_at_its_next_claim_which_held_timers_were_taken_away,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_firing_timer_its_holder_no_longer_runs_is_listed_and_handed_back_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_trace_context_is_kept_beside_the_request_id_and_split_off_when_read,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_what_does_not_fit_beside_the_request_id_is_dropped_and_the_id_kept_whole,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_creates_of_many_partitions_that_come_during_one_call_go_as_one_call,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_batch_create_answers_each_item_in_order_however_it_is_written, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_creates_of_a_partition_that_come_while_its_call_is_in_flight_go_as_one_call, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_creates_from_many_threads_are_each_answered_once_and_each_id_created_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_reader_redis_refuses_for_its_writes_goes_again_as_its_no_writes_twin,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_probe_says_whether_redis_takes_new_work_with_no_refused_call_before,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_reader_redis_refuses_for_lack_of_replicas_goes_again_as_its_no_writes_twin,
                                        setup, teardown),
        cmocka_unit_test(test_a_request_id_field_splits_at_its_blanks_only_into_whole_parts),
        cmocka_unit_test(test_a_verb_on_an_unreachable_redis_calls_back_once_unreachable),
        cmocka_unit_test(test_a_finished_record_splits_into_its_spec_and_the_history_it_holds),
        cmocka_unit_test(test_a_record_of_another_layout_does_not_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
