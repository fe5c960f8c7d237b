/* timers.h - the durable timer: its verbs, and the only code that knows its
 * Redis layout (key names, the record's bytes, the functions' argument
 * vectors and the decoding of their replies; persistence/lua/_record.lua is
 * the Redis side).
 *
 * Any thread may call a verb. A verb that returns 0 calls its callback
 * exactly once, later, on the store's writer thread; one that returns an
 * error (-EAGAIN: the store's queue is full; -ESHUTDOWN: the store is
 * stopping) never calls it. Callbacks must be quick (answer an HTTP request,
 * post to the engine's inbox). Everything a callback is given points into
 * the reply and is valid during the callback only.
 *
 * Statuses a callback gets: TIMERS_UNREACHABLE when no reply came (the call
 * may still have run: every verb is safe to repeat for its caller's
 * purposes), TIMERS_FAILED when Redis answered with an error (logged here;
 * nothing was written), else the verb's own results. */
#ifndef HW_TIMERS_H
#define HW_TIMERS_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

typedef struct timers timers; /* opaque */

enum timers_status {
    TIMERS_NO_REPLICAS = -5, /* a write: Redis refuses writes, too few replicas (NOREPLICAS); nothing written */
    TIMERS_NO_DISK = -4,   /* a write: Redis refuses writes, its AOF or RDB failed (MISCONF); nothing written */
    TIMERS_NO_MEMORY = -3, /* a write: Redis refused it for its maxmemory (OOM); nothing written */
    TIMERS_UNREACHABLE = -2,
    TIMERS_FAILED = -1,
    TIMERS_OK = 0,        /* created / cancelled / done / found */
    TIMERS_EXISTS = 1,    /* create: the same timer exists (an idempotent repeat) */
    TIMERS_CONFLICT = 2,  /* create: another timer holds the id */
    TIMERS_TOO_LATE = 3,  /* cancel, control: not possible in the timer's state */
    TIMERS_AFTER_RUN = 4, /* cancel: a recurring timer, cancelled once its run ends */
    TIMERS_UNKNOWN = 5,   /* no timer has this id */
    TIMERS_NOT_STORED = 6, /* create batch, atomic: not written, as another item failed */
};

/* The store's refusal (STORE_REFUSES_*) a status says, 0 for any other. */
int timers_refusal(int status);

/* The W3C trace context a timer was created with (service/trace.h): its
 * traceparent (parent_len 0: none) and the tracestate kept (state_len 0:
 * none), neither NUL-terminated. A timer keeps them beside its creating
 * request's id, in one field of at most 255 bytes: with a request id of up
 * to 128 bytes, a traceparent (55) and TIMERS_TRACESTATE_MAX bytes of
 * tracestate always fit. */
#define TIMERS_TRACESTATE_MAX 70
typedef struct timer_trace {
    const char *parent;
    size_t parent_len;
    const char *state;
    size_t state_len;
} timer_trace;

/* A stored timer, decoded. Pointers are into the bytes decoded. */
typedef struct timer_view {
    char state[12];
    uint32_t attempts;     /* of the current run */
    int64_t fire_ms;       /* due time of the next attempt */
    int64_t created_ms;
    uint64_t version;      /* moved by every instruction (fire, reschedule, ...) */
    uint64_t runs;         /* runs started */
    uint64_t every_ms;     /* 0: one-shot; TIMERS_CALENDAR: a calendar schedule */
    const char *request_id; /* of the request that created it ("" none) */
    size_t request_id_len;
    timer_trace trace;     /* the trace context it was created with */
    const char *queue;     /* "default" when the spec names none */
    size_t queue_len;
    const char *spec;      /* the stored spec (spec.h), compact JSON */
    size_t spec_len;
    const char *history;   /* attempts, newest first, JSON objects separated by tabs ("" none) */
    size_t history_len;
    uint64_t skipped;      /* slots of a calendar schedule its misfire policy skipped (with_skipped) */
    int with_skipped;      /* 1: skipped was read (timers_get) */
} timer_view;

/* Decodes a record and its history key's value (history may be NULL); a
 * finished timer's record may hold its history itself, which is used when
 * history is empty. Returns 0, or -EINVAL when rec is not a record of this
 * layout. Any thread; pure. */
int timers_decode(const char *rec, size_t rec_len, const char *history, size_t history_len, timer_view *v);

typedef struct timers_config {
    uint32_t partitions;     /* the same for every instance, never changed while data exists */
    const char *instance_id; /* this instance (copied) */
    uint64_t retention_ms;   /* how long a finished timer stays readable */
    uint32_t history;        /* attempts kept per timer */
    uint32_t call_budget_us; /* a claim's, begin's or finish's time in Redis (0: TIMERS_CALL_BUDGET_US) */
} timers_config;

/* A call over many timers (claim, begin, finish) takes no more once it has
 * run this long in Redis (us), so that its own work stays under about a
 * millisecond however slow the machine (a busy one adds Redis's waits for a
 * core): a claim then says more may be due, and the rest of a begin or
 * finish goes in further calls. */
#define TIMERS_CALL_BUDGET_US 500


/* every_ms of a calendar schedule (repeat.cron): stored as -1, its next slots
 * computed by the engine (finish's next fire). */
#define TIMERS_CALENDAR UINT64_MAX

/* Returns the verbs' handle over st (not owned), or NULL when c is invalid. */
timers *timers_new(store *st, const timers_config *c);
void timers_free(timers *t); /* NULL is a no-op */

/* The partition of a timer id (a key id: "<namespace>/<id>" or "<id>"). */
uint32_t timers_partition(const timers *t, const char *id);

/* ---- the API's verbs ---- */

#define TIMERS_LABELS_MAX 16
typedef struct timer_new {
    const char *id;         /* key id */
    const char *spec;       /* stored spec (spec.h) */
    size_t spec_len;
    const char *when;       /* the due time as given: "delay_ms=N" or "fire_at_ms=N", or "cron"
                             * (a calendar schedule: fire_ms is its first slot) */
    int64_t fire_ms;
    uint64_t every_ms;      /* repeat.every_ms, 0: one-shot, TIMERS_CALENDAR: repeat.cron */
    const char *queue;      /* the queue ("default" or NULL: the default) */
    const char *request_id; /* the creating request's id, or NULL */
    uint64_t now_ms;
    int hold;               /* 1: this instance holds it in its wheel at once */
    char *const *labels;    /* its labels, "key:value" (indexed for selectors), or NULL; at
                             * most TIMERS_LABELS_MAX */
    uint32_t nlabels;
    int callbacks;          /* 1: its stored spec has on_success / on_failure (finish.lua reads them) */
    timer_trace trace;      /* none, or the request's (a parent without blanks of
                             * at most 55 bytes, a state of at most
                             * TIMERS_TRACESTATE_MAX bytes; else they are dropped) */
} timer_new;

/* Creates one timer. Creates that come while a create call is in flight
 * wait and go together as the next call (on a Redis Cluster those of one
 * partition, each partition's while its own call is in flight), so cb
 * may run on the writer's thread or, when the store refuses that call, on
 * the thread of a later timers_create. Returns 0 (cb is called once), or
 * -EAGAIN when the store's queue with the waiting creates is full, or
 * -ESHUTDOWN (cb is not called).
 * status TIMERS_OK (created), TIMERS_EXISTS (v: the existing timer),
 * TIMERS_CONFLICT (state: the holder's state), or an error status. */
typedef void (*timers_create_cb)(void *arg, int status, const timer_view *v, const char *state);
int timers_create(timers *t, const timer_new *n, timers_create_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* Creates n timers of one partition (every items[i].id in it; at most
 * TIMERS_CREATE_BATCH_MAX) in one call, each as timers_create would:
 * results[i].status is TIMERS_OK (created), TIMERS_EXISTS, TIMERS_CONFLICT
 * (state: the holder's state) or, with atomic, TIMERS_NOT_STORED (another
 * item of the call conflicted, so none was written); status (and every
 * result's) is an error status when the call failed. Items repeating an id
 * of the call are idempotent repeats of the first (or conflicts). */
#define TIMERS_CREATE_BATCH_MAX 1000
typedef struct timer_created {
    int status;
    const char *state;
} timer_created;
typedef void (*timers_create_batch_cb)(void *arg, int status, size_t n, const timer_created *results);
int timers_create_batch(timers *t, uint32_t partition, size_t n, const timer_new *items, int atomic,
                        timers_create_batch_cb cb, void *arg) __attribute__((warn_unused_result));

/* status TIMERS_OK with v, TIMERS_UNKNOWN, or an error status; flag is the
 * verb's: cancel's "cancelled by this call", control's "this instance now
 * holds the run" (0 otherwise). */
typedef void (*timers_view_cb)(void *arg, int status, const timer_view *v, int flag);

int timers_get(timers *t, const char *id, timers_view_cb cb, void *arg) __attribute__((warn_unused_result));

/* Exact cancel (DESIGN §1): TIMERS_OK (cancelled; flag 1 when by this
 * call), TIMERS_AFTER_RUN, TIMERS_TOO_LATE (v: as it is), TIMERS_UNKNOWN. */
int timers_cancel(timers *t, const char *id, uint64_t now_ms, timers_view_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* op: "fire", "reschedule" (fire_ms), "pause", "resume", "retry". A run due
 * by hold_until_ms (0: none) is held by this instance at once (flag 1).
 * TIMERS_OK, TIMERS_TOO_LATE (v: as it is), TIMERS_UNKNOWN. */
int timers_control(timers *t, const char *id, const char *op, uint64_t now_ms, int64_t fire_ms,
                   uint64_t hold_until_ms, timers_view_cb cb, void *arg) __attribute__((warn_unused_result));

/* The holder of a calendar schedule's waiting run (claimed under version,
 * no attempt yet) whose slot was missed moves it to its next slot fire_ms,
 * counting `skipped` slots (GET shows the total), held by this instance
 * when due by hold_until_ms (flag 1). TIMERS_TOO_LATE when the timer moved
 * or began meanwhile. */
int timers_skip(timers *t, const char *id, uint64_t version, uint64_t now_ms, int64_t fire_ms, uint64_t skipped,
                uint64_t hold_until_ms, timers_view_cb cb, void *arg) __attribute__((warn_unused_result));

/* One partition's part of a listing page (list.lua): up to limit timers of
 * namespace ns in state, after the cursor (cursor_score NULL: from the
 * start), asc (soonest due first) or newest first, of queue (NULL: any)
 * with label ("key:value", NULL: any),
 * examining at most budget entries and stopping once the records returned
 * reach max_bytes (at least one match is returned when one is found).
 * more: the partition has entries after (last_score, last_id), the last
 * one examined. */
typedef struct timer_listed {
    const char *id;       /* key id */
    const char *score;    /* its position's score */
    const char *rec;      /* the record and history, for timers_decode */
    size_t rec_len;
    const char *history;
    size_t history_len;
} timer_listed;
typedef void (*timers_list_cb)(void *arg, int status, int more, const char *last_score, const char *last_id,
                               size_t n, const timer_listed *items);
int timers_list(timers *t, uint32_t partition, const char *ns, const char *state, int asc,
                const char *cursor_score, const char *cursor_id, uint32_t limit, const char *queue,
                const char *label, uint32_t budget, uint64_t max_bytes, timers_list_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* One partition's part of a selector operation (select.lua): the timers
 * of namespace ns that have every label of sel (the first one's index is
 * walked, TIMERS_SELECT_CHUNKS places each in id order), of sel->queue and
 * sel->state when set, from (chunk, after) on, each given sel->op
 * ("cancel", "pause", "resume", "reschedule" to sel->fire_ms, or "list":
 * nothing) exactly as the one-timer verb would; at most limit matches and
 * budget entries examined. With sel->idem (an Idempotency-Key), the answer
 * is kept for 24 h by (ns, idem, chunk, after) and a repeat gets it again
 * (replayed 1), or TIMERS_CONFLICT when it came with another fingerprint.
 * sel->op "key" (chunk TIMERS_SELECT_CHUNKS) only keeps the fingerprint
 * the key came with first, or answers TIMERS_CONFLICT for another one. */
#define TIMERS_SELECT_CHUNKS 66 /* select.lua's places: 64 chunks, then the bucket's packed and long entries */
typedef struct timer_selector {
    const char *op;
    char *const *labels; /* "key:value", 1 to TIMERS_LABELS_MAX */
    uint32_t nlabels;
    const char *queue;   /* NULL: any */
    const char *state;   /* NULL: any */
    int64_t fire_ms;     /* reschedule */
    const char *idem;    /* NULL: none */
    const char *fingerprint; /* of the whole request, compared on a repeat */
} timer_selector;
typedef struct timer_selected {
    const char *id;    /* key id */
    int code;          /* 1 done, 2 done for after the current run, 0 too late */
    const char *state; /* the state it is in now */
    const char *cancelled_queue; /* cancel: its queue when this call cancelled it, else "" */
} timer_selected;
typedef void (*timers_select_cb)(void *arg, int status, int replayed, uint32_t next_chunk, const char *next_after,
                                 int more, size_t n, const timer_selected *items);
int timers_select(timers *t, uint32_t partition, const char *ns, const timer_selector *sel, uint32_t chunk,
                  const char *after, uint32_t limit, uint32_t budget, uint64_t now_ms, timers_select_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* Replays ("replay") or purges ("purge") up to limit dead letters of
 * namespace ns in one partition (queue NULL: any). done: how many; more: 1
 * when some may be left. */
typedef void (*timers_deadletters_cb)(void *arg, int status, long long done, int more);
int timers_deadletters(timers *t, uint32_t partition, const char *ns, const char *op, const char *queue,
                       uint64_t now_ms, uint32_t limit, timers_deadletters_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* ---- the engine's verbs ---- */

/* Claims up to limit timers of one partition due by horizon_ms for this
 * instance (replay: the previous claim's reply was lost; its timers come
 * again). items[i].spec is the stored spec. */
typedef struct timer_claimed {
    const char *id;
    const char *spec;
    size_t spec_len;
    int64_t fire_ms;
    uint32_t attempts;
    uint64_t version;
    const char *request_id;
    size_t request_id_len;
    timer_trace trace;
} timer_claimed;
/* A timer this instance held waiting that an instruction took away since
 * its last claim in the partition (a cancel, fire, reschedule or pause made
 * by any instance): the job holding `id` under `version` or an older one
 * must not start and can be dropped. At most TIMERS_REVOKED_MAX a call
 * (claim.lua); a claim with limit 0 only hands these over. */
#define TIMERS_REVOKED_MAX 4096
typedef struct timer_revoked {
    const char *id; /* NUL-terminated */
    uint64_t version;
} timer_revoked;
/* more: the call's time budget ran out before its limit: more may be due
 * now (claim again soon). */
typedef void (*timers_claim_cb)(void *arg, int status, size_t n, const timer_claimed *items, size_t nrevoked,
                                const timer_revoked *revoked, int more);
/* ns_cap: at most this many of one namespace in the call (0: no cap);
 * ns_room: "<ns>=<n>," for each namespace that may take fewer (n), ""
 * when none. */
int timers_claim(timers *t, uint32_t partition, uint64_t horizon_ms, uint32_t limit, int replay, uint64_t ns_cap,
                 const char *ns_room, timers_claim_cb cb, void *arg) __attribute__((warn_unused_result));

/* Begins the attempts of n timers of one partition (at most
 * TIMERS_BATCH_MAX): results[i].attempt is the attempt number (>= 1) of
 * items[i] when it may start, else one of enum timers_refusal; then its run
 * number (>= 1) and when that run was due. TIMERS_NOT_DUE: the timer is
 * due later than items[i].due_ms (it was made again after a create whose
 * write a failover lost); run_due_ms is then its due time, and nothing
 * changed. The items' strings (ids) stay valid until cb: the rest of a
 * batch whose time budget ran out is sent from them. cb may get fewer
 * results than items (n) when such a later call failed: the rest are
 * unanswered, as in a call without a reply. */
#define TIMERS_BATCH_MAX 256
typedef struct timer_begin {
    const char *id;
    uint64_t version;  /* the version its run was claimed under */
    uint32_t token;    /* unique among this instance's jobs */
    int recurring;
    uint64_t due_ms;   /* the due time the job holds for this attempt */
} timer_begin;
enum timers_refusal {
    TIMERS_GONE = 0,
    TIMERS_NOT_WAITING = -1,
    TIMERS_NOT_OURS = -2,
    TIMERS_MOVED = -3,
    TIMERS_NOT_DUE = -4
};
typedef struct timer_begun {
    int32_t attempt;    /* >= 1, or enum timers_refusal */
    uint32_t run;       /* the run this attempt belongs to (1: the first) */
    int64_t run_due_ms; /* when that run was due (TIMERS_NOT_DUE: when the timer is due) */
} timer_begun;
typedef void (*timers_begin_cb)(void *arg, int status, size_t n, const timer_begun *results);
int timers_begin(timers *t, uint32_t partition, size_t n, const timer_begin *items, timers_begin_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* What an attempt's result means for its timer (the engine decides). */
enum timer_outcome {
    TIMER_DELIVERED,
    TIMER_RETRY,
    TIMER_FAILED,
    TIMER_NEXT, /* a recurring run succeeded: its successor is due */
    TIMER_STOP, /* a recurring run answered 410 Gone */
    TIMER_REQUEUE, /* the attempt never left this machine (no socket): again, not counted */
};
typedef struct timer_finish {
    const char *id;
    enum timer_outcome outcome;
    const char *attempt;    /* the attempt, as JSON (the API's last_attempt) */
    int64_t next_fire_ms;   /* TIMER_RETRY: when */
    int keep;               /* its next attempt may stay claimed by this instance */
    uint64_t every_ms;
    int fixed_rate;
    uint32_t times;
    int64_t next_delay_ms;  /* TIMER_NEXT: the callback's Hookwheel-Next-Delay-Ms, or -1 */
} timer_finish;
typedef struct timer_finished {
    int ok;           /* 0: no longer this instance's firing timer */
    int kept;         /* 1: waits in this instance's claims for fire_ms */
    int64_t fire_ms;
    uint64_t version;
    uint32_t attempts;
} timer_finished;
typedef void (*timers_finish_cb)(void *arg, int status, size_t n, const timer_finished *results);

/* Records the outcomes of n attempts of one partition (at most
 * TIMERS_BATCH_MAX); hold_until_ms: what is due by then stays claimed. As
 * with timers_begin, the items' strings (id, attempt) stay valid until cb,
 * which may get fewer results than items. */
int timers_finish(timers *t, uint32_t partition, uint64_t now_ms, uint64_t hold_until_ms, size_t n,
                  const timer_finish *items, timers_finish_cb cb, void *arg) __attribute__((warn_unused_result));

/* Brings one partition's keys of an earlier layout to this one, up to
 * limit of them: cb gets how many moved and whether more are left (then
 * call again). */
typedef void (*timers_migrate_cb)(void *arg, int status, long long moved, int more);
int timers_migrate(timers *t, uint32_t partition, uint32_t limit, timers_migrate_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* A timer this instance's claims show firing (timers_held): the job whose
 * attempt began (its token), that attempt and its run. */
typedef struct timer_held {
    const char *id;
    uint32_t token;
    uint32_t attempt;
    uint64_t run;
} timer_held;

/* Lists the timers of one partition that this instance's claims due by
 * until_ms show firing, examining at most limit claims from offset on
 * (held.lua). cb gets them, and the offset to go on from (0: done). */
typedef void (*timers_held_cb)(void *arg, int status, uint64_t next, size_t n, const timer_held *items);
int timers_held(timers *t, uint32_t partition, uint64_t until_ms, uint64_t offset, uint32_t limit,
                timers_held_cb cb, void *arg) __attribute__((warn_unused_result));

/* Hands back n timers of one partition (at most TIMERS_BATCH_MAX) that
 * timers_held listed and this instance runs no attempt of (a failover lost
 * their finish), as timers_release hands back an interrupted attempt,
 * recorded with the error "attempt interrupted: <why>"; each only while it
 * is still in the attempt it was listed in (handback.lua). results[i]:
 * handed 1 and the state it is in now, or handed 0 (it moved on, left
 * alone). */
typedef struct timer_handed {
    int handed;
    const char *state; /* "" when not handed back */
} timer_handed;
typedef void (*timers_hand_back_cb)(void *arg, int status, size_t n, const timer_handed *results);
int timers_hand_back(timers *t, uint32_t partition, uint64_t now_ms, const char *why, size_t n,
                     const timer_held *items, timers_hand_back_cb cb, void *arg) __attribute__((warn_unused_result));

/* Hands every claim of instance (this one or a lapsed one) back, in every
 * partition, recording a firing timer's attempt as interrupted (why), in
 * calls of at most RELEASE_SLICE claims (the next sent when one answers).
 * cb gets each partition's count of timers handed back (status other than
 * TIMERS_OK: that partition's last call failed, the count is of the calls
 * before it). Returns the number of partitions whose call was queued: cb
 * is called that many times. */
typedef void (*timers_release_cb)(void *arg, int status, long long handed);
uint32_t timers_release(timers *t, const char *instance, const char *why, uint64_t now_ms,
                        timers_release_cb cb, void *arg);

/* How many calls of timers_release's have been answered so far (any
 * thread): a release of many claims is making progress while it grows. */
uint64_t timers_release_calls(timers *t);

#endif
