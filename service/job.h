/* job.h - a claimed timer held in memory by the engine.
 *
 * Engine thread, except for the inbox fields, which a store callback sets
 * before it posts the job back to the engine (engine_post). A job is in
 * exactly one phase at a time; each phase has one owner:
 *   WHEEL      linked in the wheel, waiting for its due time
 *   READY      due, waiting in the limiter for a dispatch slot
 *   BEGIN      holds a slot; the begin-attempt script is in flight
 *   RUNNING    holds a slot; the HTTP attempt is in flight (dispatch)
 *   FINISH     the outcome script is in flight
 *   PARKED     in the wheel until a store write is retried (Redis was down)
 *   SKIP       a calendar schedule's missed slot is being skipped (its
 *              move to the next slot is in flight; misfire skip)
 * The job owns its spec, id and the outcome text it is writing. */
#ifndef HW_JOB_H
#define HW_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "limiter.h"
#include "spec.h"
#include "strtab.h"
#include "timers.h"
#include "wheel.h"

struct netpolicy;

enum job_phase { JOB_WHEEL, JOB_READY, JOB_BEGIN, JOB_RUNNING, JOB_FINISH, JOB_PARKED, JOB_SKIP };
/* OUT_NEXT: a recurring run succeeded (its successor is due); OUT_STOP: a
 * recurring run answered 410 Gone. */
enum job_outcome {
    OUT_DELIVERED = TIMER_DELIVERED,
    OUT_RETRY = TIMER_RETRY,
    OUT_FAILED = TIMER_FAILED,
    OUT_NEXT = TIMER_NEXT,
    OUT_STOP = TIMER_STOP,
    OUT_REQUEUE = TIMER_REQUEUE, /* no socket here: the attempt did not count */
};
enum job_msg { MSG_CLAIMED, MSG_BEGUN, MSG_FINISHED, MSG_SKIPPED };

/* What one HTTP attempt gave. */
typedef struct attempt_result {
    long status;            /* HTTP status, or 0 when no response came */
    int curl_code;          /* CURLE_OK or the transfer error */
    char error[160];        /* empty, or why no usable response came */
    uint64_t started_ms;    /* wall clock at the start */
    uint32_t duration_ms;
    uint64_t duration_us;   /* the same in microseconds (metrics) */
    int64_t retry_after_ms; /* from a Retry-After header, or -1 */
    int64_t next_delay_ms;  /* from a Hookwheel-Next-Delay-Ms header, or -1 */
    const char *snippet;    /* first bytes of the response body (not NUL-terminated) */
    size_t snippet_len;
    int refused_by_policy;  /* 1: the destination policy refused the address; never retried */
    int local_error;        /* 1: no socket could be made here (EMFILE, ENFILE...): our own
                             * shortage, not the target's failure; never charged to its retries */
} attempt_result;

typedef struct job {
    wtimer wt;                 /* wheel link (and the engine's held list's, begun ahead); wt.due_ms is the due time */
    ljob lj;                   /* limiter link */
    struct list_node all_node; /* the engine's list of every job it holds */
    strtab_node byid;          /* the engine's index by timer id (engine thread) */
    int revoked;               /* an instruction took the timer away: never start it */
    struct job *inbox_next;    /* engine inbox link */
    enum job_msg msg;          /* what the inbox message says */
    int reply_ok;              /* store callback: 1 when Redis answered */
    long long reply_code;      /* store callback: script result */

    void *owner;               /* the engine holding the job */
    struct ns_resident *nsr;   /* its namespace's count of jobs held (engine.c; NULL: no cap) */
    char *id;
    char *rid;                 /* id of the request that created the timer, or NULL */
    char *traceparent;         /* the trace context it was created with (trace.h), or NULL */
    char *tracestate;          /* NULL: none */
    uint32_t partition;
    timer_spec *spec;          /* NULL until the engine parsed raw_spec */
    int stats_slot;            /* its tally slot (GET /stats) + 2; 0: not looked up yet (engine thread) */
    char *raw_spec;            /* stored spec text from a claim, parsed on the engine thread */
    size_t raw_len;
    uint32_t attempts;         /* attempts recorded in Redis (of the current run) */
    uint32_t run;              /* the current run's number (begin; 1: the first) */
    int64_t run_due_ms;        /* when the current run was due (begin; retry.max_duration_ms) */
    uint64_t version;          /* the run line's version it was claimed under */
    uint32_t token;            /* unique among this instance's jobs (begin.lua) */
    enum job_phase phase;
    uint64_t due_ms;           /* due time of the current attempt (lateness, misfires; a park keeps it) */
    uint64_t start_us;         /* a begun attempt starts then, not before (engine.c send_begin) */

    enum job_outcome outcome;  /* the outcome being written (FINISH, PARKED) */
    uint64_t next_fire_ms;     /* OUT_RETRY: when */
    int keep;                  /* the next attempt may stay claimed in this wheel */
    int64_t next_delay_ms;     /* OUT_NEXT: the callback's Hookwheel-Next-Delay-Ms, or -1 */
    char *last_json;           /* last_attempt JSON being written */

    /* dispatch-private attempt state */
    struct list_node run_node; /* dispatch's list of running attempts */
    uint8_t shard;             /* dispatch: the multi handle it runs on */
    void *easy;
    struct curl_slist *hdrs;
    char *resp;
    size_t resp_len, resp_cap, resp_total;
    size_t hdr_total;     /* bytes of response headers and trailers read */
    int64_t retry_after_ms;
    int64_t next_delay_hdr_ms;
    uint64_t started_us;
    uint64_t started_mono_us; /* the same start on the monotonic clock: durations, whatever the wall clock does */
    char errbuf[256];
    const struct netpolicy *policy; /* the dispatcher's, for its open-socket callback */
    char refused[64];          /* "" or the address the policy refused this attempt */
    int sock_errno;            /* 0, or why socket() failed for this attempt */
    int allowed_tried;         /* an address the policy allowed was tried (connected or not) */
} job;

#endif
