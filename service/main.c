/* main.c - process wiring: configuration, the embedded Redis, the store, the
 * engine and the HTTP API, the orderly stop on SIGTERM/SIGINT, and the
 * tokens and namespace secrets files read again on SIGHUP.
 *
 * Signals are blocked in every thread and taken synchronously by the main
 * thread (sigwait), so no handler runs in an arbitrary thread. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <curl/curl.h>

#include "api.h"
#include "auth.h"
#include "config.h"
#include "dispatch.h"
#include "engine.h"
#include "http.h"
#include "leases.h"
#include "log.h"
#include "metrics.h"
#include "netpolicy.h"
#include "persistence/leases.h"
#include "queues.h"
#include "redis_child.h"
#include "sign.h"
#include "store.h"
#include "tally.h"
#include "xalloc.h"

/* Descriptors the process holds besides API connections and attempts: the
 * standard streams and the log, the engine's epoll, eventfd and timerfd,
 * the listening socket, the store's and the lease worker's Redis
 * connections, the embedded redis-server's pipe, the lease worker's curl
 * handle, files read at start (tokens, secrets) and the resolver's (hosts,
 * resolv.conf). About 25 are open after start-up; the rest is headroom. */
#define FD_RESERVE_PROCESS 64

typedef struct app {
    config cfg;
    signer *sign;
    netpolicy *policy;
    auth *auth;
    auth **retired;       /* tables a SIGHUP replaced: a request under way may still use one */
    size_t nretired;
    signer **retired_signers; /* the same for the signers */
    size_t nretired_signers;
    redis_child *redis;
    store *st;
    engine *eng;
    leases *leases;
    char redis_url[512];  /* the store's; the lease worker opens its own connection to it */
    metrics *metrics;
    tally *tally;         /* per-minute figures for GET /stats */
    http_server *http;
    api api;
} app;

static int start_store(app *a)
{
    char url[512];
    const char *u = a->cfg.redis_url;
    if (!u) {
        a->redis = redis_child_start_fsync(a->cfg.data_dir, a->cfg.redis_server, a->cfg.redis_appendfsync, 10000);
        if (!a->redis)
            return -1;
        snprintf(url, sizeof url, "unix://%s", redis_child_socket(a->redis));
        u = url;
    }
    snprintf(a->redis_url, sizeof a->redis_url, "%s", u);
    a->st = store_create(u, (uint32_t)a->cfg.redis_timeout_ms, (uint32_t)a->cfg.max_queued_writes);
    if (!a->st)
        return -1;
    store_set_min_replicas(a->st, (int)a->cfg.redis_min_replicas_ack, (uint32_t)a->cfg.redis_replica_ack_timeout_ms);
    if (store_start(a->st) != 0)
        return -1;
    if (!leases_available(a->st, a->cfg.lease_prefix))
        LOG(LOG_WARN, "watchdog leases are off: on a Redis Cluster HOOKWHEEL_LEASE_PREFIX needs a hash tag",
            "\"lease_prefix\":\"%.64s\",\"example\":\"lease:{l}:\"", a->cfg.lease_prefix);
    /* queue controls written by a build before their keys' hash tag */
    return store_is_cluster(a->st) || queues_upgrade(a->st) == 0 ? 0 : -1;
}

static int start_all(app *a)
{
    a->metrics = metrics_create(); /* before anything records: the store's callbacks count creates */
    if (start_store(a) < 0)
        return -1;
    a->tally = tally_create(a->st);
    if (tally_start(a->tally) < 0)
        return -1;
    a->eng = engine_create(&a->cfg, a->st, a->sign, a->policy);
    if (a->eng) {
        engine_set_metrics(a->eng, a->metrics);
        engine_set_tally(a->eng, a->tally);
    }
    if (!a->eng || engine_start(a->eng) < 0)
        return -1;
    a->leases = leases_create(&a->cfg, a->redis_url, a->eng, a->policy);
    if (!a->leases || leases_start(a->leases) < 0)
        return -1;
    api_init(&a->api, &a->cfg, a->st, a->eng, a->policy);
    a->api.m = a->metrics;
    http_config hc = {a->cfg.listen, a->cfg.max_body_bytes, a->cfg.max_batch_body_bytes, (unsigned)a->cfg.api_threads,
                      (unsigned)a->cfg.max_connections, (unsigned)a->cfg.max_connections_per_ip,
                      (unsigned)a->cfg.connection_timeout_s, (unsigned)a->cfg.request_head_timeout_ms,
                      (unsigned)a->cfg.request_body_timeout_ms, a->auth};
    a->http = http_start(&hc, api_routes, api_route_count, &a->api);
    return a->http ? 0 : -1;
}

/* Stops in dependency order: no new requests, the engine hands its claims
 * back, the store sends what open requests queued and their callbacks answer
 * them, the API answers what is left, the lease worker stops renewing (other
 * instances, if any, renew from now on; its store's last callbacks may still
 * hand the engine an on_expire timer, so it goes before the engine), the
 * per-minute figures counted until the engine stopped are queued, the
 * store sends what is queued, and only then the embedded Redis goes (it
 * flushes its AOF on SIGTERM). */
static void stop_all(app *a)
{
    if (a->http)
        http_quiesce(a->http);
    if (a->eng)
        engine_stop(a->eng);
    /* The calls of requests still open (a listing's or a batch's calls wait
     * their turn: store.h) answer them before the server frees them; a call
     * Redis does not answer fails within the Redis timeout. */
    uint32_t drain_ms = (uint32_t)a->cfg.redis_timeout_ms + 3000;
    if (store_drain(a->st, drain_ms) < 0)
        LOG(LOG_WARN, "Redis calls still queued at stop: their requests are answered 503",
            "\"waited_ms\":%" PRIu32, drain_ms);
    http_stop(a->http);
    leases_free(a->leases); /* renew as late as possible; other instances go on */
    tally_stop(a->tally);   /* after the engine: its last outcomes are counted */
    store_free(a->st);
    api_fini(&a->api);      /* after the store: its callbacks have run */
    engine_free(a->eng);
    tally_free(a->tally);   /* after the store: its writes' callbacks have run */
    metrics_free(a->metrics); /* every thread that records has stopped */
    redis_child_stop(a->redis);
    signer_free(a->sign);
    netpolicy_free(a->policy);
    auth_free(a->auth);
    for (size_t i = 0; i < a->nretired; i++)
        auth_free(a->retired[i]);
    free(a->retired);
    for (size_t i = 0; i < a->nretired_signers; i++)
        signer_free(a->retired_signers[i]);
    free(a->retired_signers);
}

/* Raises the soft open-file limit to the hard one (systemd's default soft
 * limit is 1,024 whatever the hard one), then checks that the API's
 * connections and everything else the process may hold fit under it, so an
 * open-file shortage never lands on deliveries. Returns 0, or -EINVAL after
 * one line naming the setting (exit 2). */
static int fd_limit_check(const config *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0; /* cannot happen on Linux */
    rlim_t was = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            rl.rlim_cur = was;
    }
    uint64_t reserve = FD_RESERVE_PROCESS + cfg->api_threads + 1 + /* the API workers' and daemon's eventfds */
                       dispatch_fds_needed((uint32_t)cfg->max_inflight);
    uint64_t limit = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX / 2 : (uint64_t)rl.rlim_cur;
    if (config_check_fd_limit(cfg, reserve, limit) < 0)
        return -EINVAL;
    LOG(LOG_INFO, "open-file limit", "\"was\":%llu,\"now\":%llu,\"reserved\":%llu,\"max_connections\":%llu",
        (unsigned long long)was, (unsigned long long)limit, (unsigned long long)reserve,
        (unsigned long long)cfg->max_connections);
    return 0;
}

/* Loads the TLS files for a rediss:// URL (before any store is created).
 * Returns 0, or -EINVAL after one line naming the setting (exit 2). */
static int tls_setup(const config *cfg)
{
    if (!cfg->redis_url || strncmp(cfg->redis_url, "rediss", 6) != 0) {
        if (cfg->redis_tls_ca_file || cfg->redis_tls_cert_file)
            LOG(LOG_WARN, "HOOKWHEEL_REDIS_TLS_* apply to rediss:// URLs only: they are not used",
                "\"redis\":\"%s\"", cfg->redis_url ? "plain" : "embedded");
        return 0;
    }
    const struct {
        const char *name, *path;
    } files[] = {[STORE_TLS_CA] = {"HOOKWHEEL_REDIS_TLS_CA_FILE", cfg->redis_tls_ca_file},
                 [STORE_TLS_CERT] = {"HOOKWHEEL_REDIS_TLS_CERT_FILE", cfg->redis_tls_cert_file},
                 [STORE_TLS_KEY] = {"HOOKWHEEL_REDIS_TLS_KEY_FILE", cfg->redis_tls_key_file}};
    store_tls t = {cfg->redis_tls_ca_file, cfg->redis_tls_cert_file, cfg->redis_tls_key_file,
                   (int)cfg->redis_tls_verify_host};
    enum store_tls_file bad;
    char err[256];
    if (store_tls_init(&t, &bad, err, sizeof err) == 0)
        return 0;
    fprintf(stderr, "hookwheel: invalid %s '%s': %s\n", files[bad].name,
            files[bad].path ? files[bad].path : "(the system's default CAs)", err);
    return -EINVAL;
}

/* The signer of cfg's secrets: HOOKWHEEL_SIGNING_SECRET's and the
 * namespace secrets file's; NULL when neither is set, or with *bad naming
 * the setting at fault and err[size] why. */
static signer *make_signer(const config *cfg, const char **bad, char *err, size_t size)
{
    signer *s = NULL;
    if (cfg->signing_secret && !(s = signer_create(cfg->signing_secret, err, size))) {
        *bad = "HOOKWHEEL_SIGNING_SECRET";
        return NULL;
    }
    if (cfg->namespace_secrets_file) {
        if (!s)
            s = signer_create_empty();
        if (signer_load_namespaces(s, cfg->namespace_secrets_file, err, size) < 0) {
            signer_free(s);
            *bad = "HOOKWHEEL_NAMESPACE_SECRETS_FILE";
            return NULL;
        }
    }
    return s;
}

/* A namespace secret for a namespace no token belongs to signs nothing
 * new: a misspelt name signs nothing, and the namespace meant falls back to
 * HOOKWHEEL_SIGNING_SECRET, which other namespaces' receivers may hold:
 * they could then verify, and forge, its requests. */
static void warn_unused_secrets(const app *a)
{
    const char *ns;
    for (size_t i = 0; (ns = signer_namespace(a->sign, i)); i++)
        if (!auth_has_namespace(a->auth, ns))
            LOG(LOG_WARN, "namespace secrets for a namespace no API token belongs to: its line signs nothing new",
                "\"namespace\":\"%s\"", ns);
}

/* SIGHUP: the tokens file and the namespace secrets file are read again,
 * and requests from now on are checked against the one and signed with the
 * other (rotating a token or a secret needs no restart). A file that no
 * longer reads keeps what is in use. Every other setting is read at start
 * only. */
static void reload_files(app *a)
{
    char err[600], e1[512], e2[1024];
    if (!a->cfg.api_tokens_file && !a->cfg.namespace_secrets_file) {
        LOG(LOG_WARN, "SIGHUP: no file to read again (neither HOOKWHEEL_API_TOKENS_FILE nor "
            "HOOKWHEEL_NAMESPACE_SECRETS_FILE is set); other settings are read at start only", "%s", "");
        return;
    }
    if (a->cfg.api_tokens_file) {
        auth *fresh = auth_load(a->cfg.api_tokens_file, err, sizeof err);
        if (!fresh)
            LOG(LOG_ERROR, "SIGHUP: the tokens file does not read: the tokens in use stay",
                "\"file\":\"%s\",\"error\":\"%s\"", log_json_escape(a->cfg.api_tokens_file, e1, sizeof e1),
                log_json_escape(err, e2, sizeof e2));
        else {
            a->retired = xrealloc(a->retired, (a->nretired + 1) * sizeof *a->retired);
            a->retired[a->nretired++] = a->auth;
            a->auth = fresh;
            http_set_auth(a->http, fresh);
            LOG(LOG_INFO, "SIGHUP: the tokens file was read again", "\"file\":\"%s\",\"tokens\":%zu",
                log_json_escape(a->cfg.api_tokens_file, e1, sizeof e1), auth_count(fresh));
        }
    }
    if (a->cfg.namespace_secrets_file) {
        const char *bad = NULL;
        signer *fresh = make_signer(&a->cfg, &bad, err, sizeof err);
        if (bad)
            LOG(LOG_ERROR, "SIGHUP: the namespace secrets file does not read: the secrets in use stay",
                "\"file\":\"%s\",\"error\":\"%s\"",
                log_json_escape(a->cfg.namespace_secrets_file, e1, sizeof e1), log_json_escape(err, e2, sizeof e2));
        else {
            a->retired_signers = xrealloc(a->retired_signers, (a->nretired_signers + 1) * sizeof *a->retired_signers);
            a->retired_signers[a->nretired_signers++] = a->sign;
            a->sign = fresh;
            engine_set_signer(a->eng, fresh);
            size_t n = 0;
            while (signer_namespace(fresh, n))
                n++;
            LOG(LOG_INFO, "SIGHUP: the namespace secrets file was read again", "\"file\":\"%s\",\"lines\":%zu",
                log_json_escape(a->cfg.namespace_secrets_file, e1, sizeof e1), n);
        }
    }
    warn_unused_secrets(a);
}

/* Waits for SIGTERM or SIGINT, reading the files again on SIGHUP;
 * meanwhile, every half second, starts the embedded Redis again if it
 * exited (the store reconnects on its own and loads the functions again
 * into the Redis that comes back). */
static int wait_for_signal(app *a)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    const struct timespec half_second = {0, 500000000L};
    for (;;) {
        int sig = a->redis ? sigtimedwait(&set, NULL, &half_second) : sigwaitinfo(&set, NULL);
        if (sig == SIGHUP)
            reload_files(a);
        else if (sig > 0)
            return sig;
        if (a->redis)
            redis_child_watch(a->redis);
    }
}

int main(int argc, char **argv)
{
    app a;
    memset(&a, 0, sizeof a);
    int rc = config_load(&a.cfg, argc, argv);
    if (rc != 0) {
        config_free(&a.cfg);
        return rc > 0 ? 0 : 2;
    }
    if (!http_listen_valid(a.cfg.listen)) {
        fprintf(stderr, "hookwheel: invalid HOOKWHEEL_LISTEN '%s': expected address:port (a.b.c.d:port, "
                        "localhost:port, :port or [v6]:port; port 0 to 65535)\n", a.cfg.listen);
        config_free(&a.cfg);
        return 2;
    }
    if (a.cfg.redis_url && !store_url_valid(a.cfg.redis_url)) { /* not shown: it may hold a password */
        fprintf(stderr, "hookwheel: invalid HOOKWHEEL_REDIS_URL: expected redis[s]://[user:password@]host:port[/db], "
                        "unix:///path, redis[s]+cluster://host:port[,host:port...] or "
                        "redis[s]+sentinel://host:port[,host:port...]/<master>[/db]\n");
        config_free(&a.cfg);
        return 2;
    }
    if (tls_setup(&a.cfg) < 0) {
        config_free(&a.cfg);
        return 2;
    }
    char serr[600];
    const char *bad = NULL;
    a.sign = make_signer(&a.cfg, &bad, serr, sizeof serr);
    if (bad) {
        fprintf(stderr, "hookwheel: invalid %s: %s\n", bad, serr);
        config_free(&a.cfg);
        return 2;
    }
    char perr[160];
    a.policy = netpolicy_create(a.cfg.destination_allowlist, perr, sizeof perr);
    if (!a.policy) {
        fprintf(stderr, "hookwheel: invalid HOOKWHEEL_DESTINATION_ALLOWLIST: %s\n", perr);
        signer_free(a.sign);
        config_free(&a.cfg);
        return 2;
    }
    if (a.cfg.api_tokens_file) {
        char aerr[600];
        a.auth = auth_load(a.cfg.api_tokens_file, aerr, sizeof aerr);
        if (!a.auth) {
            fprintf(stderr, "hookwheel: invalid HOOKWHEEL_API_TOKENS_FILE: %s\n", aerr);
            netpolicy_free(a.policy);
            signer_free(a.sign);
            config_free(&a.cfg);
            return 2;
        }
    }
    /* Last of the checks: it logs the limit it found, which is no answer
     * to a bad setting, and the line naming one must be the only line. */
    if (fd_limit_check(&a.cfg) < 0) {
        store_tls_cleanup();
        auth_free(a.auth);
        netpolicy_free(a.policy);
        signer_free(a.sign);
        config_free(&a.cfg);
        return 2;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* inherited by every thread started below */
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_ALL);

    int ok = start_all(&a) == 0;
    if (ok) {
        LOG(LOG_INFO, "hookwheel started",
            "\"version\":\"%s\",\"listen\":\"%s\",\"port\":%u,\"instance\":\"%s\",\"redis\":\"%s\","
            "\"auth\":\"%s\",\"tokens\":%zu,\"signing\":%s",
            HOOKWHEEL_VERSION, a.cfg.listen, http_port(a.http), a.cfg.instance_id,
            a.cfg.redis_url ? "external" : "embedded", a.auth ? "tokens" : "open", auth_count(a.auth),
            a.sign ? "true" : "false");
        warn_unused_secrets(&a);
        if (!a.auth && !http_listen_loopback(a.cfg.listen))
            LOG(LOG_WARN, "the API is open to anyone who can reach it: set HOOKWHEEL_API_TOKENS_FILE",
                "\"listen\":\"%s\"", a.cfg.listen);
        int sig = wait_for_signal(&a);
        LOG(LOG_INFO, "stopping", "\"signal\":\"%s\"", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    stop_all(&a);
    store_tls_cleanup();
    curl_global_cleanup();
    if (ok)
        LOG(LOG_INFO, "stopped", "%s", "");
    config_free(&a.cfg);
    return ok ? 0 : 1;
}
