/* trace.h - W3C Trace Context (https://www.w3.org/TR/trace-context/) across
 * a timer's delay.
 *
 * The traceparent (and a bounded tracestate) of the request that creates a
 * timer are kept with it (persistence/timers.h, timer_trace); every attempt
 * then sends the same trace id and flags under a span id of its own, so the
 * receiver's work joins the trace the create belonged to. api/timers.c
 * parses what a create brings; the dispatcher writes what an attempt sends.
 *
 * Any thread; pure, except that trace_attempt_parent draws from a generator
 * of the calling thread. */
#ifndef HW_TRACE_H
#define HW_TRACE_H

#include <stddef.h>

#define TRACE_PARENT_LEN 55    /* "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>" */
#define TRACE_STATE_MAX 512    /* a longer tracestate (all its headers joined) is ignored */

/* Parses a traceparent header value v (NULL: absent) into out
 * (TRACE_PARENT_LEN + 1 bytes): version 00 exactly, or a later version's
 * first 55 characters when a '-' or the end follows them; lower-case hex,
 * trace id and parent id not all zeros, version ff refused. Surrounding
 * blanks are ignored. Returns 0, or -EINVAL (the caller starts no trace:
 * W3C says an invalid traceparent is dropped, not refused). */
int trace_parent_parse(const char *v, char *out);

/* Keeps of a tracestate value v (NULL: absent; several headers already
 * joined with ',') the leading list members that fit, whole, in max bytes,
 * written to out (max + 1 bytes) blank-trimmed and joined with ','. W3C
 * truncates by dropping members from the right, which this is. Returns the
 * length kept; 0 when nothing is kept, or when v is longer than
 * TRACE_STATE_MAX, holds a byte other than printable ASCII, or a member
 * without a key before its '='. */
size_t trace_state_keep(const char *v, char *out, size_t max);

/* Writes the traceparent an attempt sends (TRACE_PARENT_LEN + 1 bytes) for
 * a kept one (parent, TRACE_PARENT_LEN characters as trace_parent_parse
 * wrote them): version 00, the same trace id and flags, and a fresh span id.
 * Span ids come from a splitmix64 generator per thread, seeded once from
 * getrandom: no system call per attempt, and a thread never repeats one
 * (the generator steps through 2^64 distinct values). */
void trace_attempt_parent(const char *parent, char *out);

#endif
