/* dispatch.h - HTTP attempts on libcurl multi handles (dispatch.c), driven by the
 * engine's epoll loop (curl's socket API: curl tells which sockets to watch
 * and when its next timeout is; the engine reports readiness).
 *
 * Engine thread only. The limiter decides *whether* a job may start; this
 * module only performs the request it is given and reports its result.
 * Connections are reused across attempts through the multi handle's cache. */
#ifndef HW_DISPATCH_H
#define HW_DISPATCH_H

#include <stdint.h>

#include "job.h"
#include "netpolicy.h"
#include "sign.h"

typedef struct dispatch dispatch; /* opaque */

/* Called on the engine thread when an attempt ends; res (and its snippet) is
 * valid only during the call. */
typedef void (*dispatch_done_cb)(void *arg, job *j, const attempt_result *res);

typedef struct dispatch_config {
    int epfd;                 /* the engine's epoll instance */
    uint32_t max_inflight;    /* attempts in flight at most: sizes the multi handles and the easy-handle pool */
    uint32_t snippet_bytes;   /* response bytes kept for last_attempt */
    const signer *sign;       /* NULL: requests go unsigned */
    const netpolicy *policy;  /* checked on every socket curl opens; NULL: none */
    dispatch_done_cb done;
    void *arg;
} dispatch_config;

dispatch *dispatch_create(const dispatch_config *cfg);

/* Requests built from now on are signed with sign (the namespace secrets
 * file read again on SIGHUP; NULL: unsigned). The caller keeps the earlier
 * signer until dispatch_free: a request being built may still use it. Any
 * thread. */
void dispatch_set_signer(dispatch *d, const signer *sign);

/* File descriptors the dispatcher may hold at once with max_inflight
 * attempts: each multi handle's wake-up socket pair, each attempt's socket
 * and the threaded resolver's socket pair while it resolves, and the idle
 * connections each multi handle keeps for reuse. For the start-up check of
 * the open-file limit; any thread. */
uint32_t dispatch_fds_needed(uint32_t max_inflight);

/* Aborts transfers still running (their callbacks are not called) and frees
 * d. NULL is a no-op. */
void dispatch_free(dispatch *d);

/* Starts attempt number j->attempts of j. Returns 0 (the done callback
 * follows later, never from inside this call), or -errno and no callback. */
int dispatch_start(dispatch *d, job *j) __attribute__((warn_unused_result));

/* The engine saw epoll events on a socket that is not its own. */
void dispatch_socket_event(dispatch *d, int fd, uint32_t epoll_events);

/* curl's next deadline, wall-clock microseconds, or 0 when none. */
uint64_t dispatch_deadline_us(const dispatch *d);

/* Lets curl handle its timeouts; call when the deadline has passed. */
void dispatch_timeout(dispatch *d);

/* Attempts in flight. */
uint32_t dispatch_running(const dispatch *d);

/* Stops every running attempt without calling the done callback, handing
 * each job to each(job, arg) instead (shutdown past its grace period). */
void dispatch_abort_all(dispatch *d, void (*each)(job *j, void *arg), void *arg);

#endif
