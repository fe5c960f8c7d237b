/* queuecfg.h - a queue's controls (api/queues.c writes them; the engine
 * reads them into its limiter) and the name a queue goes by: "<namespace>/<queue>"
 * ("<queue>" without namespaces), the same for the limiter and for the
 * stored controls. How they are stored is persistence/queues.h's.
 * Pure functions; any thread. */
#ifndef HW_QUEUECFG_H
#define HW_QUEUECFG_H

#include <stddef.h>
#include <stdint.h>

#include "persistence/queues.h"

#define QUEUES_POLL_MS 500          /* every engine asks the change feed (queues_feed) this often */
#define QUEUECFG_FIELD_MAX 136      /* 64 + '/' + 64 + NUL, rounded up */
/* max_dispatches_per_second is 0 (no limit) or in [QUEUECFG_MIN_RATE,
 * QUEUECFG_MAX_RATE]: one start per 1000 s at the slowest, and no faster than
 * any receiver should be called from one queue. The API refuses anything
 * else with a 400. */
#define QUEUECFG_MIN_RATE QUEUES_RATE_MIN
#define QUEUECFG_MAX_RATE QUEUES_RATE_MAX

typedef queue_controls queuecfg;

/* The limiter's and the hash's name of queue `queue` of namespace ns ("" for
 * none) into buf. */
void queuecfg_field(char *buf, size_t size, const char *ns, const char *queue);

/* The field of a timer's queue from its key id ("<ns>/<id>" or "<id>"). */
void queuecfg_field_of(char *buf, size_t size, const char *key_id, const char *queue);

/* 1 when rate is an accepted max_dispatches_per_second: 0, or a finite
 * number in [QUEUECFG_MIN_RATE, QUEUECFG_MAX_RATE]. */
int queuecfg_rate_valid(double rate);

#endif
