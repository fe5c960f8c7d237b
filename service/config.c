/* config.c - the settings table and its parser.
 *
 * One row per setting: the table is the only place a setting is named, so
 * --help, the environment and the flags cannot drift apart. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "spec.h"
#include "xalloc.h"

enum kind { K_STR, K_U64 };

typedef struct setting {
    const char *name;   /* flag without "--"; env is HOOKWHEEL_ + upper(name with - -> _) */
    enum kind kind;
    size_t offset;
    const char *def;    /* default as text; NULL: unset */
    uint64_t min, max;  /* for K_U64 */
    const char *help;
} setting;

#define S(n, f, d, h) {n, K_STR, offsetof(config, f), d, 0, 0, h}
#define U(n, f, d, lo, hi, h) {n, K_U64, offsetof(config, f), d, lo, hi, h}

static const setting settings[] = {
    S("listen", listen, "127.0.0.1:8080", "address:port of the HTTP API"),
    S("redis-url", redis_url, NULL,
      "redis://[user:password@]host:port[/db], unix:///path, redis+cluster://[user:password@]host:port[,host:port...] "
      "(a Redis Cluster's seed nodes), or redis+sentinel://[user:password@]host:port[,host:port...]/<master>[/db] "
      "(Redis Sentinels and the master's name); rediss://, rediss+cluster://, rediss+sentinel://: the same over TLS; "
      "unset: embedded redis-server"),
    S("data-dir", data_dir, "./data", "data directory of the embedded redis-server"),
    S("redis-server", redis_server, "redis-server", "binary started as the embedded Redis"),
    S("instance-id", instance_id, "", "this instance's id (default: hostname-pid)"),
    S("log-level", log_level, "info", "debug, info, warn or error"),
    S("api-tokens-file", api_tokens_file, NULL,
      "file of bearer tokens, one `<namespace> <token>` or `<namespace> sha256:<hex>` per line, read again "
      "on SIGHUP; unset: the API is open (one namespace)"),
    S("signing-secret", signing_secret, NULL,
      "whsec_<base64 key>[,whsec_...]: sign every request (Standard Webhooks); two during a rotation"),
    S("namespace-secrets-file", namespace_secrets_file, NULL,
      "file of per-namespace signing secrets, one `<namespace> whsec_...[,whsec_...]` per line, read again "
      "on SIGHUP; a namespace without one uses signing-secret"),
    S("destination-allowlist", destination_allowlist, NULL,
      "CIDRs, addresses and host names (comma-separated) that timers may call although they are "
      "loopback, private, link-local or otherwise internal; unset: public addresses only"),
    U("tick-ms", tick_ms, "1", 1, 1000, "timing wheel tick"),
    U("begin-lead-ms", begin_lead_ms, "10", 0, 1000,
      "a due timer's begin step (after which a cancel answers 409) is sent this long before its due time, so its "
      "Redis round trip is not part of its lateness; the attempt still starts at the due time, never earlier"),
    U("wheel-slots", wheel_slots, "4096", 2, 1u << 22, "timing wheel slots (a power of two)"),
    U("window-ms", window_ms, "5000", 100, 600000,
      "timers due within this window are claimed into memory; the loader sweeps every window/2"),
    U("claim-batch", claim_batch, "64", 1, 4096,
      "timers claimed per partition per call of a sweep (1 to 4096; a call holds Redis for about 5 \u00b5s a timer "
      "alone, so 0.3 ms at the default; a call that reaches 0.5 ms stops there and the next sweep goes on)"),
    U("partitions", partitions, "0", 0, 16384,
      "Redis partitions (hash tags); 0: 16, or 64 on a Redis Cluster (a +cluster URL); must be the same for "
      "every instance and never change"),
    U("max-inflight", max_inflight, "256", 1, 100000, "attempts in flight, all queues together"),
    U("queue-parallelism", queue_parallelism, "64", 1, 100000,
      "attempts in flight per queue on each instance, for queues without stored controls (and the parallelism "
      "a PUT /queues/{name} without one stores)"),
    U("max-inflight-per-namespace", max_inflight_per_namespace, "0", 0, 100000,
      "attempts in flight of one namespace's queues together, so that one namespace's slow or hanging targets "
      "leave slots to the others; 0: half of max-inflight (rounded up) with API tokens, no cap without them; "
      "max-inflight or more: no cap"),
    U("max-queues", max_queues, "10000", 1, 10000000,
      "queues with stored controls (PUT /queues/{name}), all namespaces together; a PUT of a new one beyond it "
      "answers 409"),
    U("max-body-bytes", max_body_bytes, "65536", 1024, 16u << 20, "largest API request body (413 beyond)"),
    U("max-batch", max_batch, "1000", 1, 1000, "most timers in one POST /timers/batch"),
    U("max-batch-body-bytes", max_batch_body_bytes, "4194304", 1024, 64u << 20,
      "largest POST /timers/batch body (413 beyond)"),
    U("max-url-bytes", max_url_bytes, "2048", 16, 65536, "longest target URL"),
    U("max-headers", max_headers, "32", 0, 1000, "most headers per timer"),
    U("max-header-bytes", max_header_bytes, "8192", 16, 65536, "longest header (name + value)"),
    U("max-delay-ms", max_delay_ms, "31536000000", 1000, 3153600000000ull,
      "furthest due time accepted, from now (default 365 days)"),
    U("default-timeout-ms", default_timeout_ms, "10000", 1, 3600000, "per-attempt timeout when a timer gives none"),
    U("max-timeout-ms", max_timeout_ms, "300000", 1, 3600000, "largest timeout_ms a timer may ask for"),
    U("default-max-attempts", default_max_attempts, "36", 1, 1000,
      "retry.max_attempts when a timer gives none (with the default backoff: retries for 12-24 h)"),
    U("max-attempts", max_attempts, "100", 1, 1000, "largest retry.max_attempts a timer may ask for"),
    U("default-min-backoff-ms", default_min_backoff_ms, "1000", 0, 86400000, "retry.min_backoff_ms default"),
    U("default-max-backoff-ms", default_max_backoff_ms, "3600000", 0, 86400000, "retry.max_backoff_ms default"),
    U("max-backoff-ms", max_backoff_ms, "86400000", 0, 604800000, "largest retry.max_backoff_ms a timer may ask for"),
    U("attempt-history", attempt_history, "10", 1, 100,
      "attempts kept per timer and shown by GET /timers/{id} (attempt_history), newest first"),
    U("response-snippet-bytes", response_snippet_bytes, "256", 0, 65536,
      "bytes of a target's response body kept in last_attempt"),
    U("retention-s", retention_s, "604800", 1, 315360000,
      "how long finished timers stay readable; an id stays reserved as long"),
    U("shutdown-grace-ms", shutdown_grace_ms, "10000", 0, 600000,
      "on SIGTERM, how long attempts in flight may finish"),
    U("api-threads", api_threads, "2", 1, 64, "HTTP worker threads"),
    U("max-connections", max_connections, "1024", 1, 100000,
      "concurrent API connections; with the descriptors reserved for Redis and max-inflight attempts "
      "they must fit under the open-file limit (RLIMIT_NOFILE), else start-up stops"),
    U("max-connections-per-ip", max_connections_per_ip, "0", 0, 100000,
      "concurrent API connections from one client address; 0: no cap (behind nginx every "
      "connection comes from nginx's address)"),
    U("connection-timeout-s", connection_timeout_s, "30", 1, 3600, "idle API connections are closed after this"),
    U("request-head-timeout-ms", request_head_timeout_ms, "10000", 100, 3600000,
      "a request's line and headers must arrive within this, from the connection's start or from "
      "the request line of a later request on it; else the connection is closed"),
    U("request-body-timeout-ms", request_body_timeout_ms, "30000", 100, 3600000,
      "a request's body must arrive within this after its headers; else the connection is closed"),
    U("redis-timeout-ms", redis_timeout_ms, "2000", 10, 60000, "Redis connect and command timeout"),
    S("redis-appendfsync", redis_appendfsync, "always",
      "the embedded Redis's AOF fsync: always (an acknowledged write is on disk) or everysec (a machine "
      "crash can lose the last second)"),
    U("redis-min-replicas-ack", redis_min_replicas_ack, "0", 0, 16,
      "writes are acknowledged once this many replicas have them (WAIT, once per pipelined batch); "
      "fewer within redis-replica-ack-timeout-ms: 503, never 2xx; 0: the master's answer suffices"),
    U("redis-replica-ack-timeout-ms", redis_replica_ack_timeout_ms, "1000", 1, 60000,
      "how long a batch of writes waits for redis-min-replicas-ack replicas; must be below redis-timeout-ms "
      "when redis-min-replicas-ack is set"),
    S("redis-tls-ca-file", redis_tls_ca_file, NULL,
      "rediss:// URLs: CA certificates (PEM) the Redis server's certificate must chain to; unset: the system's "
      "default CAs"),
    S("redis-tls-cert-file", redis_tls_cert_file, NULL,
      "rediss:// URLs: client certificate (PEM) for a Redis that asks for one (mutual TLS); needs "
      "redis-tls-key-file"),
    S("redis-tls-key-file", redis_tls_key_file, NULL,
      "rediss:// URLs: the client certificate's private key (PEM, unencrypted); needs redis-tls-cert-file"),
    U("redis-tls-verify-host", redis_tls_verify_host, "1", 0, 1,
      "rediss:// URLs: 1: the server's certificate must name the host connected to (the URL's, or a node's "
      "address as the cluster or the sentinels name it); 0: any certificate the CA signed will do"),
    U("max-resident", max_resident, "1000000", 1, 100000000,
      "timers held in memory at most; beyond it due timers wait in Redis until there is room"),
    U("max-resident-per-namespace", max_resident_per_namespace, "0", 0, 100000000,
      "timers of one namespace held in memory at most, so that one namespace's backlog (a paused queue, "
      "hanging targets) leaves room for the others' due timers; 0: half of max-resident (rounded up) with API "
      "tokens, no cap without them; max-resident or more: no cap"),
    U("max-queued-writes", max_queued_writes, "100000", 1, 10000000,
      "Redis commands waiting to be sent, creates waiting for the next create call included; beyond it the API "
      "answers 429 with Retry-After"),
    U("lease-ttl-ms", lease_ttl_ms, "10000", 300, 600000,
      "instance lease TTL: renewed every ttl/3; another instance takes the claims over after it lapses"),
    S("lease-prefix", lease_prefix, "lease:",
      "watchdog leases (/leases): a lease's Redis key is this prefix + its key; the same on every instance; "
      "must not start with hw:; on a Redis Cluster it needs a hash tag (lease:{l}:)"),
    U("lease-max-ttl-ms", lease_max_ttl_ms, "3600000", 300, 86400000,
      "watchdog leases: largest ttl_ms a lease may ask for (the smallest is 300, or 3 x lease-tick-ms if more)"),
    U("lease-tick-ms", lease_tick_ms, "50", 5, 1000,
      "watchdog leases: each instance looks for due renewals at least this often (and whenever one falls due); "
      "leases ask for a ttl_ms of at least 3 ticks"),
    U("list-max-bytes", list_max_bytes, "4194304", 65536, 1u << 30,
      "GET /timers: a page stops adding timers once its text would pass this (it always holds one); "
      "next_cursor continues after the last timer listed"),
    U("max-expensive-per-namespace", max_expensive_per_namespace, "4", 1, 10000,
      "listings (GET /timers, GET /leases), selector operations (POST /timers/cancel, pause, resume, reschedule), "
      "queue reads (GET /queues, GET and PATCH /queues/{name}), GET /stats and dead-letter replays and purges in "
      "flight at once per namespace; "
      "beyond it the API answers 429 with Retry-After"),
};
#define NSETTINGS (sizeof settings / sizeof settings[0])

static void env_name(const setting *s, char *buf, size_t size)
{
    size_t o = (size_t)snprintf(buf, size, "HOOKWHEEL_");
    for (const char *p = s->name; *p && o + 1 < size; p++)
        buf[o++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
    buf[o] = '\0';
}

static int set_value(config *cfg, const setting *s, const char *v, const char *from)
{
    char *field = (char *)cfg + s->offset;
    if (s->kind == K_STR) {
        char **p = (char **)field;
        free(*p);
        *p = v ? xstrdup(v) : NULL;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || *end || !(v[0] >= '0' && v[0] <= '9') || n < s->min || n > s->max) { /* no sign, no blank */
        fprintf(stderr, "hookwheel: invalid %s '%s': expected an integer from %llu to %llu\n", from, v,
                (unsigned long long)s->min, (unsigned long long)s->max);
        return -EINVAL;
    }
    *(uint64_t *)field = n;
    return 0;
}

static const setting *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < NSETTINGS; i++)
        if (strlen(settings[i].name) == len && strncmp(settings[i].name, name, len) == 0)
            return &settings[i];
    return NULL;
}

/* Sets what the flags say, left to right, and marks those settings in
 * by_flag (one byte per row of settings[]). Returns 0, 1 after --help or
 * --version (printed), or -EINVAL after one line naming the flag. */
static int parse_args(config *cfg, int argc, char **argv, unsigned char *by_flag)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            config_print_help(stdout);
            return 1;
        }
        if (strcmp(a, "--version") == 0) {
            printf("hookwheel %s\n", HOOKWHEEL_VERSION);
            return 1;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) - 2 : strlen(a) - 2;
        const setting *s = strncmp(a, "--", 2) == 0 ? find_flag(a + 2, len) : NULL;
        if (!s) {
            fprintf(stderr, "hookwheel: unknown option '%s' (see --help)\n", a);
            return -EINVAL;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) {
            fprintf(stderr, "hookwheel: option --%s needs a value\n", s->name);
            return -EINVAL;
        }
        char from[80];
        snprintf(from, sizeof from, "--%s", s->name);
        if (set_value(cfg, s, v, from) < 0)
            return -EINVAL;
        by_flag[s - settings] = 1;
    }
    return 0;
}

/* At most 64 visible ASCII characters, not starting with hookwheel's own
 * "hw:". (A prefix such as "h" could still spell hw: with a key; the API
 * refuses such keys one by one.) */
static int lease_prefix_check(const char *p)
{
    size_t n = strlen(p);
    int ok = n <= 64 && strncmp(p, "hw:", 3) != 0;
    for (size_t i = 0; ok && i < n; i++)
        ok = (unsigned char)p[i] > 0x20 && (unsigned char)p[i] < 0x7F;
    if (!ok)
        fprintf(stderr, "hookwheel: invalid HOOKWHEEL_LEASE_PREFIX '%s': expected at most 64 visible ASCII "
                        "characters, not starting with hw:\n", p);
    return ok ? 0 : -EINVAL;
}

/* The TLS files: a client certificate and its key go together, and every
 * file named must be readable (its content is checked when it is loaded,
 * main.c). */
static int tls_files_check(const config *cfg)
{
    if (!cfg->redis_tls_cert_file != !cfg->redis_tls_key_file) {
        fprintf(stderr, "hookwheel: invalid %s: needs %s too (a client certificate and its key go together)\n",
                cfg->redis_tls_cert_file ? "HOOKWHEEL_REDIS_TLS_CERT_FILE" : "HOOKWHEEL_REDIS_TLS_KEY_FILE",
                cfg->redis_tls_cert_file ? "HOOKWHEEL_REDIS_TLS_KEY_FILE" : "HOOKWHEEL_REDIS_TLS_CERT_FILE");
        return -EINVAL;
    }
    const struct {
        const char *name, *path;
    } files[] = {{"HOOKWHEEL_REDIS_TLS_CA_FILE", cfg->redis_tls_ca_file},
                 {"HOOKWHEEL_REDIS_TLS_CERT_FILE", cfg->redis_tls_cert_file},
                 {"HOOKWHEEL_REDIS_TLS_KEY_FILE", cfg->redis_tls_key_file}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        if (!files[i].path)
            continue;
        FILE *f = fopen(files[i].path, "r");
        if (!f) {
            fprintf(stderr, "hookwheel: invalid %s '%s': %s\n", files[i].name, files[i].path, strerror(errno));
            return -EINVAL;
        }
        fclose(f);
    }
    return 0;
}

/* Names the environment's HOOKWHEEL_* variables that are no setting (a
 * misspelt one would otherwise be ignored without a word), as warnings once
 * the log level is known. HOOKWHEEL_URL and HOOKWHEEL_TOKEN are hookwheelctl's. */
static void warn_unknown_env(void)
{
    extern char **environ;
    char env[96];
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        if (len < 11 || strncmp(*e, "HOOKWHEEL_", 10) != 0 || len >= sizeof env)
            continue;
        memcpy(env, *e, len);
        env[len] = '\0';
        if (strcmp(env, "HOOKWHEEL_URL") == 0 || strcmp(env, "HOOKWHEEL_TOKEN") == 0)
            continue;
        int known = 0, plain = 1;
        for (size_t i = 0; i < len; i++)
            plain &= (env[i] >= 'A' && env[i] <= 'Z') || (env[i] >= '0' && env[i] <= '9') || env[i] == '_';
        char name[96];
        for (size_t i = 0; i < NSETTINGS && !known; i++) {
            env_name(&settings[i], name, sizeof name);
            known = strcmp(name, env) == 0;
        }
        if (!known)
            LOG(LOG_WARN, "an environment variable that is no setting is ignored (see --help)", "\"variable\":\"%s\"",
                plain ? env : "HOOKWHEEL_ followed by other characters than A-Z, 0-9 and _");
    }
}

static int check(config *cfg)
{
    if (cfg->wheel_slots & (cfg->wheel_slots - 1)) {
        fprintf(stderr, "hookwheel: invalid HOOKWHEEL_WHEEL_SLOTS %llu: must be a power of two\n",
                (unsigned long long)cfg->wheel_slots);
        return -EINVAL;
    }
    int lvl = log_level_parse(cfg->log_level);
    if (lvl < 0) {
        fprintf(stderr, "hookwheel: invalid HOOKWHEEL_LOG_LEVEL '%s': expected debug, info, warn or error\n",
                cfg->log_level);
        return -EINVAL;
    }
    log_min_level = lvl;
    warn_unknown_env();
    if (cfg->default_max_backoff_ms < cfg->default_min_backoff_ms ||
        cfg->default_max_backoff_ms > cfg->max_backoff_ms) {
        fprintf(stderr, "hookwheel: invalid HOOKWHEEL_DEFAULT_MAX_BACKOFF_MS: must lie between the "
                        "default min backoff and HOOKWHEEL_MAX_BACKOFF_MS\n");
        return -EINVAL;
    }
    if (cfg->default_timeout_ms > cfg->max_timeout_ms || cfg->default_max_attempts > cfg->max_attempts) {
        fprintf(stderr, "hookwheel: invalid defaults: HOOKWHEEL_DEFAULT_TIMEOUT_MS and "
                        "HOOKWHEEL_DEFAULT_MAX_ATTEMPTS must not exceed their maximums\n");
        return -EINVAL;
    }
    if (lease_prefix_check(cfg->lease_prefix) < 0)
        return -EINVAL;
    if (cfg->lease_max_ttl_ms < 3 * cfg->lease_tick_ms) {
        fprintf(stderr, "hookwheel: invalid HOOKWHEEL_LEASE_MAX_TTL_MS: must be at least 3 x "
                        "HOOKWHEEL_LEASE_TICK_MS (the smallest ttl_ms a lease may ask for)\n");
        return -EINVAL;
    }
    if (strcmp(cfg->redis_appendfsync, "always") != 0 && strcmp(cfg->redis_appendfsync, "everysec") != 0) {
        fprintf(stderr, "hookwheel: invalid HOOKWHEEL_REDIS_APPENDFSYNC '%s': expected always or everysec\n",
                cfg->redis_appendfsync);
        return -EINVAL;
    }
    if (tls_files_check(cfg) < 0)
        return -EINVAL;
    if (cfg->redis_min_replicas_ack > 0 && cfg->redis_replica_ack_timeout_ms >= cfg->redis_timeout_ms) {
        fprintf(stderr, "hookwheel: invalid HOOKWHEEL_REDIS_REPLICA_ACK_TIMEOUT_MS: must be below "
                        "HOOKWHEEL_REDIS_TIMEOUT_MS (a WAIT longer than the command timeout would drop the "
                        "connection)\n");
        return -EINVAL;
    }
    if (cfg->instance_id[0] && !spec_id_valid(cfg->instance_id)) {
        fprintf(stderr, "hookwheel: invalid HOOKWHEEL_INSTANCE_ID '%s': expected 1 to 128 characters of "
                        "A-Z, a-z, 0-9, '.', '_', ':' or '-'\n", cfg->instance_id);
        return -EINVAL;
    }
    if (cfg->max_inflight_per_namespace == 0) /* one namespace without tokens: no cap */
        cfg->max_inflight_per_namespace = cfg->api_tokens_file ? (cfg->max_inflight + 1) / 2 : cfg->max_inflight;
    if (cfg->max_resident_per_namespace == 0)
        cfg->max_resident_per_namespace = cfg->api_tokens_file ? (cfg->max_resident + 1) / 2 : cfg->max_resident;
    if (cfg->partitions == 0) /* more on a cluster, so that every master gets some */
        cfg->partitions = cfg->redis_url && strstr(cfg->redis_url, "+cluster://") ? 64 : 16;
    if (!cfg->instance_id[0]) {
        char host[256] = "host", id[320];
        gethostname(host, sizeof host - 1);
        snprintf(id, sizeof id, "%s-%d", host, (int)getpid());
        free(cfg->instance_id);
        cfg->instance_id = xstrdup(id);
    }
    return 0;
}

/* Flags win: the flags are read first, and a setting a flag gave is not
 * read from the environment at all, so a stale or invalid variable that a
 * flag overrides neither counts nor stops start-up (nor --help). */
int config_load(config *cfg, int argc, char **argv)
{
    memset(cfg, 0, sizeof *cfg);
    unsigned char by_flag[NSETTINGS] = {0};
    for (size_t i = 0; i < NSETTINGS; i++)
        if (settings[i].def && set_value(cfg, &settings[i], settings[i].def, "default") < 0)
            return -EINVAL;
    int rc = parse_args(cfg, argc, argv, by_flag);
    if (rc != 0)
        return rc;
    char env[96];
    for (size_t i = 0; i < NSETTINGS; i++) {
        if (by_flag[i])
            continue;
        env_name(&settings[i], env, sizeof env);
        const char *v = getenv(env);
        if (v && *v && set_value(cfg, &settings[i], v, env) < 0)
            return -EINVAL;
    }
    return check(cfg);
}

int config_check_fd_limit(const config *cfg, uint64_t reserve, uint64_t limit)
{
    if (cfg->max_connections + reserve <= limit)
        return 0;
    uint64_t fit = limit > reserve ? limit - reserve : 0;
    fprintf(stderr, "hookwheel: invalid HOOKWHEEL_MAX_CONNECTIONS %llu: with the %llu file descriptors "
                    "reserved for Redis and HOOKWHEEL_MAX_INFLIGHT %llu attempts it needs %llu, over the "
                    "open-file limit of %llu (RLIMIT_NOFILE); at most %llu connections fit: lower "
                    "HOOKWHEEL_MAX_CONNECTIONS or HOOKWHEEL_MAX_INFLIGHT, or raise the limit (ulimit -n, "
                    "LimitNOFILE=)\n",
            (unsigned long long)cfg->max_connections, (unsigned long long)reserve,
            (unsigned long long)cfg->max_inflight, (unsigned long long)(cfg->max_connections + reserve),
            (unsigned long long)limit, (unsigned long long)fit);
    return -EINVAL;
}

void config_free(config *cfg)
{
    for (size_t i = 0; i < NSETTINGS; i++)
        if (settings[i].kind == K_STR) {
            char **p = (char **)((char *)cfg + settings[i].offset);
            free(*p);
            *p = NULL;
        }
}

void config_print_help(FILE *out)
{
    char env[96], flag[64];
    fprintf(out,
            "hookwheel %s - calls a URL later: delayed webhooks on Redis.\n\n"
            "usage: hookwheel [--setting=value ...]\n\n"
            "Every setting is a flag and an environment variable (flags win); an unknown flag stops start-up,\n"
            "a HOOKWHEEL_* variable that is no setting is ignored with a warning:\n\n",
            HOOKWHEEL_VERSION);
    for (size_t i = 0; i < NSETTINGS; i++) {
        const setting *s = &settings[i];
        env_name(s, env, sizeof env);
        snprintf(flag, sizeof flag, "--%s", s->name);
        fprintf(out, "  %-26s %-36s default: %s\n      %s\n", flag, env,
                s->def ? (s->def[0] ? s->def : "(hostname-pid)") : "(unset)", s->help);
    }
    fprintf(out, "\n  --help, --version\n");
}
