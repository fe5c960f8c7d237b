/* queuecfg.h - a queue's controls as stored in Redis (api/queues.c writes
 * them; the engine reads them into its limiter).
 *
 * Hash QUEUES_KEY, field "<namespace>/<queue>" ("<queue>" without
 * namespaces; the same name the limiter knows the queue by), value
 * "<parallelism> <paused 0|1> <dispatches per second, 0: no limit>".
 * Pure functions; any thread. */
#ifndef HW_QUEUECFG_H
#define HW_QUEUECFG_H

#include <stddef.h>
#include <stdint.h>

#define QUEUES_KEY "hw:queues"
#define QUEUES_POLL_MS 500          /* every engine reads the hash this often */
#define QUEUECFG_FIELD_MAX 136      /* 64 + '/' + 64 + NUL, rounded up */
#define QUEUECFG_VALUE_MAX 64
/* max_dispatches_per_second is 0 (no limit) or in [QUEUECFG_MIN_RATE,
 * QUEUECFG_MAX_RATE]: one start per 1000 s at the slowest, and no faster than
 * any receiver should be called from one queue. The API refuses anything
 * else with a 400. */
#define QUEUECFG_MIN_RATE 0.001
#define QUEUECFG_MAX_RATE 100000.0

typedef struct queuecfg {
    uint32_t parallelism; /* >= 1 */
    int paused;
    double rate;          /* starts per second; 0: no limit */
} queuecfg;

/* The limiter's and the hash's name of queue `queue` of namespace ns ("" for
 * none) into buf. */
void queuecfg_field(char *buf, size_t size, const char *ns, const char *queue);

/* The field of a timer's queue from its key id ("<ns>/<id>" or "<id>"). */
void queuecfg_field_of(char *buf, size_t size, const char *key_id, const char *queue);

/* Writes c as the stored value. */
void queuecfg_format(const queuecfg *c, char *buf, size_t size);

/* 1 when rate is an accepted max_dispatches_per_second: 0, or a finite
 * number in [QUEUECFG_MIN_RATE, QUEUECFG_MAX_RATE]. */
int queuecfg_rate_valid(double rate);

/* Parses a stored value. Returns 0, or -1 when it is malformed. A positive
 * rate below QUEUECFG_MIN_RATE (stored before the API refused them) reads as
 * QUEUECFG_MIN_RATE, the nearest accepted setting. */
int queuecfg_parse(const char *text, queuecfg *c);

#endif
