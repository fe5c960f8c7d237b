/* test_limiter.c - unit tests of the limiting dispatcher's accounting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backoff.h"
#include "limiter.h"

#define TICK_US 1000 /* the engine's default tick */

/* A test job: the ljob plus its position in its queue's push order. */
typedef struct tjob {
    ljob j;
    int id;
    int qi; /* index of its queue in the test's array */
    enum { J_IDLE, J_WAITING, J_RUNNING, J_DONE } state;
} tjob;

static uint64_t rng_state;

static uint64_t rnd(void) { return splitmix64_next(&rng_state); }

static uint64_t rnd_below(uint64_t n) { return rnd() % n; }

static tjob *pop(limiter *l)
{
    ljob *j = limiter_pop_ready(l);
    return j ? container_of(j, tjob, j) : NULL;
}

static void push(limiter *l, lqueue *q, tjob *t, int id)
{
    ljob_init(&t->j);
    t->id = id;
    limiter_push(l, q, &t->j);
}

static void test_limiter_create_rejects_zero_caps(void **state)
{
    (void)state;
    assert_null(limiter_create(0, 1));
    assert_null(limiter_create(1, 0));
    limiter_free(NULL);
}

static void test_limiter_finds_queues_by_name_and_keeps_its_own_copy(void **state)
{
    (void)state;
    enum { NQ = 500 };
    limiter *l = limiter_create(4, 2);
    lqueue *qs[NQ];
    char name[32];
    for (int i = 0; i < NQ; i++) {
        snprintf(name, sizeof name, "queue-%d", i);
        qs[i] = limiter_queue(l, name);
        assert_non_null(qs[i]);
    }
    strcpy(name, "changed");
    for (int i = 0; i < NQ; i++) {
        char want[32];
        snprintf(want, sizeof want, "queue-%d", i);
        assert_ptr_equal(limiter_queue(l, want), qs[i]);
        assert_string_equal(limiter_queue_name(qs[i]), want);
    }
    assert_ptr_not_equal(limiter_queue(l, ""), qs[0]);
    assert_ptr_equal(limiter_queue(l, ""), limiter_queue(l, ""));
    limiter_free(l);
}

static void test_limiter_keeps_fifo_order_within_a_queue(void **state)
{
    (void)state;
    enum { N = 8 };
    tjob jobs[N];
    limiter *l = limiter_create(100, 100);
    lqueue *q = limiter_queue(l, "a");
    for (int i = 0; i < N; i++)
        push(l, q, &jobs[i], i);
    assert_int_equal(limiter_waiting(l), N);
    assert_int_equal(limiter_queue_waiting(q), N);
    for (int i = 0; i < N; i++)
        assert_ptr_equal(pop(l), &jobs[i]);
    assert_null(pop(l));
    assert_int_equal(limiter_inflight(l), N);
    assert_int_equal(limiter_queue_inflight(q), N);
    assert_int_equal(limiter_waiting(l), 0);
    limiter_free(l);
}

static void test_limiter_reuses_a_freed_slot_at_once(void **state)
{
    (void)state;
    tjob a, b, c;
    limiter *l = limiter_create(1, 5);
    lqueue *q = limiter_queue(l, "only");
    push(l, q, &a, 0);
    push(l, q, &b, 1);
    push(l, q, &c, 2);
    assert_ptr_equal(pop(l), &a);
    assert_null(pop(l)); /* global cap */
    limiter_done(l, &a.j);
    assert_ptr_equal(pop(l), &b);
    assert_null(pop(l));
    limiter_done(l, &b.j);
    assert_ptr_equal(pop(l), &c);
    limiter_done(l, &c.j);
    assert_null(pop(l));
    assert_int_equal(limiter_inflight(l), 0);
    assert_int_equal(limiter_queue_inflight(q), 0);
    limiter_free(l);
}

static void test_limiter_serves_queues_round_robin(void **state)
{
    (void)state;
    enum { NQ = 3, PER = 4 };
    tjob jobs[NQ][PER];
    lqueue *qs[NQ];
    limiter *l = limiter_create(1, 10);
    const char *names[NQ] = {"a", "b", "c"};
    for (int q = 0; q < NQ; q++)
        qs[q] = limiter_queue(l, names[q]);
    /* Queue a pushes all its jobs first: it must not starve b and c. */
    for (int q = 0; q < NQ; q++)
        for (int i = 0; i < PER; i++)
            push(l, qs[q], &jobs[q][i], q * PER + i);
    for (int i = 0; i < PER; i++) {
        for (int q = 0; q < NQ; q++) {
            tjob *t = pop(l);
            assert_ptr_equal(t, &jobs[q][i]);
            assert_null(pop(l));
            limiter_done(l, &t->j);
        }
    }
    assert_null(pop(l));
    limiter_free(l);
}

static void test_limiter_round_robin_skips_a_queue_at_its_cap(void **state)
{
    (void)state;
    tjob a1, a2, b1, b2;
    limiter *l = limiter_create(3, 1);
    lqueue *a = limiter_queue(l, "a"), *b = limiter_queue(l, "b");
    push(l, a, &a1, 0);
    push(l, a, &a2, 1);
    push(l, b, &b1, 2);
    push(l, b, &b2, 3);
    assert_ptr_equal(pop(l), &a1);
    assert_ptr_equal(pop(l), &b1);
    assert_null(pop(l)); /* both queues at cap 1, one global slot free */
    limiter_done(l, &b1.j);
    assert_ptr_equal(pop(l), &b2);
    limiter_done(l, &a1.j);
    assert_ptr_equal(pop(l), &a2);
    limiter_free(l);
}

static void test_limiter_remove_takes_out_a_waiting_job_only(void **state)
{
    (void)state;
    tjob a, b, c, never;
    limiter *l = limiter_create(1, 1);
    lqueue *q = limiter_queue(l, "q");
    push(l, q, &a, 0);
    push(l, q, &b, 1);
    push(l, q, &c, 2);
    ljob_init(&never.j);
    assert_int_equal(limiter_remove(l, &never.j), 0);
    assert_ptr_equal(pop(l), &a);
    assert_int_equal(limiter_remove(l, &a.j), 0); /* running */
    assert_int_equal(limiter_remove(l, &b.j), 1);
    assert_int_equal(limiter_remove(l, &b.j), 0); /* already out */
    assert_int_equal(limiter_waiting(l), 1);
    assert_int_equal(limiter_queue_waiting(q), 1);
    limiter_done(l, &a.j);
    assert_ptr_equal(pop(l), &c);
    limiter_done(l, &c.j);
    assert_null(pop(l));
    /* Removing the last waiting job makes the queue ineligible. */
    push(l, q, &b, 3);
    assert_int_equal(limiter_remove(l, &b.j), 1);
    assert_null(pop(l));
    assert_int_equal(limiter_waiting(l), 0);
    limiter_free(l);
}

static void test_limiter_applies_a_raised_or_lowered_queue_cap(void **state)
{
    (void)state;
    enum { N = 6 };
    tjob jobs[N];
    limiter *l = limiter_create(10, 1);
    lqueue *q = limiter_queue(l, "q");
    for (int i = 0; i < N; i++)
        push(l, q, &jobs[i], i);
    assert_ptr_equal(pop(l), &jobs[0]);
    assert_null(pop(l));
    limiter_set_queue_cap(l, q, 3); /* raised: two more start */
    assert_ptr_equal(pop(l), &jobs[1]);
    assert_ptr_equal(pop(l), &jobs[2]);
    assert_null(pop(l));
    limiter_set_queue_cap(l, q, 1); /* lowered: running jobs keep running */
    assert_int_equal(limiter_queue_inflight(q), 3);
    limiter_done(l, &jobs[0].j);
    assert_null(pop(l));
    limiter_done(l, &jobs[1].j);
    assert_null(pop(l));
    limiter_done(l, &jobs[2].j);
    assert_ptr_equal(pop(l), &jobs[3]);
    assert_null(pop(l));
    limiter_set_queue_cap(l, q, 0); /* treated as 1 */
    assert_null(pop(l));
    limiter_set_queue_cap(l, q, 5);
    assert_ptr_equal(pop(l), &jobs[4]);
    assert_ptr_equal(pop(l), &jobs[5]);
    assert_null(pop(l));
    limiter_free(l);
}

/* The random workload's model of one queue. */
struct qmodel {
    lqueue *q;
    uint32_t cap;
    uint32_t inflight, waiting;
    int last_started; /* id of the last job started, for FIFO */
    int group;        /* RW_GROUPS: queue i is in group i % RW_GROUPS */
};

enum { RW_QUEUES = 7, RW_JOBS = 20000, RW_GLOBAL = 6, RW_GROUPS = 3 };

/* The groups' jobs in flight, and their cap (RW_GLOBAL: no cap). */
static uint32_t rw_group_inflight[RW_GROUPS];
static uint32_t rw_group_cap;

/* Starts every job that may start, checking the caps and FIFO at each. */
static void drain(limiter *l, struct qmodel *m, uint32_t *inflight)
{
    tjob *t;
    while ((t = pop(l)) != NULL) {
        struct qmodel *qm = &m[t->qi];
        assert_int_equal(t->state, J_WAITING);
        assert_true(qm->inflight < qm->cap); /* it was allowed to start */
        assert_true(*inflight < RW_GLOBAL);
        assert_true(rw_group_inflight[qm->group] < rw_group_cap);
        assert_true(t->id > qm->last_started);
        qm->last_started = t->id;
        t->state = J_RUNNING;
        qm->inflight++;
        qm->waiting--;
        rw_group_inflight[qm->group]++;
        (*inflight)++;
    }
    /* Nothing more may start: the global cap is reached, or every queue
     * with waiting jobs is at its own cap or its group's. */
    assert_int_equal(limiter_inflight(l), *inflight);
    for (int i = 0; i < RW_QUEUES; i++) {
        assert_int_equal(limiter_queue_inflight(m[i].q), m[i].inflight);
        assert_int_equal(limiter_queue_waiting(m[i].q), m[i].waiting);
        if (*inflight < RW_GLOBAL && m[i].waiting > 0)
            assert_true(m[i].inflight >= m[i].cap || rw_group_inflight[m[i].group] >= rw_group_cap);
    }
}

/* Picks a random job in state st, or NULL (a few tries are enough). */
static tjob *pick(tjob *jobs, int njobs, int st)
{
    for (int tries = 0; tries < 64 && njobs > 0; tries++) {
        tjob *t = &jobs[rnd_below((uint64_t)njobs)];
        if ((int)t->state == st)
            return t;
    }
    return NULL;
}

static void random_step(limiter *l, struct qmodel *m, tjob *jobs, int *njobs, uint32_t *inflight)
{
    uint64_t op = rnd_below(100);
    tjob *t;
    if (op < 45 && *njobs < RW_JOBS) {
        t = &jobs[*njobs];
        t->qi = (int)rnd_below(RW_QUEUES);
        t->state = J_WAITING;
        push(l, m[t->qi].q, t, *njobs);
        m[t->qi].waiting++;
        (*njobs)++;
    } else if (op < 85 && (t = pick(jobs, *njobs, J_RUNNING)) != NULL) {
        limiter_done(l, &t->j);
        t->state = J_DONE;
        m[t->qi].inflight--;
        rw_group_inflight[m[t->qi].group]--;
        (*inflight)--;
    } else if (op < 95 && (t = pick(jobs, *njobs, J_WAITING)) != NULL) {
        assert_int_equal(limiter_remove(l, &t->j), 1);
        t->state = J_DONE;
        m[t->qi].waiting--;
    } else if (op >= 95) {
        int qi = (int)rnd_below(RW_QUEUES);
        m[qi].cap = 1 + (uint32_t)rnd_below(4);
        limiter_set_queue_cap(l, m[qi].q, m[qi].cap);
    }
}

/* group_cap RW_GLOBAL: no group cap. The groups are "g1", "g2" and "" (a
 * queue name without '/'). */
static void random_workload(uint32_t group_cap)
{
    tjob *jobs = calloc(RW_JOBS, sizeof *jobs);
    struct qmodel m[RW_QUEUES];
    uint32_t inflight = 0;
    int njobs = 0;
    limiter *l = limiter_create(RW_GLOBAL, 2);
    assert_int_equal(limiter_set_group_cap(l, group_cap), 0);
    rw_group_cap = group_cap;
    memset(rw_group_inflight, 0, sizeof rw_group_inflight);
    rng_state = 2024;
    for (int i = 0; i < RW_QUEUES; i++) {
        char name[16];
        int g = i % RW_GROUPS;
        if (g)
            snprintf(name, sizeof name, "g%d/q%d", g, i);
        else
            snprintf(name, sizeof name, "q%d", i);
        m[i] = (struct qmodel){.q = limiter_queue(l, name), .cap = 2, .last_started = -1, .group = g};
    }
    for (int step = 0; step < 200000; step++) {
        random_step(l, m, jobs, &njobs, &inflight);
        drain(l, m, &inflight);
        uint32_t waiting = 0;
        for (int i = 0; i < RW_QUEUES; i++)
            waiting += m[i].waiting;
        assert_int_equal(limiter_waiting(l), waiting);
    }
    assert_int_equal(njobs, RW_JOBS);
    limiter_free(l);
    free(jobs);
}

static void test_limiter_never_exceeds_either_cap_under_a_random_workload(void **state)
{
    (void)state;
    random_workload(RW_GLOBAL);
}

static void test_limiter_never_exceeds_a_group_cap_under_a_random_workload(void **state)
{
    (void)state;
    random_workload(3);
}

static char held_names[256];
static unsigned held_calls;

static void note_holds(const char *group, uint32_t cap, uint32_t holds, void *arg)
{
    (void)arg;
    assert_int_equal(cap, 2);
    assert_true(holds >= 1);
    strncat(held_names, group, sizeof held_names - strlen(held_names) - 2);
    strcat(held_names, ";");
    held_calls++;
}

/* One group's hanging jobs take at most its cap; another group's queue
 * starts at once; a freed slot of the full group lets its held queues go
 * on in their turns. */
static void test_a_group_at_its_cap_leaves_the_other_slots_to_other_groups(void **state)
{
    (void)state;
    limiter *l = limiter_create(4, 10);
    assert_int_equal(limiter_set_group_cap(l, 2), 0);
    lqueue *a1 = limiter_queue(l, "a/one"), *a2 = limiter_queue(l, "a/two");
    lqueue *b = limiter_queue(l, "b/one"), *none = limiter_queue(l, "plain");
    tjob ja[6], jb[2], jn[2];
    for (int i = 0; i < 3; i++) {
        push(l, a1, &ja[i], i);
        push(l, a2, &ja[3 + i], 3 + i);
    }
    tjob *t1 = pop(l), *t2 = pop(l);
    assert_ptr_equal(t1, &ja[0]);
    assert_ptr_equal(t2, &ja[3]); /* round robin within the group */
    assert_null(pop(l));           /* group a is full; 2 global slots free */
    assert_int_equal(limiter_inflight(l), 2);
    assert_int_equal(limiter_waiting(l), 4);
    push(l, b, &jb[0], 0);
    assert_ptr_equal(pop(l), &jb[0]);
    push(l, none, &jn[0], 0);      /* a name without '/': group "", its own cap */
    assert_ptr_equal(pop(l), &jn[0]);
    push(l, b, &jb[1], 1);
    assert_null(pop(l));           /* global cap */
    limiter_done(l, &jb[0].j);
    assert_ptr_equal(pop(l), &jb[1]); /* a is still full: b takes the slot */
    limiter_done(l, &jb[1].j);
    limiter_done(l, &jn[0].j);
    assert_null(pop(l));           /* two slots free, but only a waits, and it is full */
    assert_int_equal(limiter_queue_waiting(a1), 2);
    assert_int_equal(limiter_queue_startable(l, a1), 0); /* its group is full */
    assert_int_equal(limiter_queue_startable(l, b), 0);  /* nothing waits */
    held_names[0] = '\0';
    held_calls = 0;
    limiter_report_holds(l, note_holds, NULL);
    assert_string_equal(held_names, "a;"); /* only a was held back */
    limiter_report_holds(l, note_holds, NULL);
    assert_int_equal(held_calls, 1);       /* and counting starts again */
    limiter_done(l, &t1->j);       /* a below its cap: its held queues go on, in turn */
    assert_int_equal(limiter_queue_startable(l, a1), 1); /* one slot of its group free */
    assert_ptr_equal(pop(l), &ja[1]);
    assert_null(pop(l));
    limiter_done(l, &t2->j);
    assert_ptr_equal(pop(l), &ja[4]);
    assert_null(pop(l));
    limiter_free(l);
}

static void test_a_group_cap_is_set_before_the_first_queue_and_freed_with_its_last(void **state)
{
    (void)state;
    limiter *l = limiter_create(4, 10);
    assert_int_equal(limiter_set_group_cap(l, 0), -1);
    assert_int_equal(limiter_set_group_cap(l, 1), 0);
    tjob j[3];
    for (int round = 0; round < 3; round++) { /* the group goes and comes back with its queue */
        lqueue *q = limiter_queue(l, "ns/q");
        push(l, q, &j[0], 0);
        push(l, q, &j[1], 1);
        assert_ptr_equal(pop(l), &j[0]);
        assert_null(pop(l));
        limiter_done(l, &j[0].j);
        assert_ptr_equal(pop(l), &j[1]);
        limiter_done(l, &j[1].j);
        assert_int_equal(limiter_drop_idle(l), 1);
    }
    limiter_queue(l, "x");
    assert_int_equal(limiter_set_group_cap(l, 2), -1); /* a queue exists */
    limiter_free(l);
    /* A cap at the global cap or above is no cap. */
    l = limiter_create(2, 10);
    assert_int_equal(limiter_set_group_cap(l, 2), 0);
    lqueue *q = limiter_queue(l, "ns/q");
    for (int i = 0; i < 3; i++)
        push(l, q, &j[i], i);
    assert_int_equal(limiter_queue_startable(l, q), 3); /* no group cap */
    assert_non_null(pop(l));
    assert_non_null(pop(l));
    assert_null(pop(l));
    limiter_free(l);
}

static void test_a_paused_queue_starts_nothing_and_resumes_in_order(void **state)
{
    (void)state;
    limiter *l = limiter_create(10, 10);
    lqueue *a = limiter_queue(l, "a"), *b = limiter_queue(l, "b");
    tjob t[4];
    limiter_set_queue_paused(l, a, 1);
    push(l, a, &t[0], 0);
    push(l, a, &t[1], 1);
    push(l, b, &t[2], 2);
    assert_int_equal(pop(l)->id, 2); /* the other queue goes on */
    assert_null(pop(l));
    assert_true(limiter_queue_paused(a));
    limiter_set_queue_paused(l, a, 0);
    assert_int_equal(pop(l)->id, 0);
    assert_int_equal(pop(l)->id, 1);
    assert_null(pop(l));
    limiter_free(l);
}

static void test_a_rate_limited_queue_starts_evenly_without_a_burst(void **state)
{
    (void)state;
    limiter *l = limiter_create(100, 100);
    lqueue *q = limiter_queue(l, "slow");
    tjob t[10];
    uint64_t now = 1000000;
    limiter_set_queue_rate(l, q, 20.0, now); /* one start per 50 ms */
    for (int i = 0; i < 10; i++)
        push(l, q, &t[i], i);
    assert_int_equal(limiter_tick(l, now, TICK_US), UINT64_MAX); /* a full bucket: nothing to wait for */
    tjob *first = pop(l);
    assert_non_null(first);
    assert_null(pop(l)); /* the bucket holds one token */
    uint64_t next = limiter_tick(l, now, TICK_US);
    assert_true(next > now + 49000 && next <= now + 50001);
    assert_null(pop(l));
    limiter_tick(l, now + 25000, TICK_US);
    assert_null(pop(l)); /* half a token */
    limiter_tick(l, now + 50000, TICK_US);
    assert_int_equal(pop(l)->id, 1);
    limiter_tick(l, now + 10000000, TICK_US); /* a long pause gives one token, not 200 */
    assert_int_equal(pop(l)->id, 2);
    assert_null(pop(l));
    limiter_set_queue_rate(l, q, 0, now); /* no limit */
    int started = 0;
    while (pop(l))
        started++;
    assert_int_equal(started, 7);
    assert_int_equal(limiter_tick(l, now, TICK_US), UINT64_MAX);
    limiter_free(l);
}

/* Starts from q in one tick: refills at now, pops everything it may. */
static int starts_at(limiter *l, uint64_t now, uint64_t *next)
{
    int n = 0;
    *next = limiter_tick(l, now, TICK_US);
    while (pop(l))
        n++;
    return n;
}

/* A rate so small that its wait does not fit in a uint64_t of microseconds
 * (1e-14/s: ~3e9 years) is clamped before the conversion: the next token is
 * at most LIMITER_MAX_WAIT_US away, never "now" (which made the engine wake
 * every microsecond). Built with -fsanitize=float-cast-overflow, the
 * unclamped conversion aborts this test. */
static void test_a_tiny_rate_waits_at_most_the_longest_wait_and_never_spins(void **state)
{
    (void)state;
    static const double tiny[] = {1e-14, 1e-300, 4.9e-324 /* smallest subnormal */, 1e-3};
    for (size_t i = 0; i < sizeof tiny / sizeof *tiny; i++) {
        limiter *l = limiter_create(10, 10);
        lqueue *q = limiter_queue(l, "slow");
        tjob t[2];
        uint64_t now = 5000000, next;
        limiter_set_queue_rate(l, q, tiny[i], now);
        push(l, q, &t[0], 0);
        push(l, q, &t[1], 1);
        assert_int_equal(starts_at(l, now, &next), 1); /* the full bucket's one token */
        next = limiter_tick(l, now, TICK_US);
        assert_true(next >= now + TICK_US);
        assert_true(next <= now + LIMITER_MAX_WAIT_US);
        if (tiny[i] < 1e-9)
            assert_int_equal(next, now + LIMITER_MAX_WAIT_US);
        else
            assert_true(next >= now + 999000000u); /* 1e-3/s: a token per 1000 s */
        /* waking at that time again gives no start and no earlier wake-up */
        for (uint64_t at = now + TICK_US; at < now + 10 * TICK_US; at += TICK_US) {
            uint64_t again;
            assert_int_equal(starts_at(l, at, &again), 0);
            assert_true(again >= at + TICK_US);
        }
        limiter_free(l);
    }
}

/* A rate far above one start per tick keeps its average although the
 * caller wakes only once a tick: the bucket holds a tick's worth. A rate
 * past LIMITER_MAX_RATE, infinity or NaN never poisons the arithmetic. */
static void test_a_huge_rate_keeps_its_average_when_woken_once_a_tick(void **state)
{
    (void)state;
    enum { N = 20000 };
    tjob *t = calloc(N, sizeof *t);
    limiter *l = limiter_create(N, N);
    lqueue *q = limiter_queue(l, "fast");
    uint64_t now = 1000000, next;
    limiter_set_queue_rate(l, q, 100000.0, now); /* 100 per 1 ms tick */
    for (int i = 0; i < N; i++)
        push(l, q, &t[i], i);
    int started = starts_at(l, now, &next);
    assert_int_equal(started, 1);
    for (int k = 1; k <= 100; k++) { /* 100 ticks = 100 ms: 10,000 starts */
        assert_true(next >= now + (uint64_t)(k - 1) * TICK_US + TICK_US);
        int n = starts_at(l, now + (uint64_t)k * TICK_US, &next);
        assert_true(n >= 99 && n <= 101);
        started += n;
    }
    assert_true(started >= 9900 && started <= 10100);
    /* a long quiet spell banks one tick's worth, not more */
    assert_true(starts_at(l, now + 60000000, &next) <= 101);
    static const double odd[] = {1e300, 1.0 / 0.0, 0.0 / 0.0, -1.0};
    for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
        limiter_set_queue_rate(l, q, odd[i], now);
        uint64_t at = now + 70000000 + i * TICK_US;
        int n = starts_at(l, at, &next);
        assert_true(n >= 0);
        assert_true(next == UINT64_MAX || next >= at + TICK_US);
    }
    limiter_free(l);
    free(t);
}

/* Rate 0 means no limit: everything starts at once, nothing waits for a
 * token, and the limiter never asks to be woken. */
static void test_a_zero_rate_is_no_limit_and_asks_for_no_wake_up(void **state)
{
    (void)state;
    limiter *l = limiter_create(100, 100);
    lqueue *q = limiter_queue(l, "free");
    tjob t[50];
    uint64_t next;
    limiter_set_queue_rate(l, q, 5.0, 1000);
    limiter_set_queue_rate(l, q, 0, 1000);
    for (int i = 0; i < 50; i++)
        push(l, q, &t[i], i);
    assert_int_equal(starts_at(l, 1000, &next), 50);
    assert_int_equal(next, UINT64_MAX);
    limiter_free(l);
}

/* ---- dropping idle queues ---- */

static void test_an_idle_default_queue_is_dropped_and_found_again_by_name(void **state)
{
    (void)state;
    limiter *l = limiter_create(4, 2);
    tjob a, b;
    lqueue *q = limiter_queue(l, "once");
    push(l, q, &a, 1);
    assert_int_equal(limiter_queue_count(l), 1);
    assert_int_equal(limiter_drop_idle(l), 0); /* waiting: kept */
    assert_ptr_equal(pop(l), &a);
    assert_int_equal(limiter_drop_idle(l), 0); /* in flight: kept */
    limiter_done(l, &a.j);
    assert_null(a.j.q); /* the job let go of its queue */
    assert_int_equal(limiter_queue_count(l), 1);
    assert_int_equal(limiter_drop_idle(l), 1);
    assert_int_equal(limiter_queue_count(l), 0);
    limiter_done(l, &a.j); /* done twice: still a no-op */
    assert_int_equal(limiter_remove(l, &a.j), 0);

    /* Removed while waiting: dropped too. */
    q = limiter_queue(l, "once");
    push(l, q, &b, 2);
    assert_int_equal(limiter_remove(l, &b.j), 1);
    assert_int_equal(limiter_drop_idle(l), 1);
    assert_int_equal(limiter_queue_count(l), 0);
    limiter_free(l);
}

static void test_a_queue_busy_again_before_the_drop_is_kept(void **state)
{
    (void)state;
    limiter *l = limiter_create(4, 2);
    tjob a, b;
    lqueue *q = limiter_queue(l, "q");
    push(l, q, &a, 1);
    assert_ptr_equal(pop(l), &a);
    limiter_done(l, &a.j); /* idle for a moment */
    assert_ptr_equal(limiter_queue(l, "q"), q);
    push(l, q, &b, 2); /* busy again */
    assert_int_equal(limiter_drop_idle(l), 0);
    assert_int_equal(limiter_queue_count(l), 1);
    assert_ptr_equal(pop(l), &b);
    limiter_done(l, &b.j);
    assert_int_equal(limiter_drop_idle(l), 1);
    limiter_free(l);
}

static void test_configured_or_changed_queues_are_kept_until_reset(void **state)
{
    (void)state;
    limiter *l = limiter_create(4, 2);
    tjob a, b;
    lqueue *conf = limiter_queue(l, "conf"), *capped = limiter_queue(l, "capped");
    limiter_configure_queue(l, conf, 7);
    limiter_set_queue_cap(l, capped, 1);
    push(l, conf, &a, 1);
    push(l, capped, &b, 2);
    pop(l);
    pop(l);
    limiter_done(l, &a.j);
    limiter_done(l, &b.j);
    assert_int_equal(limiter_drop_idle(l), 0); /* configured, and not the defaults */
    assert_int_equal(limiter_queue_count(l), 2);
    assert_true(limiter_queue_configured(conf));

    /* A full read that no longer has "conf" (mark 8) resets it; dropped next. */
    lqueue *other = limiter_queue(l, "other");
    limiter_configure_queue(l, other, 8);
    assert_int_equal(limiter_reset_unmarked(l, 8, 0), 1);
    assert_false(limiter_queue_configured(conf));
    assert_true(limiter_queue_configured(other));
    assert_int_equal(limiter_drop_idle(l), 1);
    assert_int_equal(limiter_queue_count(l), 2); /* capped, other */

    /* Reset of a rate-limited, paused queue: back to the defaults, then dropped. */
    limiter_set_queue_rate(l, other, 5, 0);
    limiter_set_queue_paused(l, other, 1);
    limiter_reset_queue(l, other, 0);
    assert_int_equal(limiter_queue_cap(other), 2);
    assert_false(limiter_queue_paused(other));
    assert_true(limiter_queue_rate(other) == 0);
    assert_int_equal(limiter_tick(l, 1000, TICK_US), UINT64_MAX); /* off the rate-limited list */
    assert_int_equal(limiter_drop_idle(l), 1);
    assert_int_equal(limiter_queue_count(l), 1);
    limiter_free(l);
}

static void count_shared(lqueue *q, void *arg)
{
    (void)q;
    (*(int *)arg)++;
}

static void test_a_shared_queue_starts_no_more_than_its_grant(void **state)
{
    (void)state;
    limiter *l = limiter_create(10, 5);
    lqueue *s = limiter_queue(l, "s");
    tjob t[6];
    int n = 0;
    assert_int_equal(limiter_queue_grant(s), UINT32_MAX); /* not shared: the cap alone */
    limiter_set_queue_grant(l, s, 0);
    for (int i = 0; i < 6; i++)
        push(l, s, &t[i], i);
    assert_null(pop(l)); /* no permits yet */
    limiter_each_shared(l, count_shared, &n);
    assert_int_equal(n, 1);
    limiter_set_queue_grant(l, s, 2);
    assert_int_equal(pop(l)->id, 0);
    assert_int_equal(pop(l)->id, 1);
    assert_null(pop(l)); /* the grant, below the cap of 5 */
    limiter_set_queue_grant(l, s, 9);
    for (int i = 2; i < 5; i++)
        assert_int_equal(pop(l)->id, i);
    assert_null(pop(l)); /* now the cap */
    limiter_set_queue_grant(l, s, 1); /* lowered: running jobs go on, nothing new starts */
    limiter_done(l, &t[0].j);
    limiter_done(l, &t[1].j);
    limiter_done(l, &t[2].j);
    limiter_done(l, &t[3].j);
    assert_null(pop(l));
    limiter_done(l, &t[4].j);
    assert_int_equal(pop(l)->id, 5);
    limiter_done(l, &t[5].j);
    /* a reset (controls deleted) unshares: idle, it is dropped */
    limiter_reset_queue(l, s, 0);
    assert_int_equal(limiter_queue_grant(s), UINT32_MAX);
    n = 0;
    limiter_each_shared(l, count_shared, &n);
    assert_int_equal(n, 0);
    assert_int_equal(limiter_drop_idle(l), 1);
    limiter_free(l);
}

static void test_a_changed_rate_share_keeps_the_bucket(void **state)
{
    (void)state;
    limiter *l = limiter_create(10, 10);
    lqueue *q = limiter_queue(l, "q");
    tjob t[3];
    limiter_set_queue_rate(l, q, 2, 0);
    for (int i = 0; i < 3; i++)
        push(l, q, &t[i], i);
    limiter_tick(l, 0, TICK_US);
    assert_non_null(pop(l)); /* the one token */
    assert_null(pop(l));
    limiter_set_queue_rate(l, q, 4, 0); /* a new share: no fresh token, no burst */
    limiter_tick(l, 0, TICK_US);
    assert_null(pop(l));
    limiter_tick(l, 250000, TICK_US); /* 4/s: a token after 250 ms */
    assert_non_null(pop(l));
    assert_null(pop(l));
    limiter_free(l);
}

static void test_a_rate_given_back_and_taken_again_brings_no_fresh_token(void **state)
{
    (void)state;
    limiter *l = limiter_create(10, 10);
    lqueue *q = limiter_queue(l, "q");
    tjob t[3];
    uint64_t now = 1000000;
    limiter_set_queue_rate(l, q, 2, now);
    push(l, q, &t[0], 0);
    limiter_tick(l, now, TICK_US);
    assert_non_null(pop(l)); /* the one token */
    limiter_done(l, &t[0].j);
    limiter_set_queue_rate(l, q, 0, now + 100000); /* the share goes back while the queue is idle */
    push(l, q, &t[1], 1);
    limiter_set_queue_rate(l, q, 2, now + 200000); /* and comes again with the next timer */
    limiter_tick(l, now + 200000, TICK_US);
    assert_null(pop(l)); /* 2/s: the next token is 500 ms after the last start */
    limiter_tick(l, now + 500000, TICK_US);
    assert_non_null(pop(l));
    limiter_free(l);
}

static void test_many_one_off_queues_leave_nothing_behind(void **state)
{
    (void)state;
    enum { N = 20000 };
    limiter *l = limiter_create(8, 2);
    char name[32];
    for (int i = 0; i < N; i++) {
        tjob t;
        snprintf(name, sizeof name, "one-off-%d", i);
        push(l, limiter_queue(l, name), &t, i);
        tjob *got = pop(l);
        assert_ptr_equal(got, &t);
        limiter_done(l, &t.j);
        if (i % 1000 == 999)
            limiter_drop_idle(l);
    }
    limiter_drop_idle(l);
    assert_int_equal(limiter_queue_count(l), 0);
    assert_int_equal(limiter_inflight(l), 0);
    assert_int_equal(limiter_waiting(l), 0);
    limiter_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limiter_create_rejects_zero_caps),
        cmocka_unit_test(test_limiter_finds_queues_by_name_and_keeps_its_own_copy),
        cmocka_unit_test(test_limiter_keeps_fifo_order_within_a_queue),
        cmocka_unit_test(test_limiter_reuses_a_freed_slot_at_once),
        cmocka_unit_test(test_limiter_serves_queues_round_robin),
        cmocka_unit_test(test_limiter_round_robin_skips_a_queue_at_its_cap),
        cmocka_unit_test(test_limiter_remove_takes_out_a_waiting_job_only),
        cmocka_unit_test(test_limiter_applies_a_raised_or_lowered_queue_cap),
        cmocka_unit_test(test_limiter_never_exceeds_either_cap_under_a_random_workload),
        cmocka_unit_test(test_limiter_never_exceeds_a_group_cap_under_a_random_workload),
        cmocka_unit_test(test_a_group_at_its_cap_leaves_the_other_slots_to_other_groups),
        cmocka_unit_test(test_a_group_cap_is_set_before_the_first_queue_and_freed_with_its_last),
        cmocka_unit_test(test_a_paused_queue_starts_nothing_and_resumes_in_order),
        cmocka_unit_test(test_a_rate_limited_queue_starts_evenly_without_a_burst),
        cmocka_unit_test(test_a_tiny_rate_waits_at_most_the_longest_wait_and_never_spins),
        cmocka_unit_test(test_a_huge_rate_keeps_its_average_when_woken_once_a_tick),
        cmocka_unit_test(test_a_zero_rate_is_no_limit_and_asks_for_no_wake_up),
        cmocka_unit_test(test_an_idle_default_queue_is_dropped_and_found_again_by_name),
        cmocka_unit_test(test_a_queue_busy_again_before_the_drop_is_kept),
        cmocka_unit_test(test_configured_or_changed_queues_are_kept_until_reset),
        cmocka_unit_test(test_many_one_off_queues_leave_nothing_behind),
        cmocka_unit_test(test_a_shared_queue_starts_no_more_than_its_grant),
        cmocka_unit_test(test_a_changed_rate_share_keeps_the_bucket),
        cmocka_unit_test(test_a_rate_given_back_and_taken_again_brings_no_fresh_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
