/* leases.h - watchdog leases (/leases): the renewal worker that every
 * instance runs.
 *
 * A watchdog lease is Redisson's lock watchdog as a service: a Redis key
 * <prefix><key> holding its owner, with a TTL that hookwheel extends every
 * ttl/3 while the holder shows signs of life (heartbeats, or 2xx answers
 * from its probe_url), and leaves to expire by itself when the holder goes
 * silent; then the lease's on_expire timer is created, once.
 *
 * The Redis layout and every call that changes it are persistence/leases.h's;
 * its key-name helpers (leases_key, ...) come with this header.
 *
 * Threads: leases_create/start/stop/free on the main thread; the worker is
 * its own thread. */
#ifndef HW_SERVICE_LEASES_H
#define HW_SERVICE_LEASES_H

#include <stddef.h>

#include "config.h"
#include "engine.h"
#include "netpolicy.h"
#include "persistence/leases.h"

typedef struct leases leases; /* opaque */

/* The worker for cfg (the lease settings), with its own store on the Redis
 * at redis_url (store.h), creating on_expire timers through eng (as POST
 * /timers does), probing under policy (NULL: none). cfg, eng and policy
 * must outlive it. Returns NULL after logging when the URL is invalid or
 * curl cannot be set up.
 *
 * Why its own store: the worker looks at Redis every tick, even when no
 * lease exists. On the API's pipelined connection, a Redis stall would
 * then time that connection out before a request's write is even sent, and
 * requests would see failures that were the worker's; with its own
 * connection (and writer thread, idle but for the looks) renewals never
 * wait behind a big batch of creates either. */
leases *leases_create(const config *cfg, const char *redis_url, engine *eng, const netpolicy *policy);

/* Connects its store and starts the worker thread. Returns 0 or -errno. */
int leases_start(leases *l) __attribute__((warn_unused_result));

/* Stops the worker (probes in flight are dropped), joins it, and frees its
 * store (which answers the commands still queued). From now on other
 * instances renew the leases; an on_expire this instance was creating is
 * offered to them again. eng must still exist. NULL: no-op. */
void leases_stop(leases *l);

/* Stops l if needed and frees it. NULL is a no-op. */
void leases_free(leases *l);

#endif
