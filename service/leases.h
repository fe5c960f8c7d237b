/* leases.h - watchdog leases (/leases): their Redis layout and the renewal
 * worker that every instance runs.
 *
 * A watchdog lease is Redisson's lock watchdog as a service: a Redis key
 * <prefix><key> holding its owner, with a TTL that hookwheel extends every
 * ttl/3 while the holder shows signs of life (heartbeats, or 2xx answers
 * from its probe_url), and leaves to expire by itself when the holder goes
 * silent; then the lease's on_expire timer is created, once.
 *
 * Redis layout, for a lease id <lid> (lease_spec.h: "<namespace>/<key>"
 * when the API runs with tokens, else "<key>"); every change is one call of
 * persistence/lua/lease.lua:
 *   <prefix><lid>                 string: the owner, PX ttl; others GET it
 *   hw:lease:token:<lid>          counter: the last fencing token (never reset,
 *                                 so tokens only grow, across releases too)
 *   hw:lease:meta:<lid>           hash: the live lease's settings and life signs
 *   hw:lease:meta:<lid>#<token>   hash: an expired lease whose on_expire timer
 *                                 is not yet confirmed created
 *   hw:lease:schedule             zset: <lid> or <lid>#<token> -> when a
 *                                 worker should next look at it (epoch ms)
 * The scripts build key names from the schedule's members, and the user's
 * key cannot carry hookwheel's partition hash tag, so leases need a single
 * Redis (not Redis Cluster).
 *
 * Threads: leases_create/start/stop/free on the main thread; the worker is
 * its own thread; the key-name helpers are pure (any thread). */
#ifndef HW_LEASES_H
#define HW_LEASES_H

#include <stddef.h>

#include "config.h"
#include "engine.h"
#include "netpolicy.h"
#include "store.h"

#define LEASES_SCHEDULE "hw:lease:schedule"
#define LEASES_META_PREFIX "hw:lease:meta:"
#define LEASES_TOKEN_PREFIX "hw:lease:token:"
#define LEASES_KEY_MAX 256 /* room for any of the keys above */

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

/* Key names; buf holds LEASES_KEY_MAX bytes. */
void leases_key(char *buf, const char *prefix, const char *lid);  /* <prefix><lid> */
void leases_meta_key(char *buf, const char *member);               /* hw:lease:meta:<member> */
void leases_token_key(char *buf, const char *lid);                 /* hw:lease:token:<lid> */

#endif
