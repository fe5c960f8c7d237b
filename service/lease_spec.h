/* lease_spec.h - a watchdog lease request (POST /leases, heartbeat,
 * release): validation and the values the API stores.
 *
 * Any thread; no shared state. Like spec.h for timers: unknown fields are
 * rejected, every error names its field (a dotted path such as
 * "on_expire.retry.max_attempts"), and the checks run in a fixed order so a
 * request with several faults always gets the same answer.
 *
 * Limits (documented in the README):
 *   key        1..LEASE_KEY_MAX characters of A-Z a-z 0-9 . _ : - (the same
 *              alphabet as timer ids, so the on_expire timer id can embed it)
 *   owner      1..LEASE_OWNER_MAX visible ASCII characters (0x21-0x7E): it is
 *              the Redis value other systems read, and a probe header
 *   ttl_ms     lim->min_ttl_ms .. lim->max_ttl_ms: LEASE_TTL_MIN_MS, or three
 *              lease worker ticks if more (ttl/3 renewals must be meaningful
 *              next to a Redis round trip and a worker tick: a worker looks
 *              at least every tick, and a lease's first renewal, or its next
 *              one after the instance that renewed it died, may wait that
 *              long)
 *   probe_url  an http(s) URL like a timer's url (length cap, no user-info,
 *              the destination policy on IP literals and localhost)
 *   on_expire  a timer spec (spec.h) without id, fire_at, fire_at_ms and
 *              repeat: it fires once, delay_ms (default 0) after the expiry
 *              is noticed. */
#ifndef HW_LEASE_SPEC_H
#define HW_LEASE_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "spec.h"

#define LEASE_KEY_MAX 100
#define LEASE_OWNER_MAX 200
#define LEASE_TTL_MIN_MS 300
#define LEASE_NS_MAX 64 /* API namespaces (auth.h) */
/* A lease id: the key in its namespace, "<namespace>/<key>" when the API
 * runs with tokens (as timers' key ids), else "<key>". */
#define LEASE_ID_MAX (LEASE_NS_MAX + 1 + LEASE_KEY_MAX + 1)
/* "lease:" + key + ":" + a token of up to 19 digits fits a timer id (128);
 * with its namespace it is a timer key id. */
#define LEASE_TIMER_ID_MAX (LEASE_NS_MAX + 1 + 128 + 1)

typedef struct lease_limits {
    uint64_t min_ttl_ms; /* lease_min_ttl_ms(tick); below LEASE_TTL_MIN_MS counts as it */
    uint64_t max_ttl_ms;
    const spec_limits *timer; /* for probe_url (max_url_len, policy) and on_expire */
} lease_limits;

typedef struct lease_request {
    char *key;
    char *owner;
    uint64_t ttl_ms;
    char *probe_url;          /* "" when none */
    timer_spec *on_expire;    /* NULL when none; its `when` is "delay_ms=N" */
} lease_request;

/* Validates a POST /leases body json[0..len) against lim. Returns 0 and
 * *out (free with lease_request_free), or -EINVAL with *err filled. now_ms
 * resolves on_expire's delay (the stored `when` keeps it relative). */
int lease_request_parse(const char *json, size_t len, const lease_limits *lim, uint64_t now_ms,
                        lease_request **out, spec_error *err) __attribute__((warn_unused_result));

/* NULL is a no-op. */
void lease_request_free(lease_request *r);

/* The smallest ttl_ms a lease may ask for with lease workers looking at
 * least every tick_ms: LEASE_TTL_MIN_MS, or 3 x tick_ms if more. */
uint64_t lease_min_ttl_ms(uint64_t tick_ms);

/* Validates a heartbeat body {owner, token?} into owner (at least
 * LEASE_OWNER_MAX + 1 bytes) and *token (0: not given). Returns 0 or
 * -EINVAL with *err filled. */
int lease_heartbeat_parse(const char *json, size_t len, char *owner, uint64_t *token, spec_error *err)
    __attribute__((warn_unused_result));

/* 1 when key / owner obey the limits above, else 0. */
int lease_key_valid(const char *key);
int lease_owner_valid(const char *owner);

/* Parses a fencing token given as text (a query parameter): 1..2^63-1.
 * Returns 0 or -EINVAL. */
int lease_token_parse(const char *text, uint64_t *token);

/* The lease id of key in namespace ns ("" without tokens) into buf
 * (LEASE_ID_MAX bytes). */
void lease_id(char *buf, const char *ns, const char *key);

/* The key part of a lease id (after its namespace). */
const char *lease_id_key(const char *lid);

/* The key id of the on_expire timer of lease lid's lease number token:
 * "lease:<key>:<token>" in the lease's namespace, so its owner reads it at
 * GET /timers/lease:<key>:<token>. Deterministic, so that instances racing
 * to create it create one timer. buf has LEASE_TIMER_ID_MAX bytes. */
void lease_timer_id(char *buf, const char *lid, const char *token);

/* The delay N of a stored `when` "delay_ms=N" (0 when malformed). */
uint64_t lease_when_delay(const char *when);

#endif
