/* leases.h - the durable format of leases: watchdog leases (/leases) and
 * the plain lease keys the watchdog renews (hookwheel's instance lease).
 *
 * The only code that knows the lease keys, the argument vectors of
 * lease.lua, renew.lua and unlock.lua, and the shape of their replies.
 * Callers pass typed values and get a decoded lease_reply (or, for the
 * worker's look at the schedule, a lease_look_reply) back.
 *
 * Threads and ownership: any thread may call a verb. A verb that returns 0
 * calls its callback exactly once, later, on the store's writer thread
 * (store.h); one that returns a negative errno (-EAGAIN: the store's queue
 * is full, -ESHUTDOWN: the store is stopping) never calls it. The reply and
 * every string in it belong to the verb and live only during the callback;
 * strings are NUL-terminated, "" when absent. A NULL callback is allowed:
 * the call is then sent and its answer dropped.
 *
 * Redis layout, for a lease id <lid> (service/lease_spec.h: "<namespace>/<key>"
 * when the API runs with tokens, else "<key>"); every change to a watchdog
 * lease is one call of persistence/lua/lease.lua:
 *   <prefix><lid>                 string: the owner, PX ttl; others GET it
 *   hw:lease:token:<lid>          counter: the last fencing token (never reset,
 *                                 so tokens only grow, across releases too)
 *   hw:lease:meta:<lid>           hash: the live lease's settings and life signs
 *   hw:lease:meta:<lid>#<token>   hash: an expired lease whose on_expire timer
 *                                 is not yet confirmed created
 *   hw:lease:schedule             zset: <lid> or <lid>#<token> -> when a
 *                                 worker should next look at it (epoch ms)
 *   hw:lease:held                 zset: <lid> -> 0 for every live lease, so a
 *                                 namespace's leases are a lex range (list)
 * The scripts build key names from the schedule's members, so every lease
 * key must be in one slot on a Redis Cluster: there the lease prefix must
 * carry a hash tag {X} (HOOKWHEEL_LEASE_PREFIX=lease:{l}:), and hookwheel's
 * names above carry it too: hw:{X}:lease:token:<lid>, hw:{X}:lease:meta:<lid>,
 * hw:{X}:lease:schedule, hw:{X}:lease:held (leases_available). One Redis keeps the names above. */
#ifndef HW_PERSISTENCE_LEASES_H
#define HW_PERSISTENCE_LEASES_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define LEASES_KEY_MAX 256 /* room for any lease key name */

/* What a verb found. LEASE_UNREACHABLE and LEASE_FAILED can answer every
 * verb; each other value names the verbs that answer it. */
enum lease_outcome {
    LEASE_UNREACHABLE = 0, /* Redis did not answer: nothing is known to have changed */
    LEASE_FAILED,          /* Redis answered an error, or a reply of another shape (error says which) */
    LEASE_ACQUIRED,        /* acquire: a new lease and a new token */
    LEASE_REACQUIRED,      /* acquire: this owner holds it with these settings; noted as a heartbeat */
    LEASE_OTHER_SETTINGS,  /* acquire: this owner holds it with other settings */
    LEASE_HELD_BY_OTHER,   /* acquire, heartbeat, release: another owner holds the key, a later
                              lease of this owner does (the token differs), or a value set
                              outside hookwheel */
    LEASE_NOTED,           /* heartbeat: the sign of life is recorded */
    LEASE_RELEASED,        /* release, unlock: the key is deleted */
    LEASE_FOUND,           /* get */
    LEASE_NOT_HELD,        /* heartbeat, release, get: no such key; unlock: gone or another value */
    LEASE_RENEWED,         /* extend: the key was extended */
    LEASE_RECREATED,       /* extend: the key was gone and is set again (recreate) */
    LEASE_LOST,            /* extend: the key is gone (without recreate) or holds another value */
    LEASE_CONFIRMED,       /* confirm_expiry: the pending expiry is forgotten */
    LEASE_LOOKED,          /* look: the due entries were handled (lease_look_reply) */
    LEASE_LISTED           /* list: a slice of the held leases (lease_list_reply) */
};

/* A lease as Redis holds it. holder and pttl_ms describe the key itself;
 * the rest is set only when a hookwheel lease holds it (token != 0). Times
 * are epoch ms, 0 when never. */
typedef struct lease_info {
    const char *holder;    /* the key's value */
    int64_t pttl_ms;       /* the key's remaining ttl (Redis PTTL) */
    uint64_t token;        /* fencing token; 0: the key is not a hookwheel lease's */
    int64_t ttl_ms;
    int64_t acquired_ms, heartbeat_ms, probe_ok_ms, renewed_ms, alive_ms;
    const char *probe_url; /* "" when none */
    const char *on_expire; /* the on_expire timer's stored spec, "" when none */
    size_t on_expire_len;
    const char *when;      /* on_expire's stored `when` ("delay_ms=N") */
} lease_info;

typedef struct lease_reply {
    enum lease_outcome outcome;
    const char *error; /* LEASE_FAILED: Redis's error text; else NULL */
    int refused;       /* LEASE_FAILED: STORE_REFUSES_MEMORY or STORE_REFUSES_DISK when Redis refused
                          the call before running it (OOM, MISCONF: nothing was written); else 0 */
    /* acquire, heartbeat, get: the lease (for HELD_BY_OTHER, whoever holds the
     * key); release: token of the lease released; other verbs: zero. */
    lease_info info;
} lease_reply;

typedef void (*lease_reply_cb)(void *arg, const lease_reply *r);

/* ---- watchdog leases (/leases) ---- */

typedef struct lease_acquire_req {
    const char *prefix;    /* the user keys' prefix (HOOKWHEEL_LEASE_PREFIX) */
    const char *lid;       /* the lease id */
    const char *owner;
    uint64_t ttl_ms;
    uint64_t now_ms;
    const char *probe_url; /* "" when none */
    const char *on_expire; /* stored spec of the on_expire timer, "" when none */
    size_t on_expire_len;
    const char *when;      /* its `when`, "" when none */
} lease_acquire_req;

/* SET NX PX of the lease key with a new fencing token, and the lease's
 * schedule entry a period (ttl/3) away. The same owner with the same
 * settings again counts as a heartbeat (LEASE_REACQUIRED). */
int leases_acquire(store *st, const lease_acquire_req *q, lease_reply_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* The sign of life a heartbeat records. */
enum lease_sign { LEASE_SIGN_HEARTBEAT, LEASE_SIGN_PROBE_OK };

/* The holder `owner` (with token, 0: any) is alive at now_ms: LEASE_NOTED,
 * and a holder that had fallen silent is looked at again at once. */
int leases_heartbeat(store *st, const char *prefix, const char *lid, const char *owner, uint64_t token,
                     uint64_t now_ms, enum lease_sign sign, lease_reply_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* The lease at lid: LEASE_FOUND (a key set outside hookwheel has token 0)
 * or LEASE_NOT_HELD. */
int leases_get(store *st, const char *prefix, const char *lid, lease_reply_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* Compare-and-delete by owner (and token, 0: any); a released lease never
 * fires on_expire, and the token counter stays. */
int leases_release(store *st, const char *prefix, const char *lid, const char *owner, uint64_t token,
                   lease_reply_cb cb, void *arg) __attribute__((warn_unused_result));

/* What a look asks the worker to do. */
enum lease_action_kind {
    LEASE_ACTION_PROBE,  /* GET url: the holder was quiet for a period (lid, token, owner, ttl_ms, url) */
    LEASE_ACTION_EXPIRE, /* create the on_expire timer, then confirm (member, lid, token, on_expire, when) */
    LEASE_ACTION_GONE    /* expired without on_expire; for the log (lid, token: 0 when unknown) */
};

typedef struct lease_action {
    enum lease_action_kind kind;
    const char *member;    /* the schedule member to confirm */
    const char *lid;
    uint64_t token;
    const char *owner;
    int64_t ttl_ms;
    const char *url;
    const char *on_expire;
    size_t on_expire_len;
    const char *when;
} lease_action;

typedef struct lease_look_req {
    uint64_t now_ms;
    uint32_t limit;        /* due entries handled by one look */
    const char *prefix;    /* the user keys' prefix */
    uint64_t retry_ms;     /* an unconfirmed expiry is offered again after this */
    uint64_t back_ms;      /* the wall clock stepped back this much since the last look (0: it did
                              not): the times written before the step move back first */
} lease_look_req;

typedef struct lease_look_reply {
    enum lease_outcome outcome; /* LEASE_LOOKED, LEASE_UNREACHABLE or LEASE_FAILED */
    const char *error;          /* LEASE_FAILED: Redis's error text */
    uint64_t renewed;           /* leases extended by this look */
    int64_t next_ms;            /* the earliest entry left; -1: the schedule is empty */
    size_t nactions;
    const lease_action *actions;
} lease_look_reply;

typedef void (*lease_look_cb)(void *arg, const lease_look_reply *r);

/* A worker's look at the schedule (lease.lua "renew"): every due entry is
 * handled and rescheduled in the same atomic call: live leases whose holder
 * is alive are extended; the others yield actions. */
int leases_look(store *st, const lease_look_req *q, lease_look_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* The on_expire timer of the pending expiry `member` (an action's member)
 * exists: forget the expiry (LEASE_CONFIRMED). */
int leases_confirm_expiry(store *st, const char *prefix, const char *member, lease_reply_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* One lease of a listing: its id and what leases_get would answer. */
typedef struct lease_listed {
    const char *lid;
    lease_info info;
} lease_listed;

typedef struct lease_list_reply {
    enum lease_outcome outcome; /* LEASE_LISTED, LEASE_UNREACHABLE or LEASE_FAILED */
    const char *error;          /* LEASE_FAILED: Redis's error text */
    int more;                   /* 1: leases may follow `last` */
    const char *last;           /* the last id examined ("" when none): where the next slice starts */
    size_t n;
    const lease_listed *leases; /* in lex order of their ids */
} lease_list_reply;

typedef void (*lease_list_cb)(void *arg, const lease_list_reply *r);

/* A slice of namespace ns's live leases in lex order of their ids
 * ("<ns>/<key>"; ns "": the open API's, ids without '/'), from the id after
 * `after` (NULL or "": from the first): at most `limit` leases, after
 * examining at most `budget` entries of the index (hw:lease:held), so one
 * call stays short however many leases exist. Leases made by a build
 * without the index appear once the watchdog has renewed them (a third of
 * their ttl). */
int leases_list(store *st, const char *prefix, const char *ns, const char *after, uint32_t limit, uint32_t budget,
                lease_list_cb cb, void *arg) __attribute__((warn_unused_result));

/* 1 when watchdog leases under prefix can live in st: always on one Redis;
 * on a Redis Cluster only when the prefix carries a hash tag ("lease:{l}:"),
 * which then puts every lease in that one slot. Without it every verb above
 * that takes a prefix returns -EXDEV. */
int leases_available(store *st, const char *prefix);

/* ---- plain lease keys (the watchdog: hookwheel's instance lease) ---- */

/* Compare-and-extend (renew.lua): key's ttl becomes ttl_ms if it holds
 * value (LEASE_RENEWED); with recreate set a key found gone is set again
 * (LEASE_RECREATED), else LEASE_LOST. */
int leases_extend(store *st, const char *key, const char *value, uint64_t ttl_ms, int recreate,
                  lease_reply_cb cb, void *arg) __attribute__((warn_unused_result));

/* Compare-and-delete (unlock.lua): LEASE_RELEASED if key held value, else
 * LEASE_NOT_HELD. */
int leases_unlock(store *st, const char *key, const char *value, lease_reply_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* ---- names (pure; any thread) ---- */

/* Key names; buf holds LEASES_KEY_MAX bytes. */
void leases_key(char *buf, const char *prefix, const char *lid);  /* <prefix><lid> */
void leases_meta_key(char *buf, const char *member);               /* hw:lease:meta:<member> */
void leases_token_key(char *buf, const char *lid);                 /* hw:lease:token:<lid> */

/* 1 when the lease key of lid under prefix would be one of hookwheel's own
 * names (hw:...), which a client must not reach through /leases: an empty
 * or short prefix would otherwise let it release an instance's lease. */
int leases_name_reserved(const char *prefix, const char *lid);

#endif
