/* engine.c - the engine thread.
 *
 * Design. One epoll loop owns the wheel, the limiter and the dispatcher; it
 * sleeps until the earliest of: the next wheel tick that holds a timer,
 * curl's next timeout, and the next loader sweep — never a fixed poll, so an
 * idle instance wakes only for its sweeps. Other threads talk to it through
 * an inbox (a mutex-protected list of jobs plus an eventfd); a job carries its
 * own message, so posting allocates nothing.
 *
 * Invariants. A job is in exactly one phase (job.h). A job holds a limiter
 * slot from the moment its begin-attempt script is sent until its HTTP
 * attempt ends, so the caps bound attempts, not just requests. Durable state
 * only advances through the scripts: begin marks the timer firing (after it,
 * cancel answers 409), finish records the outcome. An attempt never starts
 * before its due time: a begun job waits in e->held until then (start_some).
 *
 * Trade-off. The begin step is one Redis round trip; it is what makes cancel
 * exact, and its cost is shared by every timer due at the same moment (the
 * store pipelines them). The wheel runs begin_lead_ms ahead of the clock, so
 * the round trip happens before the due time instead of after it: a timer is
 * committed (firing, a cancel answers 409) up to begin_lead_ms before its
 * attempt starts, and its lateness does not include Redis. */
#include "engine.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "backoff.h"
#include "clock.h"
#include "counts.h"
#include "dispatch.h"
#include "job.h"
#include "jsonesc.h"
#include "instances.h"
#include "keys.h"
#include "limiter.h"
#include "log.h"
#include "queuecfg.h"
#include "metrics.h"
#include "reaper.h"
#include "tally.h"
#include "timers.h"
#include "trace.h"
#include "watchdog.h"
#include "wheel.h"
#include "xalloc.h"

#define PARK_MS 1000 /* retry a store write after Redis failed, this much later */
#define MIGRATE_SLICE 256 /* keys of an earlier layout moved per call */
#define COUNTS_SCAN 1000  /* keys a slice of the counts rebuild scans (counts.h): well under 1 ms */
#define ABSORB_MAX 256    /* claimed timers taken into the wheel per turn of the loop */
#define START_RELEASE_RETRY_MS 1000 /* the start's hand-back, when Redis did not take it, is sent again */
#define PROBE_KEYS 64 /* partitions asked a round whether Redis takes new work (probe_writes) */
#define REBUILD_RETRY_MS 1000 /* a counts rebuild or layout move that failed (Redis unreachable) runs again this much later */
#define CHORE_RECHECK_MS 10 /* a chore due that waits for its call in flight is looked at again this much later */
#define SWEEP_SOON_GAP_MS 100 /* a sweep asked for (engine_sweep_soon) follows the last one by at least this */
#define HELD_SLICE TIMERS_BATCH_MAX /* claims a reconciliation call examines (timers_held) */
/* Attempts handed to curl per turn of the loop. curl connects every attempt
 * added in a turn before it sends the first request, and a new connection
 * costs about 0.1 ms here: 64 a turn put the first request of a due burst
 * 8-15 ms after its due time, 16 (with EXPIRE_MAX) puts it 2-8 ms after. */
#define START_MAX 16
/* Expired timers taken from the wheel and made ready per turn of the loop
 * (about 0.3 us each): a burst of 100,000 timers due at one instant becomes
 * ready over a few turns, while the begins of the first go out and curl's
 * events are handled, instead of in one turn of about 40 ms. */
#define EXPIRE_MAX 4096
/* Shared queues' permits (ask_permits): renewed this often while in use,
 * kept by Redis this long after a call, trusted here this much less than
 * that, and asked for at once no more often than every PERMITS_GAP_MS. */
#define PERMITS_RENEW_MS 250
#define HOLDS_REPORT_MS 10000 /* a namespace held back by its cap is logged at most this often */
#define WRITES_PROBE_MS 1000 /* Redis is asked this often whether it takes new work (readiness) */
#define PERMITS_TTL_MS 3000
#define PERMITS_MARGIN_MS 500
#define PERMITS_GAP_MS 20
/* A finish that only records a one-shot timer's last outcome waits up to
 * this long for others of its partition: at a steady few thousand timers a
 * second each finish would otherwise be a Redis call (and a round trip of
 * the store thread) of its own. Nothing waits for it: the attempt is over,
 * its slot free. Finishes that decide what comes next (a retry, a recurring
 * timer's next run) and every finish at stop go out at once. */
#define FINISH_LINGER_MS 10
/* Finishes per call: a finish costs Redis about 10 us a timer alone
 * (bench/script_cost.py; recording a one-shot's end writes its record once
 * more, with its history and retention), and two to five times that on a
 * busy machine, where Redis waits for a core. A call of this many holds
 * Redis under 1 ms even then, and a begin due meanwhile waits no longer
 * (TIMERS_BATCH_MAX, 256, held it up to 7 ms; 48 calls went over 1 ms four
 * times as often in bench/run.sh's D, at the same deliveries/s). */
#define FINISH_BATCH_MAX 24
/* Begins held back while this instance's lease may have lapsed are tried
 * again this much later (the watchdog renews it meanwhile, see lease_held). */
#define LEASE_WAIT_MS 50

/* The jobs of one partition whose begin (or finish) goes to Redis as one
 * call: gathered during a turn of the loop, sent at its end (flush). */
typedef struct job_batch {
    struct engine *e;
    uint32_t partition;
    size_t n;
    uint64_t since_ms; /* finishes: when the first was gathered */
    int urgent;        /* finishes: one decides what comes next (FINISH_LINGER_MS) */
    job *jobs[TIMERS_BATCH_MAX];
} job_batch;

typedef struct sweep_ctx {
    engine *e;
    uint32_t partition;
    uint32_t limit;    /* the claim's batch: a full one means more may wait */
    uint64_t horizon;  /* the sweep's: claims timers due by then */
    atomic_int replay; /* the last claim's reply was lost: ask for its timers again */
} sweep_ctx;

struct engine {
    const config *cfg;
    store *st;
    int epfd, evfd;
    pthread_t thread;
    int started;

    pthread_mutex_t mu; /* guards the inbox, revoked, held_pending, queues_pending and ns_held */
    strtab ns_held;     /* struct ns_resident by namespace: jobs held per namespace (with a cap only) */
    uint64_t ns_cap;    /* max_resident_per_namespace; 0: no cap */
    job *inbox, **inbox_tail;
    struct revocation *revoked; /* from claims (timers_revoked), not yet applied */
    struct held_slice *held_pending; /* from reconciliation calls (timers_held), not yet compared */
    struct queue_settings *queues_pending; /* read from Redis, not yet applied */
    atomic_int queues_polling;             /* a feed read is in flight or not yet applied */
    struct permits_call *permits_pending;  /* answered, not yet applied */
    atomic_int permits_asking;             /* a permits call is in flight or its answer not yet applied */
    atomic_int stop;
    atomic_int accepting;
    atomic_int pending_ops; /* sweeps and releases in flight */
    atomic_int release_failed; /* a partition's release did not end: logged at a stop, sent again at start */
    atomic_int releasing_start; /* the start's hand-back of a previous process's claims has not ended well */
    atomic_int sweep_asked; /* engine_sweep_soon: timers were made due soon in Redis */
    atomic_int rebuilding;  /* partitions whose counts rebuild is in flight (sweeps do not wait) */
    atomic_int rebuild_failed; /* a call of the counts rebuild failed: it runs again (rebuild_counts_again) */
    atomic_int migrate_failed; /* a call of the layout move failed: it runs again (migrate_again) */
    atomic_long resident;   /* jobs held: bounded by max_resident */
    atomic_uint next_token; /* job tokens: random start, never 0 */

    /* engine thread only */
    wheel *w;
    limiter *lim;
    dispatch *d;
    timers *tm;           /* the timer verbs (persistence/timers.h) */
    job *backlog, **backlog_tail; /* claimed, not yet in the wheel (absorb) */
    job *starting, **starting_tail; /* begun, due, not yet handed to curl (start_some) */
    struct list_node held; /* begun ahead of their start (begin_lead_ms), in start_us order (by wt.node) */
    struct list_node expiring; /* out of the wheel, not yet made ready (EXPIRE_MAX a turn; by wt.node) */
    struct list_node all; /* every job held */
    strtab byid;          /* the jobs taken from the inbox, by timer id */
    uint32_t store_jobs;  /* jobs whose begin or finish call is in flight */
    job_batch **begins;   /* per partition: the begins gathered this turn (NULL: none) */
    job_batch **finishes; /* per partition: the finishes gathered (this turn, or lingering) */
    uint64_t finish_due_ms; /* the soonest a lingering finish batch goes out (0: none lingers) */
    uint64_t limiter_next_us; /* a rate-limited queue's next token (UINT64_MAX: none) */
    uint64_t next_queues_ms;  /* next read of the queue settings */
    int64_t queues_version;   /* the settings' version applied (-1: none yet) */
    uint32_t queues_mark;     /* the mark of the last full read (limiter_reset_unmarked) */
    uint64_t next_permits_ms; /* next renewal of the shared queues' permits */
    uint64_t permits_sent_ms; /* when the last permits call was sent */
    uint64_t permits_until_ms; /* the grants held are good until then (0: none held) */
    size_t permits_skip;      /* queues the next call skips: more than one call's worth want permits */
    int permits_active;       /* the last call had something to say: renew */
    int permits_soon;         /* a shared queue has jobs it holds no permits for: ask now */
    uint64_t next_sweep_ms;
    uint64_t last_sweep_ms; /* when the last sweep started */
    uint64_t last_now_ms; /* the wall clock when the loop last read it (follow_clock) */
    int sweep_more;       /* a partition returned a full batch: sweep again at once */
    /* How many timers a claim call takes within its time budget here
     * (TIMERS_CALL_BUDGET_US): a call cut short sets it to what it took,
     * each full call raises it by a quarter, up to claim_batch. A claim asks
     * for no more, so that it does not read and lay out entries it will not
     * take. Store thread (sweep_cb, claim_next) and the engine's (sweep). */
    atomic_uint claim_fit;
    uint64_t sweep_base;  /* the sweep's claims per partition (sweep_limit) ... */
    uint32_t sweep_extra; /* ... plus one for this many partitions ... */
    uint32_t sweep_offset, sweep_next_offset; /* ... from this one on */
    uint64_t rng;
    sweep_ctx *sweeps;
    watchdog *wd;         /* renews this instance's lease */
    wlease *lease;
    reaper *rp;
    uint64_t next_reap_ms;
    uint64_t next_rebuild_ms; /* the counts rebuild runs again no sooner (rebuild_counts_again) */
    uint64_t next_migrate_ms; /* the layout move runs again no sooner (migrate_again) */
    uint64_t next_holds_ms;   /* the next report of namespaces their cap held back */
    uint64_t next_probe_ms;   /* the next ask whether Redis takes new work (store_probe_writes) */
    char **probe_keys;        /* a key of each partition, for that ask on a Redis Cluster (else NULL) */
    uint32_t probe_next;      /* the partition the next ask starts at */
    int reconciling;         /* a reconciliation round runs (reconcile_start) */
    uint64_t reconcile_until; /* its claims due by then are examined */
    int lease_lost_logged;
    uint64_t lease_waits;     /* begins held back since the lease was last surely held (lease_held) */
    int lease_wait_logged;
    int start_release_retried; /* the start's hand-back failed once (logged) and is being sent again */

    metrics *m;                   /* may be NULL; set before the thread starts */
    tally *tally;                 /* per-minute figures (GET /stats); may be NULL, set likewise */
    atomic_long in_wheel;         /* wheel_count, published by the engine thread before it sleeps */
    _Atomic(wlease *) lease_pub;  /* e->lease, for readers on other threads */
    atomic_uint_fast64_t started_ms;
};

/* ---- inbox ---- */

static void wake(engine *e)
{
    uint64_t one = 1;
    ssize_t n = write(e->evfd, &one, sizeof one);
    (void)n;
}

/* Appends the chain first..last (linked through inbox_next) to the inbox. */
static void post_chain(engine *e, job *first, job *last)
{
    last->inbox_next = NULL;
    pthread_mutex_lock(&e->mu);
    int was_empty = e->inbox == NULL;
    *e->inbox_tail = first;
    e->inbox_tail = &last->inbox_next;
    pthread_mutex_unlock(&e->mu);
    if (was_empty)
        wake(e);
}

static void post(engine *e, job *j, enum job_msg msg)
{
    j->msg = msg;
    post_chain(e, j, j);
}

static job *take_inbox(engine *e)
{
    pthread_mutex_lock(&e->mu);
    job *j = e->inbox;
    e->inbox = NULL;
    e->inbox_tail = &e->inbox;
    pthread_mutex_unlock(&e->mu);
    return j;
}

/* ---- jobs ---- */

/* The jobs held of one namespace (a timer id's part before '/'; none: ""),
 * counted while a cap applies (HOOKWHEEL_MAX_RESIDENT_PER_NAMESPACE), so
 * that one namespace's backlog that cannot start (a paused queue, targets
 * that hang) leaves room in memory for the others' due timers: creates and
 * claims take no more of a namespace at its cap (engine_reserve,
 * claim_next). n counts the jobs and the room reserved for timers a
 * request is having claimed (engine_reserve). Under e->mu; a record goes
 * when n is back to 0. */
struct ns_resident {
    strtab_node node;
    uint64_t n;
    char name[];
};

/* The namespace of timer id into out (at most size - 1 bytes). */
static const char *ns_of(const char *id, char *out, size_t size)
{
    size_t n = keys_ns_len(id);
    if (n >= size)
        n = size - 1;
    memcpy(out, id, n);
    out[n] = '\0';
    return out;
}

/* id's namespace's record (under e->mu); NULL: it holds nothing, and one
 * is made when make is set. */
static struct ns_resident *ns_find_locked(engine *e, const char *id, int make)
{
    char ns[72]; /* a namespace is at most 64 characters */
    ns_of(id, ns, sizeof ns);
    strtab_node *n = strtab_find(&e->ns_held, ns);
    if (n || !make)
        return n ? container_of(n, struct ns_resident, node) : NULL;
    size_t len = strlen(ns);
    struct ns_resident *r = xmalloc(sizeof *r + len + 1);
    memcpy(r->name, ns, len + 1);
    r->n = 0;
    r->node = (strtab_node){0};
    strtab_add(&e->ns_held, &r->node, r->name);
    return r;
}

static void ns_put_locked(engine *e, struct ns_resident *r, uint64_t n)
{
    r->n -= n;
    if (r->n == 0) {
        strtab_remove(&e->ns_held, &r->node);
        free(r);
    }
}

/* j counts against its namespace; reserved: in the room engine_reserve
 * took for it (under e->mu). */
static void ns_count_locked(engine *e, job *j, int reserved)
{
    struct ns_resident *r = ns_find_locked(e, j->id, 1);
    if (!reserved || r->n == 0) /* (reserved: the reservation becomes the job) */
        r->n++;
    j->nsr = r;
}

static void ns_uncount_locked(engine *e, job *j)
{
    struct ns_resident *r = j->nsr;
    if (!r)
        return;
    j->nsr = NULL;
    ns_put_locked(e, r, 1);
}

/* Room for more timers in memory (the claim may overshoot by one batch). */
static long room(const engine *e)
{
    return (long)e->cfg->max_resident - atomic_load(&e->resident);
}

long engine_reserve(engine *e, const char *id, long want)
{
    if (want <= 0 || !atomic_load(&e->accepting))
        return 0;
    if (e->ns_cap)
        pthread_mutex_lock(&e->mu);
    long got = want;
    struct ns_resident *r = NULL;
    if (e->ns_cap) {
        r = ns_find_locked(e, id, 0);
        uint64_t held = r ? r->n : 0;
        uint64_t ns_room = held < e->ns_cap ? e->ns_cap - held : 0;
        if ((uint64_t)got > ns_room)
            got = (long)ns_room;
    }
    /* the room in memory, taken at once so that requests racing cannot
     * each take the same (a claim's sweep still may overshoot: room()) */
    long cur = atomic_load(&e->resident);
    long take;
    do {
        long free_slots = (long)e->cfg->max_resident - cur;
        take = got < free_slots ? got : free_slots;
        if (take <= 0) {
            take = 0;
            break;
        }
    } while (!atomic_compare_exchange_weak(&e->resident, &cur, cur + take));
    if (e->ns_cap) {
        if (take > 0)
            (r ? r : ns_find_locked(e, id, 1))->n += (uint64_t)take;
        pthread_mutex_unlock(&e->mu);
    }
    return take;
}

void engine_unreserve(engine *e, const char *id, long n)
{
    if (n <= 0)
        return;
    if (e->ns_cap) {
        pthread_mutex_lock(&e->mu);
        struct ns_resident *r = ns_find_locked(e, id, 0);
        if (r)
            ns_put_locked(e, r, (uint64_t)n <= r->n ? (uint64_t)n : r->n);
        pthread_mutex_unlock(&e->mu);
    }
    atomic_fetch_sub(&e->resident, n);
}

/* A job for timer id; reserved: in the room engine_reserve took for it,
 * else it takes room now (a sweep's claim). */
static job *job_new(engine *e, char *id, timer_spec *spec, uint64_t fire_ms, uint32_t attempts,
                    uint64_t version, const char *rid, size_t rid_len, const timer_trace *trace, int reserved)
{
    job *j = xcalloc(1, sizeof *j);
    if (rid && rid_len)
        j->rid = xstrndup(rid, rid_len);
    if (trace && trace->parent_len == TRACE_PARENT_LEN) { /* another length is none we wrote */
        j->traceparent = xstrndup(trace->parent, trace->parent_len);
        if (trace->state_len)
            j->tracestate = xstrndup(trace->state, trace->state_len);
    }
    wtimer_init(&j->wt);
    ljob_init(&j->lj);
    list_init(&j->run_node);
    j->owner = e;
    j->id = id;
    j->spec = spec;
    j->partition = timers_partition(e->tm, id);
    j->attempts = attempts;
    j->version = version;
    j->token = atomic_fetch_add(&e->next_token, 1);
    if (!j->token) /* 0 is no job's: a wrap skips it */
        j->token = atomic_fetch_add(&e->next_token, 1);
    j->wt.due_ms = fire_ms;
    j->due_ms = fire_ms;
    pthread_mutex_lock(&e->mu);
    list_insert_tail(&e->all, &j->all_node);
    if (e->ns_cap)
        ns_count_locked(e, j, reserved);
    pthread_mutex_unlock(&e->mu);
    if (!reserved)
        atomic_fetch_add(&e->resident, 1);
    return j;
}

static void job_free(engine *e, job *j)
{
    strtab_remove(&e->byid, &j->byid);
    wheel_cancel(e->w, &j->wt);
    if (limiter_remove(e->lim, &j->lj))
        metrics_gauge_add(e->m, j->spec->queue, MG_READY, -1);
    pthread_mutex_lock(&e->mu);
    list_remove(&j->all_node);
    ns_uncount_locked(e, j);
    pthread_mutex_unlock(&e->mu);
    atomic_fetch_sub(&e->resident, 1);
    spec_free(j->spec);
    free(j->raw_spec);
    free(j->id);
    free(j->rid);
    free(j->traceparent);
    free(j->tracestate);
    free(j->last_json);
    free(j);
}

/* Logs a line about j's timer: its id, queue, attempt and the id of the
 * request that created it, then the fields of fmt (NULL: none). */
__attribute__((format(printf, 4, 5))) static void job_log(int level, const char *msg, const job *j,
                                                          const char *fmt, ...)
{
    if (level < log_min_level)
        return;
    char extra[640] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        extra[0] = ',';
        vsnprintf(extra + 1, sizeof extra - 1, fmt, ap);
        va_end(ap);
    }
    log_write(level, msg, "\"timer\":\"%s\",\"queue\":\"%s\",\"attempt\":%u,\"request_id\":\"%s\"%s", j->id,
              j->spec ? j->spec->queue : "", j->attempts, j->rid ? j->rid : "", extra);
}

void engine_add_take(engine *e, char *id, timer_spec *spec, uint64_t fire_ms, uint32_t attempts,
                     uint64_t version, const char *rid, const timer_trace *trace)
{
    post(e, job_new(e, id, spec, fire_ms, attempts, version, rid, rid ? strlen(rid) : 0, trace, 1), MSG_CLAIMED);
}

int engine_running(const engine *e) { return atomic_load(&e->accepting); }

static void schedule(engine *e, job *j, enum job_phase phase, uint64_t due_ms)
{
    j->phase = phase;
    j->wt.due_ms = due_ms;
    if (phase == JOB_WHEEL) /* a park (JOB_PARKED) keeps the due time: lateness and misfires count from it */
        j->due_ms = due_ms;
    wheel_add(e->w, &j->wt);
}

/* ---- begin ---- */

static void park(engine *e, job *j)
{
    schedule(e, j, JOB_PARKED, clock_now_ms() + PARK_MS);
}

/* Store thread: the batch's begin answered; each job goes back to the
 * engine with its own result, in one post. */
static void begun_cb(void *arg, int status, size_t n, const timer_begun *res)
{
    job_batch *b = arg;
    for (size_t i = 0; i < b->n; i++) {
        job *j = b->jobs[i];
        j->reply_ok = status == TIMERS_OK && i < n;
        j->reply_code = j->reply_ok && res[i].attempt >= 1 ? 1 : 0;
        if (j->reply_code == 1) {
            j->attempts = (uint32_t)res[i].attempt;
            j->run = res[i].run;
            j->run_due_ms = res[i].run_due_ms;
        } else if (j->reply_ok && res[i].attempt == TIMERS_NOT_DUE && res[i].run_due_ms > 0) {
            j->reply_code = 2;
            j->next_fire_ms = (uint64_t)res[i].run_due_ms;
        }
        j->msg = MSG_BEGUN;
        j->inbox_next = i + 1 < b->n ? b->jobs[i + 1] : NULL;
    }
    post_chain(b->e, b->jobs[0], b->jobs[b->n - 1]);
    free(b);
}

static job_batch *batch_add(engine *e, job_batch **slot, uint32_t partition, job *j)
{
    if (!*slot) {
        *slot = xmalloc(sizeof **slot);
        (*slot)->e = e;
        (*slot)->partition = partition;
        (*slot)->n = 0;
        (*slot)->since_ms = 0;
        (*slot)->urgent = 0;
    }
    (*slot)->jobs[(*slot)->n++] = j;
    return *slot;
}

/* 1 while this instance's lease surely holds in Redis for as long as a
 * begin sent now can take to run there (the Redis timeout, at most a third
 * of the TTL). Otherwise Redis has not confirmed a renewal for most of a
 * TTL (it was out of reach, or this process was paused): the lease may have
 * lapsed, and another instance's reaper may be taking our claims over, an
 * attempt begun meanwhile included, which it would make again. Begins then
 * wait for a renewal Redis confirms (the watchdog sends one soon after a
 * failed one); what was taken over meanwhile then fails its begin.
 *
 * A reaper asks whether a lease lives, then hands the claims back in calls
 * of their own: one that saw our lease gone just before a renewal made it
 * again still hands our claims back after. So once a renewal found the key
 * gone, begins wait a Redis timeout more (those calls answer or fail
 * within it).
 *
 * On a Redis Cluster the lease key lives on one master, and begins go to
 * every master: while that one is away no instance can read the key either,
 * and the attempts on the others go on; only the wait after the key was
 * made again applies. */
static int lease_held(engine *e)
{
    uint64_t margin = e->cfg->redis_timeout_ms < e->cfg->lease_ttl_ms / 3 ? e->cfg->redis_timeout_ms
                                                                          : e->cfg->lease_ttl_ms / 3;
    int silent = e->lease && !store_is_cluster(e->st) && !watchdog_held(e->lease, margin);
    int remade = e->lease && watchdog_remade_within(e->lease, e->cfg->redis_timeout_ms);
    if (!silent && !remade) {
        if (e->lease_wait_logged)
            LOG(LOG_INFO, "this instance's lease is renewed: attempts start again",
                "\"instance\":\"%s\",\"begins_held\":%" PRIu64, e->cfg->instance_id, e->lease_waits);
        e->lease_waits = 0;
        e->lease_wait_logged = 0;
        return 1;
    }
    if (!e->lease_wait_logged && (remade || watchdog_renewed_ms(e->lease))) { /* (not before the first renewal) */
        if (silent)
            LOG(LOG_WARN, "attempts wait until this instance's lease is renewed: Redis has not confirmed it for "
                          "most of its TTL, and another instance may take its claims over",
                "\"instance\":\"%s\",\"lease_ttl_ms\":%" PRIu64, e->cfg->instance_id,
                (uint64_t)e->cfg->lease_ttl_ms);
        e->lease_wait_logged = 1;
    }
    return 0;
}

static void send_begins(engine *e, job_batch *b)
{
    size_t n = b->n; /* once sent, b is the writer thread's: its callback frees it */
    uint64_t later_ms = LEASE_WAIT_MS;
    if (lease_held(e)) {
        timer_begin items[TIMERS_BATCH_MAX] = {{0}};
        for (size_t i = 0; i < n; i++) {
            job *j = b->jobs[i];
            items[i] = (timer_begin){j->id, j->version, j->token, spec_recurring(j->spec), j->due_ms};
        }
        if (timers_begin(e->tm, b->partition, n, items, begun_cb, b) >= 0) {
            e->store_jobs += (uint32_t)n;
            return;
        }
        later_ms = PARK_MS; /* not sent: Redis is out of reach */
    } else {
        e->lease_waits += n;
    }
    for (size_t i = 0; i < n; i++) {
        limiter_done(e->lim, &b->jobs[i]->lj);
        schedule(e, b->jobs[i], JOB_PARKED, clock_now_ms() + later_ms);
    }
    free(b);
}

/* Gathers j's begin into its partition's batch (sent by flush, or now when
 * the batch is full). Its attempt starts at its due time, and in a
 * rate-limited queue not before begin_lead_ms after now, when it got its
 * token: tokens are handed out as the wheel runs, ahead of the clock, and
 * starts at the due time alone would bunch up the jobs that got theirs
 * ahead (a queue's starts are paced evenly, without bursts). */
static void send_begin(engine *e, job *j, uint64_t now_us)
{
    metrics_gauge_add(e->m, j->spec->queue, MG_READY, -1); /* pump popped it from the limiter */
    j->phase = JOB_BEGIN;
    j->start_us = j->due_ms * 1000u;
    if (limiter_queue_rate(ljob_queue(&j->lj)) > 0 && now_us + e->cfg->begin_lead_ms * 1000u > j->start_us)
        j->start_us = now_us + e->cfg->begin_lead_ms * 1000u;
    job_batch *b = batch_add(e, &e->begins[j->partition], j->partition, j);
    if (b->n == TIMERS_BATCH_MAX) {
        e->begins[j->partition] = NULL;
        send_begins(e, b);
    }
}

static int to_skip(const job *j, int64_t now, int64_t *next, uint64_t *n);
static void skip_to(engine *e, job *j, int64_t now, int64_t next, uint64_t n);

/* Starts every job the limiter lets start now. */
static void pump(engine *e)
{
    if (atomic_load(&e->stop))
        return;
    ljob *lj;
    uint64_t now_us = clock_now_us();
    e->limiter_next_us = limiter_tick(e->lim, now_us, e->cfg->tick_ms * 1000u);
    while ((lj = limiter_pop_ready(e->lim))) {
        job *j = container_of(lj, job, lj);
        /* A calendar schedule's run that waited in its queue (paused, or
         * short of permits) past its next slot is a misfire too. */
        int64_t now = (int64_t)(now_us / 1000u), next;
        uint64_t n;
        if (to_skip(j, now, &next, &n)) {
            limiter_done(e->lim, &j->lj);
            metrics_gauge_add(e->m, j->spec->queue, MG_READY, -1);
            skip_to(e, j, now, next, n);
            continue;
        }
        send_begin(e, j, now_us);
    }
}

/* ---- misfires of calendar schedules ----
 *
 * A calendar schedule's run is missed when the slot after its own has
 * passed too before it could start (every instance was down, its queue
 * was paused). With misfire "skip" (the default) the holder does not run
 * it: it counts the missed slots (at most MISFIRE_COUNT_MAX a time) and
 * moves the timer to its next slot in the future, under the version it
 * holds (timers_skip), so an instruction that came meanwhile wins. With
 * "fire_once" it runs once now, and the schedule goes on from its next
 * slot after that run (the other missed slots are passed over). A retry's
 * attempt is never a misfire: the run began. */

#define MISFIRE_COUNT_MAX 1000

static void skipped_cb(void *arg, int status, const timer_view *v, int held)
{
    job *j = arg;
    j->reply_ok = status != TIMERS_UNREACHABLE;
    j->reply_code = status == TIMERS_OK ? (held ? 2 : 1) : 0;
    if (status == TIMERS_OK) {
        j->version = v->version;
        j->next_fire_ms = (uint64_t)v->fire_ms;
    }
    post(j->owner, j, MSG_SKIPPED);
}

/* Whether j's run is to be skipped as missed at now: then *next is the
 * slot it goes on at and *n the slots skipped. */
static int to_skip(const job *j, int64_t now, int64_t *next, uint64_t *n)
{
    const timer_spec *s = j->spec;
    if (!s->cron_x || s->misfire_fire_once || j->attempts > 0)
        return 0;
    if (spec_next_slot(s, (int64_t)j->due_ms, next, NULL) < 0 || *next > now)
        return 0; /* on time, if late; or its last slot (it runs, then the schedule ends) */
    int64_t own;
    if (spec_next_slot(s, (int64_t)j->due_ms - 1, &own, NULL) < 0 || own != (int64_t)j->due_ms)
        return 0; /* due at no slot: a run a reschedule placed, which runs as soon as it can */
    *n = 1; /* its own slot */
    while (*next <= now && *n < MISFIRE_COUNT_MAX) {
        (*n)++;
        if (spec_next_slot(s, *next, next, NULL) < 0)
            return 0; /* no slot after the missed ones: run this one as the last */
    }
    if (*next <= now && spec_next_slot(s, now, next, NULL) < 0)
        return 0;
    return 1;
}

/* Moves j's missed run to its slot next, n slots skipped (to_skip). */
static void skip_to(engine *e, job *j, int64_t now, int64_t next, uint64_t n)
{
    job_log(LOG_INFO, "missed slots skipped", j, "\"skipped\":%" PRIu64 ",\"next_ms\":%" PRId64, n, next);
    j->phase = JOB_SKIP;
    e->store_jobs++;
    if (timers_skip(e->tm, j->id, j->version, (uint64_t)now, next, n, (uint64_t)now + e->cfg->window_ms, skipped_cb,
                    j) < 0) {
        e->store_jobs--;
        park(e, j);
    }
}

/* Skips j's run when its slot was missed; returns 1 when it did. */
static int skip_missed(engine *e, job *j)
{
    int64_t now = (int64_t)clock_now_ms(), next;
    uint64_t n;
    if (!to_skip(j, now, &next, &n))
        return 0;
    skip_to(e, j, now, next, n);
    return 1;
}

static void on_skipped(engine *e, job *j)
{
    e->store_jobs--;
    if (!j->reply_ok) { /* Redis unreachable: the misfire is looked at again */
        park(e, j);
        return;
    }
    if (j->reply_code == 2 && !atomic_load(&e->stop)) { /* its next slot is ours */
        schedule(e, j, JOB_WHEEL, j->next_fire_ms);
        return;
    }
    job_free(e, j); /* in the index for a later sweep, or moved by an instruction meanwhile */
}

static void make_ready(engine *e, job *j)
{
    if (skip_missed(e, j))
        return;
    j->phase = JOB_READY;
    char qn[QUEUECFG_FIELD_MAX];
    queuecfg_field_of(qn, sizeof qn, j->id, j->spec->queue); /* queues are per namespace */
    lqueue *q = limiter_queue(e->lim, qn);
    limiter_push(e->lim, q, &j->lj);
    uint32_t grant = limiter_queue_grant(q);
    if (grant != UINT32_MAX && grant < limiter_queue_cap(q) &&
        limiter_queue_inflight(q) + limiter_queue_waiting(q) > grant)
        e->permits_soon = 1; /* a shared queue short of permits */
    metrics_gauge_add(e->m, j->spec->queue, MG_READY, 1);
}

/* ---- outcome ---- */

/* Store thread: the batch's finish answered. */
static void finished_cb(void *arg, int status, size_t n, const timer_finished *res)
{
    job_batch *b = arg;
    for (size_t i = 0; i < b->n; i++) {
        job *j = b->jobs[i];
        j->reply_ok = status == TIMERS_OK && i < n;
        j->reply_code = j->reply_ok && res[i].ok ? 1 : 0;
        if (j->reply_code == 1) {
            j->next_fire_ms = (uint64_t)res[i].fire_ms;
            j->version = res[i].version;
            j->keep = res[i].kept;
            j->attempts = res[i].attempts;
        }
        j->msg = MSG_FINISHED;
        j->inbox_next = i + 1 < b->n ? b->jobs[i + 1] : NULL;
    }
    post_chain(b->e, b->jobs[0], b->jobs[b->n - 1]);
    free(b);
}

static void send_finishes(engine *e, job_batch *b)
{
    timer_finish items[TIMERS_BATCH_MAX];
    for (size_t i = 0; i < b->n; i++) {
        job *j = b->jobs[i];
        const timer_spec *s = j->spec;
        items[i] = (timer_finish){j->id, (enum timer_outcome)j->outcome, j->last_json, (int64_t)j->next_fire_ms,
                                  j->keep, s->every_ms, s->fixed_rate, s->times, j->next_delay_ms};
    }
    uint64_t now_ms = clock_now_ms();
    size_t n = b->n; /* once sent, b is the writer thread's: its callback frees it */
    if (timers_finish(e->tm, b->partition, now_ms, now_ms + e->cfg->window_ms, n, items, finished_cb, b) < 0) {
        for (size_t i = 0; i < n; i++)
            park(e, b->jobs[i]);
        free(b);
        return;
    }
    e->store_jobs += (uint32_t)n;
}

/* Gathers j's outcome into its partition's batch. */
static void send_finish(engine *e, job *j)
{
    j->phase = JOB_FINISH;
    job_batch *b = batch_add(e, &e->finishes[j->partition], j->partition, j);
    if (b->n == 1)
        b->since_ms = clock_now_ms();
    if ((j->outcome != OUT_DELIVERED && j->outcome != OUT_FAILED) || spec_recurring(j->spec))
        b->urgent = 1;
    if (b->n == FINISH_BATCH_MAX) {
        e->finishes[j->partition] = NULL;
        send_finishes(e, b);
    }
}

/* Sends every batch gathered in this turn of the loop, except finish
 * batches that may linger (FINISH_LINGER_MS) and have not yet. */
static void flush(engine *e)
{
    uint64_t now = clock_now_ms(), due = 0;
    int stopping = atomic_load(&e->stop);
    for (uint32_t p = 0; p < e->cfg->partitions; p++) {
        job_batch *b = e->finishes[p];
        if (b && !b->urgent && !stopping && now < b->since_ms + FINISH_LINGER_MS) {
            if (!due || b->since_ms + FINISH_LINGER_MS < due)
                due = b->since_ms + FINISH_LINGER_MS;
        } else if (b) {
            e->finishes[p] = NULL;
            send_finishes(e, b);
        }
        b = e->begins[p];
        if (b) {
            e->begins[p] = NULL;
            send_begins(e, b);
        }
    }
    e->finish_due_ms = due;
}

/* The last_attempt record exactly as the API shows it:
 * {"at","duration_ms","status","error","response_snippet","instance"}.
 * Written by hand: it is built once per attempt on the engine thread.
 * instance is this instance's id (config: printable, no quotes). */
static char *last_attempt_json(const attempt_result *res, const char *instance)
{
    char at[32];
    clock_format_rfc3339(res->started_ms, at, sizeof at);
    size_t elen = strlen(res->error);
    char *t = xmalloc(176 + 6 * (elen + res->snippet_len + strlen(instance)));
    size_t n = (size_t)sprintf(t, "{\"at\":\"%s\",\"duration_ms\":%u,\"status\":", at, res->duration_ms);
    n += res->status ? (size_t)sprintf(t + n, "%ld", res->status) : (size_t)sprintf(t + n, "null");
    if (elen) {
        n += (size_t)sprintf(t + n, ",\"error\":\"");
        n += json_escape(t + n, res->error, elen);
        t[n++] = '"';
    } else {
        n += (size_t)sprintf(t + n, ",\"error\":null");
    }
    n += (size_t)sprintf(t + n, ",\"response_snippet\":\"");
    n += json_escape(t + n, res->snippet ? res->snippet : "", res->snippet_len);
    t[n++] = '"';
    n += (size_t)sprintf(t + n, ",\"instance\":\"");
    n += json_escape(t + n, instance, strlen(instance));
    t[n++] = '"';
    t[n++] = '}';
    t[n] = '\0';
    return t;
}

static int retryable(const attempt_result *res)
{
    if (res->refused_by_policy)
        return 0; /* the same address would be refused again */
    if (res->local_error)
        return 1; /* our own shortage: the target was never tried */
    return res->status == 0 || res->status == 408 || res->status == 429 ||
           (res->status >= 500 && res->status <= 599); /* not 600-999: no such class */
}

/* Decides what an attempt's result means for the timer (DESIGN §6): 2xx
 * delivers; connection errors, timeouts, 408, 429 and 5xx retry while
 * attempts remain (Retry-After, when given, replaces the backoff, capped at
 * max_backoff_ms); anything else, including a destination the policy
 * refused, fails at once. A recurring timer's Hookwheel-Next-Delay-Ms is
 * raised to the minimum period, as repeat.every_ms is: the target must not
 * be able to make a timer run back to back. An attempt that got no socket
 * here (out of file descriptors) never reached the target: it is retried
 * after a short jittered delay whatever max_attempts says, so a local
 * shortage cannot turn timers into dead letters. With retry.max_duration_ms
 * a run's retries also end once that long has passed since it was due: the
 * last retry is moved up to that deadline, and an attempt failing at or
 * after it fails the timer. */
static void decide(engine *e, job *j, const attempt_result *res, uint64_t now)
{
    const timer_spec *s = j->spec;
    j->keep = !atomic_load(&e->stop);
    j->next_delay_ms = -1;
    if (res->local_error && retryable(res)) { /* the target was never tried: not an attempt */
        const uint64_t local_retry_ms = 1000;
        j->outcome = OUT_REQUEUE;
        j->next_fire_ms = now + local_retry_ms + splitmix64_next(&e->rng) % local_retry_ms;
        return;
    }
    j->next_fire_ms = 0;
    if (res->status >= 200 && res->status < 300 && s->cron_x) { /* a calendar schedule: its next slot */
        int64_t slot, after = (int64_t)now > j->run_due_ms ? (int64_t)now : j->run_due_ms;
        if (spec_next_slot(s, after, &slot, NULL) < 0) {
            j->outcome = OUT_DELIVERED; /* no slot left (end_at): the schedule is over */
            return;
        }
        j->outcome = OUT_NEXT;
        j->next_fire_ms = (uint64_t)slot;
        return;
    }
    if (res->status >= 200 && res->status < 300) {
        j->outcome = s->every_ms ? OUT_NEXT : OUT_DELIVERED;
        if (s->every_ms && res->next_delay_ms >= 0 && (uint64_t)res->next_delay_ms <= e->cfg->max_delay_ms)
            j->next_delay_ms = res->next_delay_ms < SPEC_MIN_EVERY_MS ? SPEC_MIN_EVERY_MS : res->next_delay_ms;
        return;
    }
    if (spec_recurring(s) && res->status == 410) {
        j->outcome = OUT_STOP;
        return;
    }
    if (!retryable(res) || j->attempts >= s->max_attempts) {
        j->outcome = OUT_FAILED;
        return;
    }
    uint64_t delay = backoff_delay_ms(j->attempts, s->min_backoff_ms, s->max_backoff_ms, splitmix64_next(&e->rng));
    if (res->retry_after_ms >= 0)
        delay = (uint64_t)res->retry_after_ms < s->max_backoff_ms ? (uint64_t)res->retry_after_ms : s->max_backoff_ms;
    uint64_t next = now + delay;
    if (s->max_duration_ms && j->run_due_ms > 0) {
        uint64_t deadline = (uint64_t)j->run_due_ms + s->max_duration_ms;
        if (now >= deadline) {
            j->outcome = OUT_FAILED;
            return;
        }
        if (next > deadline)
            next = deadline;
    }
    j->outcome = OUT_RETRY;
    j->next_fire_ms = next;
}

/* The job's tally slot (GET /stats), looked up once: its namespace and
 * queue do not change. -1: not counted (no tally, or past its cap). */
static int stats_slot(engine *e, job *j)
{
    if (!j->stats_slot)
        j->stats_slot = tally_slot(e->tally, j->id, j->spec->queue) + 2;
    return j->stats_slot - 2;
}

static void attempt_done_cb(void *arg, job *j, const attempt_result *res)
{
    engine *e = arg;
    static const char *const names[] = {"delivered", "retry", "failed", "next run", "stopped by 410",
                                        "again, not counted (no socket here)"};
    limiter_done(e->lim, &j->lj);
    metrics_gauge_add(e->m, j->spec->queue, MG_IN_FLIGHT, -1);
    metrics_attempt(e->m, j->spec->queue, metrics_attempt_class_of(res->status, res->curl_code, res->refused_by_policy));
    metrics_observe_us(e->m, MH_DURATION, res->duration_us);
    if (!(res->status >= 200 && res->status < 300))
        tally_attempt_failed(e->tally, stats_slot(e, j));
    decide(e, j, res, clock_now_ms());
    free(j->last_json);
    j->last_json = last_attempt_json(res, e->cfg->instance_id);
    int level = j->outcome == OUT_FAILED ? LOG_INFO : LOG_DEBUG;
    if (level >= log_min_level) {
        char err[400];
        log_json_escape(res->error, err, sizeof err);
        job_log(level, "attempt finished", j, "\"status\":%ld,\"duration_ms\":%u,\"outcome\":\"%s\",\"error\":\"%s\"",
                res->status, res->duration_ms, names[j->outcome], err);
    }
    send_finish(e, j);
    pump(e);
}

/* ---- inbox messages ---- */

static void start_attempt(engine *e, job *j)
{
    uint64_t now_us = clock_now_us(), due_us = j->due_ms * 1000u;
    metrics_observe_us(e->m, MH_LATENESS, now_us > due_us ? now_us - due_us : 0);
    if (e->tally) { /* GET /stats: lateness is a run's first attempt's */
        int slot = stats_slot(e, j);
        tally_attempt(e->tally, slot);
        if (j->attempts == 1)
            tally_lateness_us(e->tally, slot, now_us > due_us ? now_us - due_us : 0);
    }
    metrics_gauge_add(e->m, j->spec->queue, MG_IN_FLIGHT, 1); /* attempt_done_cb takes it off */
    j->phase = JOB_RUNNING;
    job_log(LOG_DEBUG, "attempt started", j, "\"lateness_ms\":%" PRId64, (int64_t)(clock_now_ms() - j->due_ms));
    if (dispatch_start(e->d, j) < 0) {
        attempt_result res = {.error = "could not start the request", .started_ms = clock_now_ms(),
                              .retry_after_ms = -1, .next_delay_ms = -1};
        attempt_done_cb(e, j, &res);
    }
}

/* Queues a begun, due job's attempt to be started (start_some). */
static void to_start(engine *e, job *j)
{
    j->inbox_next = NULL;
    *e->starting_tail = j;
    e->starting_tail = &j->inbox_next;
}

/* The held job to start first, or NULL. */
static job *held_first(engine *e)
{
    return list_empty(&e->held) ? NULL : container_of(e->held.next, job, wt.node);
}

/* Keeps a job begun before its start (start_us: its due time, see
 * send_begin) in e->held, in start order, linked by its wheel node (out of
 * the wheel since it expired; job_free's wheel_cancel unlinks it from here
 * too). Begins answer nearly in that order (a turn's calls go partition by
 * partition), so the walk from the tail is short. */
static void hold(engine *e, job *j)
{
    struct list_node *at = e->held.prev;
    while (at != &e->held && container_of(at, job, wt.node)->start_us > j->start_us)
        at = at->prev;
    list_insert_tail(at->next, &j->wt.node); /* after at */
}

static void on_begun(engine *e, job *j)
{
    e->store_jobs--;
    if (!j->reply_ok) { /* Redis unreachable: nothing started, try again later */
        limiter_done(e->lim, &j->lj);
        park(e, j);
        pump(e);
        return;
    }
    if (j->reply_code == 2) { /* due later in Redis than here: waits for that time, never early */
        job_log(LOG_DEBUG, "attempt not started: the timer is due later", j, "\"fire_at_ms\":%" PRIu64,
                j->next_fire_ms);
        limiter_done(e->lim, &j->lj);
        schedule(e, j, JOB_WHEEL, j->next_fire_ms);
        pump(e);
        return;
    }
    if (j->reply_code != 1) { /* cancelled, finished or taken over: not ours to start */
        job_log(LOG_DEBUG, "attempt not started", j, NULL);
        limiter_done(e->lim, &j->lj);
        job_free(e, j);
        pump(e);
        return;
    }
    if (j->start_us > clock_now_us()) /* begun ahead (begin_lead_ms): held until its start */
        hold(e, j);
    else
        to_start(e, j); /* started a slice a turn */
}

/* Starts up to START_MAX of the attempts whose begin Redis confirmed. A
 * batch of begins answers hundreds at once; curl connects and sends only
 * from the event loop, so adding them all before the loop turns would hold
 * the first request back until the last was added. */
static void start_some(engine *e)
{
    uint64_t now_us = clock_now_us();
    job *j;
    while ((j = held_first(e)) && j->start_us <= now_us) { /* never before its due time */
        list_remove(&j->wt.node);
        to_start(e, j);
    }
    for (int k = 0; k < START_MAX && e->starting; k++) {
        j = e->starting;
        e->starting = j->inbox_next;
        if (!e->starting)
            e->starting_tail = &e->starting;
        start_attempt(e, j);
    }
}

/* Counts an outcome Redis has just confirmed recording (finish answered 1;
 * a finish resent after a lost reply answers 1 only if the lost one had not
 * run, or answers as it did, so each outcome is counted once). */
static void count_outcome(engine *e, job *j)
{
    static const enum metrics_timer_event events[] = {
        [OUT_DELIVERED] = MT_DELIVERED, [OUT_RETRY] = MT_RETRIED, [OUT_FAILED] = MT_FAILED,
        [OUT_NEXT] = MT_DELIVERED,      [OUT_STOP] = MT_STOPPED, [OUT_REQUEUE] = MT_RETRIED,
    };
    metrics_count(e->m, j->spec->queue, events[j->outcome]);
    if (j->outcome == OUT_DELIVERED || j->outcome == OUT_NEXT)
        tally_delivered(e->tally, stats_slot(e, j));
    else if (j->outcome == OUT_FAILED)
        tally_failed(e->tally, stats_slot(e, j));
}

static void sweep_soon(engine *e, uint64_t now);

static void on_finished(engine *e, job *j)
{
    e->store_jobs--;
    if (!j->reply_ok) {
        park(e, j);
        return;
    }
    if (j->reply_code == 1) {
        count_outcome(e, j);
        /* Until this point a crash leaves the attempt to be made again. */
        job_log(LOG_DEBUG, "outcome recorded", j, NULL);
    }
    if (j->reply_code == 1 && !j->keep && j->spec->has_callbacks) /* it may have ended: its callback timer is due now */
        sweep_soon(e, clock_now_ms());
    if (j->reply_code == 1 && j->keep && !atomic_load(&e->stop)) { /* its next attempt is ours */
        free(j->last_json);
        j->last_json = NULL;
        schedule(e, j, JOB_WHEEL, j->next_fire_ms);
        return;
    }
    job_free(e, j);
}

/* Parses a claimed timer's stored spec here rather than on the store's
 * writer thread, which must stay free for Redis I/O while a large backlog is
 * being claimed. */
static int parse_claimed(job *j)
{
    spec_error err;
    if (j->spec)
        return 0;
    int rc = spec_parse(j->raw_spec, j->raw_len, NULL, clock_now_ms(), &j->spec, &err);
    free(j->raw_spec);
    j->raw_spec = NULL;
    if (rc < 0)
        job_log(LOG_ERROR, "stored timer unreadable", j, NULL);
    return rc;
}

static void on_claimed(engine *e, job *j)
{
    if (atomic_load(&e->stop) || j->revoked || parse_claimed(j) < 0) {
        job_free(e, j); /* the claim is handed back by the release at stop */
        return;
    }
    schedule(e, j, JOB_WHEEL, j->wt.due_ms);
}

/* Takes up to ABSORB_MAX claimed timers into the wheel. A sweep of a large
 * backlog hands over thousands at once, and parsing their specs takes the
 * engine's time: a slice a turn keeps the timers that fall due meanwhile
 * on time (their expiry comes first in every turn). */
static void absorb(engine *e)
{
    for (int k = 0; k < ABSORB_MAX && e->backlog; k++) {
        job *j = e->backlog;
        e->backlog = j->inbox_next;
        if (!e->backlog)
            e->backlog_tail = &e->backlog;
        on_claimed(e, j);
    }
}

/* Lets curl act on the attempts added so far when its deadline is due (it
 * connects and sends only from its timeout or socket events). */
static void kick_dispatch(engine *e)
{
    uint64_t cd = dispatch_deadline_us(e->d);
    if (cd && cd <= clock_now_us())
        dispatch_timeout(e->d);
}

static void apply_revocations(engine *e, struct revocation *r);
static void reconcile_slices(engine *e, struct held_slice *h);

static void drain_inbox(engine *e)
{
    pthread_mutex_lock(&e->mu); /* before the inbox: the jobs they name were posted before them */
    struct revocation *rv = e->revoked;
    e->revoked = NULL;
    struct held_slice *held = e->held_pending; /* compared after the inbox, with every job posted before */
    e->held_pending = NULL;
    pthread_mutex_unlock(&e->mu);
    job *j = take_inbox(e);
    while (j) {
        job *next = j->inbox_next;
        switch (j->msg) {
        case MSG_CLAIMED:
            strtab_add(&e->byid, &j->byid, j->id);
            if (j->spec) { /* handed over by a create or a control: ready as it is */
                on_claimed(e, j);
                break;
            }
            j->inbox_next = NULL; /* from a sweep: absorbed a slice a turn, after what is due */
            *e->backlog_tail = j;
            e->backlog_tail = &j->inbox_next;
            break;
        case MSG_BEGUN:
            on_begun(e, j);
            break;
        case MSG_FINISHED:
            on_finished(e, j);
            break;
        case MSG_SKIPPED:
            on_skipped(e, j);
            break;
        }
        j = next;
    }
    if (rv)
        apply_revocations(e, rv);
    if (held)
        reconcile_slices(e, held);
}

/* ---- revocations ----
 *
 * A cancel, fire, reschedule or pause of a timer this instance holds
 * waiting, made by any instance, leaves a revocation for this instance in
 * Redis; the next claim in the timer's partition hands it over (claim.lua),
 * at the latest one sweep (window/2) later. The jobs it names, claimed
 * under its version or an older one, are dropped if they wait in the wheel
 * or in the limiter (a job in a paused or slow queue would otherwise wait
 * there until its turn, only to have its begin refused), and never start if
 * they are still being taken in (backlog). A job whose begin was sent is
 * left to the begin's answer. */

struct revocation {
    struct revocation *next;
    uint64_t version;
    char id[];
};

static void post_revocations(engine *e, size_t n, const timer_revoked *rv)
{
    struct revocation *first = NULL, **tail = &first;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(rv[i].id);
        struct revocation *r = xmalloc(sizeof *r + len + 1);
        r->next = NULL;
        r->version = rv[i].version;
        memcpy(r->id, rv[i].id, len + 1);
        *tail = r;
        tail = &r->next;
    }
    if (!first)
        return;
    pthread_mutex_lock(&e->mu);
    *tail = e->revoked;
    e->revoked = first;
    pthread_mutex_unlock(&e->mu);
}

static void apply_revocations(engine *e, struct revocation *r)
{
    while (r) {
        struct revocation *next = r->next;
        strtab_node *n = strtab_find(&e->byid, r->id), *nn;
        for (; n; n = nn) {
            nn = strtab_next(n);
            job *j = container_of(n, job, byid);
            if (j->version > r->version || j->revoked)
                continue;
            if ((j->phase == JOB_WHEEL && list_linked(&j->wt.node)) || j->phase == JOB_READY) {
                job_log(LOG_DEBUG, "timer revoked: dropped", j, "\"version\":%" PRIu64, j->version);
                job_free(e, j);
            } else if (j->phase == JOB_WHEEL) {
                j->revoked = 1; /* in the backlog: on_claimed drops it */
            }
        }
        free(r);
        r = next;
    }
}

/* ---- reconciliation ----
 *
 * The engine's steps do not wait for replicas, so a failover can promote a
 * replica that lost the finish of an attempt the old master recorded. The
 * new master shows that timer firing, held by this instance, which dropped
 * its job once the finish was acknowledged: no takeover comes (this
 * instance is alive), no sweep (the timer does not wait), and no job will
 * ever finish it. So every lease_ttl/2, with the reaper, a round lists
 * partition by partition the timers this instance's soonest due past-due
 * claims show firing (timers_held, HELD_SLICE claims of each partition, one
 * call) and compares them with the
 * jobs held here: a job holds its timer's id from its claim until its finish
 * is acknowledged, so a firing timer with no job of that id is one whose
 * finish was lost. Those are handed back as a release hands back an
 * interrupted attempt (timers_hand_back), each only while it is still in
 * the attempt it was listed in, so one claimed and begun again meanwhile is
 * left alone. When nothing is amiss a round costs one short call per
 * partition. */

struct held_slice {
    struct held_slice *next;
    uint32_t partition;
    int ok;               /* Redis answered */
    size_t n;
    timer_held items[];   /* ids owned (held_slice_free) */
};

static void held_slice_free(struct held_slice *h)
{
    for (size_t i = 0; i < h->n; i++)
        free((char *)h->items[i].id);
    free(h);
}

/* Store thread: a listing answered; it goes to the engine thread, which
 * compares it with its jobs after the inbox posted before it. */
static void held_cb(void *arg, int status, uint64_t next, size_t n, const timer_held *items)
{
    sweep_ctx *c = arg; /* (the partition's context) */
    engine *e = c->e;
    struct held_slice *h = xmalloc(sizeof *h + n * sizeof *h->items);
    (void)next; /* a round reads each partition's soonest due slice only (reconcile_slices) */
    *h = (struct held_slice){NULL, c->partition, status == TIMERS_OK, n};
    for (size_t i = 0; i < n; i++) {
        h->items[i] = items[i];
        h->items[i].id = xstrdup(items[i].id);
    }
    pthread_mutex_lock(&e->mu);
    h->next = e->held_pending;
    e->held_pending = h;
    pthread_mutex_unlock(&e->mu);
    wake(e);
}

/* Asks for partition p's firing claims from offset on; 0, or the round
 * ends (the next one comes lease_ttl/2 later). */
static void reconcile_send(engine *e, uint32_t p, uint64_t offset)
{
    if (timers_held(e->tm, p, e->reconcile_until, offset, HELD_SLICE, held_cb, &e->sweeps[p]) < 0)
        e->reconciling = 0;
}

static void reconcile_start(engine *e, uint64_t now)
{
    if (e->reconciling || atomic_load(&e->stop))
        return;
    e->reconciling = 1;
    e->reconcile_until = now;
    reconcile_send(e, 0, 0);
}

typedef struct handback_ctx {
    uint32_t partition;
    size_t n;
    timer_held items[]; /* ids owned */
} handback_ctx;

/* Store thread: logs what was handed back, once, where Redis decided it. */
static void handed_cb(void *arg, int status, size_t n, const timer_handed *res)
{
    handback_ctx *c = arg;
    for (size_t i = 0; i < c->n; i++) {
        const timer_held *t = &c->items[i];
        if (i < n && res[i].handed)
            LOG(LOG_WARN,
                "a timer this instance no longer ran was left firing (its finish was lost, as in a Redis "
                "failover); handed back",
                "\"timer\":\"%s\",\"attempt\":%" PRIu32 ",\"run\":%" PRIu64 ",\"state\":\"%s\"", t->id, t->attempt,
                t->run, res[i].state);
        else if (status == TIMERS_OK)
            LOG(LOG_DEBUG, "a firing timer moved on before its hand-back; left alone", "\"timer\":\"%s\"", t->id);
        free((char *)t->id);
    }
    if (status != TIMERS_OK)
        LOG(LOG_WARN, "could not hand back timers left firing; the next round tries again",
            "\"partition\":%" PRIu32 ",\"timers\":%zu", c->partition, c->n);
    free(c);
}

/* The timers of h that no job here holds go back (timers_hand_back). */
static void hand_back_orphans(engine *e, const struct held_slice *h)
{
    handback_ctx *c = xmalloc(sizeof *c + (h->n ? h->n : 1) * sizeof *c->items);
    c->partition = h->partition;
    c->n = 0;
    for (size_t i = 0; i < h->n; i++)
        if (!strtab_find(&e->byid, h->items[i].id)) {
            c->items[c->n] = h->items[i];
            c->items[c->n++].id = xstrdup(h->items[i].id);
        }
    if (c->n && timers_hand_back(e->tm, h->partition, clock_now_ms(), "its finish was lost (Redis failover?)", c->n,
                                 c->items, handed_cb, c) == 0)
        return;
    for (size_t i = 0; i < c->n; i++)
        free((char *)c->items[i].id);
    free(c);
}

/* Engine thread: compares each answered listing with the jobs held, and
 * goes on with the round (the rest of the partition, or the next one). */
static void reconcile_slices(engine *e, struct held_slice *h)
{
    while (h) {
        struct held_slice *next = h->next;
        if (atomic_load(&e->stop) || !h->ok)
            e->reconciling = 0; /* stopping (the release hands everything back), or Redis failed */
        else {
            hand_back_orphans(e, h);
            /* Only the soonest due HELD_SLICE claims of each partition a
             * round: a timer left firing stays in the claims, and comes to
             * the front once what was due before it is done, so a backlog
             * (a drain of many due timers) is never paged through. */
            if (h->partition + 1 < e->cfg->partitions)
                reconcile_send(e, h->partition + 1, 0);
            else
                e->reconciling = 0;
        }
        held_slice_free(h);
        h = next;
    }
}

/* ---- wheel expiry ---- */

/* The wheel's time at wall time now_ms: begin_lead_ms ahead, so a timer
 * expires (and its begin is sent) that long before it is due. */
static uint64_t wheel_time(const engine *e, uint64_t now_ms) { return now_ms + e->cfg->begin_lead_ms; }

/* Takes up to EXPIRE_MAX of what falls due from the wheel into e->expiring
 * (in due order), and makes up to EXPIRE_MAX of those ready (or sends their
 * parked outcome). The wheel hands out more only once the list is empty, so
 * a burst due at one instant is walked a slice a turn: the first slice's
 * begins go out before the rest is touched. A job waiting in the list is out
 * of the wheel (HANDED_OUT): job_free's wheel_cancel unlinks it from the
 * list, as from e->held. (The list holds more than a slice only after a
 * stall of a whole wheel turn, when the wheel hands out all that is due.) */
static void expire(engine *e, uint64_t now)
{
    struct list_node *n;
    if (list_empty(&e->expiring))
        wheel_advance_max(e->w, wheel_time(e, now), &e->expiring, EXPIRE_MAX);
    for (int k = 0; k < EXPIRE_MAX && (n = list_pop_head(&e->expiring)); k++) {
        job *j = container_of(n, job, wt.node);
        if (j->phase == JOB_PARKED && j->last_json)
            send_finish(e, j);
        else
            make_ready(e, j);
    }
    pump(e);
}

/* ---- loader: sweeps and releases ---- */

static uint32_t sweep_limit(const engine *e, uint32_t p);
static void sweep_cb(void *arg, int status, size_t n, const timer_claimed *items, size_t nrevoked,
                     const timer_revoked *revoked, int more);

/* Appends "<ns>=<room>," to the claim's list for a namespace whose room
 * under the cap is less than the claim's limit (the others need no entry:
 * the limit bounds them). strtab_each's callback, under e->mu. */
struct room_list {
    const engine *e;
    uint32_t limit;
    char *buf;
    size_t len, cap;
};

static void room_entry(strtab_node *n, void *arg)
{
    struct room_list *l = arg;
    const struct ns_resident *r = container_of(n, struct ns_resident, node);
    uint64_t room = r->n < l->e->ns_cap ? l->e->ns_cap - r->n : 0;
    if (room >= l->limit)
        return;
    size_t need = strlen(r->name) + 24;
    if (l->len + need > l->cap) {
        l->cap = (l->len + need) * 2;
        l->buf = xrealloc(l->buf, l->cap);
    }
    l->len += (size_t)snprintf(l->buf + l->len, l->cap - l->len, "%s=%" PRIu64 ",", r->name, room);
}

/* Sends partition p's claim of the sweep (any thread). With a cap per
 * namespace the claim takes no more of a namespace than its room: the
 * list names the namespaces whose room is below the limit. */
static int claim_next(engine *e, uint32_t p, uint64_t horizon, uint32_t limit)
{
    sweep_ctx *c = &e->sweeps[p];
    uint32_t fit = atomic_load(&e->claim_fit);
    if (limit > fit)
        limit = fit;
    c->limit = limit;
    c->horizon = horizon;
    struct room_list l = {e, limit, NULL, 0, 0};
    if (e->ns_cap && limit) {
        pthread_mutex_lock(&e->mu);
        strtab_each(&e->ns_held, room_entry, &l);
        pthread_mutex_unlock(&e->mu);
    }
    int rc = timers_claim(e->tm, p, horizon, limit, atomic_load(&c->replay), e->ns_cap, l.buf ? l.buf : "", sweep_cb,
                          c);
    free(l.buf);
    return rc;
}

/* Store thread: a partition's claim answered; the claimed timers go to the
 * engine in one post (their specs are parsed there, see parse_claimed). */
static void sweep_cb(void *arg, int status, size_t n, const timer_claimed *items, size_t nrevoked,
                     const timer_revoked *revoked, int more)
{
    sweep_ctx *c = arg;
    engine *e = c->e;
    post_revocations(e, nrevoked, revoked); /* before the jobs: drain_inbox takes them first */
    /* No reply: the claim may have run all the same, and the next one asks
     * for its timers again. An error reply ran nothing, so a replay still
     * owed stays owed: dropped, the claim after it would replace the lost
     * batch and its timers would stay this instance's, never attempted. */
    if (status != TIMERS_FAILED)
        atomic_store(&c->replay, status == TIMERS_UNREACHABLE);
    job *first = NULL, *last = NULL;
    for (size_t i = 0; i < n; i++) {
        const timer_claimed *t = &items[i];
        job *j = job_new(e, xstrdup(t->id), NULL, (uint64_t)t->fire_ms, t->attempts, t->version, t->request_id,
                         t->request_id_len, &t->trace, 0);
        j->raw_spec = xstrndup(t->spec, t->spec_len);
        j->raw_len = t->spec_len;
        j->msg = MSG_CLAIMED;
        if (last)
            last->inbox_next = j;
        else
            first = j;
        last = j;
    }
    if (first)
        post_chain(e, first, last); /* one lock and one wake-up for the whole batch */
    uint32_t fit = atomic_load(&e->claim_fit);
    if (more && n > 0)
        atomic_store(&e->claim_fit, n < 4 ? 4u : (uint32_t)n);
    else if (status == TIMERS_OK && c->limit && n >= c->limit && fit < e->cfg->claim_batch)
        atomic_store(&e->claim_fit, fit + fit / 4 + 1 < e->cfg->claim_batch ? fit + fit / 4 + 1
                                                                              : (uint32_t)e->cfg->claim_batch);
    if ((c->limit && n >= c->limit) || more || nrevoked >= TIMERS_REVOKED_MAX)
        e->sweep_more = 1; /* read by the engine thread after the wake below: benign race */
    if (c->partition + 1 < e->cfg->partitions &&
        claim_next(e, c->partition + 1, c->horizon, sweep_limit(e, c->partition + 1)) == 0)
        return; /* the sweep goes on with the next partition */
    atomic_fetch_sub(&e->pending_ops, 1);
    wake(e);
}

/* How many timers partition p may claim in this sweep: the room spread over
 * the partitions, the remainder one each to the partitions from
 * sweep_offset on (so a room smaller than the partition count still claims,
 * in turn across sweeps), at most claim_batch. 0: full, the claim only hands
 * the revocations over. Read by the store thread while the sweep's chain
 * runs; sweep() sets the fields before it starts and only when no chain
 * runs. */
static uint32_t sweep_limit(const engine *e, uint32_t p)
{
    uint32_t parts = (uint32_t)e->cfg->partitions;
    uint64_t n = e->sweep_base + ((p + parts - e->sweep_offset) % parts < e->sweep_extra);
    return n < e->cfg->claim_batch ? (uint32_t)n : (uint32_t)e->cfg->claim_batch;
}

/* Claims timers due within the window, in every partition, as far as there
 * is room in memory; past max_resident the rest waits in Redis (in due-time
 * order) for the next sweep. One partition's claim is in flight at a time
 * (each callback sends the next), and each claims at most claim_batch
 * timers: begins share the store's connection, and so never wait behind
 * more than one claim. A partition that filled its batch is swept again
 * once the whole sweep ended and its timers are in the wheel. */
static void sweep(engine *e, uint64_t now)
{
    long free_slots = room(e);
    uint32_t parts = (uint32_t)e->cfg->partitions;
    if (free_slots < 0)
        free_slots = 0;
    e->sweep_base = (uint64_t)free_slots / parts;
    e->sweep_extra = (uint32_t)((uint64_t)free_slots % parts);
    e->sweep_offset = e->sweep_next_offset;
    e->sweep_next_offset = (e->sweep_offset + e->sweep_extra) % parts;
    e->sweep_more = 0;
    atomic_fetch_add(&e->pending_ops, 1);
    if (claim_next(e, 0, now + e->cfg->window_ms, sweep_limit(e, 0)) < 0)
        atomic_fetch_sub(&e->pending_ops, 1);
}

static void release_cb(void *arg, int status, long long n)
{
    engine *e = arg;
    if (status != TIMERS_OK) { /* at a stop the rest wait for a reaper; at start, start_release_done */
        atomic_store(&e->release_failed, 1);
        if (!atomic_load(&e->releasing_start))
            LOG(LOG_WARN, "could not hand claims back", "\"instance\":\"%s\",\"timers\":%lld", e->cfg->instance_id,
                n);
    } else if (n > 0)
        LOG(LOG_INFO, "claims handed back", "\"instance\":\"%s\",\"timers\":%lld", e->cfg->instance_id, n);
    atomic_fetch_sub(&e->pending_ops, 1);
    wake(e);
}

/* Store thread: one slice of a partition's migration answered; the next
 * slice goes at once (sweep_ctx serves as the partition's context). */
static void migrated_cb(void *arg, int status, long long moved, int more)
{
    sweep_ctx *c = arg;
    engine *e = c->e;
    if (moved > 0)
        LOG(LOG_INFO, "timers of an earlier layout moved", "\"partition\":%" PRIu32 ",\"timers\":%lld", c->partition,
            moved);
    if (status == TIMERS_OK && more && !atomic_load(&e->stop) &&
        timers_migrate(e->tm, c->partition, MIGRATE_SLICE, migrated_cb, c) == 0)
        return;
    if (status != TIMERS_OK || more)
        atomic_store(&e->migrate_failed, 1);
    atomic_fetch_sub(&e->pending_ops, 1);
    wake(e);
}

/* Brings keys an earlier release left to this layout, before the first
 * sweep (the sweep waits for pending_ops). */
static void migrate_all(engine *e)
{
    for (uint32_t p = 0; p < e->cfg->partitions; p++) {
        atomic_fetch_add(&e->pending_ops, 1);
        if (timers_migrate(e->tm, p, MIGRATE_SLICE, migrated_cb, &e->sweeps[p]) < 0) {
            atomic_fetch_sub(&e->pending_ops, 1);
            atomic_store(&e->migrate_failed, 1);
        }
    }
}

/* Engine thread: asks whether Redis takes new work, so that /readyz says
 * it even when no create comes. On a Redis Cluster each master is asked:
 * PROBE_KEYS partitions a round, the next ones the next round (with the
 * default 64 partitions, all of them; with more, hashed over the masters,
 * every master is asked nearly surely each round). */
static void probe_writes(engine *e)
{
    if (!e->probe_keys) {
        (void)store_probe_writes(e->st, 0, NULL);
        return;
    }
    uint32_t parts = (uint32_t)e->cfg->partitions, n = parts < PROBE_KEYS ? parts : PROBE_KEYS;
    const char *keys[PROBE_KEYS] = {0};
    for (uint32_t i = 0; i < n; i++)
        keys[i] = e->probe_keys[(e->probe_next + i) % parts];
    if (store_probe_writes(e->st, n, keys) == 0)
        e->probe_next = (e->probe_next + n) % parts;
}

/* Engine thread: the layout move again, every partition, once the last
 * round ended with a failed call (Redis was unreachable at the start, or
 * refused the writes): else what an earlier release left stayed until this
 * instance's next start. A partition already moved answers at once. It
 * goes with no sweep or release in flight, and the next sweep waits for it,
 * as at the start. */
static void migrate_again(engine *e, uint64_t now)
{
    if (atomic_load(&e->pending_ops) || now < e->next_migrate_ms || !atomic_load(&e->migrate_failed))
        return;
    atomic_store(&e->migrate_failed, 0);
    e->next_migrate_ms = now + REBUILD_RETRY_MS;
    migrate_all(e);
}

/* Store thread: one slice of a partition's counts rebuild answered; the
 * next goes at once until the partition is done, Redis fails or we stop. */
static void counted_cb(void *arg, int ok, long long counted, int more)
{
    sweep_ctx *c = arg;
    engine *e = c->e;
    if (counted > 0)
        LOG(LOG_INFO, "timers of an earlier release counted", "\"partition\":%" PRIu32 ",\"timers\":%lld",
            c->partition, counted);
    if (ok && more && !atomic_load(&e->stop) &&
        counts_rebuild(e->st, c->partition, COUNTS_SCAN, counted_cb, c) == 0)
        return;
    if (!ok)
        atomic_store(&e->rebuild_failed, 1);
    atomic_fetch_sub(&e->rebuilding, 1);
    wake(e);
}

/* Counts the timers an earlier release stored (counts.h), in the
 * background: a partition already done answers its first call at once, and
 * sweeps go on meanwhile (every function counts a timer it changes). Any
 * instance may run it, several at once; one stopped half-way resumes at the
 * cursor kept in Redis. */
static void rebuild_counts(engine *e)
{
    for (uint32_t p = 0; p < e->cfg->partitions; p++) {
        atomic_fetch_add(&e->rebuilding, 1);
        if (counts_rebuild(e->st, p, COUNTS_SCAN, counted_cb, &e->sweeps[p]) < 0) {
            atomic_fetch_sub(&e->rebuilding, 1);
            atomic_store(&e->rebuild_failed, 1);
        }
    }
}

/* Engine thread: the counts rebuild again, every partition, once the last
 * round ended with a failed call (Redis was unreachable at the start, or
 * went away during the scan): else counts_exact stayed false until this
 * instance's next start. A partition already done answers its first call
 * at once; one stopped half-way resumes at its cursor. */
static void rebuild_counts_again(engine *e, uint64_t now)
{
    if (atomic_load(&e->rebuilding) || now < e->next_rebuild_ms || !atomic_load(&e->rebuild_failed))
        return;
    atomic_store(&e->rebuild_failed, 0);
    e->next_rebuild_ms = now + REBUILD_RETRY_MS;
    rebuild_counts(e);
}

/* Hands every claim of this instance back to due, in every partition. */
static void release_all(engine *e)
{
    uint32_t parts = (uint32_t)e->cfg->partitions;
    atomic_fetch_add(&e->pending_ops, (int)parts);
    uint32_t sent = timers_release(e->tm, e->cfg->instance_id, "the instance stopped", clock_now_ms(), release_cb, e);
    atomic_fetch_sub(&e->pending_ops, (int)(parts - sent));
    if (sent < parts) /* those partitions' claims stay, as if their call had failed */
        atomic_store(&e->release_failed, 1);
}

/* Engine thread, with no sweep or release in flight: 1 once the start's
 * hand-back of the claims a previous process with this id left (it was
 * killed) has ended well. Until then (Redis was unreachable at the start,
 * or refused the writes) it is sent again every START_RELEASE_RETRY_MS and
 * nothing is swept: no other instance's reaper takes the claims of an id
 * whose lease lives, so without it they would wait in Redis for this
 * instance's next start. A timer this instance claimed meanwhile (at its
 * create) is handed back too; its begin then fails and the next sweep
 * claims it again, as after a lapsed lease. */
static int start_release_done(engine *e, uint64_t now)
{
    if (!atomic_load(&e->releasing_start))
        return 1;
    if (!atomic_exchange(&e->release_failed, 0)) {
        atomic_store(&e->releasing_start, 0);
        if (e->start_release_retried)
            LOG(LOG_INFO, "the claims a previous process of this instance left are handed back",
                "\"instance\":\"%s\"", e->cfg->instance_id);
        return 1;
    }
    if (!e->start_release_retried)
        LOG(LOG_WARN, "could not hand back the claims a previous process of this instance left; "
            "trying again every second, and claiming nothing until then", "\"instance\":\"%s\"",
            e->cfg->instance_id);
    e->start_release_retried = 1;
    release_all(e);
    e->next_sweep_ms = now + START_RELEASE_RETRY_MS;
    return 0;
}

/* Engine thread: the next sweep comes now, or SWEEP_SOON_GAP_MS after the
 * last one began, rather than window/2 after it. For timers made due soon
 * in Redis without being handed to an instance (a selector's reschedule or
 * resume, a bulk replay of dead letters, a callback timer): no instance
 * holds them, so only a sweep brings them to a wheel. The gap bounds the
 * Redis work a client asking in a loop can cause (a claim per partition
 * each time). */
static void sweep_soon(engine *e, uint64_t now)
{
    uint64_t at = e->last_sweep_ms + SWEEP_SOON_GAP_MS;
    if (at < now)
        at = now;
    if (at < e->next_sweep_ms)
        e->next_sweep_ms = at;
}

void engine_sweep_soon(engine *e)
{
    if (e && !atomic_exchange(&e->sweep_asked, 1))
        wake(e);
}

/* ---- the loop ---- */

/* Wall-clock microseconds of the next thing to do: the next wheel tick with
 * a timer, curl's deadline, the next sweep (at most a minute away) or a
 * rate-limited queue's next token. The token's wake-up is never sooner than
 * one tick from now: pump has just started everything that could start, so
 * nothing is ready before then, and a queue's rate (a client's number) must
 * not be able to make the engine spin (limiter_tick sizes the buckets so
 * that waking once a tick keeps every rate). */
static uint64_t next_wake_us(engine *e, uint64_t now_ms, uint64_t chores_ms)
{
    /* A sweep time already past waits for the calls in flight (run sweeps
     * only when none is): each one's end wakes the loop, so it is no time
     * to wake at; else a slow Redis (a call taking longer than the time to
     * the next sweep) made the loop spin until it answered. */
    uint64_t until = chores_ms;
    if (e->next_sweep_ms < until && atomic_load(&e->pending_ops) == 0)
        until = e->next_sweep_ms;
    int64_t w = wheel_next_ms(e->w, wheel_time(e, now_ms)); /* ms from now_ms, as the wheel runs ahead */
    if (w >= 0 && now_ms + (uint64_t)w < until)
        until = now_ms + (uint64_t)w;
    if (until > now_ms + 60000)
        until = now_ms + 60000;
    if (e->finish_due_ms && e->finish_due_ms < until) /* a lingering finish batch goes out */
        until = e->finish_due_ms;
    if (e->backlog || e->starting || !list_empty(&e->expiring)) /* timers to absorb, to make ready, to start: no sleep */
        until = now_ms;
    /* A sweep that brought full batches goes on at once, not at the next
     * chore: else a large due batch came in 16 x claim_batch timers a
     * queue poll (500 ms), and was still being claimed after its due time. */
    if (e->sweep_more && atomic_load(&e->pending_ops) == 0)
        until = now_ms;
    uint64_t wake = until * 1000u, cd = dispatch_deadline_us(e->d);
    job *h = held_first(e);
    if (h && h->start_us < wake) /* a held attempt falls due */
        wake = h->start_us;
    uint64_t token = e->limiter_next_us, soonest = clock_now_us() + e->cfg->tick_ms * 1000u;
    if (token < soonest)
        token = soonest;
    if (token < wake)
        wake = token;
    return cd && cd < wake ? cd : wake;
}

/* Waits for events until wake_us (wall clock, microseconds; 0: do not
 * wait). epoll_pwait2 takes a nanosecond timeout, so the engine wakes at the
 * millisecond boundary a timer is due at, not up to a millisecond later as a
 * millisecond epoll_wait timeout would. */
static int wait_events(engine *e, struct epoll_event *evs, int max, uint64_t wake_us)
{
    uint64_t now = clock_now_us();
    uint64_t us = wake_us > now ? wake_us - now : 0;
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    int n = epoll_pwait2(e->epfd, evs, max, &ts, NULL);
    if (n < 0 && errno == ENOSYS) /* kernels before 5.11 */
        n = epoll_wait(e->epfd, evs, max, (int)((us + 999) / 1000));
    return n;
}

/* Everything the loop schedules by the wall clock (the wheel, sweeps,
 * reaper rounds, polls, lingering finishes) is pulled in to now when the
 * clock stepped back since the loop last read it (NTP, an operator's date):
 * otherwise each would wait out the step, an hour for an hour's step, while
 * the timers due meanwhile wait in Redis. Permits granted for a while are
 * trusted no longer than a fresh grant would be. */
static void follow_clock(engine *e, uint64_t now)
{
    uint64_t last = e->last_now_ms;
    e->last_now_ms = now;
    if (now >= last)
        return;
    if (last - now >= 1000)
        LOG(LOG_WARN, "the wall clock stepped back", "\"by_ms\":%" PRIu64, last - now);
    wheel_rewind(e->w, wheel_time(e, now));
    if (e->next_sweep_ms > now)
        e->next_sweep_ms = now;
    if (e->next_reap_ms > now)
        e->next_reap_ms = now;
    if (e->next_queues_ms > now)
        e->next_queues_ms = now;
    if (e->next_permits_ms > now)
        e->next_permits_ms = now;
    if (e->permits_until_ms > now + PERMITS_TTL_MS - PERMITS_MARGIN_MS)
        e->permits_until_ms = now + PERMITS_TTL_MS - PERMITS_MARGIN_MS;
    for (uint32_t p = 0; p < e->cfg->partitions; p++)
        if (e->finishes[p] && e->finishes[p]->since_ms > now)
            e->finishes[p]->since_ms = now;
}

static void poll_once(engine *e, uint64_t wake_us)
{
    struct epoll_event evs[256];
    int n = wait_events(e, evs, 256, wake_us);
    follow_clock(e, clock_now_ms()); /* before the inbox's jobs go into the wheel */
    for (int i = 0; i < n; i++) {
        if (evs[i].data.fd == e->evfd) {
            uint64_t v;
            ssize_t r = read(e->evfd, &v, sizeof v);
            (void)r;
        } else {
            dispatch_socket_event(e->d, evs[i].data.fd, evs[i].events);
        }
    }
    drain_inbox(e);
    start_some(e);
    kick_dispatch(e);
    flush(e);
}

static uint64_t housekeeping(engine *e, uint64_t now);
static void reconcile_start(engine *e, uint64_t now);
static void apply_queue_settings(engine *e);
static void apply_permits(engine *e);

static void run(engine *e)
{
    while (!atomic_load(&e->stop)) {
        uint64_t now = clock_now_ms();
        follow_clock(e, now);
        uint64_t chores = housekeeping(e, now);
        if (atomic_load_explicit(&e->sweep_asked, memory_order_relaxed) && atomic_exchange(&e->sweep_asked, 0))
            sweep_soon(e, now);
        if ((now >= e->next_sweep_ms || e->sweep_more) && atomic_load(&e->pending_ops) == 0 && !e->backlog &&
            start_release_done(e, now)) {
            sweep(e, now);
            e->last_sweep_ms = now;
            e->next_sweep_ms = now + e->cfg->window_ms / 2;
        }
        apply_queue_settings(e);
        apply_permits(e);
        expire(e, now);
        absorb(e);
        flush(e);
        atomic_store_explicit(&e->in_wheel, (long)wheel_count(e->w), memory_order_relaxed);
        if (e->permits_soon && e->permits_sent_ms + PERMITS_GAP_MS < chores)
            chores = e->permits_sent_ms + PERMITS_GAP_MS;
        /* housekeeping has just done every chore due that it could: one
         * still due waits for its call in flight (a renewal, a queue poll, a
         * permits call) and is looked at again CHORE_RECHECK_MS later, not
         * at once, which would spin while Redis is slow to answer */
        if (chores <= now)
            chores = now + CHORE_RECHECK_MS;
        poll_once(e, next_wake_us(e, clock_now_ms(), chores));
    }
}

/* ---- queue controls (queuecfg.h) ----
 *
 * Every QUEUES_POLL_MS the engine asks the change feed (queues_feed) what
 * changed since the version it applied last: nothing (one small call: the
 * usual case, however many queues are configured), the fields written since
 * (applied one by one; a deleted one goes back to the defaults), or, at
 * start or when too far behind, the whole hash (applied, then every
 * configured queue not in it goes back to the defaults). A poll is in
 * flight until its settings are applied, so the next asks from the version
 * they brought. */

typedef struct queue_settings {
    int64_t version;
    int full;
    size_t n;
    struct {
        char field[QUEUECFG_FIELD_MAX];
        int present; /* 0: deleted, the defaults */
        queuecfg cfg;
    } q[];
} queue_settings;

/* Store thread: the feed's answer; hands what changed to the engine. */
static void queues_cb(void *arg, const queues_reply *r)
{
    engine *e = arg;
    if (r->status != QUEUES_OK || r->version == e->queues_version) {
        atomic_store(&e->queues_polling, 0);
        return;
    }
    queue_settings *qs = xmalloc(sizeof *qs + r->n * sizeof qs->q[0]);
    qs->version = r->version;
    qs->full = r->full;
    qs->n = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->entries[i].field_len >= QUEUECFG_FIELD_MAX)
            continue;
        memcpy(qs->q[qs->n].field, r->entries[i].field, r->entries[i].field_len + 1);
        qs->q[qs->n].present = r->entries[i].present;
        qs->q[qs->n].cfg = r->entries[i].controls;
        qs->n++;
    }
    pthread_mutex_lock(&e->mu);
    free(e->queues_pending);
    e->queues_pending = qs;
    pthread_mutex_unlock(&e->mu);
    wake(e); /* queues_polling stays set until apply_queue_settings */
}

/* Also frees the limiter's idle queues (limiter_drop_idle) once a poll:
 * nothing here holds an lqueue across turns of the loop. */
static void poll_queue_settings(engine *e, uint64_t now)
{
    if (now < e->next_queues_ms || atomic_exchange(&e->queues_polling, 1))
        return;
    e->next_queues_ms = now + QUEUES_POLL_MS;
    limiter_drop_idle(e->lim);
    if (queues_feed(e->st, e->queues_version, queues_cb, e) < 0)
        atomic_store(&e->queues_polling, 0);
}

/* Applies what the last poll found changed, if anything, to the limiter's
 * queues, touching only the queues whose controls differ. */
static void apply_queue_settings(engine *e)
{
    pthread_mutex_lock(&e->mu);
    queue_settings *qs = e->queues_pending;
    e->queues_pending = NULL;
    pthread_mutex_unlock(&e->mu);
    if (!qs)
        return;
    uint64_t now_us = clock_now_us();
    if (qs->full)
        e->queues_mark = e->queues_mark == UINT32_MAX ? 1 : e->queues_mark + 1;
    uint32_t mark = e->queues_mark ? e->queues_mark : 1;
    for (size_t i = 0; i < qs->n; i++) {
        lqueue *q = limiter_queue(e->lim, qs->q[i].field);
        const queuecfg *c = &qs->q[i].cfg;
        if (!qs->q[i].present) {
            limiter_reset_queue(e->lim, q, now_us);
            continue;
        }
        if (limiter_queue_cap(q) != c->parallelism)
            limiter_set_queue_cap(e->lim, q, c->parallelism);
        if (limiter_queue_paused(q) != c->paused)
            limiter_set_queue_paused(e->lim, q, c->paused);
        if (!c->per_instance) { /* limits for the deployment: permits decide grant and rate */
            if (limiter_queue_grant(q) == UINT32_MAX) {
                limiter_set_queue_grant(e->lim, q, 0);
                e->permits_soon = 1;
            }
        } else {
            if (limiter_queue_grant(q) != UINT32_MAX)
                limiter_set_queue_grant(e->lim, q, UINT32_MAX);
            limiter_set_queue_rate(e->lim, q, c->rate, now_us); /* a no-op when unchanged */
        }
        limiter_configure_queue(e->lim, q, mark);
    }
    if (qs->full)
        limiter_reset_unmarked(e->lim, mark, now_us);
    e->queues_version = qs->version;
    free(qs);
    atomic_store(&e->queues_polling, 0);
    pump(e);
}

/* ---- deployment-wide queue limits (queues_permits) ----
 *
 * A configured queue's parallelism and rate hold for the deployment unless
 * its controls say per instance. For such a shared queue the limiter lets at
 * most `grant` of its jobs run here, and paces them at this instance's share
 * of the rate; both come from permits held in Redis (permits.lua). While
 * any shared queue has work or holds permits, the engine reports every such
 * queue's want (waiting + in flight) and in-flight count every
 * PERMITS_RENEW_MS in one call, and at once (at most every PERMITS_GAP_MS)
 * when a queue has jobs it holds no permits for. Redis keeps an instance's
 * permits for PERMITS_TTL_MS after its last call; the engine trusts its
 * grants for PERMITS_MARGIN_MS less than that after sending the call that
 * brought them, so when it cannot renew it stops starting before Redis
 * gives its permits to others. At a graceful stop it gives them back. */

typedef struct permits_call {
    engine *e;
    int ok;
    int give_back; /* shutdown: nothing is applied */
    uint64_t sent_ms;
    size_t n;
    size_t skip; /* collecting: queues still to pass over */
    int more;    /* collecting: more queues than one call takes */
    queues_demand d[QUEUES_PERMITS_MAX];
    queues_permit p[QUEUES_PERMITS_MAX];
    char field[QUEUES_PERMITS_MAX][QUEUECFG_FIELD_MAX];
} permits_call;

/* Store thread: the call's answer; hands it to the engine. */
static void permits_cb(void *arg, int ok, const queues_permit *p, size_t n)
{
    permits_call *c = arg;
    engine *e = c->e;
    if (c->give_back) {
        free(c);
        atomic_fetch_sub(&e->pending_ops, 1);
        wake(e);
        return;
    }
    c->ok = ok;
    if (ok)
        memcpy(c->p, p, n * sizeof *p);
    pthread_mutex_lock(&e->mu);
    free(e->permits_pending);
    e->permits_pending = c;
    pthread_mutex_unlock(&e->mu);
    wake(e); /* permits_asking stays set until apply_permits */
}

static void collect_demand(lqueue *q, void *arg)
{
    permits_call *c = arg;
    uint32_t inflight = limiter_queue_inflight(q);
    /* A stopping engine starts nothing more: it wants no permits, and holds
     * those of its attempts in flight until they end (give-back). Jobs its
     * namespace's cap holds back are not wanted now either: permits held
     * for them would be idle while another instance could use them. */
    uint32_t want = c->give_back || atomic_load(&c->e->stop) ? 0 : inflight + limiter_queue_startable(c->e->lim, q);
    if (!want && !inflight && !limiter_queue_grant(q))
        return; /* nothing held, nothing wanted: nothing to say */
    if (c->skip) {
        c->skip--;
        return;
    }
    if (c->n == QUEUES_PERMITS_MAX) {
        c->more = 1;
        return;
    }
    snprintf(c->field[c->n], QUEUECFG_FIELD_MAX, "%s", limiter_queue_name(q));
    c->d[c->n] = (queues_demand){c->field[c->n], want, inflight};
    c->n++;
}

/* One call for the shared queues with something to say. A give-back (at a
 * graceful stop, after the last attempt) reports nothing wanted or in
 * flight; it may follow a renewal still in flight: the store keeps their
 * order. */
static void ask_permits(engine *e, uint64_t now, int give_back)
{
    if (!give_back && atomic_exchange(&e->permits_asking, 1))
        return;
    permits_call *c = xcalloc(1, sizeof *c);
    c->e = e;
    c->give_back = give_back;
    c->sent_ms = now;
    c->skip = give_back ? 0 : e->permits_skip;
    uint32_t skipped = c->skip;
    limiter_each_shared(e->lim, collect_demand, c);
    if (c->n == 0 && !c->more && !skipped)
        e->permits_until_ms = 0; /* no shared queue holds or wants a permit: no renewal is due to fail */
    e->permits_skip = c->more ? e->permits_skip + c->n : 0;
    e->permits_active = c->n > 0 || c->more;
    e->permits_soon = c->more;
    e->permits_sent_ms = now;
    e->next_permits_ms = now + PERMITS_RENEW_MS;
    if (give_back)
        atomic_fetch_add(&e->pending_ops, 1);
    if (c->n == 0 || queues_permits(e->st, e->cfg->instance_id, PERMITS_TTL_MS, c->d, c->n, permits_cb, c) < 0) {
        free(c);
        if (give_back)
            atomic_fetch_sub(&e->pending_ops, 1);
        else
            atomic_store(&e->permits_asking, 0);
    }
}

static void drop_grant(lqueue *q, void *arg)
{
    engine *e = arg;
    limiter_set_queue_grant(e->lim, q, 0);
}

/* Housekeeping: renew when due, ask at once for a queue short of permits,
 * and stop starting when the grants held are no longer known good. */
static void renew_permits(engine *e, uint64_t now)
{
    if (e->permits_until_ms && now >= e->permits_until_ms) {
        limiter_each_shared(e->lim, drop_grant, e);
        e->permits_until_ms = 0;
        LOG(LOG_WARN, "shared queues' permits could not be renewed: their attempts wait",
            "\"ttl_ms\":%u", PERMITS_TTL_MS);
    }
    if ((e->permits_active && now >= e->next_permits_ms) ||
        (e->permits_soon && now >= e->permits_sent_ms + PERMITS_GAP_MS))
        ask_permits(e, now, 0);
}

/* Applies the last answer, if any, to the shared queues it names. */
static void apply_permits(engine *e)
{
    pthread_mutex_lock(&e->mu);
    permits_call *c = e->permits_pending;
    e->permits_pending = NULL;
    pthread_mutex_unlock(&e->mu);
    if (!c)
        return;
    if (c->ok) {
        uint64_t now_us = clock_now_us();
        for (size_t i = 0; i < c->n; i++) {
            lqueue *q = limiter_queue(e->lim, c->field[i]);
            if (!c->p[i].shared || limiter_queue_grant(q) == UINT32_MAX)
                continue; /* not shared (any more): the settings poll says how it runs */
            limiter_set_queue_grant(e->lim, q, c->p[i].grant);
            limiter_set_queue_rate(e->lim, q, c->p[i].rate, now_us);
        }
        e->permits_until_ms = c->sent_ms + PERMITS_TTL_MS - PERMITS_MARGIN_MS;
    }
    free(c);
    atomic_store(&e->permits_asking, 0);
    pump(e);
}

static void op_done_cb(void *arg, const redisReply *r)
{
    engine *e = arg;
    (void)r;
    atomic_fetch_sub(&e->pending_ops, 1);
    wake(e);
}

static void registered_cb(void *arg, int ok)
{
    (void)ok;
    op_done_cb(arg, NULL);
}

/* The instance lease (renewed by the watchdog from now on) and the registry
 * entry through which other instances' reapers find our claims. */
static void register_instance(engine *e)
{
    char lk[KEYS_MAX];
    instances_lease_key(lk, e->cfg->instance_id);
    e->lease = watchdog_add(e->wd, lk, e->cfg->instance_id, e->cfg->lease_ttl_ms, 1);
    atomic_store(&e->lease_pub, e->lease);
    watchdog_run(e->wd, clock_now_ms());
    atomic_fetch_add(&e->pending_ops, 1); /* shutdown waits for it */
    if (instances_register(e->st, e->cfg->instance_id, registered_cb, e) < 0)
        atomic_fetch_sub(&e->pending_ops, 1);
}

/* After the claims were handed back: drop the lease. The registry entry
 * stays: a create answered while we were stopping may still have claimed a
 * timer after our hand-back, and a live instance's reaper (or our own next
 * start) then finds our id without a lease, hands that back too and removes
 * the entry. */
static void unregister_instance(engine *e)
{
    atomic_fetch_add(&e->pending_ops, 1);
    watchdog_remove(e->wd, e->lease, 1, op_done_cb, e);
}

static void log_hold(const char *ns, uint32_t cap, uint32_t holds, void *arg)
{
    (void)arg;
    LOG(LOG_WARN, "a namespace had its cap of attempts in flight: its due timers waited for its own to end",
        "\"namespace\":\"%s\",\"cap\":%u,\"holds\":%u", ns, cap, holds);
}

/* strtab_each's callback over e->ns_held (under e->mu): a namespace at its
 * cap of timers held in memory. */
static void log_resident_cap(strtab_node *n, void *arg)
{
    const engine *e = arg;
    const struct ns_resident *r = container_of(n, struct ns_resident, node);
    if (r->n >= e->ns_cap)
        LOG(LOG_WARN, "a namespace had its cap of timers held in memory: its further due timers waited in Redis",
            "\"namespace\":\"%s\",\"cap\":%" PRIu64 ",\"held\":%" PRIu64, r->name, e->ns_cap, r->n);
}

/* Periodic work besides the wheel: lease renewal, the reaper and the sweep.
 * Returns when the next of the first two is due. */
static uint64_t housekeeping(engine *e, uint64_t now)
{
    uint64_t next = watchdog_run(e->wd, now);
    if (now >= e->next_holds_ms) { /* (no wake-up of its own: holds happen while the loop is busy) */
        limiter_report_holds(e->lim, log_hold, e);
        if (e->ns_cap) {
            pthread_mutex_lock(&e->mu);
            strtab_each(&e->ns_held, log_resident_cap, e);
            pthread_mutex_unlock(&e->mu);
        }
        e->next_holds_ms = now + HOLDS_REPORT_MS;
    }
    if (now >= e->next_probe_ms || e->next_probe_ms > now + WRITES_PROBE_MS) {
        probe_writes(e);
        e->next_probe_ms = now + WRITES_PROBE_MS;
    }
    if (e->next_probe_ms < next)
        next = e->next_probe_ms;
    poll_queue_settings(e, now);
    rebuild_counts_again(e, now);
    migrate_again(e, now);
    if (e->next_queues_ms < next)
        next = e->next_queues_ms;
    renew_permits(e, now);
    if (e->permits_active && e->next_permits_ms < next)
        next = e->next_permits_ms;
    if (e->permits_until_ms && e->permits_until_ms < next)
        next = e->permits_until_ms;
    if (now >= e->next_reap_ms) {
        reaper_run(e->rp);
        reconcile_start(e, now);
        e->next_reap_ms = now + e->cfg->lease_ttl_ms / 2;
    }
    if (watchdog_lost(e->lease) && !e->lease_lost_logged) {
        LOG(LOG_ERROR, "this instance's lease was taken over; its claims now belong to others",
            "\"instance\":\"%s\"", e->cfg->instance_id);
        e->lease_lost_logged = 1;
    }
    if (watchdog_take_lapsed(e->lease)) {
        /* Silent for longer than the lease (a pause, or Redis out of reach):
         * another instance's reaper may have handed our claims back and taken
         * us out of the registry. Our wheel's timers that were handed back
         * fail their begin; what we claim from now on must be findable by a
         * reaper again, so we register again. */
        LOG(LOG_WARN, "this instance's lease had lapsed and is made again; other instances may have taken its claims",
            "\"instance\":\"%s\"", e->cfg->instance_id);
        atomic_fetch_add(&e->pending_ops, 1);
        if (instances_register(e->st, e->cfg->instance_id, registered_cb, e) < 0)
            atomic_fetch_sub(&e->pending_ops, 1);
    }
    return next < e->next_reap_ms ? next : e->next_reap_ms;
}

static void abandon_cb(job *j, void *arg)
{
    metrics_gauge_add(((engine *)arg)->m, j->spec->queue, MG_IN_FLIGHT, -1);
    job_free(arg, j); /* still firing in Redis: the release marks it interrupted */
}

/* Graceful stop: drop what has not started, let attempts and their outcome
 * writes finish until the grace deadline, then hand every claim back. */
static void shutdown_engine(engine *e)
{
    atomic_store(&e->accepting, 0);
    while (e->backlog) { /* not in the wheel yet: the release hands them back */
        job *j = e->backlog;
        e->backlog = j->inbox_next;
        job_free(e, j);
    }
    e->backlog_tail = &e->backlog;
    struct list_node *n, *next;
    for (n = e->all.next; n != &e->all; n = next) {
        next = n->next;
        job *j = container_of(n, job, all_node);
        /* A claimed job still in the inbox (posted by a create or a sweep,
         * not yet taken: its phase is the first, JOB_WHEEL, but it is in no
         * slot) is the inbox's until the drain below frees it (on_claimed:
         * stop is set); freed here, the drain would walk freed memory. */
        if (j->phase == JOB_WHEEL && !list_linked(&j->wt.node))
            continue;
        if (j->phase == JOB_WHEEL || j->phase == JOB_READY || (j->phase == JOB_PARKED && !j->last_json))
            job_free(e, j);
        else if (j->phase == JOB_PARKED) { /* an outcome Redis missed: it goes out now, not after the release */
            wheel_cancel(e->w, &j->wt);
            send_finish(e, j);
        }
    }
    /* Lingering finishes too (stop is set), and the parked ones above:
     * release_all would take them all for interrupted attempts. */
    flush(e);
    uint64_t deadline = clock_now_ms() + e->cfg->shutdown_grace_ms;
    /* What remains in the wheel are outcomes Redis missed again (parked):
     * tried again every PARK_MS until the grace deadline. */
    while ((dispatch_running(e->d) || e->store_jobs || e->starting || !list_empty(&e->held) ||
            wheel_count(e->w) || !list_empty(&e->expiring) || atomic_load(&e->pending_ops)) &&
           clock_now_ms() < deadline) {
        expire(e, clock_now_ms());
        /* The attempts still running hold their queues' permits: renewed
         * as usual, or another instance would take them 3 s from now. */
        apply_permits(e);
        renew_permits(e, clock_now_ms());
        /* So does the lease, which may be shorter than the grace: lapsed, a
         * reaper would hand the running attempts back to be made again. */
        watchdog_run(e->wd, clock_now_ms());
        poll_once(e, clock_now_us() + 10000);
    }
    dispatch_abort_all(e->d, abandon_cb, e);
    ask_permits(e, clock_now_ms(), 1);
    atomic_store(&e->releasing_start, 0); /* (a start's failure is no stop's) */
    atomic_store(&e->release_failed, 0);
    release_all(e);
    /* Claims go back a slice a call: the wait goes on while calls answer. */
    uint64_t calls = timers_release_calls(e->tm);
    deadline = clock_now_ms() + 2 * e->cfg->redis_timeout_ms + 1000;
    while ((atomic_load(&e->pending_ops) || atomic_load(&e->rebuilding)) && clock_now_ms() < deadline) {
        watchdog_run(e->wd, clock_now_ms());
        poll_once(e, clock_now_us() + 10000);
        if (timers_release_calls(e->tm) != calls) {
            calls = timers_release_calls(e->tm);
            deadline = clock_now_ms() + 2 * e->cfg->redis_timeout_ms + 1000;
        }
    }
    if (atomic_load(&e->pending_ops) || atomic_load(&e->release_failed))
        LOG(LOG_WARN, "claims were left in Redis: a live instance's reaper hands them back once this instance's "
            "lease is gone (at once: it is deleted now), or this instance's next start does",
            "\"instance\":\"%s\"", e->cfg->instance_id);
    unregister_instance(e);
    while ((atomic_load(&e->pending_ops) || atomic_load(&e->rebuilding)) && clock_now_ms() < deadline)
        poll_once(e, clock_now_us() + 10000);
}

static void *engine_main(void *arg)
{
    engine *e = arg;
    pthread_setname_np(pthread_self(), "hw-engine");
    register_instance(e); /* before any claim, so a crash leaves claims the reaper finds */
    atomic_store(&e->releasing_start, 1);
    release_all(e);       /* claims a previous process with our id left behind (start_release_done) */
    migrate_all(e);
    rebuild_counts(e);
    e->next_sweep_ms = 0;
    e->next_reap_ms = clock_now_ms() + e->cfg->lease_ttl_ms / 2;
    run(e);
    shutdown_engine(e);
    return NULL;
}

engine *engine_create(const config *cfg, store *st, const signer *sign, const netpolicy *policy)
{
    engine *e = xcalloc(1, sizeof *e);
    e->cfg = cfg;
    e->st = st;
    e->inbox_tail = &e->inbox;
    e->backlog_tail = &e->backlog;
    e->starting_tail = &e->starting;
    list_init(&e->held);
    list_init(&e->expiring);
    list_init(&e->all);
    strtab_init(&e->byid);
    strtab_init(&e->ns_held);
    e->ns_cap = cfg->max_resident_per_namespace < cfg->max_resident ? cfg->max_resident_per_namespace : 0;
    pthread_mutex_init(&e->mu, NULL);
    atomic_init(&e->stop, 0);
    atomic_init(&e->accepting, 1);
    atomic_init(&e->pending_ops, 0);
    atomic_init(&e->release_failed, 0);
    atomic_init(&e->releasing_start, 0);
    atomic_init(&e->rebuild_failed, 0);
    atomic_init(&e->migrate_failed, 0);
    atomic_init(&e->rebuilding, 0);
    atomic_init(&e->queues_polling, 0);
    atomic_init(&e->permits_asking, 0);
    e->queues_version = -1;
    e->limiter_next_us = UINT64_MAX;
    atomic_init(&e->resident, 0);
    if (getrandom(&e->rng, sizeof e->rng, 0) != sizeof e->rng)
        e->rng = clock_now_us();
    atomic_init(&e->next_token, (unsigned)splitmix64_next(&e->rng) | 1u);
    atomic_init(&e->claim_fit, (unsigned)cfg->claim_batch);
    timers_config tc = {(uint32_t)cfg->partitions, cfg->instance_id, cfg->retention_s * 1000u,
                        (uint32_t)cfg->attempt_history, TIMERS_CALL_BUDGET_US};
    e->tm = timers_new(st, &tc);
    e->begins = xcalloc(cfg->partitions, sizeof *e->begins);
    e->finishes = xcalloc(cfg->partitions, sizeof *e->finishes);
    e->sweeps = xcalloc(cfg->partitions, sizeof *e->sweeps);
    if (store_is_cluster(st)) {
        e->probe_keys = xcalloc(cfg->partitions, sizeof *e->probe_keys);
        for (uint32_t p = 0; p < cfg->partitions; p++) {
            char key[KEYS_MAX];
            keys_timer_prefix(key, p);
            e->probe_keys[p] = xstrdup(key);
        }
    }
    for (uint32_t p = 0; p < cfg->partitions; p++) {
        e->sweeps[p].e = e;
        e->sweeps[p].partition = p;
        atomic_init(&e->sweeps[p].replay, 0);
    }
    atomic_init(&e->sweep_asked, 0);
    e->wd = watchdog_create(st);
    e->rp = reaper_create(st, e->tm, cfg);
    e->w = wheel_create((uint32_t)cfg->wheel_slots, (uint32_t)cfg->tick_ms, clock_now_ms());
    e->lim = limiter_create((uint32_t)cfg->max_inflight, (uint32_t)cfg->queue_parallelism);
    limiter_set_group_cap(e->lim, cfg->max_inflight_per_namespace ? (uint32_t)cfg->max_inflight_per_namespace
                                                                   : (uint32_t)cfg->max_inflight);
    e->epfd = epoll_create1(EPOLL_CLOEXEC);
    e->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = e->evfd};
    if (!e->w || e->epfd < 0 || e->evfd < 0 || epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->evfd, &ev) < 0) {
        LOG(LOG_ERROR, "engine set-up failed", "\"errno\":%d", errno);
        engine_free(e);
        return NULL;
    }
    dispatch_config dc = {e->epfd, (uint32_t)cfg->max_inflight, (uint32_t)cfg->response_snippet_bytes, sign,
                          policy, attempt_done_cb, e};
    e->d = dispatch_create(&dc);
    if (!e->d) {
        engine_free(e);
        return NULL;
    }
    return e;
}

void engine_set_metrics(engine *e, metrics *m) { e->m = m; }

void engine_set_tally(engine *e, tally *t) { e->tally = t; }

void engine_set_signer(engine *e, const signer *sign) { dispatch_set_signer(e->d, sign); }

timers *engine_timers(engine *e) { return e->tm; }

void engine_read_gauges(const engine *e, engine_gauges *g)
{
    wlease *l = atomic_load(&e->lease_pub);
    g->claimed = (uint64_t)atomic_load_explicit(&e->resident, memory_order_relaxed);
    g->in_wheel = (uint64_t)atomic_load_explicit(&e->in_wheel, memory_order_relaxed);
    g->lease_renewed_ms = l ? watchdog_renewed_ms(l) : 0;
    g->started_ms = atomic_load_explicit(&e->started_ms, memory_order_relaxed);
}

int engine_start(engine *e)
{
    atomic_store(&e->started_ms, clock_now_ms());
    int rc = pthread_create(&e->thread, NULL, engine_main, e);
    if (rc)
        return -rc;
    e->started = 1;
    return 0;
}

void engine_stop(engine *e)
{
    if (!e->started)
        return;
    atomic_store(&e->accepting, 0);
    atomic_store(&e->stop, 1);
    wake(e);
    pthread_join(e->thread, NULL);
    e->started = 0;
}

void engine_free(engine *e)
{
    if (!e)
        return;
    engine_stop(e);
    dispatch_free(e->d);
    while (!list_empty(&e->all))
        job_free(e, container_of(e->all.next, job, all_node));
    wheel_free(e->w);
    limiter_free(e->lim);
    watchdog_free(e->wd);
    reaper_free(e->rp);
    if (e->epfd >= 0)
        close(e->epfd);
    if (e->evfd >= 0)
        close(e->evfd);
    free(e->queues_pending);
    free(e->permits_pending);
    pthread_mutex_destroy(&e->mu);
    free(e->sweeps);
    for (uint32_t p = 0; e->probe_keys && p < (uint32_t)e->cfg->partitions; p++)
        free(e->probe_keys[p]);
    free(e->probe_keys);
    for (uint32_t p = 0; e->begins && p < e->cfg->partitions; p++) {
        free(e->begins[p]);
        free(e->finishes[p]);
    }
    free(e->begins);
    strtab_free(&e->byid);
    strtab_free(&e->ns_held); /* (every job was freed: no record is left) */
    while (e->revoked) {
        struct revocation *r = e->revoked;
        e->revoked = r->next;
        free(r);
    }
    while (e->held_pending) {
        struct held_slice *h = e->held_pending;
        e->held_pending = h->next;
        held_slice_free(h);
    }
    free(e->finishes);
    timers_free(e->tm);
    free(e);
}
