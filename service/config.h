/* config.h - hookwheel's settings: one table drives environment variables,
 * command-line flags, validation and --help (redis's static_configs[]).
 *
 * Main thread, at start-up only; afterwards the config is read-only and any
 * thread may read it. Every setting has an environment variable HOOKWHEEL_X
 * and a flag --x (flags win over the environment). */
#ifndef HW_CONFIG_H
#define HW_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define HOOKWHEEL_VERSION "0.1.0"

typedef struct config {
    char *listen;
    char *redis_url;          /* NULL: embedded redis-server */
    char *data_dir;
    char *redis_server;       /* binary of the embedded redis-server */
    char *instance_id;        /* "" until config_load fills the default */
    char *log_level;
    char *api_tokens_file;    /* NULL: the API is open, without namespaces */
    char *signing_secret;     /* NULL: requests are not signed */
    char *namespace_secrets_file; /* NULL: every namespace uses signing_secret */
    char *destination_allowlist; /* NULL: only public addresses may be called */
    uint64_t tick_ms;
    uint64_t begin_lead_ms; /* begins are sent this long before the due time */
    uint64_t wheel_slots;
    uint64_t window_ms;
    uint64_t claim_batch;
    uint64_t partitions;
    uint64_t max_inflight;
    uint64_t queue_parallelism;
    uint64_t max_inflight_per_namespace; /* 0 until config_load resolves it */
    uint64_t max_queues;
    uint64_t max_body_bytes;
    uint64_t max_batch;
    uint64_t max_batch_body_bytes;
    uint64_t max_url_bytes;
    uint64_t max_headers;
    uint64_t max_header_bytes;
    uint64_t max_delay_ms;
    uint64_t default_timeout_ms;
    uint64_t max_timeout_ms;
    uint64_t default_max_attempts;
    uint64_t max_attempts;
    uint64_t default_min_backoff_ms;
    uint64_t default_max_backoff_ms;
    uint64_t max_backoff_ms;
    uint64_t response_snippet_bytes;
    uint64_t attempt_history;      /* attempts kept per timer */
    uint64_t retention_s;
    uint64_t shutdown_grace_ms;
    uint64_t api_threads;
    uint64_t max_connections;
    uint64_t max_connections_per_ip; /* 0: no cap */
    uint64_t connection_timeout_s;
    uint64_t request_head_timeout_ms; /* deadline for a request's line and headers */
    uint64_t request_body_timeout_ms; /* deadline for its body, from the end of its headers */
    uint64_t redis_timeout_ms;
    char *redis_appendfsync;          /* the embedded Redis's AOF fsync policy */
    uint64_t redis_min_replicas_ack;  /* WAIT for this many replicas after writes (0: no) */
    uint64_t redis_replica_ack_timeout_ms;
    char *redis_tls_ca_file;          /* rediss://: NULL: the system's default CAs */
    char *redis_tls_cert_file;        /* rediss://: client certificate, with its key; NULL: none */
    char *redis_tls_key_file;
    uint64_t redis_tls_verify_host;   /* 1: the certificate must name the host connected to */
    uint64_t lease_ttl_ms;
    uint64_t max_resident;
    uint64_t max_resident_per_namespace; /* 0 until config_load resolves it; max_resident or more: no cap */
    uint64_t max_queued_writes;
    char *lease_prefix;       /* watchdog leases: Redis key = lease_prefix + lease id */
    uint64_t lease_max_ttl_ms;
    uint64_t lease_tick_ms;   /* the lease worker looks at the schedule at least this often */
    uint64_t list_max_bytes;  /* a listing page's text stops growing past this */
    uint64_t max_expensive_per_namespace; /* listings and dead-letter calls in flight per namespace */
} config;

/* Fills cfg from defaults, then the environment, then argv. Returns 0; 1
 * when --help or --version was printed (exit 0); -EINVAL after printing one
 * line naming the bad setting to stderr (exit 2). */
int config_load(config *cfg, int argc, char **argv);

/* Checks that max_connections API connections plus reserve descriptors
 * (everything else the process may hold open at once) fit under limit, the
 * soft RLIMIT_NOFILE. Returns 0, or -EINVAL after printing one line naming
 * HOOKWHEEL_MAX_CONNECTIONS and the most that fit (exit 2). */
int config_check_fd_limit(const config *cfg, uint64_t reserve, uint64_t limit);

/* Frees the strings of cfg. */
void config_free(config *cfg);

/* Prints the settings table (--help). */
void config_print_help(FILE *out);

#endif
