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

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "clock.h"
#include "jsonesc.h"
#include "log.h"
#include "lua_scripts.h"
#include "xalloc.h"

#define RECONNECT_MIN_MS 50
#define RECONNECT_MAX_MS 2000

typedef struct cmd {
    struct cmd *next;
    char *buf;
    int len;
    store_reply_cb cb;
    void *arg;
} cmd;

struct store {
    char *host, *path, *user, *password;
    int port, db;
    uint32_t timeout_ms, max_queued;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    cmd *head, **tail;
    uint32_t queued;
    int stopping, started;
    pthread_t thread;

    redisContext *ctx;      /* writer thread only */
    uint64_t last_try_ms;   /* writer thread only */
    uint64_t backoff_ms;    /* writer thread only: wait before the next connect */
    volatile int ready;     /* written by the writer, read by anyone */
    volatile uint64_t oom_ms; /* when Redis last refused a write for maxmemory (0: since then one passed) */
    int warned;             /* writer thread only: the outage was logged */
};

/* The scripts, as one Redis function library (FUNCTION LOAD, Redis 7.0+):
 * the prelude's helpers are made once when the library loads, where EVALSHA
 * would make them again on every call (bench/script_cost.py: ~2 us of
 * Redis per create). Each script file's body becomes the body of a function
 * function(KEYS, ARGV), so it reads as an EVAL script does. The library and
 * function names carry a hash of the code, so instances of different builds
 * sharing a Redis each call their own. */
static const struct {
    const char *name, *src;
} scripts[SCRIPT_COUNT] = {
    [SCRIPT_CREATE] = {"create", lua_create},
    [SCRIPT_GET] = {"get", lua_get},
    [SCRIPT_MIGRATE] = {"migrate", lua_migrate},
    [SCRIPT_CLAIM] = {"claim", lua_claim},
    [SCRIPT_BEGIN] = {"begin", lua_begin},
    [SCRIPT_FINISH] = {"finish", lua_finish},
    [SCRIPT_CANCEL] = {"cancel", lua_cancel},
    [SCRIPT_RELEASE] = {"release", lua_release},
    [SCRIPT_CONTROL] = {"control", lua_control},
    [SCRIPT_LIST] = {"list", lua_list},
    [SCRIPT_DEADLETTERS] = {"deadletters", lua_deadletters},
    [SCRIPT_RENEW] = {"renew", lua_renew},
    [SCRIPT_UNLOCK] = {"unlock", lua_unlock},
    [SCRIPT_LEASE] = {"lease", lua_lease},
    [SCRIPT_QUEUES] = {"queues", lua_queues},
};
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
        len += strlen(scripts[i].src) + 128;
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
        k += (size_t)snprintf(lib_src + k, len - k, "redis.register_function('%s', function(KEYS, ARGV)\n%send)\n",
                              fn_name[i], scripts[i].src);
    }
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
    if (strncmp(url, "redis://", 8) != 0)
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

store *store_create(const char *url, uint32_t timeout_ms, uint32_t max_queued)
{
    pthread_once(&lib_once, build_library);
    store *s = xcalloc(1, sizeof *s);
    if (parse_url(s, url) < 0) {
        LOG(LOG_ERROR, "invalid Redis URL", "\"setting\":\"HOOKWHEEL_REDIS_URL\"%s", "");
        s->started = 0;
        store_free(s);
        return NULL;
    }
    s->timeout_ms = timeout_ms;
    s->max_queued = max_queued;
    s->tail = &s->head;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    return s;
}

/* ---- connection (writer thread) ---- */

static int simple_ok(redisContext *c, const char *fmt, const char *a, const char *b)
{
    redisReply *r = b ? redisCommand(c, fmt, a, b) : redisCommand(c, fmt, a);
    int ok = r && r->type != REDIS_REPLY_ERROR;
    if (r && !ok)
        LOG(LOG_ERROR, "Redis refused a start-up command", "\"error\":\"%.200s\"", r->str);
    freeReplyObject(r);
    return ok;
}

static int load_scripts(redisContext *c)
{
    redisReply *r = redisCommand(c, "FUNCTION LOAD REPLACE %s", lib_src);
    int ok = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, lib_name) == 0;
    if (r && !ok)
        LOG(LOG_ERROR, "Redis refused hookwheel's function library (Redis 7.0 or later is needed)",
            "\"library\":\"%s\",\"error\":\"%.200s\"", lib_name,
            r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return ok ? 0 : -EIO;
}

static void drop_connection(store *s)
{
    if (s->ctx)
        redisFree(s->ctx);
    s->ctx = NULL;
    s->ready = 0;
}

static int connect_redis(store *s)
{
    struct timeval tv = {s->timeout_ms / 1000, (s->timeout_ms % 1000) * 1000};
    s->last_try_ms = clock_now_ms();
    redisContext *c = s->path ? redisConnectUnixWithTimeout(s->path, tv)
                              : redisConnectWithTimeout(s->host, s->port, tv);
    if (!c || c->err) {
        s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : RECONNECT_MIN_MS;
        if (s->backoff_ms > RECONNECT_MAX_MS)
            s->backoff_ms = RECONNECT_MAX_MS;
        if (!s->warned || log_min_level <= LOG_DEBUG)
            LOG(LOG_WARN, "Redis unreachable", "\"error\":\"%s\"", c ? c->errstr : "no memory");
        s->warned = 1;
        if (c)
            redisFree(c);
        s->ready = 0;
        return -EIO;
    }
    redisSetTimeout(c, tv);
    int ok = 1;
    if (s->password)
        ok = s->user && s->user[0] ? simple_ok(c, "AUTH %s %s", s->user, s->password)
                                   : simple_ok(c, "AUTH %s", s->password, NULL);
    if (ok && s->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", s->db);
        ok = simple_ok(c, "SELECT %s", db, NULL);
    }
    if (!ok || load_scripts(c) < 0) {
        redisFree(c);
        s->ready = 0;
        return -EIO;
    }
    if (!s->ready)
        LOG(LOG_INFO, "Redis connected", "\"scripts\":%d", SCRIPT_COUNT);
    s->ctx = c;
    s->ready = 1;
    s->warned = 0;
    s->backoff_ms = 0;
    return 0;
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

/* Notes whether Redis refuses writes: an OOM error (maxmemory reached with
 * noeviction) marks it, a function call that succeeds clears it. The
 * engine calls a function every lease tick, so the mark stays current. */
static void note_writable(store *s, const cmd *c, const redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "OOM", 3) == 0)
        s->oom_ms = clock_now_ms();
    else if (r->type != REDIS_REPLY_ERROR && s->oom_ms && c->len > 16 && memmem(c->buf, 16, "FCALL", 5))
        s->oom_ms = 0;
}

/* Redis lost the library (a restart without persistence, FUNCTION FLUSH). */
static int is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "Function not found");
}

/* A "Function not found" reply: load the library again and send this one
 * command again, alone, after the rest of the batch. */
static redisReply *resend_after_noscript(store *s, cmd *c)
{
    if (load_scripts(s->ctx) < 0)
        return NULL;
    redisReply *r = NULL;
    if (redisAppendFormattedCommand(s->ctx, c->buf, (size_t)c->len) != REDIS_OK ||
        redisGetReply(s->ctx, (void **)&r) != REDIS_OK)
        return NULL;
    return r;
}

static void run_batch(store *s, cmd *batch)
{
    if (!s->ctx && (clock_now_ms() - s->last_try_ms < s->backoff_ms || connect_redis(s) < 0)) {
        fail_list(batch);
        return;
    }
    for (cmd *c = batch; c; c = c->next)
        redisAppendFormattedCommand(s->ctx, c->buf, (size_t)c->len);
    cmd *deferred = NULL, **dtail = &deferred;
    while (batch) {
        redisReply *r = NULL;
        if (redisGetReply(s->ctx, (void **)&r) != REDIS_OK) {
            LOG(LOG_WARN, "Redis connection lost", "\"error\":\"%s\"", s->ctx->errstr);
            drop_connection(s);
            fail_list(batch);
            fail_list(deferred);
            return;
        }
        cmd *c = batch;
        batch = c->next;
        if (is_noscript(r)) {
            freeReplyObject(r);
            c->next = NULL;
            *dtail = c;
            dtail = &c->next;
            continue;
        }
        note_writable(s, c, r);
        finish_cmd(c, r);
        freeReplyObject(r);
    }
    while (deferred) {
        cmd *c = deferred;
        deferred = c->next;
        redisReply *r = resend_after_noscript(s, c);
        if (!r) {
            drop_connection(s);
            finish_cmd(c, NULL);
            fail_list(deferred);
            return;
        }
        finish_cmd(c, r);
        freeReplyObject(r);
    }
}

static void *writer_main(void *arg)
{
    store *s = arg;
    pthread_setname_np(pthread_self(), "hw-store");
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stopping)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head)
            break;
        cmd *batch = s->head;
        s->head = NULL;
        s->tail = &s->head;
        s->queued = 0;
        pthread_mutex_unlock(&s->mu);
        run_batch(s, batch);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    drop_connection(s);
    return NULL;
}

int store_start(store *s)
{
    connect_redis(s);
    int rc = pthread_create(&s->thread, NULL, writer_main, s);
    if (rc)
        return -rc;
    s->started = 1;
    return 0;
}

void store_free(store *s)
{
    if (!s)
        return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    if (s->tail) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
    }
    drop_connection(s);
    free(s->host);
    free(s->path);
    free(s->user);
    free(s->password);
    free(s);
}

int store_ready(const store *s) { return s->ready; }

int store_refusing_writes(const store *s)
{
    uint64_t t = s->oom_ms;
    return t && clock_now_ms() - t < STORE_OOM_HOLD_MS;
}

uint32_t store_queued(store *s)
{
    pthread_mutex_lock(&s->mu);
    uint32_t n = s->queued;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- submit ---- */

static int submit(store *s, char *buf, int len, store_reply_cb cb, void *arg)
{
    if (len < 0)
        return -ENOMEM;
    cmd *c = xmalloc(sizeof *c);
    *c = (cmd){NULL, buf, len, cb, arg};
    pthread_mutex_lock(&s->mu);
    int rc = s->stopping ? -ESHUTDOWN : s->queued >= s->max_queued ? -EAGAIN : 0;
    if (rc == 0) {
        *s->tail = c;
        s->tail = &c->next;
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

int store_command(store *s, int argc, const char **argv, const size_t *lens, store_reply_cb cb, void *arg)
{
    char *buf = NULL;
    int len = format_resp(&buf, argc, argv, lens);
    return submit(s, buf, len, cb, arg);
}

int store_eval(store *s, enum store_script script, int nkeys, int argc, const char **argv,
               const size_t *lens, store_reply_cb cb, void *arg)
{
    enum { SMALL = 24 }; /* arguments kept on the stack; batches (timers.c) take more */
    if (argc < 0 || script < 0 || script >= SCRIPT_COUNT)
        return -EINVAL;
    const char *vs[SMALL], **v = vs;
    size_t ls[SMALL], *l = ls;
    if (argc + 3 > SMALL) {
        v = xmalloc((size_t)(argc + 3) * sizeof *v);
        l = xmalloc((size_t)(argc + 3) * sizeof *l);
    }
    char nk[12];
    snprintf(nk, sizeof nk, "%d", nkeys);
    v[0] = "FCALL";
    v[1] = fn_name[script];
    v[2] = nk;
    for (int i = 0; i < 3; i++)
        l[i] = strlen(v[i]);
    for (int i = 0; i < argc; i++) {
        v[3 + i] = argv[i];
        l[3 + i] = lens ? lens[i] : strlen(argv[i]);
    }
    int rc = store_command(s, argc + 3, v, l, cb, arg);
    if (v != vs) {
        free(v);
        free(l);
    }
    return rc;
}

/* ---- reply helpers ---- */

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
