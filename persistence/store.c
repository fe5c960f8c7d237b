/* store.c - the writer thread and its pipeline.
 *
 * Submitters format their command on their own thread (format_resp)
 * and append it to a mutex-protected FIFO. The writer takes the whole FIFO at
 * once, appends every command to the connection's output buffer, and reads
 * the replies in order: many requests' writes share one round trip (group
 * commit), and the lock is held only to splice a list.
 *
 * Connection loss fails the batch in flight (callbacks get NULL) and the
 * writer reconnects on a later batch, with a backoff doubling from
 * RECONNECT_MIN_MS to RECONNECT_MAX_MS between tries, so while Redis is down
 * submitters learn it at once instead of queueing behind a timeout, and a
 * dead Redis is not hammered with connection attempts. */
#include "store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <hiredis/sds.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#include "clock.h"
#include "cluster.h"
#include "jsonesc.h"
#include "log.h"
#include "lua_scripts.h"
#include "xalloc.h"

#define RECONNECT_MIN_MS 50
#define RECONNECT_MAX_MS 2000
#define SENTINEL_POLL_MS 500 /* how often the sentinels are asked where the master is */
#define KEY_GUARD_MAX 160
#define BULK_PER_BATCH 2 /* bulk calls (cmd.bulk) a batch takes at most */

typedef struct cmd {
    struct cmd *next;
    char *buf;
    int len;
    int slot; /* cluster: the slot of the command's key, -1 none */
    uint64_t held_since; /* when it was first held back (0: never) */
    uint32_t hold_max_ms; /* held longer, it fails (it never ran) */
    int writes;          /* a write the API acknowledges: only once replicas have it */
    int bulk;            /* a call over many timers for one request: BULK_PER_BATCH a batch */
    redisReply *reply;   /* its reply while the replicas' acknowledgement is read */
    store_reply_cb cb;
    void *arg;
} cmd;

/* A connection to one Redis. hiredis formats the commands (into
 * ctx->obuf) and parses the replies (ctx->reader); on a rediss:// store ssl
 * moves the bytes over ctx's socket, else hiredis does its own I/O. */
typedef struct conn {
    redisContext *ctx;
    SSL *ssl; /* NULL: plain */
} conn;

/* One Redis server the writer talks to: the only one, or a cluster master.
 * Its fields are the writer thread's. */
typedef struct node {
    char *host;         /* NULL: the store's unix socket */
    int port;
    conn conn;          /* ctx NULL: not connected */
    uint64_t last_try_ms;
    uint64_t backoff_ms; /* wait before the next connect */
    int warned;          /* the outage was logged */
    uint64_t down_logged_ms; /* cluster: when its CLUSTERDOWN answers were last logged */
    uint64_t down_calls;     /* cluster: calls it answered CLUSTERDOWN since then */
    cmd *q, **qtail;     /* this batch's commands for it, in order */
    int waited;          /* a WAIT follows them (a write among them, min_replicas > 0) */
    int loading;         /* it answered LOADING at its last connect: loading its dataset */
    int refusal;         /* why it last refused a write (STORE_REFUSES_...) */
    uint64_t refused_ms; /* when (0: a write passed since): note_writable */
} node;

struct store {
    char *host, *path, *user, *password;
    int port, db;
    int tls;                   /* rediss...: every connection is TLS (store_tls_init) */
    uint32_t timeout_ms, max_queued;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_cond_t idle_cv;    /* broadcast when nothing is queued or in flight (store_drain) */
    int busy;                  /* a batch is in flight (its callbacks may queue more) */
    cmd *head, **tail;
    uint32_t queued;
    uint32_t bulk_queued;      /* of which bulk calls (take_batch) */
    int stopping, started;
    pthread_t thread;

    /* writer thread only: nodes[0] is the Redis of a single-node store; in
     * cluster mode nodes[i] is map->nodes[i], the masters. */
    node nodes[CLUSTER_MAX_NODES];
    int nnodes;
    int cluster;               /* redis+cluster:// */
    char *sentinel;            /* redis+sentinel://: the master's name; s->host is where it is */
    pthread_t watcher;         /* sentinel: asks the sentinels every SENTINEL_POLL_MS (watch_main) */
    int watching;              /* the watcher thread runs */
    pthread_cond_t watch_cv;   /* wakes the watcher when the store stops */
    char named_host[CLUSTER_HOST_MAX]; /* under mu: the master the sentinels named */
    int named_port;            /* when the watcher last asked (0: none answered) */
    cluster_node *seeds;       /* cluster: the URL's nodes */
    int nseeds;
    cluster_map *map;          /* cluster: slot -> master; NULL until learned */
    int map_stale;             /* a redirection or a lost master: learn it again */
    int map_partial;           /* cluster: the map has slots without a master (logged once) */
    uint64_t map_try_ms;
    cmd *held, **held_tail;    /* cluster: calls to retry after held_until, in order */
    uint64_t held_until;
    uint32_t *held_slots;      /* cluster: held calls per slot (later ones wait behind them) */

    int min_replicas;          /* WAIT for this many replicas after writes (0: no) */
    uint32_t replica_timeout_ms;

    volatile int ready;     /* written by the writer, read by anyone */
    volatile int loading;   /* the same: a node answered LOADING at its last connect (store_loading) */
    volatile uint64_t oom_ms; /* when Redis last refused a write (0: since then one passed) */
    volatile int refusal;     /* why: STORE_REFUSES_MEMORY, _DISK or _REPLICAS */
    atomic_int probing;       /* store_probe_writes' calls that wait for their replies */
    store_stats stats;      /* written by the writer (relaxed atomics), read by anyone */
};

/* The scripts, as one Redis function library (FUNCTION LOAD, Redis 7.0+):
 * the prelude's helpers are made once when the library loads, where EVALSHA
 * would make them again on every call (bench/script_cost.py: ~2 us of
 * Redis per create). Each script file's body becomes the body of a function
 * function(KEYS, ARGV), so it reads as an EVAL script does. The library and
 * function names carry a hash of the code, so instances of different builds
 * sharing a Redis each call their own.
 *
 * A function registered without flags is refused with OOM while Redis is at
 * its maxmemory (noeviction). Only what adds work is: a create, a batch, a
 * lease's acquire (its own registration of lease.lua, SCRIPT_LEASE_ACQUIRE),
 * a queue's controls, the counts rebuild and the start-up move of an older
 * layout. Everything that carries on with what Redis already holds is
 * registered allow-oom: the claims, begins and finishes that deliver due
 * timers, the hand-backs, cancels, instructions, selectors and dead-letter
 * replays and purges, the renewals of leases (the instance's and every
 * watchdog lease: Redis at maxmemory must not end a lock whose holder
 * lives), heartbeats and releases, permits and figures. They change records
 * in place or delete; what they add (an attempt's outcome, a callback timer,
 * a minute's figures) follows deliveries, whose records then expire, so
 * Redis goes past maxmemory by little while it refuses new work, as it lets
 * DEL and EXPIRE do. The readers behind GET /timers/{id} and GET /timers
 * may write too (get upgrades a record of an older layout in place, list
 * drops index entries of expired timers): allow-oom, so what Redis holds
 * stays readable. held only reads. SCRIPT_WRITABLE writes nothing and has no
 * flags: Redis refuses it exactly when it refuses new work, which is what
 * store_probe_writes asks. A failed AOF write or RDB save (MISCONF: a full
 * disk) makes Redis refuse every function that may write, allow-oom or not,
 * before it runs: get and list have no-writes twins for that time and so
 * have the other readers (store_eval_read): the same code, whose prelude is
 * told not to write (READ_ONLY). no-writes implies allow-oom. */
#define GOES_ON "{'allow-oom'}"
#define READ_FLAGS GOES_ON
static const struct {
    const char *name, *src;
    const char *flags; /* register_function's, as a Lua table; NULL: none */
    int read_only;     /* no-writes, and the prelude's READ_ONLY set */
} scripts[SCRIPT_COUNT] = {
    [SCRIPT_CREATE] = {"create", lua_create},
    [SCRIPT_CREATE_BATCH] = {"create_batch", lua_create_batch},
    [SCRIPT_SELECT] = {"select", lua_select, GOES_ON},
    [SCRIPT_GET] = {"get", lua_get, READ_FLAGS},
    [SCRIPT_MIGRATE] = {"migrate", lua_migrate},
    [SCRIPT_CLAIM] = {"claim", lua_claim, GOES_ON},
    [SCRIPT_BEGIN] = {"begin", lua_begin, GOES_ON},
    [SCRIPT_FINISH] = {"finish", lua_finish, GOES_ON},
    [SCRIPT_CANCEL] = {"cancel", lua_cancel, GOES_ON},
    [SCRIPT_RELEASE] = {"release", lua_release, GOES_ON},
    [SCRIPT_CONTROL] = {"control", lua_control, GOES_ON},
    [SCRIPT_LIST] = {"list", lua_list, READ_FLAGS},
    [SCRIPT_DEADLETTERS] = {"deadletters", lua_deadletters, GOES_ON},
    [SCRIPT_RENEW] = {"renew", lua_renew, GOES_ON},
    [SCRIPT_UNLOCK] = {"unlock", lua_unlock, GOES_ON},
    [SCRIPT_LEASE] = {"lease", lua_lease, GOES_ON},
    [SCRIPT_QUEUES] = {"queues", lua_queues},
    [SCRIPT_PERMITS] = {"permits", lua_permits, GOES_ON},
    [SCRIPT_COUNTS] = {"counts", lua_counts},
    [SCRIPT_STATS] = {"stats", lua_stats, GOES_ON},
    [SCRIPT_HELD] = {"held", lua_held, "{'no-writes'}"},
    [SCRIPT_HANDBACK] = {"handback", lua_handback, GOES_ON},
    [SCRIPT_GET_RO] = {"get_ro", lua_get, "{'no-writes'}", 1},
    [SCRIPT_LIST_RO] = {"list_ro", lua_list, "{'no-writes'}", 1},
    [SCRIPT_COUNTS_RO] = {"counts_ro", lua_counts, "{'no-writes'}", 1},
    [SCRIPT_LEASE_RO] = {"lease_ro", lua_lease, "{'no-writes'}", 1},
    [SCRIPT_LEASE_ACQUIRE] = {"lease_acquire", lua_lease},
    [SCRIPT_WRITABLE] = {"writable", "return 1\n"},
};
/* A reader's no-writes twin (store_eval_read); SCRIPT_COUNT: none. */
static enum store_script twin_of(enum store_script s)
{
    switch (s) {
    case SCRIPT_GET: return SCRIPT_GET_RO;
    case SCRIPT_LIST: return SCRIPT_LIST_RO;
    case SCRIPT_COUNTS: return SCRIPT_COUNTS_RO;
    case SCRIPT_LEASE: return SCRIPT_LEASE_RO;
    default: return SCRIPT_COUNT;
    }
}
static char lib_name[32];                    /* hw_<12 hex of the code's SHA-1> */
static char fn_name[SCRIPT_COUNT][48];       /* <lib_name>_<script> */
static char *lib_src;                        /* the library, as FUNCTION LOAD takes it */
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

static void build_library(void)
{
    EVP_MD_CTX *h = EVP_MD_CTX_new();
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    size_t len = strlen(lua__prelude) + 64;
    if (!h || !EVP_DigestInit_ex(h, EVP_sha1(), NULL))
        abort();
    EVP_DigestUpdate(h, lua__prelude, strlen(lua__prelude));
    for (int i = 0; i < SCRIPT_COUNT; i++) {
        EVP_DigestUpdate(h, scripts[i].name, strlen(scripts[i].name) + 1);
        EVP_DigestUpdate(h, scripts[i].src, strlen(scripts[i].src) + 1);
        if (scripts[i].flags)
            EVP_DigestUpdate(h, scripts[i].flags, strlen(scripts[i].flags) + 1);
        EVP_DigestUpdate(h, scripts[i].read_only ? "r" : "w", 1);
        len += strlen(scripts[i].src) + 192;
    }
    EVP_DigestFinal_ex(h, md, &n);
    EVP_MD_CTX_free(h);
    memcpy(lib_name, "hw_", 3);
    for (unsigned int j = 0; j < 6; j++)
        snprintf(lib_name + 3 + 2 * j, 3, "%02x", md[j]);
    lib_src = xmalloc(len);
    size_t k = (size_t)snprintf(lib_src, len, "#!lua name=%s\n%s", lib_name, lua__prelude);
    for (int i = 0; i < SCRIPT_COUNT; i++) {
        snprintf(fn_name[i], sizeof fn_name[i], "%s_%s", lib_name, scripts[i].name);
        k += (size_t)snprintf(lib_src + k, len - k,
                              "redis.register_function{function_name='%s', flags=%s, callback=function(KEYS, ARGV)\n"
                              "batch_reset(%s)\n%send}\n",
                              fn_name[i], scripts[i].flags ? scripts[i].flags : "{}",
                              scripts[i].read_only ? "true" : "false", scripts[i].src);
    }
}

/* ---- TLS settings (rediss://) ----
 *
 * hiredis 0.14 has no TLS, so a rediss:// connection is made in steps:
 * hiredis opens the TCP connection (with its timeouts), OpenSSL runs the
 * handshake over its socket, and from then on hiredis only formats commands
 * and parses replies while SSL_write and SSL_read move the bytes (conn_*
 * below). One SSL_CTX serves every store of the process: the API's and the
 * lease worker's open the same URL, and an SSL_CTX may be shared by threads
 * once it is set up. */
static SSL_CTX *tls_ctx;
static int tls_verify_host;

/* A key file that asks for a passphrase fails at once instead of
 * prompting on a terminal the service does not have. */
static int no_passphrase_cb(char *buf, int size, int rwflag, void *arg)
{
    (void)buf, (void)size, (void)rwflag, (void)arg;
    return 0;
}

/* Called when the server asks for a client certificate and none is set:
 * notes it (tls_connect's flag) and goes on without one, as the server may
 * only ask (tls-auth-clients optional). */
static int client_cert_cb(SSL *ssl, X509 **x509, EVP_PKEY **pkey)
{
    int *asked = SSL_get_app_data(ssl);
    (void)x509, (void)pkey;
    if (asked)
        *asked = 1;
    return 0;
}

int store_tls_init(const store_tls *t, enum store_tls_file *bad, char *err, size_t size)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx)
        abort();
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_default_passwd_cb(ctx, no_passphrase_cb);
    SSL_CTX_set_client_cert_cb(ctx, client_cert_cb);
    ERR_clear_error();
    *bad = STORE_TLS_CA;
    int ok = t->ca_file ? SSL_CTX_load_verify_locations(ctx, t->ca_file, NULL) == 1
                        : SSL_CTX_set_default_verify_paths(ctx) == 1;
    if (ok && t->cert_file) {
        *bad = STORE_TLS_CERT;
        ok = SSL_CTX_use_certificate_chain_file(ctx, t->cert_file) == 1;
    }
    if (ok && t->key_file) {
        *bad = STORE_TLS_KEY;
        ok = SSL_CTX_use_PrivateKey_file(ctx, t->key_file, SSL_FILETYPE_PEM) == 1 &&
             SSL_CTX_check_private_key(ctx) == 1;
    }
    if (!ok) {
        const char *why = ERR_reason_error_string(ERR_peek_last_error());
        snprintf(err, size, "%s", why ? why : "not usable");
        ERR_clear_error();
        SSL_CTX_free(ctx);
        return -EINVAL;
    }
    SSL_CTX_free(tls_ctx);
    tls_ctx = ctx;
    tls_verify_host = t->verify_host;
    return 0;
}

void store_tls_cleanup(void)
{
    SSL_CTX_free(tls_ctx);
    tls_ctx = NULL;
}

/* ---- URL ---- */

static char *url_part(CURLU *u, CURLUPart part)
{
    char *v = NULL;
    if (curl_url_get(u, part, &v, CURLU_URLDECODE) != CURLUE_OK)
        return NULL;
    char *copy = xstrdup(v);
    curl_free(v);
    return copy;
}

static int parse_url(store *s, const char *url)
{
    if (strncmp(url, "unix://", 7) == 0) {
        if (url[7] != '/')
            return -EINVAL;
        s->path = xstrdup(url + 7);
        return 0;
    }
    if (strncmp(url, "redis://", 8) != 0 && strncmp(url, "rediss://", 9) != 0)
        return -EINVAL;
    CURLU *u = curl_url();
    int rc = -EINVAL;
    if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK)
        goto out;
    s->host = url_part(u, CURLUPART_HOST);
    if (!s->host || !s->host[0])
        goto out;
    char *port = url_part(u, CURLUPART_PORT), *path = url_part(u, CURLUPART_PATH);
    s->port = port ? atoi(port) : 6379;
    s->db = path && path[0] == '/' && path[1] ? atoi(path + 1) : 0;
    free(port);
    free(path);
    s->user = url_part(u, CURLUPART_USER);
    s->password = url_part(u, CURLUPART_PASSWORD);
    if (s->host[0] == '[') { /* curl keeps IPv6 brackets; hiredis wants them off */
        size_t n = strlen(s->host);
        memmove(s->host, s->host + 1, n - 2);
        s->host[n - 2] = '\0';
    }
    rc = s->port > 0 && s->port < 65536 ? 0 : -EINVAL;
out:
    curl_url_cleanup(u);
    return rc;
}

/* The authority of redis+cluster:// and redis+sentinel:// URLs,
 * [user[:password]@]host:port[,host:port...]: every node is read as the
 * host part of a redis:// URL, the first with the user part, so both are
 * parsed (and decoded) as for one Redis. Fills s->seeds. */
static int parse_node_list(store *s, const char *auth, size_t alen)
{
    const char *at = memrchr(auth, '@', alen), *hosts = at ? at + 1 : auth;
    size_t ulen = at ? (size_t)(at + 1 - auth) : 0, hlen = alen - ulen;
    if (hlen == 0)
        return -EINVAL;
    s->seeds = xcalloc(CLUSTER_MAX_NODES, sizeof *s->seeds);
    for (size_t off = 0; off <= hlen;) {
        size_t n = strcspn(hosts + off, ",");
        if (n > hlen - off)
            n = hlen - off;
        if (n == 0 || s->nseeds == CLUSTER_MAX_NODES || n >= CLUSTER_HOST_MAX)
            return -EINVAL;
        char one[2 * CLUSTER_HOST_MAX + 16];
        snprintf(one, sizeof one, "redis://%.*s%.*s", s->nseeds ? 0 : (int)ulen, auth, (int)n, hosts + off);
        store tmp = {0};
        int rc = parse_url(&tmp, one);
        if (rc == 0 && s->nseeds == 0) {
            s->user = tmp.user;
            s->password = tmp.password;
            tmp.user = tmp.password = NULL;
        }
        if (rc == 0 && tmp.db == 0 && strlen(tmp.host) < CLUSTER_HOST_MAX) {
            snprintf(s->seeds[s->nseeds].host, CLUSTER_HOST_MAX, "%s", tmp.host);
            s->seeds[s->nseeds++].port = tmp.port;
        } else
            rc = -EINVAL;
        free(tmp.host);
        free(tmp.user);
        free(tmp.password);
        if (rc < 0)
            return rc;
        off += n + 1;
    }
    return 0;
}

/* redis+cluster://<nodes>[/], auth is what follows the scheme: a cluster
 * has only database 0, so no path. */
static int parse_cluster_url(store *s, const char *auth)
{
    size_t alen = strcspn(auth, "/?#");
    if (auth[alen] && strcmp(auth + alen, "/") != 0)
        return -EINVAL;
    s->cluster = 1;
    return parse_node_list(s, auth, alen);
}

/* redis+sentinel://<sentinels>/<master name>[/db], auth is what follows
 * the scheme: the user part is the master's (and its replicas');
 * sentinels are asked without one. */
static int parse_sentinel_url(store *s, const char *auth)
{
    size_t alen = strcspn(auth, "/?#");
    if (auth[alen] != '/')
        return -EINVAL;
    const char *name = auth + alen + 1;
    size_t nlen = strcspn(name, "/");
    if (nlen == 0 || nlen > 128 || strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") < nlen)
        return -EINVAL;
    if (name[nlen]) {
        char *end;
        long db = strtol(name + nlen + 1, &end, 10);
        if (end == name + nlen + 1 || *end || db < 0 || db > 1000000)
            return -EINVAL;
        s->db = (int)db;
    }
    s->sentinel = xstrndup(name, nlen);
    s->host = xcalloc(1, CLUSTER_HOST_MAX); /* the master, as the sentinels name it */
    return parse_node_list(s, auth, alen);
}

/* Any URL of store.h: a scheme that starts with rediss is the same as
 * with redis, over TLS. */
static int parse_any_url(store *s, const char *url)
{
    size_t k = strncmp(url, "rediss", 6) == 0 ? 6 : strncmp(url, "redis", 5) == 0 ? 5 : 0;
    s->tls = k == 6;
    if (k && strncmp(url + k, "+cluster://", 11) == 0)
        return parse_cluster_url(s, url + k + 11);
    if (k && strncmp(url + k, "+sentinel://", 12) == 0)
        return parse_sentinel_url(s, url + k + 12);
    return parse_url(s, url);
}

int store_url_valid(const char *url)
{
    store *s = xcalloc(1, sizeof *s);
    int rc = parse_any_url(s, url);
    s->started = 0;
    store_free(s);
    return rc == 0;
}

store *store_create(const char *url, uint32_t timeout_ms, uint32_t max_queued)
{
    pthread_once(&lib_once, build_library);
    store *s = xcalloc(1, sizeof *s);
    int rc = parse_any_url(s, url);
    if (rc < 0 || (s->tls && !tls_ctx)) {
        LOG(LOG_ERROR, rc < 0 ? "invalid Redis URL" : "a rediss:// URL needs the TLS settings loaded first",
            "\"setting\":\"HOOKWHEEL_REDIS_URL\"%s", "");
        s->started = 0;
        store_free(s);
        return NULL;
    }
    s->timeout_ms = timeout_ms;
    s->max_queued = max_queued;
    s->tail = &s->head;
    s->held_tail = &s->held;
    if (s->cluster)
        s->held_slots = xcalloc(CLUSTER_SLOTS, sizeof *s->held_slots);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    pthread_cond_init(&s->watch_cv, NULL);
    return s;
}

/* ---- connections (writer thread) ---- */

/* Whether a TLS call that returned rc (SSL_connect, SSL_read, SSL_write;
 * each made with OpenSSL's error queue empty) is to be made again (a
 * signal interrupted it); otherwise records why it failed on the
 * connection's context as hiredis records its own errors, so a timeout (the
 * socket's SO_RCVTIMEO/SO_SNDTIMEO, from redisSetTimeout) or a closed
 * connection is handled as on a plain connection. */
static int tls_retry(conn *k, int rc)
{
    int sys = errno, e = SSL_get_error(k->ssl, rc);
    unsigned long q = ERR_peek_last_error();
    long v = SSL_get_verify_result(k->ssl);
    redisContext *c = k->ctx;
    if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) && sys == EINTR)
        return 1;
    c->err = REDIS_ERR_IO;
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        snprintf(c->errstr, sizeof c->errstr, "TLS: timed out");
    } else if (v != X509_V_OK) {
        snprintf(c->errstr, sizeof c->errstr, "certificate verify failed: %s", X509_verify_cert_error_string(v));
    } else if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && !q && !sys)) {
        c->err = REDIS_ERR_EOF;
        snprintf(c->errstr, sizeof c->errstr, "Server closed the connection");
    } else if (e == SSL_ERROR_SYSCALL && !q) {
        snprintf(c->errstr, sizeof c->errstr, "TLS: %s", strerror(sys));
    } else {
        const char *why = ERR_reason_error_string(q);
        snprintf(c->errstr, sizeof c->errstr, "TLS: %s", why ? why : "error");
    }
    ERR_clear_error();
    return 0;
}

/* Writes all of ctx->obuf with SSL_write; REDIS_ERR with the reason on
 * ctx. Like hiredis, the emptied buffer is given back, so one large batch
 * does not keep its memory. */
static int tls_flush(conn *k)
{
    redisContext *c = k->ctx;
    while (sdslen(c->obuf) > 0) {
        size_t len = sdslen(c->obuf);
        ERR_clear_error();
        int n = SSL_write(k->ssl, c->obuf, len > INT_MAX ? INT_MAX : (int)len);
        if (n > 0)
            sdsrange(c->obuf, n, -1);
        else if (!tls_retry(k, n))
            return REDIS_ERR;
    }
    sdsfree(c->obuf);
    c->obuf = sdsempty();
    if (!c->obuf)
        abort();
    return REDIS_OK;
}

/* redisGetReply over TLS: a reply already parsed, else the commands
 * appended are written and the reader is fed until a reply is whole. */
static int tls_get_reply(conn *k, redisReply **out)
{
    redisContext *c = k->ctx;
    void *r = NULL;
    if (redisGetReplyFromReader(c, &r) != REDIS_OK)
        return REDIS_ERR;
    if (!r && tls_flush(k) != REDIS_OK)
        return REDIS_ERR;
    while (!r) {
        char buf[16 * 1024]; /* as hiredis reads */
        ERR_clear_error();
        int n = SSL_read(k->ssl, buf, sizeof buf);
        if (n <= 0) {
            if (tls_retry(k, n))
                continue;
            return REDIS_ERR;
        }
        if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
            c->err = c->reader->err;
            snprintf(c->errstr, sizeof c->errstr, "%s", c->reader->errstr);
            return REDIS_ERR;
        }
        if (redisGetReplyFromReader(c, &r) != REDIS_OK)
            return REDIS_ERR;
    }
    *out = r;
    return REDIS_OK;
}

/* The next reply on k: the pipeline's hot path, so a plain connection
 * costs one branch more than redisGetReply. REDIS_ERR when the connection
 * failed (the reason is in k->ctx->errstr). */
static int conn_get_reply(conn *k, redisReply **r)
{
    if (!k->ssl)
        return redisGetReply(k->ctx, (void **)r);
    return tls_get_reply(k, r);
}

/* redisCommand on k: the reply, or NULL when the connection failed. */
static redisReply *conn_command(conn *k, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = redisvAppendCommand(k->ctx, fmt, ap);
    va_end(ap);
    redisReply *r = NULL;
    if (rc != REDIS_OK || conn_get_reply(k, &r) != REDIS_OK)
        return NULL;
    return r;
}

static void conn_close(conn *k)
{
    SSL_free(k->ssl);
    if (k->ctx)
        redisFree(k->ctx);
    *k = (conn){NULL, NULL};
}

/* The TLS handshake over k's socket: the server's certificate must chain
 * to the CA file (or the system's CAs) and, unless the host check is off,
 * name host (a DNS name, or an address). TLS 1.3 lets a client finish its
 * handshake before the server has checked the client's certificate, so a
 * refused one shows only with the first reply: one PING completes the
 * handshake (any reply will do: it may be NOAUTH before AUTH). A server
 * that refuses a client without a certificate may close the connection
 * before its alert can be read, so a failure after it asked for one says
 * so. 0, or -EIO with the reason in k->ctx->errstr. */
static int tls_connect(conn *k, const char *host)
{
    unsigned char addr[16];
    int ip = inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1;
    k->ssl = SSL_new(tls_ctx);
    if (!k->ssl)
        abort();
    int ok = SSL_set_fd(k->ssl, k->ctx->fd) == 1 &&
             (ip || SSL_set_tlsext_host_name(k->ssl, host) == 1); /* SNI names hosts, not addresses */
    if (ok && tls_verify_host)
        ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(k->ssl), host) == 1 : SSL_set1_host(k->ssl, host) == 1;
    if (!ok) {
        snprintf(k->ctx->errstr, sizeof k->ctx->errstr, "TLS: cannot use host name %.64s", host);
        return -EIO;
    }
    int asked = 0, rc;
    SSL_set_app_data(k->ssl, &asked);
    do {
        ERR_clear_error();
        rc = SSL_connect(k->ssl);
    } while (rc != 1 && tls_retry(k, rc));
    redisReply *r = rc == 1 ? conn_command(k, "PING") : NULL;
    SSL_set_app_data(k->ssl, NULL);
    freeReplyObject(r);
    if (!r && asked && SSL_get_verify_result(k->ssl) == X509_V_OK)
        snprintf(k->ctx->errstr, sizeof k->ctx->errstr,
                 "the server asks for a client certificate (mutual TLS) and none is set");
    return r ? 0 : -EIO;
}

/* A connection to host:port (or the unix socket when host is NULL), TLS on
 * a rediss:// store; 0, or -EIO after logging why (once per outage:
 * *warned, unless at debug level). */
static int conn_open(store *s, const char *host, int port, int *warned, conn *k)
{
    struct timeval tv = {s->timeout_ms / 1000, (s->timeout_ms % 1000) * 1000};
    *k = (conn){host ? redisConnectWithTimeout(host, port, tv) : redisConnectUnixWithTimeout(s->path, tv), NULL};
    const char *what = "Redis unreachable";
    if (k->ctx && !k->ctx->err) {
        redisSetTimeout(k->ctx, tv);
        what = "Redis TLS handshake failed";
        if (!s->tls || tls_connect(k, host) == 0)
            return 0;
    }
    char eb[256];
    if (!*warned || log_min_level <= LOG_DEBUG)
        LOG(LOG_WARN, what, "\"node\":\"%s:%d\",\"error\":\"%s\"", host ? host : "unix", port,
            log_json_escape(k->ctx ? k->ctx->errstr : "no memory", eb, sizeof eb));
    *warned = 1;
    conn_close(k);
    return -EIO;
}

/* A refusal is logged once an outage (*warned, the node's: reset when a
 * connection is made), or every time at debug level: a wrong password, a
 * user without rights or a full disk would otherwise log it at every
 * reconnect, up to every 2 s. (A cluster's slot map is asked for with
 * connections that log nothing, warned set: the nodes' own connections
 * say it.) */
static int simple_ok(conn *k, const char *fmt, const char *a, const char *b, int *warned)
{
    redisReply *r = b ? conn_command(k, fmt, a, b) : conn_command(k, fmt, a);
    int ok = r && r->type != REDIS_REPLY_ERROR;
    char eb[256];
    if (r && !ok && (!*warned || log_min_level <= LOG_DEBUG))
        LOG(LOG_ERROR, "Redis refused a start-up command", "\"error\":\"%s\"", log_json_escape(r->str, eb, sizeof eb));
    if (r && !ok)
        *warned = 1;
    freeReplyObject(r);
    return ok;
}

/* Whether r says Redis is loading its dataset (after a restart): it runs
 * no command but a few until the data is in memory. */
static int is_loading(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "LOADING", 7) == 0;
}

/* 1 when Redis holds the library already. Its name carries a hash of its
 * code and flags, so the one of that name is this one. Asked first because
 * FUNCTION LOAD is a write: Redis refuses it at maxmemory and with a full
 * disk, where a reconnect must still find the functions that go on there
 * (and the readers). 0 when it is missing or the question fails, -EAGAIN
 * while Redis loads its dataset. */
static int library_loaded(conn *k)
{
    redisReply *r = conn_command(k, "FUNCTION LIST LIBRARYNAME %s", lib_name);
    if (is_loading(r)) {
        freeReplyObject(r);
        return -EAGAIN;
    }
    int found = 0;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements && !found; i++) {
        const redisReply *lib = r->element[i]; /* library_name, <name>, engine, LUA, functions, [...] */
        for (size_t j = 0; lib->type == REDIS_REPLY_ARRAY && j + 1 < lib->elements; j += 2) {
            const redisReply *key = lib->element[j], *val = lib->element[j + 1];
            if (key->type == REDIS_REPLY_STRING && strcmp(key->str, "library_name") == 0 &&
                val->type == REDIS_REPLY_STRING && strcmp(val->str, lib_name) == 0)
                found = 1;
        }
    }
    freeReplyObject(r);
    return found;
}

/* 0 once Redis holds the function library, -EAGAIN while it loads its
 * dataset (the caller says so), else -EIO after logging why. */
static int load_scripts(conn *k, int *warned)
{
    int have = library_loaded(k);
    if (have != 0)
        return have > 0 ? 0 : have;
    redisReply *r = conn_command(k, "FUNCTION LOAD REPLACE %s", lib_src);
    if (is_loading(r)) {
        freeReplyObject(r);
        return -EAGAIN;
    }
    int ok = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, lib_name) == 0;
    char eb[256];
    if (r && !ok && *warned && log_min_level > LOG_DEBUG) { /* said once an outage, as in simple_ok */
        freeReplyObject(r);
        return -EIO;
    }
    if (r && !ok)
        *warned = 1;
    /* A user without the right to load it is told so: NOPERM is no
     * question of the server's version. */
    if (r && !ok && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOPERM", 6) == 0)
        LOG(LOG_ERROR, "Redis refused hookwheel's function library: the Redis user may not load it (it needs "
            "FUNCTION LOAD, FCALL and the commands the functions call, e.g. +@all ~* &*)",
            "\"library\":\"%s\",\"error\":\"%s\"", lib_name, log_json_escape(r->str, eb, sizeof eb));
    else if (r && !ok && r->type == REDIS_REPLY_ERROR && strstr(r->str, "unknown command"))
        LOG(LOG_ERROR, "Redis refused hookwheel's function library (Redis 7.0 or later is needed)",
            "\"library\":\"%s\",\"error\":\"%s\"", lib_name, log_json_escape(r->str, eb, sizeof eb));
    else if (r && !ok) /* MISCONF (a full disk), OOM, ...: the error says why */
        LOG(LOG_ERROR, "Redis refused hookwheel's function library", "\"library\":\"%s\",\"error\":\"%s\"",
            lib_name, log_json_escape(r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply", eb, sizeof eb));
    freeReplyObject(r);
    return ok ? 0 : -EIO;
}

static void drop_node(node *n)
{
    conn_close(&n->conn);
}

/* A connection to host:port (or the unix socket when host is NULL), with
 * the URL's credentials given; 0, or -EIO after logging when it cannot be
 * made. warned and backoff are the caller's outage state. */
static int open_ctx(store *s, const char *host, int port, int *warned, conn *k)
{
    if (conn_open(s, host, port, warned, k) < 0)
        return -EIO;
    int ok = 1;
    if (s->password)
        ok = s->user && s->user[0] ? simple_ok(k, "AUTH %s %s", s->user, s->password, warned)
                                   : simple_ok(k, "AUTH %s", s->password, NULL, warned);
    if (!ok) {
        conn_close(k);
        return -EIO;
    }
    return 0;
}

/* Asks the sentinel k is connected to where the master is (SENTINEL
 * get-master-addr-by-name): its port, with its host in host[CLUSTER_HOST_MAX],
 * or 0 when the sentinel does not name one. */
static int sentinel_ask(store *s, conn *k, char *host)
{
    redisReply *r = conn_command(k, "SENTINEL get-master-addr-by-name %s", s->sentinel);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
             r->element[1]->type == REDIS_REPLY_STRING && r->element[0]->len < CLUSTER_HOST_MAX;
    int port = ok ? atoi(r->element[1]->str) : 0;
    if (port > 0 && port < 65536)
        snprintf(host, CLUSTER_HOST_MAX, "%s", r->element[0]->str);
    freeReplyObject(r);
    return port > 0 && port < 65536 ? port : 0;
}

/* Sentinel: asks each sentinel in turn where the master is and points n
 * there. */
static int sentinel_resolve(store *s, node *n)
{
    for (int i = 0; i < s->nseeds; i++) {
        conn k;
        int quiet = 1; /* a sentinel that does not answer is told by the warning below */
        char host[CLUSTER_HOST_MAX];
        int port = conn_open(s, s->seeds[i].host, s->seeds[i].port, &quiet, &k) == 0 ? sentinel_ask(s, &k, host) : 0;
        conn_close(&k);
        if (port) {
            if (strcmp(s->host, host) != 0 || s->port != port)
                LOG(LOG_INFO, "Redis Sentinel names the master", "\"master\":\"%s\",\"node\":\"%s:%d\"",
                    s->sentinel, host, port);
            snprintf(s->host, CLUSTER_HOST_MAX, "%s", host);
            s->port = port;
            n->host = s->host;
            n->port = s->port;
            return 0;
        }
    }
    if (!n->warned || log_min_level <= LOG_DEBUG)
        LOG(LOG_WARN, "no Redis Sentinel names the master", "\"master\":\"%s\",\"sentinels\":%d", s->sentinel,
            s->nseeds);
    n->warned = 1;
    return -EIO;
}

/* 1 when c's server is a master (ROLE); a sentinel's answer can lag a
 * failover, and a demoted master must not be written to. */
static int is_master(conn *k)
{
    redisReply *r = conn_command(k, "ROLE");
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING &&
             strcmp(r->element[0]->str, "master") == 0;
    freeReplyObject(r);
    return ok;
}

static atomic_int loading_said; /* a LOADING answer was logged (connect_node) */

/* Connects n, selects the database and loads the function library (on a
 * cluster: on every master, so a master that appears gets it too). */
static int connect_node(store *s, node *n)
{
    n->last_try_ms = clock_now_ms();
    conn k = {NULL, NULL};
    int ok = (!s->sentinel || sentinel_resolve(s, n) == 0) && open_ctx(s, n->host, n->port, &n->warned, &k) == 0;
    ok = ok && (!s->sentinel || is_master(&k));
    if (ok && s->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", s->db);
        ok = simple_ok(&k, "SELECT %s", db, NULL, &n->warned);
    }
    int loaded = ok ? load_scripts(&k, &n->warned) : -EIO;
    /* said once a load, however many connects it takes, and once for the
     * process (the API's and the lease worker's stores share the Redis) */
    if (loaded == -EAGAIN && !n->loading && !atomic_exchange(&loading_said, 1))
        LOG(LOG_WARN, "Redis is loading its dataset (it restarted): hookwheel connects once the data is in memory",
            "\"node\":\"%s:%d\"", n->host ? n->host : "unix", n->port);
    if (loaded != -EAGAIN && n->loading)
        atomic_store(&loading_said, 0);
    n->loading = loaded == -EAGAIN;
    if (n->loading)
        n->warned = 1; /* "Redis connected" says when it ends */
    if (loaded < 0) {
        conn_close(&k);
        n->backoff_ms = n->backoff_ms ? n->backoff_ms * 2 : RECONNECT_MIN_MS;
        if (n->backoff_ms > RECONNECT_MAX_MS)
            n->backoff_ms = RECONNECT_MAX_MS;
        return -EIO;
    }
    if (n->warned || !s->ready)
        LOG(LOG_INFO, "Redis connected", "\"node\":\"%s:%d\",\"scripts\":%d", n->host ? n->host : "unix",
            n->port, SCRIPT_COUNT);
    n->conn = k;
    n->warned = 0;
    n->backoff_ms = 0;
    return 0;
}

/* Writer: the store's readiness, and whether a node it lacks is loading
 * its dataset (store_loading). */
static void note_ready(store *s, int ready)
{
    int loading = 0;
    for (int i = 0; i < s->nnodes && !ready; i++)
        loading |= s->nodes[i].loading && !s->nodes[i].conn.ctx;
    s->loading = loading;
    s->ready = ready;
}

/* n connected, or connected now unless its backoff has not passed. */
static int ensure_node(store *s, node *n)
{
    if (n->conn.ctx)
        return 0;
    if (clock_now_ms() - n->last_try_ms < n->backoff_ms)
        return -EAGAIN;
    return connect_node(s, n);
}

#define STAT_ADD(s, field) __atomic_fetch_add(&(s)->stats.field, 1, __ATOMIC_RELAXED)

/* Makes nodes[] the masters of m: a master already known keeps its
 * connection and its outage state (backoff, last try, logged), one no
 * longer a master is disconnected. A master that cannot be reached marks
 * the map stale on every batch that has a command for it, so were its
 * outage state reset here, it would be connected to (and its outage
 * logged) on every batch. */
static void adopt_map(store *s, cluster_map *m)
{
    node old[CLUSTER_MAX_NODES];
    int nold = s->nnodes;
    memcpy(old, s->nodes, sizeof old);
    memset(s->nodes, 0, sizeof s->nodes);
    for (int i = 0; i < m->nnodes; i++) {
        node *n = &s->nodes[i];
        n->host = m->nodes[i].host;
        n->port = m->nodes[i].port;
        for (int j = 0; j < nold; j++)
            if (old[j].host && old[j].port == n->port && strcmp(old[j].host, n->host) == 0) {
                n->conn = old[j].conn;
                n->last_try_ms = old[j].last_try_ms;
                n->backoff_ms = old[j].backoff_ms;
                n->warned = old[j].warned;
                n->down_logged_ms = old[j].down_logged_ms;
                n->down_calls = old[j].down_calls;
                n->refusal = old[j].refusal;
                n->refused_ms = old[j].refused_ms;
                old[j].conn = (conn){NULL, NULL};
                old[j].host = NULL;
            }
    }
    for (int j = 0; j < nold; j++)
        drop_node(&old[j]);
    s->nnodes = m->nnodes;
    __atomic_store_n(&s->stats.masters, (uint64_t)m->nnodes, __ATOMIC_RELAXED);
}

/* Asks a known master, then each seed, for the slot map (CLUSTER SLOTS)
 * and adopts the first complete answer. At most one try per
 * RECONNECT_MIN_MS, so a cluster that is down is not hammered. When no node
 * gives a complete map (slots without a master: a master lost with no
 * replica and forgotten, slots deleted), the most complete answer is
 * adopted: the slots that have a master are served, the others' calls fail
 * as when Redis is unreachable, the store is not ready (/readyz), and the
 * map is asked for again once per RECONNECT_MAX_MS, logged once until it is
 * complete again. */
static int refresh_map(store *s)
{
    uint64_t now = clock_now_ms();
    if (s->map && now - s->map_try_ms < (s->map_partial ? RECONNECT_MAX_MS : RECONNECT_MIN_MS))
        return -EAGAIN;
    s->map_try_ms = now;
    cluster_map *m = xmalloc(sizeof *m), *best = NULL;
    int ncand = s->nnodes + s->nseeds, rc = -EIO, best_covered = 0;
    const char *best_host = "";
    int best_port = 0;
    for (int i = 0; i < ncand && rc < 0; i++) {
        if (i < s->nnodes && !s->nodes[i].conn.ctx && now - s->nodes[i].last_try_ms < s->nodes[i].backoff_ms)
            continue; /* a master known to be unreachable: the others, or the seeds, answer */
        const char *host = i < s->nnodes ? s->nodes[i].host : s->seeds[i - s->nnodes].host;
        int port = i < s->nnodes ? s->nodes[i].port : s->seeds[i - s->nnodes].port, warned = 1;
        conn k;
        redisReply *r = open_ctx(s, host, port, &warned, &k) == 0 ? conn_command(&k, "CLUSTER SLOTS") : NULL;
        int covered = r ? cluster_map_parse(m, r, host) : -EIO;
        if (covered == CLUSTER_SLOTS) {
            rc = 0;
        } else if (covered > best_covered) { /* the most complete so far: kept, m is filled anew */
            cluster_map *t = best ? best : xmalloc(sizeof *t);
            best = m;
            m = t;
            best_covered = covered;
            best_host = host;
            best_port = port;
        }
        freeReplyObject(r);
        conn_close(&k);
    }
    if (rc < 0 && best) {
        if (!s->map_partial)
            LOG(LOG_WARN, "Redis Cluster gives no complete slot map: calls to the slots without a master fail",
                "\"node\":\"%s:%d\",\"covered\":%d", best_host, best_port, best_covered);
        free(m);
        m = best;
        best = NULL;
    } else if (rc < 0) {
        free(m);
        return rc;
    } else if (s->map_partial) {
        LOG(LOG_INFO, "Redis Cluster gives a complete slot map again", "%s", "");
    }
    free(best);
    s->map_partial = rc < 0;
    adopt_map(s, m);
    free(s->map);
    s->map = m;
    s->map_stale = s->map_partial;
    STAT_ADD(s, map_refreshes);
    return 0;
}

/* The node index a command goes to, or -1 when no master is known for it. */
static int route(const store *s, const cmd *c)
{
    if (!s->cluster)
        return 0;
    if (!s->map)
        return -1;
    return c->slot < 0 ? (s->nnodes ? 0 : -1) : s->map->slot_node[c->slot];
}

/* The index of host:port among the nodes, adding it (unconnected) when a
 * redirection names a master the map does not know yet; -1 when full. */
static int node_for(store *s, const char *host, int port)
{
    int before = s->map->nnodes, i = cluster_map_node(s->map, host, port);
    if (i >= 0 && i == before) {
        s->nodes[i] = (node){.host = s->map->nodes[i].host, .port = port};
        s->nnodes = s->map->nnodes;
    }
    return i;
}

/* ---- writer ---- */

static void finish_cmd(cmd *c, const redisReply *r)
{
    c->cb(c->arg, r);
    free(c->buf);
    free(c);
}

static void fail_list(cmd *c)
{
    while (c) {
        cmd *next = c->next;
        finish_cmd(c, NULL);
        c = next;
    }
}

/* 1 while the callback of a call Redis never ran is given its NULL reply
 * (store_call_unsent). */
static _Thread_local int call_unsent;

int store_call_unsent(void) { return call_unsent; }

/* Fails c, which Redis never ran: it was not sent (no connection, no
 * master for its slot, held past its wait), or Redis refused it before
 * running it (READONLY, CLUSTERDOWN). */
static void fail_unsent(cmd *c)
{
    call_unsent = 1;
    finish_cmd(c, NULL);
    call_unsent = 0;
}

static void fail_list_unsent(cmd *c)
{
    call_unsent = 1;
    fail_list(c);
    call_unsent = 0;
}

/* 1 when c calls a function Redis runs at its maxmemory too (one with
 * flags, above: allow-oom or no-writes): its success says nothing about
 * writes. The name is in the command's head: *N, FCALL, then the name's
 * length and the name. */
static int calls_oom_exempt(const cmd *c)
{
    size_t head = c->len < 96 ? (size_t)c->len : 96;
    for (int i = 0; i < SCRIPT_COUNT; i++) {
        if (!scripts[i].flags)
            continue;
        char name[64];
        int n = snprintf(name, sizeof name, "\r\n%s\r\n", fn_name[i]);
        if (memmem(c->buf, head, name, (size_t)n))
            return 1;
    }
    return 0;
}

/* Notes whether node n refuses writes: an OOM error (maxmemory reached
 * with noeviction), a MISCONF one (its last AOF write or RDB save failed: a
 * full or failing disk) or a NOREPLICAS one marks it, a call of a function
 * Redis refuses at maxmemory that succeeds on it clears its mark. The store
 * refuses while any node's mark is fresh: on a Redis Cluster one full master
 * refuses the creates of its slots while the others take theirs, and their
 * successes must not clear its mark (readiness and the metric flapped). The
 * engine probes every partition every second (store_probe_writes), so the
 * marks stay current. */
static atomic_int refusal_said; /* the refusal last logged, for the process (its stores share a Redis) */

/* The store's mark from its nodes': the freshest live one, or none. */
static void sum_marks(store *s, uint64_t now)
{
    uint64_t at = 0;
    int why = 0;
    for (int i = 0; i < s->nnodes; i++) {
        const node *n = &s->nodes[i];
        if (n->refused_ms && now - n->refused_ms < STORE_OOM_HOLD_MS && n->refused_ms > at) {
            at = n->refused_ms;
            why = n->refusal;
        }
    }
    if (at)
        s->refusal = why;
    s->oom_ms = at;
}

static void note_writable(store *s, node *n, const cmd *c, const redisReply *r)
{
    int refusal = store_reply_refusal(r);
    if (refusal) {
        /* said once a refusal, not once a refused call: a client retrying
         * its creates would flood the log (each is answered 503) */
        if (atomic_exchange(&refusal_said, refusal) != refusal) {
            char eb[256];
            if (refusal == STORE_REFUSES_MEMORY)
                LOG(LOG_WARN, "Redis refuses new work (maxmemory reached): creates, lease acquires and queue "
                    "changes answer 503; due timers are still delivered and leases renewed",
                    "\"error\":\"%s\"", log_json_escape(r->str, eb, sizeof eb));
            else
                LOG(LOG_WARN, "Redis refuses writes: every write answers 503 and no attempt starts",
                    "\"why\":\"%s\",\"error\":\"%s\"", store_refusal_text(refusal),
                    log_json_escape(r->str, eb, sizeof eb));
        }
        n->refusal = refusal;
        n->refused_ms = clock_now_ms();
        s->refusal = refusal;
        s->oom_ms = n->refused_ms;
    }
    else if (r->type != REDIS_REPLY_ERROR && n->refused_ms && c->len > 16 && memmem(c->buf, 16, "FCALL", 5) &&
             !calls_oom_exempt(c)) {
        n->refused_ms = 0;
        sum_marks(s, clock_now_ms());
        if (s->oom_ms)
            return; /* another node still refuses */
        int said = atomic_exchange(&refusal_said, 0);
        if (said)
            LOG(LOG_INFO, "Redis takes writes again", "\"refused_for\":\"%s\"", store_refusal_text(said));
    }
}

#define DOWN_LOG_MS 10000 /* a node's CLUSTERDOWN answers are logged once in this time */

/* Whether r, from node n, is CLUSTERDOWN: the node serves no call for that
 * slot now (the cluster lost a master and has not failed over yet, a node
 * that has just come back has not rejoined, a slot has no master). The call
 * never ran; it fails as when Redis is unreachable (reply NULL), and the
 * answers are logged once per DOWN_LOG_MS per node with their count, not
 * once per call. */
static int cluster_down(store *s, node *n, const redisReply *r)
{
    if (!s->cluster || r->type != REDIS_REPLY_ERROR || strncmp(r->str, "CLUSTERDOWN", 11) != 0)
        return 0;
    uint64_t now = clock_now_ms();
    if (strstr(r->str, "not served"))
        s->map_stale = 1; /* "Hash slot not served": the slot has no master now, the map says otherwise */
    n->down_calls++;
    if (!n->down_logged_ms || now - n->down_logged_ms >= DOWN_LOG_MS) {
        char eb[256];
        LOG(LOG_WARN, "Redis Cluster node answers CLUSTERDOWN: its calls fail as when Redis is unreachable",
            "\"node\":\"%s:%d\",\"error\":\"%s\",\"calls\":%" PRIu64, n->host, n->port,
            log_json_escape(r->str, eb, sizeof eb), n->down_calls);
        n->down_logged_ms = now;
        n->down_calls = 0;
    }
    return 1;
}

/* Redis lost the library (a restart without persistence, FUNCTION FLUSH). */
static int is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "Function not found");
}

/* A reply the batch cannot take as it is: the library is missing on that
 * node, or (cluster) the slot is elsewhere or in migration. */
static int needs_resend(const store *s, const redisReply *r)
{
    if (is_noscript(r))
        return 1;
    if (!s->cluster || r->type != REDIS_REPLY_ERROR)
        return 0;
    return strncmp(r->str, "MOVED ", 6) == 0 || strncmp(r->str, "ASK ", 4) == 0 ||
           strncmp(r->str, "TRYAGAIN", 8) == 0;
}

/* Sends one command alone to node i (after ASKING when asking) and waits
 * for its reply; NULL when the connection failed (it is dropped). */
/* 1 when c must wait for replicas (HOOKWHEEL_REDIS_MIN_REPLICAS_ACK). */
static int needs_wait(const store *s, const cmd *c)
{
    return s->min_replicas > 0 && c->writes;
}

static void append_wait(store *s, redisContext *ctx)
{
    char n[16], t[16];
    snprintf(n, sizeof n, "%d", s->min_replicas);
    snprintf(t, sizeof t, "%u", s->replica_timeout_ms);
    redisAppendCommand(ctx, "WAIT %s %s", n, t);
}

/* A WAIT reply: 1 when enough replicas acknowledged, else 0 (logged and
 * counted). */
static int replicas_acked(store *s, const node *n, const redisReply *w)
{
    if (w && w->type == REDIS_REPLY_INTEGER && w->integer >= s->min_replicas)
        return 1;
    STAT_ADD(s, replica_ack_timeouts);
    LOG(LOG_WARN, "Redis replicas did not acknowledge writes in time: they are answered as not written",
        "\"node\":\"%s:%d\",\"acked\":%lld,\"wanted\":%d,\"timeout_ms\":%u", n->host ? n->host : "unix", n->port,
        w && w->type == REDIS_REPLY_INTEGER ? w->integer : -1LL, s->min_replicas, s->replica_timeout_ms);
    return 0;
}

static redisReply *send_alone(store *s, int i, const cmd *c, int asking)
{
    node *n = &s->nodes[i];
    if (ensure_node(s, n) < 0)
        return NULL;
    redisReply *r = NULL, *w = NULL;
    int wait = needs_wait(s, c);
    if (asking)
        redisAppendCommand(n->conn.ctx, "ASKING");
    if (redisAppendFormattedCommand(n->conn.ctx, c->buf, (size_t)c->len) != REDIS_OK)
        goto lost;
    if (wait)
        append_wait(s, n->conn.ctx);
    if (asking) {
        if (conn_get_reply(&n->conn, &r) != REDIS_OK)
            goto lost;
        freeReplyObject(r);
        r = NULL;
    }
    if (conn_get_reply(&n->conn, &r) != REDIS_OK)
        goto lost;
    if (!wait)
        return r;
    if (conn_get_reply(&n->conn, &w) != REDIS_OK) {
        freeReplyObject(r);
        goto lost;
    }
    int ok = r->type == REDIS_REPLY_ERROR || replicas_acked(s, n, w); /* an error wrote nothing */
    freeReplyObject(w);
    if (ok)
        return r;
    freeReplyObject(r);
    return NULL;
lost:
    char eb[256];
    LOG(LOG_WARN, "Redis connection lost", "\"error\":\"%s\"", log_json_escape(n->conn.ctx->errstr, eb, sizeof eb));
    drop_node(n);
    s->map_stale = s->cluster;
    return NULL;
}

#define MAX_HOPS 5        /* redirections one command follows */
#define TRYAGAIN_MS 20    /* wait before retrying a call that met a migrating slot */

static int is_fcall(const cmd *c)
{
    return c->len > 16 && memmem(c->buf, 16, "FCALL", 5) != NULL;
}

/* Holds a call that met a slot in migration, to be sent again after
 * TRYAGAIN_MS with everything else held (run_batch); calls to its slot that
 * come later wait behind it, so a slot's calls keep their order. A call
 * held for its hold_max_ms gets reply NULL: it never ran. */
static void hold(store *s, cmd *c)
{
    uint64_t now = clock_now_ms();
    if (!c->held_since)
        c->held_since = now;
    if (now - c->held_since > c->hold_max_ms) {
        fail_unsent(c);
        return;
    }
    if (!s->held)
        s->held_until = now + TRYAGAIN_MS;
    c->next = NULL;
    *s->held_tail = c;
    s->held_tail = &c->next;
    if (c->slot >= 0)
        s->held_slots[c->slot]++;
}

/* Finishes a command whose reply r (from node i) asked for it to be sent
 * again: the library is loaded again after "Function not found"; MOVED
 * updates the slot's master (and the map is learned again before the next
 * batch); ASK sends a plain command to the importing master once (after
 * ASKING) and holds a function call (hold: its migration guard keeps it from
 * running until the slot has moved); TRYAGAIN holds it. A command that is
 * still redirected after MAX_HOPS gets that error reply. */
static void resend(store *s, cmd *c, redisReply *r, int i)
{
    for (int hop = 0; r && hop < MAX_HOPS && needs_resend(s, r); hop++) {
        int asking = 0, port;
        uint16_t slot;
        char host[CLUSTER_HOST_MAX];
        enum cluster_redirect k = s->cluster ? cluster_redirect_parse(r->str, &slot, host, &port,
                                                                      s->nodes[i].host ? s->nodes[i].host : "")
                                             : CLUSTER_NOT_REDIRECT;
        if (k == CLUSTER_MOVED || k == CLUSTER_ASK) {
            int j = node_for(s, host, port);
            if (j < 0)
                break;
            if (k == CLUSTER_MOVED) {
                s->map->slot_node[slot] = (int16_t)j;
                s->map_stale = 1;
                STAT_ADD(s, moved);
            } else {
                STAT_ADD(s, ask);
                if (is_fcall(c)) {
                    freeReplyObject(r);
                    hold(s, c);
                    return;
                }
            }
            i = j;
            asking = k == CLUSTER_ASK;
        } else if (k == CLUSTER_TRYAGAIN) {
            STAT_ADD(s, tryagain);
            freeReplyObject(r);
            hold(s, c);
            return;
        } else if (s->nodes[i].conn.ctx && load_scripts(&s->nodes[i].conn, &(int){0}) < 0) { /* Function not found */
            break; /* (logged each time: the node is connected, so this is no reconnect loop) */
        }
        freeReplyObject(r);
        r = send_alone(s, i, c, asking);
    }
    if (r && cluster_down(s, &s->nodes[i], r)) {
        freeReplyObject(r);
        fail_unsent(c);
        return;
    }
    if (r)
        note_writable(s, &s->nodes[i], c, r);
    finish_cmd(c, r);
    freeReplyObject(r);
}

/* Reads node n's replies to the commands it was sent, in order; the ones
 * to send again go to *redo (with the node they came from in slot's place:
 * see run_batch). A lost connection fails the rest. */
static void read_replies(store *s, int i, cmd ***redo, redisReply ***rr, int **from)
{
    node *n = &s->nodes[i];
    cmd *c = n->q, *acks = NULL, **atail = &acks; /* writes whose replies wait for the replicas' */
    int demoted = 0, waited = n->waited;
    n->q = NULL;
    while (c) {
        redisReply *r = NULL;
        if (conn_get_reply(&n->conn, &r) != REDIS_OK) {
            char eb[256];
            LOG(LOG_WARN, "Redis connection lost", "\"node\":\"%s:%d\",\"error\":\"%s\"",
                n->host ? n->host : "unix", n->port, log_json_escape(n->conn.ctx->errstr, eb, sizeof eb));
            drop_node(n);
            s->map_stale = s->cluster;
            fail_list(c);
            fail_list(acks);
            return;
        }
        cmd *next = c->next;
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0) {
            /* a replica now (a failover demoted it): nothing was written */
            demoted = 1;
            fail_unsent(c);
            freeReplyObject(r);
        } else if (needs_resend(s, r)) {
            c->next = NULL;
            **redo = c;
            *redo = &c->next;
            *(*rr)++ = r;
            *(*from)++ = i;
        } else if (cluster_down(s, n, r)) {
            fail_unsent(c);
            freeReplyObject(r);
        } else if (waited && needs_wait(s, c) && r->type != REDIS_REPLY_ERROR) {
            c->reply = r;
            c->next = NULL;
            *atail = c;
            atail = &c->next;
        } else {
            note_writable(s, n, c, r);
            finish_cmd(c, r);
            freeReplyObject(r);
        }
        c = next;
    }
    if (waited) {
        redisReply *w = NULL;
        int lost = conn_get_reply(&n->conn, &w) != REDIS_OK;
        int ok = !lost && (!acks || replicas_acked(s, n, w));
        freeReplyObject(w);
        while (acks) {
            cmd *a = acks;
            acks = a->next;
            redisReply *r = a->reply;
            if (ok)
                note_writable(s, n, a, r);
            finish_cmd(a, ok ? r : NULL);
            freeReplyObject(r);
        }
        if (lost) {
            drop_node(n);
            s->map_stale = s->cluster;
            return;
        }
    }
    if (demoted) {
        LOG(LOG_WARN, "Redis answered READONLY: no longer the master", "\"node\":\"%s:%d\"",
            n->host ? n->host : "unix", n->port);
        drop_node(n);
        s->map_stale = s->cluster;
    }
}

/* ---- the sentinel watcher ----
 *
 * A planned failover (SENTINEL FAILOVER) promotes the replica at once, but
 * the old master stays a master, taking writes, until the sentinels make
 * it a replica (some 10 s later: they wait before reconfiguring a node
 * that still says it is the master), and its resync then drops all it
 * took. Its connections are not closed meanwhile and it answers no
 * READONLY, so the writer would follow only then. The watcher thread asks
 * the sentinels where the master is every SENTINEL_POLL_MS, on a
 * connection it keeps (to the first sentinel in the URL's order that
 * answers), and the writer drops its connection when they name another
 * node: the next batch connects to the master they name. */

/* The master the sentinels name, asked on *k (opened to the first sentinel
 * that answers, from the URL's first, when closed): its port with its host
 * in host, or 0 when none answers. */
static int watch_ask(store *s, conn *k, char *host)
{
    for (int i = 0; i < s->nseeds; i++) {
        int quiet = 1; /* the writer's own connects say when nothing answers */
        if (!k->ctx && conn_open(s, s->seeds[i].host, s->seeds[i].port, &quiet, k) < 0)
            continue;
        int port = sentinel_ask(s, k, host);
        if (port)
            return port;
        conn_close(k); /* the next round starts from the first sentinel again */
    }
    return 0;
}

static void *watch_main(void *arg)
{
    store *s = arg;
    pthread_setname_np(pthread_self(), "hw-sentinel");
    conn k = {NULL, NULL};
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        pthread_mutex_unlock(&s->mu);
        char host[CLUSTER_HOST_MAX];
        int port = watch_ask(s, &k, host);
        pthread_mutex_lock(&s->mu);
        if (port)
            memcpy(s->named_host, host, sizeof host);
        s->named_port = port; /* none answered: the writer keeps its master, acting on no older answer */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + SENTINEL_POLL_MS * 1000000u;
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        if (!s->stopping)
            pthread_cond_timedwait(&s->watch_cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    conn_close(&k);
    return NULL;
}

/* Writer: drops the connection to the master when the sentinels, as the
 * watcher last asked them, name another node. */
static void follow_sentinels(store *s)
{
    node *n = &s->nodes[0];
    char host[CLUSTER_HOST_MAX];
    pthread_mutex_lock(&s->mu);
    int port = s->named_port;
    memcpy(host, s->named_host, sizeof host);
    pthread_mutex_unlock(&s->mu);
    if (!port || !n->conn.ctx || (port == n->port && strcmp(host, n->host) == 0))
        return;
    LOG(LOG_WARN, "Redis Sentinel names another master: the connection to the old one is dropped",
        "\"master\":\"%s\",\"node\":\"%s:%d\",\"named\":\"%s:%d\"", s->sentinel, n->host, n->port, host, port);
    drop_node(n);
}

/* One batch: every command goes to the master of its slot (the only
 * Redis, when not a cluster), each master's share is written in one go and
 * its replies read in order, so commands to one slot keep their order.
 * Commands that must be sent again (a redirection, a lost library) are sent
 * one by one after the rest, in their order. */
static void run_batch(store *s, cmd *batch)
{
    if (s->cluster && (!s->map || s->map_stale))
        refresh_map(s);
    if (s->watching)
        follow_sentinels(s);
    if (s->held && clock_now_ms() >= s->held_until) { /* held calls go first, in their order */
        *s->held_tail = batch;
        batch = s->held;
        s->held = NULL;
        s->held_tail = &s->held;
        memset(s->held_slots, 0, CLUSTER_SLOTS * sizeof *s->held_slots);
    }
    size_t count = 0;
    for (cmd *c = batch; c; c = c->next)
        count++;
    for (int i = 0; i < s->nnodes; i++)
        s->nodes[i].qtail = &s->nodes[i].q;
    while (batch) {
        cmd *c = batch;
        batch = c->next;
        c->next = NULL;
        if (s->held && c->slot >= 0 && s->held_slots[c->slot]) {
            hold(s, c);
            continue;
        }
        int i = route(s, c);
        if (i < 0) {
            fail_unsent(c);
            continue;
        }
        *s->nodes[i].qtail = c;
        s->nodes[i].qtail = &c->next;
    }
    int up = 1;
    for (int i = 0; i < s->nnodes; i++) {
        node *n = &s->nodes[i];
        if (!n->q)
            continue;
        if (ensure_node(s, n) < 0) {
            fail_list_unsent(n->q);
            n->q = NULL;
            up = 0;
            s->map_stale = s->cluster;
            continue;
        }
        n->waited = 0;
        for (cmd *c = n->q; c; c = c->next) {
            redisAppendFormattedCommand(n->conn.ctx, c->buf, (size_t)c->len);
            n->waited |= needs_wait(s, c);
        }
        if (n->waited)
            append_wait(s, n->conn.ctx);
    }
    cmd *redo = NULL, **rtail = &redo;
    redisReply **replies = count ? xmalloc(count * sizeof *replies) : NULL, **rr = replies;
    int *froms = count ? xmalloc(count * sizeof *froms) : NULL, *from = froms;
    for (int i = 0; i < s->nnodes; i++)
        if (s->nodes[i].q)
            read_replies(s, i, &rtail, &rr, &from);
    size_t k = 0;
    while (redo) {
        cmd *c = redo;
        redo = c->next;
        resend(s, c, replies[k], froms[k]);
        k++;
    }
    free(replies);
    free(froms);
    for (int i = 0; i < s->nnodes && up; i++)
        up = s->nodes[i].conn.ctx != NULL;
    note_ready(s, up && s->nnodes > 0 && !s->map_partial);
}

/* Under mu: the next batch, taken from the queue: every command in it but
 * the bulk ones past the first BULK_PER_BATCH, which stay queued, in their
 * order, for the batches after. With no more bulk calls queued than a batch
 * takes (nearly always), the whole queue is the batch; otherwise the walk
 * ends at the last bulk call, and what follows it joins the batch whole. */
static cmd *take_batch(store *s)
{
    cmd *batch = s->head;
    if (s->bulk_queued <= BULK_PER_BATCH) {
        s->head = NULL;
        s->tail = &s->head;
        s->queued = s->bulk_queued = 0;
        return batch;
    }
    cmd **bt = &batch, *rest = NULL, **rt = &rest, *c = s->head;
    uint32_t left = 0, seen = 0;
    for (cmd *next; c && seen < s->bulk_queued; c = next) {
        next = c->next;
        seen += c->bulk != 0;
        if (c->bulk && seen > BULK_PER_BATCH) {
            *rt = c;
            rt = &c->next;
            left++;
            continue;
        }
        *bt = c;
        bt = &c->next;
    }
    *bt = c; /* after the last bulk call: all of it goes now */
    *rt = NULL;
    s->head = rest;
    s->tail = rest ? rt : &s->head;
    s->queued = s->bulk_queued = left;
    return batch;
}

static void *writer_main(void *arg)
{
    store *s = arg;
    pthread_setname_np(pthread_self(), "hw-store");
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stopping) {
            if (!s->held) {
                pthread_cond_wait(&s->cv, &s->mu);
                continue;
            }
            uint64_t now = clock_now_ms();
            if (now >= s->held_until)
                break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t ns = (uint64_t)ts.tv_nsec + (s->held_until - now) * 1000000u;
            ts.tv_sec += (time_t)(ns / 1000000000u);
            ts.tv_nsec = (long)(ns % 1000000000u);
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        }
        if (!s->head && s->stopping)
            break; /* what is still held fails below: it never ran */
        cmd *batch = take_batch(s);
        s->busy = 1;
        pthread_mutex_unlock(&s->mu);
        run_batch(s, batch);
        pthread_mutex_lock(&s->mu);
        s->busy = 0;
        if (!s->head)
            pthread_cond_broadcast(&s->idle_cv);
    }
    pthread_mutex_unlock(&s->mu);
    fail_list_unsent(s->held);
    s->held = NULL;
    for (int i = 0; i < s->nnodes; i++)
        drop_node(&s->nodes[i]);
    return NULL;
}

/* Connects to every master (the one Redis, or the cluster's, after learning
 * its slot map from the seeds); a failure is logged and retried by the
 * writer on demand. */
static void connect_all(store *s)
{
    if (!s->cluster) {
        s->nodes[0] = (node){.host = s->host, .port = s->port};
        s->nnodes = 1;
    } else if (refresh_map(s) < 0) {
        s->ready = 0;
        return;
    }
    int up = 1;
    for (int i = 0; i < s->nnodes; i++)
        up &= connect_node(s, &s->nodes[i]) == 0;
    note_ready(s, up && !s->map_partial);
}

int store_start(store *s)
{
    connect_all(s);
    int rc = pthread_create(&s->thread, NULL, writer_main, s);
    if (rc)
        return -rc;
    s->started = 1;
    if (s->sentinel) {
        rc = pthread_create(&s->watcher, NULL, watch_main, s);
        if (rc) /* then a failover is followed when the old master is lost or demoted */
            LOG(LOG_WARN, "the Redis Sentinel watcher could not start", "\"error\":%d", rc);
        s->watching = rc == 0;
    }
    return 0;
}

int store_drain(store *s, uint32_t timeout_ms)
{
    if (!s || !s->started)
        return 0;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)timeout_ms * 1000000u;
    until.tv_sec += (time_t)(ns / 1000000000u);
    until.tv_nsec = (long)(ns % 1000000000u);
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    while ((s->head || s->busy) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&s->idle_cv, &s->mu, &until);
    int left = s->head || s->busy;
    pthread_mutex_unlock(&s->mu);
    return left ? -ETIMEDOUT : 0;
}

void store_free(store *s)
{
    if (!s)
        return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        pthread_cond_signal(&s->cv);
        pthread_cond_signal(&s->watch_cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        if (s->watching)
            pthread_join(s->watcher, NULL);
    }
    if (s->tail) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        pthread_cond_destroy(&s->idle_cv);
        pthread_cond_destroy(&s->watch_cv);
    }
    for (int i = 0; i < s->nnodes; i++)
        drop_node(&s->nodes[i]);
    free(s->map);
    free(s->sentinel);
    free(s->held_slots);
    free(s->seeds);
    free(s->host);
    free(s->path);
    free(s->user);
    free(s->password);
    free(s);
}

void store_get_stats(const store *s, store_stats *out)
{
    out->moved = __atomic_load_n(&s->stats.moved, __ATOMIC_RELAXED);
    out->ask = __atomic_load_n(&s->stats.ask, __ATOMIC_RELAXED);
    out->tryagain = __atomic_load_n(&s->stats.tryagain, __ATOMIC_RELAXED);
    out->map_refreshes = __atomic_load_n(&s->stats.map_refreshes, __ATOMIC_RELAXED);
    out->masters = __atomic_load_n(&s->stats.masters, __ATOMIC_RELAXED);
    out->replica_ack_timeouts = __atomic_load_n(&s->stats.replica_ack_timeouts, __ATOMIC_RELAXED);
}

int store_is_cluster(const store *s) { return s->cluster; }

void store_set_min_replicas(store *s, int n, uint32_t timeout_ms)
{
    s->min_replicas = n;
    s->replica_timeout_ms = timeout_ms;
}

int store_ready(const store *s) { return s->ready; }

int store_loading(const store *s) { return s->loading; }

int store_reply_refusal(const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ERROR || !r->str)
        return 0;
    return strncmp(r->str, "OOM ", 4) == 0          ? STORE_REFUSES_MEMORY
           : strncmp(r->str, "MISCONF ", 8) == 0    ? STORE_REFUSES_DISK
           : strncmp(r->str, "NOREPLICAS ", 11) == 0 ? STORE_REFUSES_REPLICAS
                                                    : 0;
}

const char *store_refusal_text(int refusal)
{
    switch (refusal) {
    case STORE_REFUSES_MEMORY: return "maxmemory reached";
    case STORE_REFUSES_DISK: return "it could not write its AOF or RDB file: a full or failing disk";
    case STORE_REFUSES_REPLICAS: return "fewer replicas are connected than its min-replicas-to-write";
    default: return NULL;
    }
}

int store_refusing_writes(const store *s)
{
    uint64_t t = s->oom_ms;
    return t && clock_now_ms() - t < STORE_OOM_HOLD_MS ? s->refusal : 0;
}

static void probed_cb(void *arg, const redisReply *r)
{
    (void)r; /* note_writable read it */
    atomic_fetch_sub((atomic_int *)arg, 1);
}

int store_probe_writes(store *s, uint32_t nkeys, const char *const *keys)
{
    int calls = s->cluster && nkeys ? (int)nkeys : 1;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&s->probing, &expected, calls))
        return 0;
    int rc = 0;
    for (int i = 0; i < calls; i++) {
        const char *key = s->cluster && nkeys ? keys[i] : NULL;
        int sent = store_eval(s, SCRIPT_WRITABLE, key ? 1 : 0, key ? 1 : 0, key ? &key : NULL, NULL, probed_cb,
                              &s->probing);
        if (sent < 0) {
            atomic_fetch_sub(&s->probing, 1);
            rc = sent;
        }
    }
    return rc;
}

uint32_t store_queued(store *s)
{
    pthread_mutex_lock(&s->mu);
    uint32_t n = s->queued;
    pthread_mutex_unlock(&s->mu);
    return n;
}

uint32_t store_max_queued(const store *s) { return s->max_queued; }

/* ---- submit ---- */

/* admitted: the command carries writes admitted before (store_eval_admitted),
 * so a full queue does not refuse it. */
static int submit(store *s, char *buf, int len, int slot, int writes, int bulk, uint32_t hold_max_ms, int admitted,
                  store_reply_cb cb, void *arg)
{
    if (len < 0)
        return -ENOMEM;
    cmd *c = xmalloc(sizeof *c);
    *c = (cmd){.buf = buf, .len = len, .slot = slot, .hold_max_ms = hold_max_ms, .writes = writes, .bulk = bulk,
               .cb = cb, .arg = arg};
    pthread_mutex_lock(&s->mu);
    int rc = s->stopping ? -ESHUTDOWN : s->queued >= s->max_queued && !admitted ? -EAGAIN : 0;
    if (rc == 0) {
        *s->tail = c;
        s->tail = &c->next;
        s->bulk_queued += bulk != 0;
        if (s->queued++ == 0)
            pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc) {
        free(buf);
        free(c);
    }
    return rc;
}

/* The RESP encoding of a command (what redisFormatCommandArgv produces),
 * written with one allocation and no printf: this runs for every Redis
 * command, on the API's and the engine's threads. */
static int format_resp(char **out, int argc, const char **argv, const size_t *lens)
{
    size_t total = 16;
    for (int i = 0; i < argc; i++)
        total += (lens ? lens[i] : strlen(argv[i])) + 24;
    char *b = xmalloc(total), *p = b;
    *p++ = '*';
    p += json_int(p, argc);
    *p++ = '\r';
    *p++ = '\n';
    for (int i = 0; i < argc; i++) {
        size_t n = lens ? lens[i] : strlen(argv[i]);
        *p++ = '$';
        p += json_int(p, (long long)n);
        *p++ = '\r';
        *p++ = '\n';
        memcpy(p, argv[i], n);
        p += n;
        *p++ = '\r';
        *p++ = '\n';
    }
    *out = b;
    return (int)(p - b);
}

/* The slot of argv[k] on a cluster, else -1 (one Redis needs no routing). */
static int key_slot(const store *s, int argc, const char **argv, const size_t *lens, int k)
{
    if (!s->cluster || k >= argc)
        return -1;
    return cluster_slot(argv[k], lens ? lens[k] : strlen(argv[k]));
}

static int command_at(store *s, int argc, const char **argv, const size_t *lens, int slot, int writes, int bulk,
                      uint32_t hold_max_ms, int admitted, store_reply_cb cb, void *arg)
{
    char *buf = NULL;
    int len = format_resp(&buf, argc, argv, lens);
    return submit(s, buf, len, slot, writes, bulk, hold_max_ms, admitted, cb, arg);
}

int store_command(store *s, int argc, const char **argv, const size_t *lens, store_reply_cb cb, void *arg)
{
    return command_at(s, argc, argv, lens, key_slot(s, argc, argv, lens, 1), 0, 0, STORE_HOLD_MAX_MS, 0, cb, arg);
}

/* The migration guard of a cluster call whose first key is key: a key of
 * the same hash tag that is never written ("hw:{tag}:~"), declared as the
 * call's last key. While its slot migrates, the source master finds it
 * missing and answers ASK, and the importing master answers TRYAGAIN (several
 * keys, one missing), so a function never runs in a half-moved slot: the
 * functions touch keys they do not declare (the indexes of the partition),
 * which Redis's own rules for migrating slots do not cover. Returns the
 * guard's length, or 0 when the key has no hash tag (no guard). */
static size_t migration_guard(char *out, size_t size, const char *key, size_t len)
{
    size_t tlen;
    const char *tag = cluster_hash_tag(key, len, &tlen);
    int n = tag ? snprintf(out, size, "hw:%.*s:~", (int)tlen, tag) : 0;
    return n > 0 && (size_t)n < size ? (size_t)n : 0;
}

static int eval(store *s, enum store_script script, int nkeys, int argc, const char **argv, const size_t *lens,
                int admitted, int bulk, store_reply_cb cb, void *arg)
{
    enum { SMALL = 24 }; /* arguments kept on the stack; batches (timers.c) take more */
    if (argc < 0 || nkeys < 0 || nkeys > argc || script < 0 || script >= SCRIPT_COUNT)
        return -EINVAL;
    char guard[KEY_GUARD_MAX];
    size_t glen = s->cluster && nkeys > 0 ? migration_guard(guard, sizeof guard, argv[0], lens ? lens[0] : strlen(argv[0])) : 0;
    int total = argc + 3 + (glen > 0);
    const char *vs[SMALL], **v = vs;
    size_t ls[SMALL], *l = ls;
    if (total > SMALL) {
        v = xmalloc((size_t)total * sizeof *v);
        l = xmalloc((size_t)total * sizeof *l);
    }
    char nk[12];
    snprintf(nk, sizeof nk, "%d", nkeys + (glen > 0));
    v[0] = "FCALL";
    v[1] = fn_name[script];
    v[2] = nk;
    for (int i = 0; i < 3; i++)
        l[i] = strlen(v[i]);
    int k = 3;
    for (int i = 0; i < argc; i++) {
        if (i == nkeys && glen) {
            v[k] = guard;
            l[k++] = glen;
        }
        v[k] = argv[i];
        l[k++] = lens ? lens[i] : strlen(argv[i]);
    }
    if (nkeys == argc && glen) {
        v[k] = guard;
        l[k++] = glen;
    }
    /* What the API acknowledges waits for replicas; the engine's own steps
     * (claim, begin, finish, release...) do not: a step lost in a failover
     * repeats an attempt (at least once), and deliveries go on while a
     * replica is away. */
    int writes = script == SCRIPT_CREATE || script == SCRIPT_CREATE_BATCH || script == SCRIPT_SELECT ||
                 script == SCRIPT_CANCEL || script == SCRIPT_CONTROL || script == SCRIPT_QUEUES ||
                 script == SCRIPT_LEASE || script == SCRIPT_LEASE_ACQUIRE || script == SCRIPT_DEADLETTERS;
    /* The engine claims one partition at a time, each claim sent once the
     * one before answered: a claim held while its slot migrates would hold
     * back the claims of every partition after it. It fails soon instead
     * (it never ran), and the next sweep claims that partition again. */
    uint32_t hold_max_ms = script == SCRIPT_CLAIM ? STORE_CLAIM_HOLD_MAX_MS : STORE_HOLD_MAX_MS;
    /* Calls over many timers or queues for one request (a listing's page,
     * the counts, a selector's or dead-letter operation's chunk, a batch's
     * creates: store_eval_bulk; about a millisecond of Redis each) go
     * BULK_PER_BATCH a batch, so that a
     * flood of them from one namespace does not stand in front of
     * everyone's creates, begins and finishes on the one connection. */
    bulk |= script == SCRIPT_LIST || script == SCRIPT_LIST_RO || script == SCRIPT_COUNTS ||
            script == SCRIPT_COUNTS_RO || script == SCRIPT_SELECT || script == SCRIPT_DEADLETTERS;
    int rc = command_at(s, total, v, l, nkeys > 0 ? key_slot(s, argc, argv, lens, 0) : -1, writes, bulk,
                        hold_max_ms, admitted, cb, arg);
    if (v != vs) {
        free(v);
        free(l);
    }
    return rc;
}

int store_eval(store *s, enum store_script script, int nkeys, int argc, const char **argv, const size_t *lens,
               store_reply_cb cb, void *arg)
{
    return eval(s, script, nkeys, argc, argv, lens, 0, 0, cb, arg);
}

int store_eval_admitted(store *s, enum store_script script, int nkeys, int argc, const char **argv,
                        const size_t *lens, store_reply_cb cb, void *arg)
{
    return eval(s, script, nkeys, argc, argv, lens, 1, 0, cb, arg);
}

int store_eval_bulk(store *s, enum store_script script, int nkeys, int argc, const char **argv, const size_t *lens,
                    store_reply_cb cb, void *arg)
{
    return eval(s, script, nkeys, argc, argv, lens, 0, 1, cb, arg);
}

/* A reader sent by store_eval_read: its arguments, kept (in an arena of
 * their own: the caller's need not outlive the call) until its answer. */
typedef struct reader {
    store *s;
    enum store_script twin; /* SCRIPT_COUNT: sent as the twin already */
    int nkeys, argc;
    const char **v;
    size_t *len;
    store_reply_cb cb;
    void *arg;
} reader;

static void reader_free(reader *rd)
{
    free(rd->v); /* the arena follows the vectors in one allocation */
    free(rd);
}

static void reader_cb(void *arg, const redisReply *r)
{
    reader *rd = arg;
    if (store_reply_refusal(r) && rd->twin != SCRIPT_COUNT) {
        enum store_script twin = rd->twin;
        rd->twin = SCRIPT_COUNT; /* once */
        if (eval(rd->s, twin, rd->nkeys, rd->argc, rd->v, rd->len, 1, 0, reader_cb, rd) == 0)
            return;
    }
    rd->cb(rd->arg, r);
    reader_free(rd);
}

int store_eval_read(store *s, enum store_script script, int nkeys, int argc, const char **argv,
                    const size_t *lens, store_reply_cb cb, void *arg)
{
    enum store_script twin = twin_of(script);
    if (twin == SCRIPT_COUNT || argc < 0)
        return eval(s, script, nkeys, argc, argv, lens, 0, 0, cb, arg);
    size_t total = 0;
    for (int i = 0; i < argc; i++)
        total += (lens ? lens[i] : strlen(argv[i])) + 1;
    size_t vec = (size_t)argc * (sizeof(const char *) + sizeof(size_t));
    reader *rd = xmalloc(sizeof *rd);
    *rd = (reader){s, twin, nkeys, argc, xmalloc(vec + total + 1), NULL, cb, arg};
    rd->len = (size_t *)(rd->v + argc);
    char *p = (char *)(rd->len + argc);
    for (int i = 0; i < argc; i++) {
        size_t n = lens ? lens[i] : strlen(argv[i]);
        memcpy(p, argv[i], n);
        p[n] = '\0';
        rd->v[i] = p;
        rd->len[i] = n;
        p += n + 1;
    }
    if (store_refusing_writes(s)) {
        script = twin;
        rd->twin = SCRIPT_COUNT;
    }
    int rc = eval(s, script, nkeys, argc, rd->v, rd->len, 0, 0, reader_cb, rd);
    if (rc < 0)
        reader_free(rd);
    return rc;
}

/* ---- reply helpers ---- */

redisReply *store_reply_take(const redisReply *r, size_t i)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || i >= r->elements)
        return NULL;
    redisReply *e = r->element[i];
    r->element[i] = NULL; /* (the array of pointers is the reply's own: freeReplyObject skips a NULL) */
    return e;
}

long long store_reply_int(const redisReply *r, int i, long long def)
{
    if (!r)
        return def;
    if (i >= 0) {
        if (r->type != REDIS_REPLY_ARRAY || (size_t)i >= r->elements)
            return def;
        r = r->element[i];
    }
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING) {
        char *end;
        long long v = strtoll(r->str, &end, 10);
        return end != r->str && !*end ? v : def;
    }
    return def;
}

const char *store_reply_str(const redisReply *r, int i, size_t *len)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || i < 0 || (size_t)i >= r->elements)
        return NULL;
    const redisReply *e = r->element[i];
    if (e->type != REDIS_REPLY_STRING && e->type != REDIS_REPLY_STATUS)
        return NULL;
    if (len)
        *len = e->len;
    return e->str;
}
