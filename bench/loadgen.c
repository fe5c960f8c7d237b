/* loadgen.c - hookwheel's benchmark load generator: creates timers that call
 * the sink, at a paced rate or as fast as the service answers.
 *
 * Design. --connections keep-alive HTTP/1.1 connections to the API, driven by
 * one epoll loop; each carries one create at a time (a client that waits for
 * its answer, no pipelining), so at most that many are in flight. A request
 * is written by hand and sent with one send(); an answer is parsed only as
 * far as needed: the status, its end (Content-Length, a chunked body's last
 * chunk, or no body for 1xx/204/304) and "Connection: close". The client is
 * this lean because it shares the machine's cores with what it measures:
 * with libcurl multi it cost ~45 us of CPU per create on the 2-core bench box,
 * most of a core at 20,000 creates/s. A connection the server closed is
 * opened again for the next create; a create without an answer within
 * --timeout-ms counts as an error and its connection is closed.
 *
 * Pacing is open loop: create n may start at start + n/rate, so a stall is
 * caught up afterwards (bounded by the connections) and the achieved rate is
 * reported, not assumed. --rate 0 sends as fast as connections free up.
 * Every timer gets an explicit id "<run-id>-<seq>" and a due time fire_at_ms,
 * either the wall clock at send plus --delay-ms or the fixed --at-ms, and
 * carries {"seq","due_ms","pad"} in its JSON body so the sink can compute its
 * lateness.
 *
 * Output: one line with stable keys,
 *   LOADGEN sent=.. ok=.. non2xx=.. errors=.. rate=.. p50_ms=.. p99_ms=..
 *           max_ms=.. elapsed_s=.. first_send_ms=.. last_done_ms=.. cpu_ms=.. codes=..
 * where latency is that of the create request (add to done), cpu_ms is the
 * load generator's own user+system CPU time and codes lists the HTTP statuses
 * seen. Exit 0 once every create finished, whatever its
 * answer; 1 on a setup error; 2 on bad arguments. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_STATUS 600
#define IN_CAP 8192 /* an answer's head and body; a create's answer is far smaller */

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

/* One connection and the create it carries, if any. */
typedef struct conn {
    int fd;               /* -1: not connected */
    int busy;             /* a create was sent and awaits its answer */
    int64_t t0_ns;        /* when the create was sent */
    size_t cap;
    char *out;            /* the request */
    size_t in_len;
    char in[IN_CAP + 1];  /* the answer so far, NUL-terminated */
} conn;

static lg_opts o = {NULL, NULL, "lg", 32, 0, 0, 0, 2000, 0, 100, 30000, 0};
static char *pad;
static conn *conns;
static conn **idle;
static unsigned n_idle;
static int ep = -1;
static struct sockaddr_storage api_addr;
static socklen_t api_addr_len;
static char api_host[256], api_path[1024];
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

/* Splits http://host[:port]/path and resolves host once. 0, or -1. */
static int parse_url(const char *url)
{
    const char *p = url, *slash, *colon;
    char port[16] = "80";
    if (strncmp(p, "http://", 7))
        return -1;
    p += 7;
    slash = strchr(p, '/');
    if (!slash)
        slash = p + strlen(p);
    if ((size_t)(slash - p) >= sizeof api_host || strlen(slash) >= sizeof api_path)
        return -1;
    memcpy(api_host, p, (size_t)(slash - p));
    api_host[slash - p] = '\0';
    strcpy(api_path, *slash ? slash : "/");
    char host[256];
    strcpy(host, api_host);
    colon = strrchr(host, ':');
    if (colon) {
        snprintf(port, sizeof port, "%s", colon + 1);
        host[colon - host] = '\0';
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai))
        return -1;
    memcpy(&api_addr, ai->ai_addr, ai->ai_addrlen);
    api_addr_len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* Opens c's connection (a blocking connect, immediate on loopback), then
 * makes it non-blocking and watches it for answers. 0, or -1. */
static int conn_open(conn *c)
{
    int fd = socket(api_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&api_addr, api_addr_len) < 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
        close(fd);
        return -1;
    }
    c->fd = fd;
    return 0;
}

static void conn_close(conn *c)
{
    if (c->fd >= 0)
        close(c->fd); /* also leaves the epoll set */
    c->fd = -1;
}

/* The create is over: counts it (status 0: no answer), frees the slot. */
static void finish(conn *c, int status, const char *why)
{
    if (status >= 200 && status < 300) {
        ok++;
    } else if (status > 0) {
        if (non2xx < 3) {
            const char *body = strstr(c->in, "\r\n\r\n");
            fprintf(stderr, "loadgen: HTTP %d: %.512s\n", status, body ? body + 4 : c->in);
        }
        non2xx++;
    } else {
        if (errors < 5)
            fprintf(stderr, "loadgen: %s\n", why);
        errors++;
    }
    if (status > 0 && status < MAX_STATUS)
        codes[status]++;
    lat_push((uint32_t)((mono_ns() - c->t0_ns) / 1000));
    last_done_ms = wall_ms();
    c->busy = 0;
    idle[n_idle++] = c;
}

/* Writes the create request for seq and sends it on c. */
static void send_one(conn *c, uint64_t seq)
{
    int64_t now = wall_ms();
    int64_t due = o.at_ms > 0 ? o.at_ms : now + o.delay_ms;
    char head[sizeof api_path + sizeof api_host + 128];
    int b = o.plain
                ? snprintf(c->out + 1024, c->cap - 1024,
                           "{\"id\":\"%s-%" PRIu64 "\",\"url\":\"%s\",\"fire_at_ms\":%" PRId64
                           ",\"body\":\"%s\"}",
                           o.run_id, seq, o.sink_url, due, pad)
                : snprintf(c->out + 1024, c->cap - 1024,
                           "{\"id\":\"%s-%" PRIu64 "\",\"url\":\"%s\",\"fire_at_ms\":%" PRId64
                           ",\"json\":{\"seq\":%" PRIu64 ",\"due_ms\":%" PRId64 ",\"pad\":\"%s\"},"
                           "\"retry\":{\"max_attempts\":3,\"min_backoff_ms\":100,\"max_backoff_ms\":1000}}",
                           o.run_id, seq, o.sink_url, due, seq, due, pad);
    if (b < 0 || (size_t)b >= c->cap - 1024)
        abort(); /* cap is computed from the same inputs */
    int h = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %d\r\n\r\n",
                     api_path, api_host, b);
    if (h < 0 || h > 1024)
        abort(); /* path and host are capped by parse_url */
    char *req = c->out + 1024 - h; /* the head goes right before the body */
    memcpy(req, head, (size_t)h);
    if (!first_send_ms)
        first_send_ms = now;
    c->busy = 1;
    c->in_len = 0;
    c->in[0] = '\0';
    c->t0_ns = mono_ns();
    if (c->fd < 0 && conn_open(c) < 0) {
        finish(c, 0, "could not connect");
        return;
    }
    /* a request fits the socket buffer of a fresh or idle connection */
    ssize_t n = send(c->fd, req, (size_t)(h + b), MSG_NOSIGNAL);
    if (n != h + b) {
        conn_close(c);
        finish(c, 0, n < 0 ? strerror(errno) : "short send");
    }
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

/* The value of header name (lower case) in the answer head of len bytes,
 * or NULL. */
static const char *header_value(const char *in, size_t len, const char *name)
{
    size_t k = strlen(name);
    const char *p = strstr(in, "\r\n"), *end = in + len;
    while (p && p + 2 + k < end) {
        p += 2;
        if (!strncasecmp(p, name, k) && p[k] == ':') {
            p += k + 1;
            while (*p == ' ' || *p == '\t')
                p++;
            return p;
        }
        p = strstr(p, "\r\n");
    }
    return NULL;
}

/* The length of the complete answer in c->in: 0 while it is incomplete, -1
 * when it cannot be parsed or does not fit IN_CAP. Sets *status and, when
 * the server will close the connection after it, *close_after. eof: the
 * server closed the connection (ends an answer without a length). */
static long answer_len(const conn *c, int eof, int *status, int *close_after)
{
    const char *end = strstr(c->in, "\r\n\r\n"), *v;
    if (!end)
        return c->in_len >= IN_CAP ? -1 : 0;
    size_t head = (size_t)(end + 4 - c->in);
    if (sscanf(c->in, "HTTP/%*d.%*d %d", status) != 1)
        return -1;
    v = header_value(c->in, head, "connection");
    *close_after = v && !strncasecmp(v, "close", 5);
    if (*status < 200 || *status == 204 || *status == 304)
        return (long)head;
    v = header_value(c->in, head, "content-length");
    if (v) {
        size_t n = head + strtoul(v, NULL, 10);
        return n > IN_CAP ? -1 : c->in_len >= n ? (long)n : 0;
    }
    v = header_value(c->in, head, "transfer-encoding");
    if (v && !strncasecmp(v, "chunked", 7)) {
        const char *z = strstr(c->in + head - 2, "\r\n0\r\n\r\n"); /* the last chunk */
        return z ? (long)(z + 7 - c->in) : c->in_len >= IN_CAP ? -1 : 0;
    }
    return eof ? (long)c->in_len : c->in_len >= IN_CAP ? -1 : 0; /* ends with the connection */
}

/* c's socket is readable: one recv, then the create is over if its answer
 * is complete or the connection ended. Data on an idle connection (the
 * server closing it) closes it; the next create opens it again. */
static void on_readable(conn *c)
{
    ssize_t n = recv(c->fd, c->in + c->in_len, IN_CAP - c->in_len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    int eof = n <= 0;
    if (n > 0)
        c->in_len += (size_t)n;
    c->in[c->in_len] = '\0';
    if (!c->busy) {
        conn_close(c);
        return;
    }
    int status = 0, close_after = 0;
    long len = answer_len(c, eof, &status, &close_after);
    if (len > 0) {
        if (close_after || eof)
            conn_close(c);
        finish(c, status, NULL);
    } else if (len < 0 || eof) {
        conn_close(c);
        finish(c, 0, len < 0 ? "answer not understood" : "connection closed without an answer");
    }
}

/* Ends every create older than --timeout-ms as an error. */
static void expire(int64_t now)
{
    for (unsigned i = 0; i < o.connections; i++) {
        conn *c = &conns[i];
        if (c->busy && now - c->t0_ns > (int64_t)o.timeout_ms * 1000000) {
            conn_close(c);
            finish(c, 0, "timeout");
        }
    }
}

/* How long the loop may sleep: until the next paced send, or until an
 * answer arrives (epoll_wait returns early). */
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
static uint64_t run(void)
{
    int64_t start = mono_ns(), next_check = start;
    int64_t end = o.rate <= 0 && o.duration_s > 0 ? start + (int64_t)(o.duration_s * 1e9) : 0;
    uint64_t total = o.count ? o.count : UINT64_MAX, next = 0;
    struct epoll_event evs[256];
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
                send_one(idle[--n_idle], next++);
        }
        if (!sending && n_idle == o.connections)
            return next;
        int n = epoll_wait(ep, evs, 256, wait_ms(start, next, sending));
        for (int i = 0; i < n; i++)
            on_readable(evs[i].data.ptr);
        now = mono_ns();
        if (now >= next_check) {
            expire(now);
            next_check = now + 10000000;
        }
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
    if (parse_url(o.url) < 0) {
        fprintf(stderr, "loadgen: cannot use --url %s (http://host[:port]/path)\n", o.url);
        return 2;
    }
    pad = malloc(o.body_bytes + 1);
    conns = calloc(o.connections, sizeof *conns);
    idle = calloc(o.connections, sizeof *idle);
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (!pad || !conns || !idle || ep < 0)
        return 1;
    memset(pad, 'x', o.body_bytes);
    pad[o.body_bytes] = '\0';
    for (unsigned i = 0; i < o.connections; i++) {
        conn *c = &conns[i];
        c->fd = -1;
        c->cap = 1024 + strlen(o.sink_url) + strlen(o.run_id) + o.body_bytes + 512;
        c->out = malloc(c->cap);
        if (!c->out)
            return 1;
        idle[n_idle++] = c;
    }
    int64_t t0 = mono_ns();
    uint64_t sent = run();
    print_summary(sent, (double)(mono_ns() - t0) / 1e9);
    for (unsigned i = 0; i < o.connections; i++) {
        conn_close(&conns[i]);
        free(conns[i].out);
    }
    close(ep);
    free(conns);
    free(idle);
    free(pad);
    free(lat_us);
    return 0;
}
