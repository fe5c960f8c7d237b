/* queues.h - the durable format of queue controls (parallelism, pause,
 * dispatch rate), which api/queues.c writes and every engine polls.
 *
 * Redis layout: one hash QUEUES_KEY ("hw:{queues}"), field "<namespace>/<queue>"
 * ("<queue>" when the API runs without namespaces; the name the limiter
 * knows the queue by), value "<parallelism> <paused 0|1> <dispatches per
 * second, 0: no limit>[ i]". A queue without a field has the defaults. The
 * limits hold for the whole deployment (queues_permits) unless the value
 * ends in " i" (per instance); values stored before the scope existed have
 * no suffix.
 *
 * Change feed: every put, patch and delete (one Redis function, queues.lua) also
 * bumps a version counter (QUEUES_KEY ":version") and records the field in
 * a change log (zset QUEUES_KEY ":changes", the last 1024 writes; the
 * highest version trimmed from it in QUEUES_KEY ":floor"), so an engine
 * polls with queues_feed: one cheap call when nothing changed, the changed
 * fields when it is behind by less than the log, the whole hash otherwise.
 * A tool that writes the hash directly must bump the version too (INCR
 * "hw:{queues}:version"); engines read the whole hash when they start.
 * The four keys share the hash tag {queues}, so on a Redis Cluster the
 * function's call is in one slot; before they did they were named
 * "hw:queues", "hw:queues:version", ... (queues_upgrade).
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
/* The largest parallelism the API takes. It is the same bound for both
 * scopes: a deployment's figure is shared by all its instances, so it may
 * rightly exceed one instance's HOOKWHEEL_MAX_INFLIGHT, and an instance never
 * has more in flight than its own HOOKWHEEL_MAX_INFLIGHT whatever the
 * queue's figure (instances may be configured differently, so the API
 * cannot check against the one that answers). */
#define QUEUES_PARALLELISM_MAX 1000000

typedef struct queue_controls {
    uint32_t parallelism; /* >= 1 */
    int paused;
    double rate;          /* starts per second; 0: no limit */
    int per_instance;     /* 1: parallelism and rate hold per instance; 0: for the deployment */
} queue_controls;

enum queues_status {
    QUEUES_UNREACHABLE = 0, /* Redis did not answer: nothing is known to have changed */
    QUEUES_FAILED,          /* Redis answered an error or a reply of another shape */
    QUEUES_OK
};

/* Which members of a queue_controls a patch sets (or-ed together). */
enum queues_member {
    QUEUES_SET_PARALLELISM = 1 << 0,
    QUEUES_SET_PAUSED = 1 << 1,
    QUEUES_SET_RATE = 1 << 2,
    QUEUES_SET_SCOPE = 1 << 3
};

/* put's and patch's outcome */
enum queues_put_result {
    QUEUES_PUT_REPLACED = 0, /* the field held controls already */
    QUEUES_PUT_CREATED,      /* a new field */
    QUEUES_PUT_FULL          /* refused: the hash holds `cap` fields; nothing written */
};

typedef struct queues_entry {
    const char *field; /* NUL-terminated */
    size_t field_len;
    queue_controls controls; /* when present */
    int present; /* feed: 0 when the field was deleted (or holds a malformed value): the defaults */
} queues_entry;

typedef struct queues_reply {
    enum queues_status status;
    int refused;             /* QUEUES_FAILED: STORE_REFUSES_MEMORY or STORE_REFUSES_DISK when Redis
                              * refused the call before running it (OOM, MISCONF: nothing was
                              * written); else 0 */
    int found;               /* get: the field holds well-formed controls; delete: a field was deleted */
    enum queues_put_result put; /* put, patch */
    int64_t version;         /* feed: the version the entries bring the reader to */
    int full;                /* feed: entries are the whole hash (fields not in it have the defaults) */
    queue_controls controls; /* get, when found; patch: what is stored now (found is 1), unless refused */
    size_t n;                /* list: entries */
    const queues_entry *entries; /* list: every field whose value is well formed, in the hash's order;
                                  * feed: see queues_feed */
} queues_reply;

typedef void (*queues_reply_cb)(void *arg, const queues_reply *r);

/* Every queue's controls (HGETALL); malformed values are left out. */
int queues_list(store *st, queues_reply_cb cb, void *arg) __attribute__((warn_unused_result));

/* One queue's controls; found is 0 when it has none (or a malformed value). */
int queues_get(store *st, const char *field, queues_reply_cb cb, void *arg) __attribute__((warn_unused_result));

/* Replaces one queue's controls with *c (copied before it returns), unless
 * the field is new and the hash already holds cap fields (r->put says
 * which). Bumps the version. */
int queues_put(store *st, const char *field, const queue_controls *c, uint64_t cap, queues_reply_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* Sets the members of one queue's controls that `set` (enum queues_member)
 * names to those of *c, keeping the stored others, in one Redis function
 * call, so concurrent patches of different members all hold. A queue
 * without stored controls (or with a malformed value) starts from *defaults.
 * Refused as put is when the field is new and the hash holds cap fields;
 * else r->controls is the value now stored. Bumps the version when it
 * wrote. c and defaults are copied before it returns; set must not be 0
 * (-EINVAL). */
int queues_patch(store *st, const char *field, const queue_controls *c, unsigned set, const queue_controls *defaults,
                 uint64_t cap, queues_reply_cb cb, void *arg) __attribute__((warn_unused_result));

/* Deletes one queue's controls (the queue goes back to the defaults); found
 * is 1 when there were any. Bumps the version when it deleted. */
int queues_delete(store *st, const char *field, queues_reply_cb cb, void *arg) __attribute__((warn_unused_result));

/* What changed after version `since` (-1: nothing read yet). r->version is
 * the version now. When it equals since, n is 0 and nothing changed. Else,
 * when r->full, the entries are the whole hash (every field not among them
 * has the defaults; malformed values are left out); else they are the
 * fields written after since, each present with its controls or not
 * present (deleted or malformed: the defaults). */
int queues_feed(store *st, int64_t since, queues_reply_cb cb, void *arg) __attribute__((warn_unused_result));

/* ---- deployment-wide limits (permits.lua) ----
 * An instance with work in a shared queue (stored controls, not per
 * instance) holds permits for it in Redis: a hash per queue
 * ("hw:{queues}:pm:<field>", instance -> held, rate share, want, expiry).
 * It reports, per queue, how many attempts it wants in flight (waiting +
 * in flight) and has in flight, and gets how many it may have in flight
 * (grant) and its share of the queue's rate. Across live instances the
 * permits held never exceed the parallelism, nor the rate shares the rate;
 * an instance's entry expires ttl_ms after its last call. Reporting want 0
 * and nothing in flight gives its permits back. */
typedef struct queues_demand {
    const char *field; /* NUL-terminated */
    uint32_t want, inflight;
} queues_demand;

typedef struct queues_permit {
    int shared;     /* 0: the queue has no stored controls, or per-instance ones: use them locally */
    uint32_t grant; /* attempts it may have in flight */
    double rate;    /* its share of the queue's rate; 0: no rate limit (or grant 0) */
} queues_permit;

/* ok 0: Redis did not answer or answered something else (p is NULL): keep
 * the grants held, until they expire. Else p[i] answers d[i]. */
typedef void (*queues_permits_cb)(void *arg, int ok, const queues_permit *p, size_t n);

#define QUEUES_PERMITS_MAX 256 /* queues per call */

/* One call for up to QUEUES_PERMITS_MAX queues (d copied before it returns). */
int queues_permits(store *st, const char *instance, uint32_t ttl_ms, const queues_demand *d, size_t n,
                   queues_permits_cb cb, void *arg) __attribute__((warn_unused_result));

/* Renames the keys of a build before the hash tag (hw:queues...) to the
 * current names, each only when it exists and the new name does not (one
 * call of queues.lua). For one Redis only: on a Cluster the old and new
 * names are in different slots, and a cluster never held the old names.
 * Queued before anything else the process sends, so the first read sees the
 * moved keys. Returns 0 or the store's -errno (store_eval). */
int queues_upgrade(store *st) __attribute__((warn_unused_result));

#endif
