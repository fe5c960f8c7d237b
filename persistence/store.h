/* store.h - the Redis store: one writer thread that pipelines every queued
 * command (group commit).
 *
 * Any thread may submit; the writer thread owns the hiredis connection,
 * appends everything queued in one go, reads the replies in order and calls
 * each command's callback on the writer thread. The one exception to the
 * order: the bulk calls (a listing's page, the counts, a selector's or
 * dead-letter operation's chunk, store_eval_bulk's) go at most
 * BULK_PER_BATCH (2) a batch; the others wait for the next batches, in
 * their order, while what is queued after them goes on. A callback must be quick:
 * it answers an HTTP request or posts to the engine's inbox, never blocks.
 *
 * Scripts (persistence/lua/) are one Redis function library (Redis 7.0+),
 * loaded on every connect and called with FCALL; a "Function not found"
 * reply (a restarted or flushed Redis) loads it again and resends the
 * command once.
 *
 * When Redis cannot be reached the callback gets reply == NULL: nothing is
 * known to have been written. (A command whose connection broke after it
 * was sent may still have run; every script is safe to repeat for the
 * caller's purposes: create is idempotent by id, the others check state.) */
#ifndef HW_STORE_H
#define HW_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

typedef struct store store; /* opaque */

enum store_script {
    SCRIPT_CREATE,
    SCRIPT_CREATE_BATCH, /* POST /timers/batch: a partition's creates in one call */
    SCRIPT_SELECT, /* selector operations: POST /timers/cancel, pause, resume, reschedule */
    SCRIPT_GET,
    SCRIPT_MIGRATE,
    SCRIPT_CLAIM,
    SCRIPT_BEGIN,
    SCRIPT_FINISH,
    SCRIPT_CANCEL,
    SCRIPT_RELEASE,
    SCRIPT_CONTROL,
    SCRIPT_LIST,
    SCRIPT_DEADLETTERS,
    SCRIPT_RENEW,
    SCRIPT_UNLOCK,
    SCRIPT_LEASE, /* every watchdog lease operation (lease.lua; service/leases.h) */
    SCRIPT_QUEUES, /* queue controls' writes and change feed (queues.lua; persistence/queues.h) */
    SCRIPT_PERMITS, /* shared queues' permits (permits.lua; persistence/queues.h) */
    SCRIPT_COUNTS,  /* counts per queue and state: read and rebuild (counts.lua; persistence/counts.h) */
    SCRIPT_STATS,   /* per-minute delivery figures: an instance's additions (stats.lua; persistence/stats.h) */
    SCRIPT_HELD,     /* the firing timers of an instance's claims (held.lua; timers_held) */
    SCRIPT_HANDBACK, /* hands back those the instance no longer runs (handback.lua; timers_hand_back) */
    SCRIPT_GET_RO,    /* the no-writes twins of the readers (store_eval_read) */
    SCRIPT_LIST_RO,
    SCRIPT_COUNTS_RO,
    SCRIPT_LEASE_RO,
    SCRIPT_LEASE_ACQUIRE, /* lease.lua's acquire: the one lease operation Redis refuses at maxmemory */
    SCRIPT_WRITABLE,      /* writes nothing, refused when Redis refuses writes (store_probe_writes) */
    SCRIPT_COUNT
};

/* Called on the writer thread; reply is NULL when Redis was unreachable and
 * is freed after the callback returns. */
typedef void (*store_reply_cb)(void *arg, const redisReply *reply);

/* Detaches element i of the array reply r (the one a callback was given)
 * and returns it, the caller's to free with freeReplyObject; the store
 * frees the rest. NULL when r has no such element. For a callback that
 * leaves the work on what Redis answered to another thread. */
redisReply *store_reply_take(const redisReply *r, size_t i);


/* 1 when url has one of the forms store_create takes (its syntax only:
 * nothing is resolved or connected). */
int store_url_valid(const char *url);
/* Parses url and prepares the store; max_queued bounds the commands waiting
 * for the writer. Returns NULL after logging one line when url is invalid.
 * The URL is one of
 *   redis://[user][:password@]host[:port][/db]    one Redis
 *   unix:///path                                   one Redis, on a unix socket
 *   redis+cluster://[user[:password]@]host:port[,host:port...]
 *       a Redis Cluster: the writer learns the slot map from these seed
 *       nodes (CLUSTER SLOTS), keeps a connection and a pipeline per master,
 *       sends each command to the master of its key's slot (FCALL: its first
 *       key; a plain command: argv[1]), follows MOVED (and learns the map
 *       again) and ASK (ASKING, once), waits briefly on TRYAGAIN, and loads
 *       the function library on every master it connects to. A function
 *       call that meets its slot in migration is held and sent again every
 *       20 ms until the slot has moved; held for STORE_HOLD_MAX_MS (a claim:
 *       STORE_CLAIM_HOLD_MAX_MS) it gets reply NULL, having never run.
 *   redis+sentinel://[user[:password]@]host:port[,host:port...]/<master>[/db]
 *       one Redis whose master Redis Sentinel names: before every connect
 *       the writer asks the sentinels (in the URL's order) where <master>
 *       is and checks ROLE; a lost connection or a READONLY answer (a
 *       demoted master) makes it ask again, and so does a watcher thread
 *       that asks them every 500 ms and has the writer leave a master they
 *       no longer name, so a failover, planned ones too, is followed
 *       without a restart. The user part is the data nodes'.
 *   rediss://..., rediss+cluster://..., rediss+sentinel://...
 *       the same over TLS to every node (sentinels included), with the
 *       settings of store_tls_init, which must have succeeded before. */
store *store_create(const char *url, uint32_t timeout_ms, uint32_t max_queued);
#define STORE_HOLD_MAX_MS 10000
#define STORE_CLAIM_HOLD_MAX_MS 200

/* TLS for rediss:// URLs. The server's certificate must chain to ca_file
 * (PEM; NULL: the system's default CAs) and, when verify_host is set, name
 * the host the connection was made to (the URL's, or a node's address as
 * the cluster or the sentinels name it). cert_file and key_file (PEM, the
 * key unencrypted; both or neither) are the client's certificate for
 * servers that ask for one (mutual TLS). */
typedef struct store_tls {
    const char *ca_file, *cert_file, *key_file;
    int verify_host;
} store_tls;

enum store_tls_file { STORE_TLS_CA, STORE_TLS_CERT, STORE_TLS_KEY };

/* Main thread, before the first store_create of a rediss:// URL: loads the
 * files into the one TLS context every store of the process uses (the API's
 * and the lease worker's). Returns 0; or -EINVAL when a file cannot be used,
 * with *bad naming it and OpenSSL's reason in err. */
int store_tls_init(const store_tls *t, enum store_tls_file *bad, char *err, size_t size)
    __attribute__((warn_unused_result));

/* Frees what store_tls_init loaded, after every store is freed. */
void store_tls_cleanup(void);

/* Connects (a failure is logged; the writer reconnects on demand) and starts
 * the writer thread. Returns 0, or -errno when the thread cannot start. */
int store_start(store *s) __attribute__((warn_unused_result));

/* Stops the writer after the commands already queued were sent; commands
 * submitted afterwards get reply NULL at once. Frees s. NULL is a no-op. */
/* Waits until nothing is queued and no batch is in flight (the callbacks of
 * what was queued have run, and what they queued in turn), at most
 * timeout_ms. 0, or -ETIMEDOUT. Before the HTTP server stops: its requests'
 * callbacks answer them while they are still there. */
int store_drain(store *s, uint32_t timeout_ms);
void store_free(store *s);

/* 1 when the last contact with Redis succeeded and the scripts are loaded. */
int store_ready(const store *s);

/* 1 while the store is not ready because Redis (on a Redis Cluster: a
 * master) is loading its dataset after a restart; any thread. */
int store_loading(const store *s);

/* Why Redis refuses writes, when it (on a Redis Cluster: any master)
 * refused one within the last STORE_OOM_HOLD_MS and no function call
 * succeeded on it since: for lack of memory (OOM: maxmemory reached), of
 * disk (MISCONF: its AOF or RDB could not be written) or of replicas
 * (NOREPLICAS: fewer good replicas than its min-replicas-to-write); 0 when
 * it takes them. Any thread. */
#define STORE_OOM_HOLD_MS 2000
enum { STORE_REFUSES_MEMORY = 1, STORE_REFUSES_DISK = 2, STORE_REFUSES_REPLICAS = 3 };
int store_refusing_writes(const store *s);
/* What a refusal means, for a person: "maxmemory reached", ...; NULL for 0. */
const char *store_refusal_text(int refusal);
/* Asks Redis whether it takes new work (a create, a lease's acquire), with
 * a call that writes nothing and that Redis refuses when it would refuse
 * those, so that store_refusing_writes says so without waiting for a
 * refused request, and stops saying so once Redis takes them again. On a
 * Redis Cluster one call per key of keys[nkeys] (one a partition: each goes
 * to the master of its slot, so a full master is asked too); else one
 * call. At most one round waits at a time (a second ask meanwhile returns
 * 0). Returns 0, or what store_eval returned for a call not sent. Any
 * thread. */
int store_probe_writes(store *s, uint32_t nkeys, const char *const *keys);

/* Why Redis refused the call whose reply is r before running it:
 * STORE_REFUSES_MEMORY for an OOM error (maxmemory reached, noeviction),
 * STORE_REFUSES_DISK for a MISCONF one (its AOF or RDB could not be
 * written), STORE_REFUSES_REPLICAS for a NOREPLICAS one; 0 for any other
 * reply (NULL too). Redis refuses a function
 * that may write before it runs, so nothing of a call refused so was
 * written. */
int store_reply_refusal(const redisReply *r);

/* Before store_start: every batch with a write the API acknowledges (the
 * functions create, cancel, control, queues, lease, deadletters) ends with
 * WAIT n timeout_ms on its master, and those calls' callbacks run once its
 * answer is in; when fewer than n replicas acknowledged, they get reply
 * NULL (as when Redis is unreachable: the write may have happened, on the
 * master only). The engine's own steps, reads and plain commands do not
 * wait. 0: never wait (the default). */
void store_set_min_replicas(store *s, int n, uint32_t timeout_ms);

/* 1 when the URL named a Redis Cluster. Any thread. */
int store_is_cluster(const store *s);

/* Cluster routing counters since the start (all 0 for one Redis). */
typedef struct store_stats {
    uint64_t moved;         /* MOVED redirections followed */
    uint64_t ask;           /* ASK redirections followed */
    uint64_t tryagain;      /* TRYAGAIN replies waited out */
    uint64_t map_refreshes; /* slot maps learned */
    uint64_t masters;       /* masters in the current map */
    uint64_t replica_ack_timeouts; /* WAITs that ended with fewer replicas than asked */
} store_stats;

/* Any thread: relaxed reads of the writer's counters. */
void store_get_stats(const store *s, store_stats *out);

/* Commands waiting for the writer (what max_queued bounds). Any thread; holds
 * the submit lock only to read one number. */
uint32_t store_queued(store *s);

/* The cap on queued commands (store_create's max_queued). Any thread. */
uint32_t store_max_queued(const store *s);

/* Queues FCALL of script with nkeys keys followed by the other arguments
 * (argv[0..argc) holds keys then args; lens may be NULL for C strings).
 * Returns 0, and cb is called exactly once later; or -EAGAIN when the queue
 * is full, or -ESHUTDOWN after store_free began, and cb is never called. */
int store_eval(store *s, enum store_script script, int nkeys, int argc, const char **argv,
               const size_t *lens, store_reply_cb cb, void *arg) __attribute__((warn_unused_result));

/* store_eval for a reader that may write (SCRIPT_GET, SCRIPT_LIST,
 * SCRIPT_COUNTS' read, SCRIPT_LEASE's get and list: an older layout's
 * upgrade, a stale index entry's removal), which Redis refuses before it
 * runs while it refuses writes (MISCONF: a failed AOF write or RDB save;
 * OOM at maxmemory for those not registered allow-oom). While the store
 * has seen such a refusal the call goes as the script's no-writes twin
 * (the same code, told not to write), and a call refused so is sent once
 * more as the twin, so what Redis holds stays readable. */
int store_eval_read(store *s, enum store_script script, int nkeys, int argc, const char **argv,
                    const size_t *lens, store_reply_cb cb, void *arg) __attribute__((warn_unused_result));

/* store_eval for a call over many timers for one request that the script
 * alone does not say (create_batch of POST /timers/batch, where the creates
 * that waited for their partition's call are not): it goes with the bulk
 * functions, BULK_PER_BATCH a batch (the head of this file). */
int store_eval_bulk(store *s, enum store_script script, int nkeys, int argc, const char **argv, const size_t *lens,
                    store_reply_cb cb, void *arg) __attribute__((warn_unused_result));

/* store_eval for a command that carries writes admitted earlier within the
 * cap (timers.c: creates that waited for their partition's call): a full
 * queue does not refuse it, so it can exceed the cap by what was admitted. */
int store_eval_admitted(store *s, enum store_script script, int nkeys, int argc, const char **argv,
                        const size_t *lens, store_reply_cb cb, void *arg) __attribute__((warn_unused_result));

/* Queues a plain command (argv[0] is the command name); same contract as
 * store_eval. */
int store_command(store *s, int argc, const char **argv, const size_t *lens, store_reply_cb cb,
                  void *arg) __attribute__((warn_unused_result));

/* Helpers for callbacks: the integer at index i of an array reply (or of an
 * integer reply when i < 0), or def when absent or of another type. */
long long store_reply_int(const redisReply *r, int i, long long def);

/* In a callback given no reply (on the store's thread, before it
 * returns): 1 when Redis never ran the call (it was not sent: no
 * connection, no master for its slot; or Redis refused it before running
 * it: READONLY, CLUSTERDOWN), so nothing it would write was written; 0
 * when it may have run (the connection broke after it was sent, or the
 * replicas did not acknowledge it). */
int store_call_unsent(void);

/* The string at index i of an array reply, or NULL; *len gets its length. */
const char *store_reply_str(const redisReply *r, int i, size_t *len);

#endif
