/* counts.h - how many timers each queue has in each state, and how many of
 * them are due but not begun: the counts the Redis functions keep
 * (_record.lua: "counts"; counts.lua reads and rebuilds them).
 *
 * Redis layout: per partition P a hash hw:{P}:cn, field
 * "<namespace>/<state code><queue>" -> the partition's timers of that
 * namespace and queue in that state (scheduled, retrying, paused: a timer
 * in its attempt is counted under the state it waited in;
 * finished timers leave by the expiry of their records, which no function
 * sees, so finished states are not counted). Every function that changes a
 * timer's state moves it between fields in the same call, so the sum over
 * partitions is exact. A timer stored before counts existed is counted by
 * its first change of state or by the rebuild (counts_rebuild: a SCAN of the
 * partition's timer keys, cursor in hw:{P}:cn:scan, hw:{P}:cn:v once done),
 * exactly once (a bit of its head says it is counted).
 *
 * Threads and ownership: any thread may call a verb. A verb that returns 0
 * calls its callback exactly once, later, on the store's writer thread; one
 * that returns a negative errno never calls it. A rebuild's reply lives only
 * during the callback; a read's answers are the callback's to free. */
#ifndef HW_PERSISTENCE_COUNTS_H
#define HW_PERSISTENCE_COUNTS_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* (service/metrics.h's enum metrics_queue_count lists them in this order) */
/* The counted states; a timer in its attempt is counted under the state it
 * waited in (scheduled for a first attempt, retrying for a later one), as
 * listings show it (_record.lua: count_bucket). */
enum counts_state { COUNTS_SCHEDULED, COUNTS_RETRYING, COUNTS_PAUSED, COUNTS_STATES };

/* The name of each counted state, as the API spells it. */
extern const char *const counts_state_names[COUNTS_STATES];

/* Due entries one partition's read examines at most (each from a prefix of
 * its record): past them the due numbers are lower bounds (exact is 0). */
#define COUNTS_DUE_BUDGET 500

typedef struct counts_row {
    const char *ns, *queue;       /* NUL-terminated; ns "" without namespaces */
    uint64_t n[COUNTS_STATES];
    uint64_t due;                 /* waiting (scheduled, retrying) with due time <= now, not begun */
    int64_t oldest_due_ms;        /* the due time of the oldest of those; 0 when due is 0 */
} counts_row;

enum counts_status { COUNTS_UNREACHABLE = 0, COUNTS_FAILED, COUNTS_OK };

typedef struct counts_reply {
    enum counts_status status;
    int exact;               /* 0: a partition's rebuild has not ended, or its due entries passed the budget */
    size_t n;
    const counts_row *rows;  /* by namespace, then queue; only queues with a count or a due timer */
} counts_reply;

/* A read's answers, one per partition, not yet summed. The callback owns
 * them: it frees them with counts_answers_free, then or later, on any
 * thread. Summing tens of thousands of queues' rows takes milliseconds, so
 * it is left to whoever needs the rows (counts_sum), off the writer thread
 * that every request's Redis calls share. */
typedef struct counts_answers counts_answers;
typedef void (*counts_cb)(void *arg, counts_answers *a);

/* The counts of namespace ns (NULL: every namespace) summed over the
 * partitions (one call per partition, pipelined), and the waiting timers
 * due by now_ms. status is COUNTS_OK only when every partition answered. */
int counts_read(store *st, uint32_t partitions, const char *ns, uint64_t now_ms, counts_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* COUNTS_OK when every partition answered (known without summing). */
enum counts_status counts_answers_status(const counts_answers *a);
/* 0 when a partition's rebuild has not ended or its due entries passed the
 * budget (counts_reply's exact, known without summing). */
int counts_answers_exact(const counts_answers *a);
/* The sum of a's rows, by namespace then queue, made on the first call
 * (the same reply after); it lives until counts_answers_free. */
const counts_reply *counts_sum(counts_answers *a);
/* The row of one queue of namespace ns ("" without namespaces) into *out,
 * without summing the others (a look at each answer's fields); 1 when a
 * partition counted it, else 0 with *out zero. */
int counts_find(const counts_answers *a, const char *ns, const char *queue, counts_row *out);
void counts_answers_free(counts_answers *a); /* NULL: nothing */

/* One slice of the rebuild of partition p (SCAN COUNT scan_count). cb gets
 * ok (0: Redis did not answer or failed), how many timers it counted, and
 * more (1: call again). */
typedef void (*counts_rebuild_cb)(void *arg, int ok, long long counted, int more);
int counts_rebuild(store *st, uint32_t p, uint32_t scan_count, counts_rebuild_cb cb, void *arg)
    __attribute__((warn_unused_result));

#endif
