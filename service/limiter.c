/* limiter.c - global and per-queue parallelism caps with round robin.
 *
 * Design. Each named queue has a FIFO of waiting jobs and counts its jobs in
 * flight. A queue is "eligible" when it has a waiting job and free
 * parallelism (waiting > 0 && inflight < cap); eligible queues sit in one
 * ring. limiter_pop_ready takes the queue at the head of the ring, starts its
 * oldest job, and moves the queue to the tail if it is still eligible, so
 * queues take turns for free global slots. Every operation that changes a
 * queue's waiting or inflight count or its cap re-checks that one queue's
 * eligibility (queue_update), which keeps pop O(1) and never scans queues.
 *
 * Invariants: l->inflight <= global_cap (pop refuses at the cap); a queue's
 * inflight only grows in pop, which only serves eligible queues, so it never
 * passes the cap in force at that moment (lowering a cap below inflight
 * stops new starts but never stops running jobs); the ring holds exactly
 * the eligible queues.
 *
 * Queue controls (Cloud Tasks' max_concurrent_dispatches and
 * max_dispatches_per_second): a paused queue is never eligible, so its jobs
 * wait in order; a rate-limited queue spends a token per start from a bucket
 * refilled at `rate` per second, so starts are paced evenly. Refilling needs
 * a clock, which this module does not read: limiter_tick(now, period)
 * refills the rate-limited queues (kept on their own list) and says when the
 * next token is due, never sooner than one period away. The bucket holds one
 * token, or one period's worth when the rate is above one per period: a
 * caller that wakes once a period then still starts `rate` jobs a second, in
 * groups of at most rate x period, and a quiet spell never banks a burst
 * larger than that.
 *
 * Rates come from clients, so the arithmetic is guarded: a rate is clamped
 * to [0, LIMITER_MAX_RATE] (NaN counts as no limit), and the wait for the
 * next token is clamped to [period, LIMITER_MAX_WAIT_US] before it becomes
 * an integer, so no rate, however tiny, overflows the conversion (a
 * double -> uint64_t conversion out of range is undefined behaviour, and
 * gave 0 on x86-64: a wake-up every microsecond).
 *
 * Queues are found by name in a strtab (strtab.h); each queue is one
 * allocation with its name inline. A queue lives while it is needed: while it has a
 * job waiting or in flight, or is configured (holds stored controls,
 * limiter_configure_queue), or has controls other than the defaults. The
 * moment it is none of these (limiter_done, limiter_remove,
 * limiter_reset_queue) it joins the idle list, and limiter_drop_idle frees
 * every queue on it that is still idle: it holds exactly what a new queue
 * would, so nothing is lost, and the table holds the configured queues plus
 * the busy ones, not every name ever seen. Freeing only there keeps every
 * lqueue pointer valid until the caller's next limiter_drop_idle, and a
 * queue that is busy again by then is kept. A job lets go of its queue when
 * it is done or removed (j->q = NULL), so no job points at a freed queue;
 * limiter_queue finds or creates it again.
 *
 * Groups (limiter_set_group_cap): a queue named "a/b" belongs to group "a"
 * (a namespace), one without '/' to the group "". A group counts its
 * queues' jobs in flight; at its cap, its queues wait even with free global
 * slots, so one group's hanging attempts cannot take every slot. A queue
 * eligible but for its group's cap sits on the group's `held` list (by the
 * same ring link); when the group drops below its cap (limiter_done) its
 * held queues rejoin the ring's tail at once, in order (a splice). Queues
 * join the ring whatever their group's count: limiter_pop_ready moves one
 * whose group is full to `held` when it reaches the head, so the held list
 * keeps the ring's turn order and pop stays amortised O(1).
 * Invariant: a group below its cap holds nothing on `held`. A group lives
 * while one of its queues does.
 */
#include "limiter.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "strtab.h"
#include "xalloc.h"

typedef struct lgroup {
    strtab_node byname;    /* link in limiter.groups */
    struct list_node held; /* its queues eligible but for the group's cap, in turn order */
    uint32_t inflight;
    uint32_t queues;       /* queues pointing at it: freed with the last */
    uint32_t holds;        /* queues moved to `held` since limiter_report_holds */
    char name[];
} lgroup;

struct lqueue {
    struct list_node fifo; /* waiting ljobs, oldest first */
    struct list_node ring; /* link in limiter.eligible; self-linked when not eligible */
    strtab_node byname;    /* link in limiter.names */
    struct list_node limited; /* link in limiter.limited while rate > 0 */
    struct list_node idle;    /* link in limiter.idle: was idle once since the last limiter_drop_idle */
    struct list_node shared;  /* link in limiter.shared while grant != UINT32_MAX */
    uint32_t cap;
    uint32_t grant;  /* a shared queue's permits (limiter_set_queue_grant); UINT32_MAX: not shared */
    uint32_t inflight;
    uint32_t waiting;
    int paused;
    uint32_t mark;   /* 0: not configured; else the mark of its last limiter_configure_queue */
    double rate;     /* starts per second; 0: no limit */
    double tokens;   /* 0..bucket capacity (limiter_tick); kept while the rate is 0 */
    int metered;     /* has had a rate: tokens and refilled_us say what its bucket held */
    uint64_t refilled_us;
    lgroup *g;       /* NULL while groups have no cap */
    char name[]; /* owned copy */
};

struct limiter {
    strtab names; /* every queue, by name */
    strtab groups; /* every group with a queue, by name (only with a group cap) */
    struct list_node eligible; /* ring of eligible queues, next to serve first */
    struct list_node limited;  /* queues with a rate limit */
    struct list_node idle;     /* queues that became idle (limiter_drop_idle) */
    struct list_node shared;   /* queues whose limits hold for the deployment */
    uint32_t global_cap;
    uint32_t default_cap;
    uint32_t group_cap; /* UINT32_MAX: groups have no cap */
    uint32_t inflight;
    uint32_t waiting;
};

static int group_full(const limiter *l, const lgroup *g) { return g && g->inflight >= l->group_cap; }

/* Puts q in the ring when it has become eligible and takes it out (of the
 * ring or its group's held list) when it has stopped being so; a queue that
 * stays eligible keeps its turn. */
static void queue_update(limiter *l, lqueue *q)
{
    int eligible = q->waiting > 0 && q->inflight < q->cap && q->inflight < q->grant && !q->paused &&
                   (q->rate <= 0 || q->tokens >= 1.0);
    if (eligible && !list_linked(&q->ring))
        list_insert_tail(&l->eligible, &q->ring); /* even in a full group: pop moves it to held in ring order */
    else if (!eligible && list_linked(&q->ring))
        list_remove(&q->ring);
}

limiter *limiter_create(uint32_t global_cap, uint32_t default_queue_cap)
{
    if (global_cap < 1 || default_queue_cap < 1)
        return NULL;
    limiter *l = xcalloc(1, sizeof *l);
    strtab_init(&l->names);
    strtab_init(&l->groups);
    l->global_cap = global_cap;
    l->group_cap = UINT32_MAX;
    l->default_cap = default_queue_cap;
    list_init(&l->eligible);
    list_init(&l->limited);
    list_init(&l->idle);
    list_init(&l->shared);
    return l;
}

int limiter_set_group_cap(limiter *l, uint32_t cap)
{
    if (cap < 1 || strtab_count(&l->names))
        return -1;
    l->group_cap = cap < l->global_cap ? cap : UINT32_MAX; /* at the global cap or above it changes nothing */
    return 0;
}

static void free_queue(strtab_node *n, void *arg)
{
    (void)arg;
    free(container_of(n, lqueue, byname));
}

static void free_group(strtab_node *n, void *arg)
{
    (void)arg;
    free(container_of(n, lgroup, byname));
}

void limiter_free(limiter *l)
{
    if (!l)
        return;
    strtab_each(&l->names, free_queue, NULL);
    strtab_free(&l->names);
    strtab_each(&l->groups, free_group, NULL);
    strtab_free(&l->groups);
    free(l);
}

/* The group of the queue named `name` (its part before the first '/'),
 * created when new; NULL while groups have no cap. */
static lgroup *group_of(limiter *l, const char *name)
{
    if (l->group_cap == UINT32_MAX)
        return NULL;
    size_t len = keys_ns_len(name);
    char small[72], *key = len < sizeof small ? small : xmalloc(len + 1); /* (a namespace: at most 64) */
    memcpy(key, name, len);
    key[len] = '\0';
    strtab_node *n = strtab_find(&l->groups, key);
    lgroup *g;
    if (n) {
        g = container_of(n, lgroup, byname);
    } else {
        g = xcalloc(1, sizeof *g + len + 1);
        memcpy(g->name, key, len + 1);
        list_init(&g->held);
        strtab_add(&l->groups, &g->byname, g->name);
    }
    if (key != small)
        free(key);
    g->queues++;
    return g;
}

static lqueue *queue_new(limiter *l, const char *name)
{
    size_t len = strlen(name);
    lqueue *q = xcalloc(1, sizeof *q + len + 1);
    memcpy(q->name, name, len + 1);
    list_init(&q->fifo);
    list_init(&q->ring);
    list_init(&q->limited);
    list_init(&q->idle);
    list_init(&q->shared);
    q->cap = l->default_cap;
    q->grant = UINT32_MAX;
    q->g = group_of(l, name);
    return q;
}

/* 1 when nothing needs q any more: no job waiting or in flight, not
 * configured and with the defaults (so not rate-limited: on no list but
 * its hash chain and the idle list). */
static int idle(const limiter *l, const lqueue *q)
{
    return !q->waiting && !q->inflight && !q->mark && q->cap == l->default_cap && !q->paused && q->rate <= 0 &&
           q->grant == UINT32_MAX;
}

/* Puts q on the idle list when it is idle (limiter_drop_idle frees it). */
static void note_idle(limiter *l, lqueue *q)
{
    if (idle(l, q) && !list_linked(&q->idle))
        list_insert_tail(&l->idle, &q->idle);
}

static void drop(limiter *l, lqueue *q)
{
    strtab_remove(&l->names, &q->byname);
    if (list_linked(&q->ring))
        list_remove(&q->ring);
    if (list_linked(&q->limited))
        list_remove(&q->limited);
    if (list_linked(&q->idle))
        list_remove(&q->idle);
    if (list_linked(&q->shared))
        list_remove(&q->shared);
    if (q->g && --q->g->queues == 0) {
        strtab_remove(&l->groups, &q->g->byname);
        free(q->g);
    }
    free(q);
}

size_t limiter_drop_idle(limiter *l)
{
    size_t n = 0;
    struct list_node *node;
    while ((node = list_pop_head(&l->idle))) {
        lqueue *q = container_of(node, lqueue, idle);
        if (idle(l, q)) {
            drop(l, q);
            n++;
        }
    }
    return n;
}

lqueue *limiter_queue(limiter *l, const char *name)
{
    strtab_node *n = strtab_find(&l->names, name);
    if (n)
        return container_of(n, lqueue, byname);
    lqueue *q = queue_new(l, name);
    strtab_add(&l->names, &q->byname, q->name);
    return q;
}

void limiter_set_queue_cap(limiter *l, lqueue *q, uint32_t cap)
{
    q->cap = cap < 1 ? 1 : cap;
    queue_update(l, q);
}

void limiter_set_queue_grant(limiter *l, lqueue *q, uint32_t grant)
{
    q->grant = grant;
    if (grant != UINT32_MAX && !list_linked(&q->shared))
        list_insert_tail(&l->shared, &q->shared);
    else if (grant == UINT32_MAX && list_linked(&q->shared))
        list_remove(&q->shared);
    queue_update(l, q);
    note_idle(l, q);
}

void limiter_each_shared(limiter *l, void (*fn)(lqueue *q, void *arg), void *arg)
{
    struct list_node *n, *next;
    for (n = l->shared.next; n != &l->shared; n = next) {
        next = n->next;
        fn(container_of(n, lqueue, shared), arg);
    }
}

uint32_t limiter_queue_grant(const lqueue *q) { return q->grant; }

void limiter_set_queue_paused(limiter *l, lqueue *q, int paused)
{
    q->paused = paused != 0;
    queue_update(l, q);
}

void limiter_set_queue_rate(limiter *l, lqueue *q, double per_s, uint64_t now_us)
{
    /* Written so that NaN fails every comparison and counts as no limit. */
    double rate = per_s > 0 ? (per_s < LIMITER_MAX_RATE ? per_s : LIMITER_MAX_RATE) : 0;
    if (rate == q->rate)
        return;
    if (rate > 0 && q->rate <= 0 && q->metered) {
        /* Limited again: the bucket kept what it held when the limit went
         * (a shared queue's share goes to 0 whenever it gives its permits
         * back between two timers) and gains what the time since would
         * have brought, up to one token. A fresh token here would let
         * timers that come due one by one start as fast as they come. */
        double gained = now_us > q->refilled_us ? (double)(now_us - q->refilled_us) * rate / 1e6 : 0;
        q->tokens = q->tokens + gained < 1.0 ? q->tokens + gained : 1.0;
        q->refilled_us = now_us;
    } else if (q->rate <= 0 || q->tokens > 1.0) { /* a first limit, or a bucket past the new one's start */
        q->tokens = 1.0;
        q->refilled_us = now_us;
    }
    if (rate > 0)
        q->metered = 1;
    q->rate = rate;
    if (q->rate > 0 && !list_linked(&q->limited))
        list_insert_tail(&l->limited, &q->limited);
    else if (q->rate <= 0 && list_linked(&q->limited))
        list_remove(&q->limited);
    queue_update(l, q);
}

/* Microseconds until q holds a whole token again, for a queue short of one:
 * at least period_us (the caller wakes no more often) and at most
 * LIMITER_MAX_WAIT_US, computed in double and clamped before the
 * conversion, which is defined only for values in range. */
static uint64_t token_wait_us(const lqueue *q, uint64_t period_us)
{
    double wait = (1.0 - q->tokens) * 1e6 / q->rate;
    if (!(wait < (double)LIMITER_MAX_WAIT_US)) /* also NaN */
        return LIMITER_MAX_WAIT_US;
    uint64_t us = wait > 0 ? (uint64_t)wait + 1 : 1;
    return us > period_us ? us : period_us;
}

uint64_t limiter_tick(limiter *l, uint64_t now_us, uint64_t period_us)
{
    uint64_t next = UINT64_MAX;
    for (struct list_node *n = l->limited.next; n != &l->limited; n = n->next) {
        lqueue *q = container_of(n, lqueue, limited);
        double capacity = q->rate * (double)period_us / 1e6;
        if (capacity < 1.0)
            capacity = 1.0;
        if (now_us > q->refilled_us) {
            q->tokens += (double)(now_us - q->refilled_us) * q->rate / 1e6;
            if (q->tokens > capacity)
                q->tokens = capacity;
            q->refilled_us = now_us;
        } else {
            q->refilled_us = now_us; /* the wall clock stepped back: refill from here on */
        }
        queue_update(l, q);
        if (q->tokens < 1.0 && q->waiting > 0 && !q->paused) {
            uint64_t due = now_us + token_wait_us(q, period_us);
            if (due < next)
                next = due;
        }
    }
    return next;
}

void limiter_configure_queue(limiter *l, lqueue *q, uint32_t mark)
{
    (void)l;
    q->mark = mark ? mark : 1;
}

void limiter_reset_queue(limiter *l, lqueue *q, uint64_t now_us)
{
    q->mark = 0;
    q->cap = l->default_cap;
    if (list_linked(&q->shared))
        list_remove(&q->shared);
    q->grant = UINT32_MAX;
    q->paused = 0;
    limiter_set_queue_rate(l, q, 0, now_us);
    queue_update(l, q);
    note_idle(l, q);
}

typedef struct reset_ctx {
    limiter *l;
    uint32_t mark;
    uint64_t now_us;
    size_t n;
} reset_ctx;

static void reset_if_unmarked(strtab_node *node, void *arg)
{
    reset_ctx *c = arg;
    lqueue *q = container_of(node, lqueue, byname);
    if (q->mark && q->mark != c->mark) {
        limiter_reset_queue(c->l, q, c->now_us); /* frees nothing (limiter_drop_idle does) */
        c->n++;
    }
}

size_t limiter_reset_unmarked(limiter *l, uint32_t mark, uint64_t now_us)
{
    reset_ctx c = {l, mark, now_us, 0};
    strtab_each(&l->names, reset_if_unmarked, &c);
    return c.n;
}

int limiter_queue_configured(const lqueue *q) { return q->mark != 0; }

uint32_t limiter_queue_cap(const lqueue *q) { return q->cap; }

double limiter_queue_rate(const lqueue *q) { return q->rate; }

uint32_t limiter_queue_count(const limiter *l) { return strtab_count(&l->names); }

int limiter_queue_paused(const lqueue *q) { return q->paused; }

const lqueue *ljob_queue(const ljob *j) { return j->q; }

void ljob_init(ljob *j)
{
    list_init(&j->node);
    j->q = NULL;
    j->running = 0;
}

void limiter_push(limiter *l, lqueue *q, ljob *j)
{
    j->q = q;
    j->running = 0;
    list_insert_tail(&q->fifo, &j->node);
    q->waiting++;
    l->waiting++;
    queue_update(l, q);
}

ljob *limiter_pop_ready(limiter *l)
{
    if (l->inflight >= l->global_cap)
        return NULL;
    lqueue *q;
    for (;;) {
        if (list_empty(&l->eligible))
            return NULL;
        q = container_of(l->eligible.next, lqueue, ring);
        if (!group_full(l, q->g))
            break;
        list_remove(&q->ring); /* its group filled up after it joined the ring */
        list_insert_tail(&q->g->held, &q->ring);
        q->g->holds++;
    }
    ljob *j = container_of(list_pop_head(&q->fifo), ljob, node);
    j->running = 1;
    q->waiting--;
    l->waiting--;
    q->inflight++;
    l->inflight++;
    if (q->g)
        q->g->inflight++;
    if (q->rate > 0)
        q->tokens -= 1.0;
    /* Served: give up the turn, rejoining at the tail if still eligible. */
    list_remove(&q->ring);
    queue_update(l, q);
    return j;
}

void limiter_done(limiter *l, ljob *j)
{
    if (!j->running)
        return;
    j->running = 0;
    lqueue *q = j->q;
    j->q = NULL;
    q->inflight--;
    l->inflight--;
    if (q->g && q->g->inflight-- == l->group_cap)
        list_splice_tail(&l->eligible, &q->g->held); /* below its cap again: its held queues take their turns */
    queue_update(l, q);
    note_idle(l, q);
}

int limiter_remove(limiter *l, ljob *j)
{
    if (j->running || !list_linked(&j->node))
        return 0;
    list_remove(&j->node);
    lqueue *q = j->q;
    j->q = NULL;
    q->waiting--;
    l->waiting--;
    queue_update(l, q);
    note_idle(l, q);
    return 1;
}

uint32_t limiter_inflight(const limiter *l) { return l->inflight; }

uint32_t limiter_waiting(const limiter *l) { return l->waiting; }

uint32_t limiter_queue_inflight(const lqueue *q) { return q->inflight; }

uint32_t limiter_queue_waiting(const lqueue *q) { return q->waiting; }

typedef struct holds_ctx {
    const limiter *l;
    void (*fn)(const char *group, uint32_t cap, uint32_t holds, void *arg);
    void *arg;
} holds_ctx;

static void report_holds(strtab_node *n, void *arg)
{
    holds_ctx *c = arg;
    lgroup *g = container_of(n, lgroup, byname);
    if (g->holds) {
        c->fn(g->name, c->l->group_cap, g->holds, c->arg);
        g->holds = 0;
    }
}

void limiter_report_holds(limiter *l, void (*fn)(const char *group, uint32_t cap, uint32_t holds, void *arg),
                          void *arg)
{
    holds_ctx c = {l, fn, arg};
    strtab_each(&l->groups, report_holds, &c);
}

uint32_t limiter_queue_startable(const limiter *l, const lqueue *q)
{
    if (!q->g)
        return q->waiting;
    uint32_t room = q->g->inflight < l->group_cap ? l->group_cap - q->g->inflight : 0;
    return q->waiting < room ? q->waiting : room;
}

const char *limiter_queue_name(const lqueue *q) { return q->name; }
