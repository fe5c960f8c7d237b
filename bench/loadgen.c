/* loadgen.c - hookwheel's benchmark load generator: creates timers that call
 * the sink, at a paced rate or as fast as the service answers.
 *
 * Design. One libcurl multi handle drives --connections easy handles, each
 * reused for every request it sends so its keep-alive connection stays open;
 * at most that many creates are in flight. Pacing is open loop: create n may
 * start at start + n/rate, so a stall is caught up afterwards (bounded by the
 * connections) and the achieved rate is reported, not assumed. --rate 0 sends
 * as fast as handles free up. Every timer gets an explicit id
 * "<run-id>-<seq>" and a due time fire_at_ms, either the wall clock at send
 * plus --delay-ms or the fixed --at-ms, and carries {"seq","due_ms","pad"} in
 * its JSON body so the sink can compute its lateness.
 *
 * Output: one line with stable keys,
 *   LOADGEN sent=.. ok=.. non2xx=.. errors=.. rate=.. p50_ms=.. p99_ms=..
 *           max_ms=.. elapsed_s=.. first_send_ms=.. last_done_ms=.. cpu_ms=.. codes=..
 * where latency is that of the create request (add to done), cpu_ms is the
 * load generator's own user+system CPU time and codes lists the HTTP statuses
 * seen. Exit 0 once every create finished, whatever its
 * answer; 1 on a setup error; 2 on bad arguments. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <curl/curl.h>

#define MAX_STATUS 600

typedef struct lg_opts {
    const char *url;      /* the API's /timers URL */
    const char *sink_url; /* the timers' target */
    const char *run_id;
    unsigned connections;
    double rate;          /* creates per second; 0: as fast as possible */
    uint64_t count;
    double duration_s;
    int64_t delay_ms;
    int64_t at_ms;        /* > 0: every timer due at this epoch ms */
    unsigned body_bytes;  /* length of the pad string */
    long timeout_ms;
    int plain;            /* --plain 1: a plain "body" of body_bytes, default retry (M) */
} lg_opts;

typedef struct slot {
    CURL *h;
    int64_t t0_ns;
    size_t cap;
    char *buf;
    size_t rlen;
    char resp[512]; /* start of the answer, printed for the first non-2xx */
} slot;

static lg_opts o = {NULL, NULL, "lg", 32, 0, 0, 0, 2000, 0, 100, 30000, 0};
static char *pad;
static slot **idle;
static unsigned n_idle;
static uint32_t *lat_us;
static size_t lat_n, lat_cap;
static uint64_t ok, non2xx, errors, codes[MAX_STATUS];
static int64_t first_send_ms, last_done_ms;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static size_t keep_head_cb(char *p, size_t size, size_t n, void *ud)
{
    slot *s = ud;
    size_t len = size * n, room = sizeof s->resp - 1 - s->rlen;
    size_t k = len < room ? len : room;
    memcpy(s->resp + s->rlen, p, k);
    s->rlen += k;
    s->resp[s->rlen] = '\0';
    return len;
}

static void lat_push(uint32_t us)
{
    if (lat_n == lat_cap) {
        lat_cap = lat_cap ? lat_cap * 2 : 65536;
        lat_us = realloc(lat_us, lat_cap * sizeof *lat_us);
        if (!lat_us)
            abort();
    }
    lat_us[lat_n++] = us;
}

/* Writes the create request for seq into the slot and hands it to curl. */
static void send_one(CURLM *m, slot *s, uint64_t seq)
{
    int64_t now = wall_ms();
    int64_t due = o.at_ms > 0 ? o.at_ms : now + o.delay_ms;
    int n = o.plain
                ? snprintf(s->buf, s->cap,
                           "{\"id\":\"%s-%" PRIu64 "\",\"url\":\"%s\",\"fire_at_ms\":%" PRId64
                           ",\"body\":\"%s\"}",
                           o.run_id, seq, o.sink_url, due, pad)
                : snprintf(s->buf, s->cap,
                           "{\"id\":\"%s-%" PRIu64 "\",\"url\":\"%s\",\"fire_at_ms\":%" PRId64
                           ",\"json\":{\"seq\":%" PRIu64 ",\"due_ms\":%" PRId64 ",\"pad\":\"%s\"},"
                           "\"retry\":{\"max_attempts\":3,\"min_backoff_ms\":100,\"max_backoff_ms\":1000}}",
                           o.run_id, seq, o.sink_url, due, seq, due, pad);
    if (n < 0 || (size_t)n >= s->cap)
        abort(); /* cap is computed from the same inputs */
    curl_easy_setopt(s->h, CURLOPT_POSTFIELDS, s->buf);
    curl_easy_setopt(s->h, CURLOPT_POSTFIELDSIZE, (long)n);
    if (!first_send_ms)
        first_send_ms = now;
    s->rlen = 0;
    s->resp[0] = '\0';
    s->t0_ns = mono_ns();
    curl_multi_add_handle(m, s->h);
}

static void finish_one(CURLM *m, CURLMsg *msg)
{
    slot *s;
    long status = 0;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
    if (msg->data.result == CURLE_OK) {
        curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &status);
        if (status >= 200 && status < 300) {
            ok++;
        } else {
            if (non2xx < 3)
                fprintf(stderr, "loadgen: HTTP %ld: %s\n", status, s->resp);
            non2xx++;
        }
        if (status >= 0 && status < MAX_STATUS)
            codes[status]++;
    } else {
        if (errors < 5)
            fprintf(stderr, "loadgen: %s\n", curl_easy_strerror(msg->data.result));
        errors++;
    }
    lat_push((uint32_t)((mono_ns() - s->t0_ns) / 1000));
    last_done_ms = wall_ms();
    curl_multi_remove_handle(m, s->h);
    idle[n_idle++] = s;
}

static slot *slot_create(struct curl_slist *hdrs)
{
    slot *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->cap = strlen(o.sink_url) + strlen(o.run_id) + o.body_bytes + 512;
    s->buf = malloc(s->cap);
    s->h = curl_easy_init();
    if (!s->buf || !s->h)
        abort();
    curl_easy_setopt(s->h, CURLOPT_URL, o.url);
    curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, keep_head_cb);
    curl_easy_setopt(s->h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->h, CURLOPT_PRIVATE, s);
    curl_easy_setopt(s->h, CURLOPT_TIMEOUT_MS, o.timeout_ms);
    curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(s->h, CURLOPT_TCP_NODELAY, 1L);
    return s;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static double pct_ms(double p)
{
    if (!lat_n)
        return 0;
    size_t k = (size_t)(p * (double)lat_n + 0.999999);
    k = k < 1 ? 1 : k > lat_n ? lat_n : k;
    return lat_us[k - 1] / 1000.0;
}

static void print_summary(uint64_t sent, double elapsed_s)
{
    qsort(lat_us, lat_n, sizeof *lat_us, cmp_u32);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000L +
                  (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000L;
    printf("LOADGEN sent=%" PRIu64 " ok=%" PRIu64 " non2xx=%" PRIu64 " errors=%" PRIu64
           " rate=%.1f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f elapsed_s=%.3f first_send_ms=%" PRId64
           " last_done_ms=%" PRId64 " cpu_ms=%ld codes=",
           sent, ok, non2xx, errors, elapsed_s > 0 ? (double)sent / elapsed_s : 0.0, pct_ms(0.50),
           pct_ms(0.99), lat_n ? lat_us[lat_n - 1] / 1000.0 : 0.0, elapsed_s, first_send_ms,
           last_done_ms, cpu_ms);
    int any = 0;
    for (int c = 0; c < MAX_STATUS; c++)
        if (codes[c]) {
            printf("%s%d:%" PRIu64, any ? "," : "", c, codes[c]);
            any = 1;
        }
    printf("%s\n", any ? "" : "-");
    fflush(stdout);
}

/* How long the loop may sleep: until the next paced send, or until curl has
 * news (curl_multi_poll returns early on socket activity). */
static int wait_ms(int64_t start, uint64_t next, int sending)
{
    if (!sending || !n_idle)
        return 100;
    if (o.rate <= 0)
        return 0;
    int64_t due = start + (int64_t)((double)next * 1e9 / o.rate);
    int64_t d = due - mono_ns();
    if (d <= 0)
        return 0;
    return d >= 100000000 ? 100 : (int)((d + 999999) / 1000000);
}

/* The send loop. Returns how many creates it sent. */
static uint64_t run(CURLM *m)
{
    int64_t start = mono_ns();
    int64_t end = o.rate <= 0 && o.duration_s > 0 ? start + (int64_t)(o.duration_s * 1e9) : 0;
    uint64_t total = o.count ? o.count : UINT64_MAX, next = 0;
    for (;;) {
        int64_t now = mono_ns();
        int sending = next < total && (!end || now < end);
        if (sending) {
            uint64_t allowed = total;
            if (o.rate > 0) {
                uint64_t a = (uint64_t)((double)(now - start) * o.rate / 1e9) + 1;
                allowed = a < total ? a : total;
            }
            while (next < allowed && n_idle)
                send_one(m, idle[--n_idle], next++);
        }
        int running = 0;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left)))
            if (msg->msg == CURLMSG_DONE)
                finish_one(m, msg);
        if (!sending && n_idle == o.connections)
            return next;
        curl_multi_poll(m, NULL, 0, wait_ms(start, next, sending), NULL);
    }
}

static void usage(void)
{
    fprintf(stderr,
            "usage: loadgen --url http://127.0.0.1:P/timers --sink-url URL\n"
            "               (--count N | --duration S) [--rate R (0: max)] [--connections C]\n"
            "               [--delay-ms D | --at-ms T] [--body-bytes B] [--run-id ID]\n"
            "               [--timeout-ms MS] [--plain 1 (a plain 200-byte-style \"body\", default retry)]\n");
}

static int parse_args(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--url"))
            o.url = v;
        else if (!strcmp(a, "--sink-url"))
            o.sink_url = v;
        else if (!strcmp(a, "--run-id"))
            o.run_id = v;
        else if (!strcmp(a, "--connections"))
            o.connections = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--rate"))
            o.rate = strtod(v, NULL);
        else if (!strcmp(a, "--count"))
            o.count = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--duration"))
            o.duration_s = strtod(v, NULL);
        else if (!strcmp(a, "--delay-ms"))
            o.delay_ms = strtoll(v, NULL, 10);
        else if (!strcmp(a, "--at-ms"))
            o.at_ms = strtoll(v, NULL, 10);
        else if (!strcmp(a, "--body-bytes"))
            o.body_bytes = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--timeout-ms"))
            o.timeout_ms = strtol(v, NULL, 10);
        else if (!strcmp(a, "--plain") && !strcmp(v, "1"))
            o.plain = 1;
        else
            return -1;
    }
    if (argc % 2 == 0 || !o.url || !o.sink_url || !o.connections || o.rate < 0)
        return -1;
    if (!o.count && o.rate > 0 && o.duration_s > 0)
        o.count = (uint64_t)(o.rate * o.duration_s + 0.5);
    return o.count || o.duration_s > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (parse_args(argc, argv) < 0) {
        usage();
        return 2;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return 1;
    pad = malloc(o.body_bytes + 1);
    idle = calloc(o.connections, sizeof *idle);
    CURLM *m = curl_multi_init();
    if (!pad || !idle || !m)
        return 1;
    memset(pad, 'x', o.body_bytes);
    pad[o.body_bytes] = '\0';
    curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)o.connections);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    hdrs = curl_slist_append(hdrs, "Expect:");
    for (unsigned i = 0; i < o.connections; i++)
        idle[n_idle++] = slot_create(hdrs);
    int64_t t0 = mono_ns();
    uint64_t sent = run(m);
    print_summary(sent, (double)(mono_ns() - t0) / 1e9);
    for (unsigned i = 0; i < n_idle; i++) {
        curl_easy_cleanup(idle[i]->h);
        free(idle[i]->buf);
        free(idle[i]);
    }
    curl_multi_cleanup(m);
    curl_slist_free_all(hdrs);
    curl_global_cleanup();
    free(pad);
    free(idle);
    free(lat_us);
    return 0;
}
