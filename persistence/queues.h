/* queues.h - the durable format of queue controls (parallelism, pause,
 * dispatch rate), which api/queues.c writes and every engine polls.
 *
 * Redis layout: one hash QUEUES_KEY ("hw:queues"), field "<namespace>/<queue>"
 * ("<queue>" when the API runs without namespaces; the name the limiter
 * knows the queue by), value "<parallelism> <paused 0|1> <dispatches per
 * second, 0: no limit>". A queue without a field has the defaults.
 *
 * Threads and ownership: any thread may call a verb. A verb that returns 0
 * calls its callback exactly once, later, on the store's writer thread
 * (store.h); one that returns a negative errno (-EAGAIN, -ESHUTDOWN) never
 * calls it. The reply and its strings live only during the callback. */
#ifndef HW_PERSISTENCE_QUEUES_H
#define HW_PERSISTENCE_QUEUES_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define QUEUES_RATE_MAX 100000.0 /* the largest rate a stored value may hold */
/* The smallest positive rate: one start per 1000 s. The API refuses a
 * smaller one; a value stored before it did reads as this. */
#define QUEUES_RATE_MIN 0.001

typedef struct queue_controls {
    uint32_t parallelism; /* >= 1 */
    int paused;
    double rate;          /* starts per second; 0: no limit */
} queue_controls;

enum queues_status {
    QUEUES_UNREACHABLE = 0, /* Redis did not answer: nothing is known to have changed */
    QUEUES_FAILED,          /* Redis answered an error or a reply of another shape */
    QUEUES_OK
};

typedef struct queues_entry {
    const char *field; /* NUL-terminated */
    size_t field_len;
    queue_controls controls;
} queues_entry;

typedef struct queues_reply {
    enum queues_status status;
    int found;               /* get: the field holds well-formed controls */
    queue_controls controls; /* get, when found */
    size_t n;                /* list: entries */
    const queues_entry *entries; /* list: every field whose value is well formed, in the hash's order */
} queues_reply;

typedef void (*queues_reply_cb)(void *arg, const queues_reply *r);

/* Every queue's controls (HGETALL); malformed values are left out. */
int queues_list(store *st, queues_reply_cb cb, void *arg) __attribute__((warn_unused_result));

/* One queue's controls; found is 0 when it has none (or a malformed value). */
int queues_get(store *st, const char *field, queues_reply_cb cb, void *arg) __attribute__((warn_unused_result));

/* Replaces one queue's controls with *c (copied before it returns). */
int queues_put(store *st, const char *field, const queue_controls *c, queues_reply_cb cb, void *arg)
    __attribute__((warn_unused_result));

#endif
