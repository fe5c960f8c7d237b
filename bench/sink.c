/* sink.c - hookwheel's benchmark receiver: an HTTP server that records when
 * each webhook arrived and when it was due.
 *
 * Design. libmicrohttpd runs its own epoll threads (a pool of --threads). The
 * first access-handler call for a request (its headers have arrived) takes
 * the arrival time from CLOCK_REALTIME, the clock hookwheel and the load
 * generator use for due times. The body, a JSON object that the load
 * generator put into each timer ({"seq":n,"due_ms":T,"pad":"..."}, in any key
 * order), is kept up to BODY_CAP bytes and searched for "seq" and "due_ms"
 * with strstr: the sink parses only what the load generator wrote. Records
 * live in arrays preallocated for --expect timers and indexed by seq, and a
 * per-seq atomic flag decides the first arrival, so recording takes no lock;
 * counters are atomics. Only the main thread reads the arrays, after
 * MHD_stop_daemon joined the server threads.
 *
 * It stops on SIGTERM/SIGINT, after --timeout-s, or, with --exit-when-done,
 * once --expect distinct seqs arrived. Then it writes the CSV (--csv:
 * seq,due_ms,arrival_us) and prints one summary line with stable keys:
 *   SINK received=.. unique=.. dupes=.. unknown=.. early=.. lost=.. p50_ms=..
 *        p99_ms=.. p999_ms=.. max_ms=.. min_ms=.. first_us=.. last_us=.. cpu_ms=..
 * cpu_ms is the sink's own user+system CPU time (getrusage). Lateness is
 * arrival - due in ms; early counts arrivals before the due ms; lost =
 * expect - unique. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <microhttpd.h>

#define BODY_CAP 4096

typedef struct sink_opts {
    unsigned port;
    uint32_t expect;
    int exit_when_done;
    unsigned status;
    unsigned threads;
    double timeout_s;
    const char *csv;
} sink_opts;

typedef struct record {
    int64_t due_ms;
    int64_t arrival_us;
} record;

typedef struct request {
    int64_t arrival_us;
    size_t len;
    char body[BODY_CAP + 1];
} request;

static sink_opts opts = {0, 0, 0, 204, 2, 0, NULL};
static record *records;      /* [expect], written once per seq */
static atomic_uchar *seen;   /* [expect], 1 once seq arrived */
static atomic_ulong n_received, n_unique, n_dupes, n_unknown;
static struct MHD_Response *empty_response;

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Finds "key" (with quotes and colon) in a NUL-terminated body and reads the
 * integer after it. Returns 0, or -1 when the key or a number is missing. */
static int find_int(const char *body, const char *key, int64_t *out)
{
    const char *p = strstr(body, key);
    if (!p)
        return -1;
    p += strlen(key);
    while (*p == ' ')
        p++;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno)
        return -1;
    *out = v;
    return 0;
}

static void record_request(const request *r)
{
    int64_t seq, due;
    atomic_fetch_add(&n_received, 1);
    if (find_int(r->body, "\"seq\":", &seq) < 0 || find_int(r->body, "\"due_ms\":", &due) < 0 ||
        seq < 0 || (uint64_t)seq >= opts.expect) {
        atomic_fetch_add(&n_unknown, 1);
        return;
    }
    if (atomic_exchange(&seen[seq], 1)) {
        atomic_fetch_add(&n_dupes, 1);
        return;
    }
    records[seq] = (record){due, r->arrival_us};
    atomic_fetch_add(&n_unique, 1);
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    (void)cls, (void)url, (void)method, (void)version;
    request *r = *con_cls;
    if (!r) {
        int64_t t = now_us(); /* headers are in: this is the arrival */
        r = malloc(sizeof *r);
        if (!r)
            return MHD_NO;
        r->arrival_us = t;
        r->len = 0;
        r->body[0] = '\0';
        *con_cls = r;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        if (n > BODY_CAP - r->len)
            n = BODY_CAP - r->len; /* the load generator's bodies are far smaller */
        memcpy(r->body + r->len, upload, n);
        r->len += n;
        r->body[r->len] = '\0';
        *upload_size = 0;
        return MHD_YES;
    }
    record_request(r);
    return MHD_queue_response(c, opts.status, empty_response);
}

/* The one place a request's context is freed. */
static void completed_cb(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    free(*con_cls);
    *con_cls = NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array, in ms. */
static double pct_ms(const int64_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t k = (size_t)(p * (double)n + 0.999999);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return (double)v[k - 1] / 1000.0;
}

static int write_csv(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "sink: %s: %s\n", path, strerror(errno));
        return -1;
    }
    fputs("seq,due_ms,arrival_us\n", f);
    for (uint32_t i = 0; i < opts.expect; i++)
        if (atomic_load(&seen[i]))
            fprintf(f, "%" PRIu32 ",%" PRId64 ",%" PRId64 "\n", i, records[i].due_ms,
                    records[i].arrival_us);
    return fclose(f) == 0 ? 0 : -1;
}

static void print_summary(void)
{
    size_t n = 0, early = 0;
    int64_t *lat = malloc(sizeof *lat * (opts.expect ? opts.expect : 1));
    int64_t first = 0, last = 0;
    if (!lat)
        abort();
    for (uint32_t i = 0; i < opts.expect; i++) {
        if (!atomic_load(&seen[i]))
            continue;
        const record *r = &records[i];
        lat[n++] = r->arrival_us - r->due_ms * 1000;
        early += r->arrival_us < r->due_ms * 1000;
        if (n == 1 || r->arrival_us < first)
            first = r->arrival_us;
        if (n == 1 || r->arrival_us > last)
            last = r->arrival_us;
    }
    qsort(lat, n, sizeof *lat, cmp_i64);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000L +
                  (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000L;
    printf("SINK received=%lu unique=%lu dupes=%lu unknown=%lu early=%zu lost=%" PRIu64
           " p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f min_ms=%.3f first_us=%" PRId64
           " last_us=%" PRId64 " cpu_ms=%ld\n",
           atomic_load(&n_received), atomic_load(&n_unique), atomic_load(&n_dupes),
           atomic_load(&n_unknown), early, (uint64_t)opts.expect - atomic_load(&n_unique),
           pct_ms(lat, n, 0.50), pct_ms(lat, n, 0.99), pct_ms(lat, n, 0.999),
           n ? (double)lat[n - 1] / 1000.0 : 0.0, n ? (double)lat[0] / 1000.0 : 0.0, first, last, cpu_ms);
    fflush(stdout);
    free(lat);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: sink --port P --expect N [--exit-when-done] [--csv FILE] [--status CODE]\n"
            "            [--threads T] [--timeout-s S]\n"
            "Listens on 127.0.0.1:P, records arrival and due time per seq, prints a SINK line.\n");
}

static int parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--exit-when-done")) {
            opts.exit_when_done = 1;
            continue;
        }
        if (!v)
            return -1;
        i++;
        if (!strcmp(a, "--port"))
            opts.port = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--expect"))
            opts.expect = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--status"))
            opts.status = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--threads"))
            opts.threads = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--timeout-s"))
            opts.timeout_s = strtod(v, NULL);
        else if (!strcmp(a, "--csv"))
            opts.csv = v;
        else
            return -1;
    }
    return opts.port && opts.status >= 100 && opts.status <= 599 && opts.threads >= 1 ? 0 : -1;
}

static struct MHD_Daemon *start_daemon(void)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)opts.port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
    return MHD_start_daemon(flags, (uint16_t)opts.port, NULL, NULL, access_cb, NULL,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_THREAD_POOL_SIZE, opts.threads,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)10000,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
                            MHD_OPTION_NOTIFY_COMPLETED, completed_cb, NULL, MHD_OPTION_END);
}

/* Waits for a signal, the deadline, or (with --exit-when-done) every seq. */
static void wait_until_done(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    struct timespec tick = {0, 10 * 1000 * 1000};
    int64_t deadline = opts.timeout_s > 0 ? now_us() + (int64_t)(opts.timeout_s * 1e6) : 0;
    for (;;) {
        if (sigtimedwait(&set, NULL, &tick) >= 0)
            return;
        if (opts.exit_when_done && atomic_load(&n_unique) >= opts.expect)
            return;
        if (deadline && now_us() >= deadline)
            return;
    }
}

int main(int argc, char **argv)
{
    if (parse_args(argc, argv) < 0) {
        usage();
        return 2;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* the MHD threads inherit the mask */
    signal(SIGPIPE, SIG_IGN);
    size_t n = opts.expect ? opts.expect : 1;
    records = calloc(n, sizeof *records);
    seen = calloc(n, sizeof *seen);
    empty_response = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!records || !seen || !empty_response)
        return 1;
    struct MHD_Daemon *d = start_daemon();
    if (!d) {
        fprintf(stderr, "sink: cannot listen on 127.0.0.1:%u\n", opts.port);
        return 1;
    }
    wait_until_done();
    MHD_stop_daemon(d);
    int rc = opts.csv ? write_csv(opts.csv) : 0;
    print_summary();
    MHD_destroy_response(empty_response);
    free(records);
    free(seen);
    return rc < 0 ? 1 : 0;
}
