/* http.c - libmicrohttpd glue: request contexts, routing, suspend/resume.
 *
 * Life of a request. libmicrohttpd calls access_cb several times for one
 * request. The first call creates the context: one allocation holding copies
 * of the method, the raw path, its percent-decoded segments, every header
 * and every query argument, so the accessors never touch the connection and
 * work from any thread. It then matches the route and, when the request
 * cannot succeed, refuses it without handing it on (400 malformed
 * percent-encoding, 401, 404, 405 + Allow, 415). Upload calls append to a
 * buffer that grows up to max_body_bytes; past the cap the rest is read and
 * dropped and the request ends in 413; a refused request's body is all
 * dropped. Refusals and 413s are queued once the body is in, at the last
 * call: answered with the body left unread, libmicrohttpd closes the
 * connection, so requests pipelined behind went unanswered, and a client
 * that sends its whole body before it reads (most do) saw the connection
 * reset under its send, without the answer. Only a client that keeps
 * sending far too much (or announces it, or waits for 100 Continue), a
 * request whose framing is in doubt, and a request while quiescing (503)
 * are answered at once or cut off, and their connection closed. The last
 * call hands the request to the route's handler. The context is freed only
 * in completed_cb.
 *
 * Answer protocol (race-free suspend/resume). An answer is first claimed
 * (`claimed`, an atomic flag: the first http_respond_* wins, a later one is
 * dropped with a warning), then published: the answerer stores the response
 * in the context and atomically exchanges `state` to READY. After the handler
 * returns, the access thread
 *   1. loads state; READY means the handler, or a quick other thread, has
 *      answered: queue the response now;
 *   2. otherwise calls MHD_suspend_connection and then tries to move state
 *      from PENDING to SUSPENDED. If that fails, an answer was published
 *      between 1 and 2, and the access thread resumes the connection itself.
 * The answerer resumes only when its exchange returned SUSPENDED, which is
 * stored only after the suspend call returned. So a suspended connection is
 * resumed exactly once, by whichever side comes second; a connection that was
 * never suspended is never resumed, and no wake-up is lost. After the resume
 * libmicrohttpd calls access_cb again, which finds READY and queues the stored
 * response (MHD_queue_response may only be called from access_cb). The
 * atomics are sequentially consistent, so the response written before the
 * exchange is visible to whoever sees READY. The answerer must not touch the
 * context after its exchange: the request may complete and be freed at once.
 *
 * Deadlines. libmicrohttpd's connection timeout is an idle timeout: a
 * client that sends one header line every few seconds (slowloris) holds its
 * connection for ever, and enough of them fill the connection limit. So
 * every connection also carries a deadline (struct http_conn, its socket
 * context): the request line and headers must be in within head_timeout of
 * the connection's start (or, on a kept-alive connection, of the request
 * line; an idle kept-alive connection gets connection_timeout + head_timeout
 * before that), and the body within body_timeout of the headers. While a
 * handler runs there is none. A watcher thread walks the connections a few
 * times per shortest timeout and shuts down the socket of each one past its
 * deadline; libmicrohttpd then reads EOF and closes it as usual. The list is
 * locked, and libmicrohttpd reports a connection closed (NOTIFY_CLOSED,
 * which unlinks it) before it closes the socket, so the watcher never shuts
 * down a descriptor number that was reused.
 *
 * Clients that left. A request can wait in the listen backlog until its
 * client has given up (the limit was full); before a handler runs, the
 * socket is peeked, and a request whose client has closed (EOF or a reset)
 * is dropped unanswered, so no timer is created for nobody.
 *
 * Stopping. libmicrohttpd panics if a connection is still suspended when
 * MHD_stop_daemon runs. Every request handed to a handler is therefore kept
 * on the server's pending list until it completes; http_stop answers the
 * unanswered ones with 503, waits (bounded) until the list drains, and only
 * then stops the daemon. */
#include "http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "auth.h"
#include "clock.h"
#include "hex.h"

#include "list.h"
#include "problem.h"
#include "log.h"
#include "xalloc.h"


#define MAX_SEGMENTS      16            /* longer paths match no route */
#define CONN_MEMORY_LIMIT (16 * 1024)   /* per connection: request line + headers + read buffer */
#define BODY_MIN_CAP      1024          /* first body allocation when the length is unknown */
#define DISCARD_MIN       (1024 * 1024) /* bytes read past the cap, at least, before we close instead */
#define STOP_DRAIN_MS     5000          /* http_stop waits this long for answered requests */
#define WATCH_MIN_US      10000         /* the deadline watcher wakes at most every 10 ms... */
#define WATCH_MAX_US      250000        /* ...and at least every 250 ms */

enum answer_state { ANSWER_PENDING, ANSWER_SUSPENDED, ANSWER_READY };
enum phase { PHASE_BEGIN, PHASE_BODY, PHASE_EARLY, PHASE_HANDLER, PHASE_DONE };

struct kv {
    const char *name, *value;
};

/* One per TCP connection: its socket context. */
struct http_conn {
    struct list_node link;      /* in srv->conns, under conn_lock */
    int fd;
    atomic_uint_fast64_t deadline_us; /* monotonic; 0: none */
    uint64_t answered_us;       /* monotonic, when its last request ended; 0: none yet (its MHD thread only) */
};

struct http_server {
    struct MHD_Daemon *daemon;
    const http_route *routes;
    size_t nroutes;
    void *app;
    size_t max_body;
    size_t max_batch_body;      /* routes with big_body */
    const struct auth *_Atomic auth; /* NULL: no tokens, every caller is in namespace "" (http_set_auth) */
    uint16_t port;
    int listen_fd;              /* shut down by http_quiesce, closed after the daemon stops */
    atomic_bool quiesced;       /* new requests get 503 */
    pthread_mutex_t lock;       /* guards pending and stopping */
    pthread_cond_t drained;     /* signalled when pending empties while stopping */
    struct list_node pending;   /* requests handed to a handler, not yet completed */
    bool stopping;
    struct sockaddr_storage addr;
    uint64_t head_us, body_us, idle_us; /* deadlines; head_us 0: none */
    pthread_mutex_t conn_lock;  /* guards conns and watch_stop */
    pthread_cond_t watch_wake;  /* signalled to stop the watcher */
    struct list_node conns;     /* every open connection (struct http_conn) */
    bool watch_stop;
    bool watching;              /* the watcher thread runs */
    pthread_t watcher;
    uint32_t rid_prefix;        /* random per server: made request ids differ across runs */
    atomic_uint_fast64_t rid_seq;
};

struct http_req {
    http_server *srv;
    struct MHD_Connection *conn;
    struct list_node link;      /* in srv->pending while registered */
    struct list_node stop_link; /* http_stop's list of requests it answers */
    bool registered;            /* access thread only */
    enum phase phase;           /* access thread only */
    uint64_t start_us;
    const http_route *route;
    const char *ns;             /* the caller's namespace ("" without tokens) */
    const char *method;
    const char *path;           /* as received: percent-encoded, without the query */
    const char *params[HTTP_MAX_PARAMS + 1];
    char *segs[MAX_SEGMENTS];
    int nsegs;                  /* -1: malformed escape; MAX_SEGMENTS + 1: too many */
    bool bad_query;             /* malformed escape in the query */
    const struct kv *headers, *query;
    size_t nheaders, nquery;
    char *body;                 /* NUL-terminated; NULL while empty */
    size_t body_len, body_cap, body_hint, body_seen; /* body_seen: every byte received */
    bool body_over;             /* the body exceeded max_body: answer 413 */
    atomic_bool claimed;        /* an answer was given */
    atomic_int state;           /* enum answer_state */
    struct MHD_Response *answer;/* written before state becomes READY */
    unsigned status;
    char rid[HTTP_REQUEST_ID_MAX + 1]; /* the request id (http_req_id) */
    struct kv kvs[];            /* headers, then query, then all the strings */
};

/* ---- percent-decoding, paths and routes ---------------------------------- */

/* Decodes %HH escapes of the NUL-terminated s in place. Returns 0, or -1 for
 * a malformed escape or %00 (which would silently cut the value short). */
static int pct_decode(char *s)
{
    char *o = s;
    for (const char *p = s; *p; p++) {
        if (*p != '%') {
            *o++ = *p;
            continue;
        }
        int hi = hex_value(p[1]), lo = hi < 0 ? -1 : hex_value(p[2]);
        if (lo < 0 || (hi | lo) == 0)
            return -1;
        *o++ = (char)(hi * 16 + lo);
        p += 2;
    }
    *o = '\0';
    return 0;
}

/* Copies the raw path (without its leading '/') into buf, splits it at '/'
 * and decodes each segment, so "%2F" inside an id stays inside the id.
 * Returns the number of segments, -1 for a malformed escape, or
 * MAX_SEGMENTS + 1 when there are too many to match any route. */
static int path_split(const char *path, char *buf, char **segs)
{
    if (path[0] != '/')
        return 0;
    strcpy(buf, path + 1);
    int n = 0;
    for (char *p = buf;;) {
        char *slash = strchr(p, '/');
        if (slash)
            *slash = '\0';
        if (n == MAX_SEGMENTS)
            return MAX_SEGMENTS + 1;
        if (pct_decode(p) != 0)
            return -1;
        segs[n++] = p;
        if (!slash)
            return n;
        p = slash + 1;
    }
}

/* The path of a request target in absolute form ("http://host:port/path",
 * which RFC 9112 §3.2.2 says a server must accept; libmicrohttpd passes it
 * on as it came): from the first '/' after the authority, or "/" when there
 * is none. Any other target is returned as it is. */
static const char *origin_path(const char *url)
{
    const char *p = url;
    if (strncasecmp(p, "http://", 7) == 0)
        p += 7;
    else if (strncasecmp(p, "https://", 8) == 0)
        p += 8;
    else
        return url;
    const char *slash = strchr(p, '/');
    return slash ? slash : "/";
}

/* Matches a route pattern ("/timers/{id}/fire") against decoded segments.
 * "{name}" matches one non-empty segment. On a match fills params
 * (NULL-terminated) and returns true. */
static bool pattern_match(const char *pattern, char *const *segs, int nsegs, const char **params)
{
    const char *p = pattern + 1;
    int np = 0;
    if (nsegs > MAX_SEGMENTS) /* path_split stopped counting */
        return false;
    for (int i = 0; i < nsegs; i++) {
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= 2 && p[0] == '{' && p[len - 1] == '}') {
            if (segs[i][0] == '\0' || np == HTTP_MAX_PARAMS)
                return false;
            params[np++] = segs[i];
        } else if (strlen(segs[i]) != len || memcmp(segs[i], p, len) != 0) {
            return false;
        }
        if (!end) {
            if (i != nsegs - 1)
                return false;
            params[np] = NULL;
            return true;
        }
        p = end + 1;
    }
    return false;
}

/* Finds the route for r's method and path; HEAD falls back to GET. Sets
 * *path_known when some route has this path, whatever its method. */
static const http_route *route_find(const http_server *s, http_req *r, bool *path_known)
{
    const http_route *head_get = NULL;
    const char *params[HTTP_MAX_PARAMS + 1];
    *path_known = false;
    for (size_t i = 0; i < s->nroutes; i++) {
        const http_route *rt = &s->routes[i];
        if (!pattern_match(rt->pattern, r->segs, r->nsegs, params))
            continue;
        *path_known = true;
        if (strcmp(rt->method, r->method) == 0) {
            memcpy(r->params, params, sizeof params);
            return rt;
        }
        if (!head_get && strcmp(r->method, "HEAD") == 0 && strcmp(rt->method, "GET") == 0) {
            head_get = rt;
            memcpy(r->params, params, sizeof params);
        }
    }
    return head_get;
}

/* Writes the Allow header value for r's path ("GET, HEAD, DELETE"). */
static void allow_list(const http_server *s, const http_req *r, char *buf, size_t size)
{
    const char *params[HTTP_MAX_PARAMS + 1];
    size_t o = 0;
    bool get = false, head = false;
    buf[0] = '\0';
    for (size_t i = 0; i < s->nroutes; i++) {
        const http_route *rt = &s->routes[i];
        if (!pattern_match(rt->pattern, r->segs, r->nsegs, params))
            continue;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(s->routes[j].method, rt->method) == 0 &&
                   pattern_match(s->routes[j].pattern, r->segs, r->nsegs, params);
        bool is_head = strcmp(rt->method, "HEAD") == 0;
        if (seen || (is_head && head))
            continue;
        get |= strcmp(rt->method, "GET") == 0;
        head |= is_head;
        int n = snprintf(buf + o, size - o, "%s%s", o ? ", " : "", rt->method);
        if (n < 0 || (size_t)n >= size - o)
            return;
        o += (size_t)n;
        if (get && !head) {
            n = snprintf(buf + o, size - o, ", HEAD");
            if (n < 0 || (size_t)n >= size - o)
                return;
            o += (size_t)n;
            head = true;
        }
    }
}

/* Checks the route table once at start: patterns start with '/', have at
 * most HTTP_MAX_PARAMS parameters and MAX_SEGMENTS segments. */
static int routes_check(const http_route *routes, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const http_route *rt = &routes[i];
        int params = 0, segs = 0;
        if (!rt->method || !rt->handler || !rt->pattern || rt->pattern[0] != '/')
            return -EINVAL;
        for (const char *p = rt->pattern; *p; p++) {
            params += *p == '{';
            segs += *p == '/';
        }
        if (params > HTTP_MAX_PARAMS || segs > MAX_SEGMENTS)
            return -EINVAL;
    }
    return 0;
}

static bool is_json_type(const char *ct)
{
    static const char json[] = "application/json";
    if (!ct)
        return false;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    if (strncasecmp(ct, json, sizeof json - 1) != 0)
        return false;
    ct += sizeof json - 1;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return *ct == '\0' || *ct == ';';
}

/* ---- request contexts ---------------------------------------------------- */

struct kv_sizing {
    size_t n, bytes;
};

struct kv_filling {
    struct kv *kv;
    size_t n, cap;
    char *p;
    bool decode, bad;
};

static enum MHD_Result kv_size_cb(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    struct kv_sizing *sz = cls;
    (void)kind;
    sz->n++;
    sz->bytes += strlen(key) + 1 + (value ? strlen(value) : 0) + 1;
    return MHD_YES;
}

/* Copies s to p (percent-decoding when asked) and returns the byte after
 * its NUL. A malformed escape sets *bad. */
static char *kv_copy(char *p, const char *s, bool decode, bool *bad)
{
    size_t n = strlen(s) + 1;
    memcpy(p, s, n);
    if (decode && pct_decode(p) != 0)
        *bad = true;
    return p + n;
}

static enum MHD_Result kv_copy_cb(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    struct kv_filling *f = cls;
    (void)kind;
    if (f->n == f->cap)
        return MHD_NO;
    struct kv *e = &f->kv[f->n++];
    e->name = f->p;
    f->p = kv_copy(f->p, key, f->decode, &f->bad);
    e->value = f->p;
    f->p = kv_copy(f->p, value ? value : "", f->decode, &f->bad);
    return MHD_YES;
}

static void request_id_set(http_req *r);

/* The query arrives with '+' already turned into ' ' by libmicrohttpd but
 * otherwise raw (unescape_none_cb), and is decoded here. */
static http_req *req_create(http_server *s, struct MHD_Connection *conn, const char *url,
                            const char *method)
{
    struct kv_sizing hs = {0, 0}, qs = {0, 0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, kv_size_cb, &hs);
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, kv_size_cb, &qs);
    size_t mlen = strlen(method) + 1, plen = strlen(url) + 1;
    http_req *r = xcalloc(1, sizeof *r + (hs.n + qs.n) * sizeof(struct kv) + mlen + 2 * plen +
                                 hs.bytes + qs.bytes);
    r->srv = s;
    r->conn = conn;
    r->start_us = clock_mono_us();
    list_init(&r->link);
    list_init(&r->stop_link);
    atomic_init(&r->claimed, false);
    atomic_init(&r->state, ANSWER_PENDING);

    char *p = (char *)(r->kvs + hs.n + qs.n);
    r->method = memcpy(p, method, mlen);
    p += mlen;
    r->path = memcpy(p, url, plen);
    p += plen;
    r->nsegs = path_split(url, p, r->segs);
    p += plen;

    struct kv_filling hf = {r->kvs, 0, hs.n, p, false, false};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, kv_copy_cb, &hf);
    struct kv_filling qf = {r->kvs + hs.n, 0, qs.n, hf.p, true, false};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, kv_copy_cb, &qf);
    r->headers = r->kvs;
    r->nheaders = hf.n;
    r->query = r->kvs + hs.n;
    r->nquery = qf.n;
    r->bad_query = qf.bad;
    request_id_set(r);
    return r;
}

static const char *kv_find(const struct kv *kv, size_t n, const char *name, bool nocase)
{
    for (size_t i = 0; i < n; i++)
        if (nocase ? strcasecmp(kv[i].name, name) == 0 : strcmp(kv[i].name, name) == 0)
            return kv[i].value;
    return NULL;
}

/* A client's X-Request-Id is kept when it is a sane token (the same rule as
 * docker/nginx.conf's map: 1..128 of [A-Za-z0-9._:/+=@-]); otherwise the
 * server makes one, 16 hex digits: a random prefix drawn at start and a
 * counter. */
static bool request_id_sane(const char *id)
{
    size_t n = 0;
    for (; id[n]; n++) {
        char c = id[n];
        if (n == HTTP_REQUEST_ID_MAX || !(isalnum((unsigned char)c) || strchr("._:/+=@-", c)))
            return false;
    }
    return n > 0;
}

static void request_id_set(http_req *r)
{
    const char *given = kv_find(r->headers, r->nheaders, "X-Request-Id", true);
    if (given && request_id_sane(given)) {
        strcpy(r->rid, given);
        return;
    }
    uint64_t v = (uint64_t)r->srv->rid_prefix << 32 | (uint32_t)atomic_fetch_add(&r->srv->rid_seq, 1);
    for (int i = 15; i >= 0; i--, v >>= 4) /* 16 hex digits, as "%08x%08x" of prefix and counter */
        r->rid[i] = "0123456789abcdef"[v & 15];
    r->rid[16] = '\0';
}

/* Client errors (4xx) logged at info per second, at most; the rest are
 * counted and the count is logged with the next second's first one. */
#define CLIENT_ERROR_LINES_PER_S 10

/* 1 when a client error's line may be written at info now. One client
 * sending bad requests in a loop must not flood the log (it got its answer
 * in the problem document), yet an operator still finds the request id of
 * an occasional one. Lock-free and approximate under races, which is all a
 * log budget needs. */
static bool client_error_line_allowed(void)
{
    static atomic_uint_fast64_t window_s, in_window, suppressed;
    uint64_t now_s = clock_mono_us() / 1000000u, w = atomic_load(&window_s);
    if (now_s != w && atomic_compare_exchange_strong(&window_s, &w, now_s)) {
        atomic_store(&in_window, 0);
        uint64_t n = atomic_exchange(&suppressed, 0);
        if (n)
            LOG(LOG_INFO, "client error requests not logged", "\"suppressed\":%" PRIu64 ",\"per_second\":%d",
                n, CLIENT_ERROR_LINES_PER_S);
    }
    if (atomic_fetch_add(&in_window, 1) < CLIENT_ERROR_LINES_PER_S)
        return true;
    atomic_fetch_add(&suppressed, 1);
    return false;
}

/* One line per finished request. Requests that failed (a 4xx or 5xx, or a
 * connection that died before the answer went out) are logged at info, so an
 * operator finds their request id (http_req_id: the client's X-Request-Id,
 * which nginx sets, docker/nginx.conf, or one made here) at the default
 * level; successes stay at debug. 4xx lines are rate-limited
 * (client_error_line_allowed); at debug every request has its line. 429 and
 * 503 are the exception: they shed load, a line each would add work exactly
 * when there is too much of it, and their cause (a full write queue, Redis
 * down) is logged where it is decided; nginx's access log has them all with
 * their request ids. Costs one comparison when the level is off; no
 * allocation either way. */
static void log_request(const http_req *r, enum MHD_RequestTerminationCode toe)
{
    char method[32], path[512];
    bool completed = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK;
    bool failed = !completed || (r->status >= 400 && r->status != 429 && r->status != 503);
    int level = failed ? LOG_INFO : LOG_DEBUG;
    if (level < log_min_level)
        return;
    if (level == LOG_INFO && completed && r->status < 500 && log_min_level > LOG_DEBUG &&
        !client_error_line_allowed())
        return;
    LOG(level, "http request",
        "\"method\":\"%s\",\"path\":\"%s\",\"status\":%u,\"duration_us\":%llu,"
        "\"completed\":%s,\"request_id\":\"%s\"",
        log_json_escape(r->method, method, sizeof method),
        log_json_escape(r->path, path, sizeof path), r->status,
        (unsigned long long)(clock_mono_us() - r->start_us), completed ? "true" : "false", r->rid);
}

/* ---- responses ----------------------------------------------------------- */

static struct MHD_Response *response_check(struct MHD_Response *resp)
{
    if (!resp) {
        LOG(LOG_ERROR, "out of memory", "\"what\":\"%s\"", "http response");
        abort();
    }
    return resp;
}

/* Serialises doc (stolen; NULL gives an empty body) into a response with
 * Content-Type ctype. Returns NULL if doc cannot be serialised. */
static struct MHD_Response *json_response_take(json_t *doc, const char *ctype)
{
    if (!doc)
        return response_check(MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT));
    /* 15 digits: a real the API gives rounded (0.488, 1.234) is written as
     * such, not as the 17 digits of its nearest double (0.48799999999999999) */
    char *text = json_dumps(doc, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
    json_decref(doc);
    if (!text)
        return NULL;
    json_free_t jfree;
    json_get_alloc_funcs(NULL, &jfree);
    struct MHD_Response *resp = response_check(
        MHD_create_response_from_buffer_with_free_callback(strlen(text), text, jfree));
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    return resp;
}

static struct MHD_Response *problem_response(unsigned status, const char *detail,
                                             const char *field, json_t *extra,
                                             unsigned retry_after_s)
{
    struct MHD_Response *resp = json_response_take(http_problem_doc(status, detail, field, extra),
                                                   "application/problem+json");
    if (!resp) /* jansson out of memory: still answer, with an empty body */
        resp = json_response_take(NULL, NULL);
    if (retry_after_s > 0) {
        char v[16];
        snprintf(v, sizeof v, "%u", retry_after_s);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    return resp;
}

static struct MHD_Response *shutdown_response(void)
{
    struct MHD_Response *resp = problem_response(503, "shutting down", NULL, NULL, 1);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    return resp;
}

/* ---- the answer protocol (see the top of the file) ------------------------ */

static bool answer_claim(http_req *r)
{
    return !atomic_exchange(&r->claimed, true);
}

/* Publishes a claimed answer. r may be freed as soon as this returns, and
 * even before, once the exchange is done. */
static void answer_publish(http_req *r, unsigned status, struct MHD_Response *resp)
{
    struct MHD_Connection *conn = r->conn;
    r->status = status;
    r->answer = resp;
    if (atomic_exchange(&r->state, ANSWER_READY) == ANSWER_SUSPENDED)
        MHD_resume_connection(conn);
}

static void answer_dropped(unsigned status)
{
    LOG(LOG_WARN, "second answer to one request dropped", "\"status\":%u", status);
}

/* Access thread: queues the published answer. */
static enum MHD_Result answer_queue(http_req *r)
{
    struct MHD_Response *resp = r->answer;
    r->answer = NULL;
    r->phase = PHASE_DONE;
    enum MHD_Result ret = MHD_queue_response(r->conn, r->status, resp);
    MHD_destroy_response(resp);
    if (ret != MHD_YES)
        LOG(LOG_ERROR, "cannot queue HTTP response", "\"status\":%u", r->status);
    return ret;
}

/* Access thread, before any handler saw r: the answer is r's. */
static void answer_store(http_req *r, unsigned status, struct MHD_Response *resp)
{
    atomic_store(&r->claimed, true);
    r->status = status;
    r->answer = resp;
    atomic_store(&r->state, ANSWER_READY);
}

/* Access thread, before any handler saw r: answers at once. */
static enum MHD_Result answer_now(http_req *r, unsigned status, struct MHD_Response *resp)
{
    answer_store(r, status, resp);
    return answer_queue(r);
}

/* The body cap of r's route. */
static size_t max_body_of(const http_req *r)
{
    return r->route && r->route->big_body ? r->srv->max_batch_body : r->srv->max_body;
}

/* The most bytes of a body that are read (and dropped) so that the answer
 * refusing it (a 413, or refuse's) reaches the client: the cap and as much
 * again, or 1 MiB more. */
static uint64_t discard_max_of(const http_req *r)
{
    size_t max = max_body_of(r);
    return (uint64_t)max + (max > DISCARD_MIN ? max : DISCARD_MIN);
}

/* Whether r's body may be read to its end (and dropped) before an answer:
 * yes when it has none, not when the client waits for 100 Continue (it
 * sends the body only when asked) nor when its length is past
 * discard_max_of (a chunked body is cut off there as it comes). */
static bool body_readable(const http_req *r)
{
    const char *cl = kv_find(r->headers, r->nheaders, "Content-Length", true);
    const char *expect = kv_find(r->headers, r->nheaders, "Expect", true);
    unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0; /* libmicrohttpd validated it */
    if (n == 0 && !kv_find(r->headers, r->nheaders, "Transfer-Encoding", true))
        return true;
    if (expect && strcasecmp(expect, "100-continue") == 0)
        return false;
    return n <= discard_max_of(r);
}

/* Access thread, at the first call: refuses r once its body, if any, is
 * read (and dropped), at its last call. Queued at the first call, an answer
 * makes libmicrohttpd close the connection, as the body is left unread: the
 * requests a client pipelined behind a 404 or a 401 went unanswered, and a
 * client still sending a body could see the connection reset before the
 * answer. A body that cannot be read (body_readable) is refused at once. */
static enum MHD_Result refuse(http_req *r, unsigned status, struct MHD_Response *resp)
{
    if (!body_readable(r))
        return answer_now(r, status, resp);
    answer_store(r, status, resp);
    r->phase = PHASE_EARLY;
    return MHD_YES;
}

static enum MHD_Result problem_now(http_req *r, unsigned status, const char *detail)
{
    return refuse(r, status, problem_response(status, detail, NULL, NULL, 0));
}

static enum MHD_Result too_large_now(http_req *r, bool close)
{
    char detail[96];
    snprintf(detail, sizeof detail, "the request body is larger than %zu bytes", max_body_of(r));
    struct MHD_Response *resp = problem_response(413, detail, NULL, NULL, 0);
    if (close) /* the body is left unread */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    return answer_now(r, 413, resp);
}

static enum MHD_Result unauthorized_now(http_req *r)
{
    struct MHD_Response *resp =
        problem_response(401, "a valid bearer token is required (Authorization: Bearer <token>)", NULL, NULL, 0);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"hookwheel\"");
    return refuse(r, 401, resp);
}

static enum MHD_Result not_allowed_now(http_req *r)
{
    char allow[128];
    allow_list(r->srv, r, allow, sizeof allow);
    struct MHD_Response *resp =
        problem_response(405, "this method is not allowed on this path", NULL, NULL, 0);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    return refuse(r, 405, resp);
}

/* ---- connection deadlines (see the top of the file) ----------------------- */

static struct http_conn *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Access thread: the connection's deadline becomes now + us (0: none). */
static void deadline_set(const http_server *s, struct MHD_Connection *conn, uint64_t us)
{
    struct http_conn *c = s->head_us ? conn_of(conn) : NULL;
    if (c)
        atomic_store(&c->deadline_us, us ? clock_mono_us() + us : 0);
}

/* libmicrohttpd's connection notifications: link a new connection, with
 * the deadline of its first request's head, and unlink a closed one (called
 * before its socket is closed). */
static void notify_connection_cb(void *cls, struct MHD_Connection *conn, void **socket_context,
                                 enum MHD_ConnectionNotificationCode code)
{
    http_server *s = cls;
    struct http_conn *c = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        c = xcalloc(1, sizeof *c);
        c->fd = ci ? ci->connect_fd : -1;
        atomic_init(&c->deadline_us, s->head_us ? clock_mono_us() + s->head_us : 0);
        pthread_mutex_lock(&s->conn_lock);
        list_insert_tail(&s->conns, &c->link);
        pthread_mutex_unlock(&s->conn_lock);
        *socket_context = c;
        return;
    }
    if (!c)
        return;
    pthread_mutex_lock(&s->conn_lock);
    list_remove(&c->link);
    pthread_mutex_unlock(&s->conn_lock);
    free(c);
    *socket_context = NULL;
}

/* Called when a request line has been read. On a kept-alive connection the
 * head's deadline runs from here (the first request's ran from the
 * connection's start, which is earlier and stays). Returns the request's
 * initial context: NULL, as access_cb expects. */
static void *uri_log_cb(void *cls, const char *uri, struct MHD_Connection *conn)
{
    http_server *s = cls;
    struct http_conn *c = s->head_us ? conn_of(conn) : NULL;
    (void)uri;
    if (c) {
        uint64_t d = clock_mono_us() + s->head_us, cur = atomic_load(&c->deadline_us);
        if (cur == 0 || d < cur)
            atomic_store(&c->deadline_us, d);
    }
    return NULL;
}

/* Shuts down every connection past its deadline. conn_lock held. Returns
 * how many. */
static unsigned watch_sweep(http_server *s, uint64_t now)
{
    unsigned n = 0;
    for (struct list_node *p = s->conns.next; p != &s->conns; p = p->next) {
        struct http_conn *c = container_of(p, struct http_conn, link);
        uint_fast64_t d = atomic_load(&c->deadline_us);
        if (d == 0 || d > now || c->fd < 0)
            continue;
        /* Only the deadline seen: the access thread may have moved on. */
        if (atomic_compare_exchange_strong(&c->deadline_us, &d, 0)) {
            shutdown(c->fd, SHUT_RDWR);
            n++;
        }
    }
    return n;
}

/* Creates refused because the write queue is full (429): the request log
 * leaves them out (one line each would add work exactly when there is too
 * much), so they are counted here and the deadline watcher writes one warn
 * line a second at most with the refusals since its previous line. A burst
 * is so counted whole, and its line comes within a second of its first
 * refusal even if no request follows. */
static atomic_uint_fast64_t shed_count;

void http_count_shed(void)
{
    atomic_fetch_add(&shed_count, 1);
}

static void shed_flush(uint64_t now, uint64_t *last_line_us, bool force)
{
    if (atomic_load(&shed_count) == 0 || (!force && now - *last_line_us < 1000000u))
        return;
    *last_line_us = now;
    LOG(LOG_WARN, "write queue full; requests answered 429", "\"shed\":%" PRIu64,
        (uint64_t)atomic_exchange(&shed_count, 0));
}

static void *watch_main(void *arg)
{
    http_server *s = arg;
    uint64_t period = (s->head_us < s->body_us ? s->head_us : s->body_us) / 4;
    period = period < WATCH_MIN_US ? WATCH_MIN_US : period > WATCH_MAX_US ? WATCH_MAX_US : period;
    uint64_t last_shed_us = 0;
    pthread_mutex_lock(&s->conn_lock);
    while (!s->watch_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + period * 1000u;
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&s->watch_wake, &s->conn_lock, &ts);
        unsigned n = s->watch_stop ? 0 : watch_sweep(s, clock_mono_us());
        if (n) {
            pthread_mutex_unlock(&s->conn_lock);
            LOG(LOG_INFO, "closed API connections whose request was not in by its deadline",
                "\"closed\":%u,\"head_timeout_ms\":%llu,\"body_timeout_ms\":%llu", n,
                (unsigned long long)(s->head_us / 1000u), (unsigned long long)(s->body_us / 1000u));
            pthread_mutex_lock(&s->conn_lock);
        }
        shed_flush(clock_mono_us(), &last_shed_us, false);
    }
    pthread_mutex_unlock(&s->conn_lock);
    shed_flush(clock_mono_us(), &last_shed_us, true);
    return NULL;
}

static void watch_stop(http_server *s)
{
    if (!s->watching)
        return;
    pthread_mutex_lock(&s->conn_lock);
    s->watch_stop = true;
    pthread_cond_signal(&s->watch_wake);
    pthread_mutex_unlock(&s->conn_lock);
    pthread_join(s->watcher, NULL);
    s->watching = false;
}

/* A request read within this time of its connection's previous answer is not
 * checked for a client that left (client_gone). */
#define GONE_CHECK_AFTER_US 50000

/* True when the client has closed its side or reset the connection: the
 * answer would go to nobody. A client that half-closes after sending its
 * request (rare in HTTP) counts as gone too. It costs a syscall, so it is
 * asked only of a request that may have waited: a connection's first (it
 * may have waited in the listen backlog), or one that came more than
 * GONE_CHECK_AFTER_US after the connection's previous answer (it may have
 * waited in the socket's buffer while this thread was busy; or its client
 * was idle, and then one syscall does not matter). A request read sooner
 * after the previous answer cannot have waited longer than that, and on a
 * busy kept-alive connection the check would be one syscall in six of a
 * create's. */
static bool client_gone(struct MHD_Connection *conn)
{
    const struct http_conn *c = conn_of(conn);
    if (c && c->answered_us && clock_mono_us() - c->answered_us < GONE_CHECK_AFTER_US)
        return false;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char b;
    if (!ci)
        return false;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* The request's framing is ambiguous (RFC 9112 §6.3): more than one
 * Content-Length, Content-Length beside Transfer-Encoding, or a transfer
 * coding other than chunked. libmicrohttpd (0.9.75) takes the first
 * Content-Length, or chunked over Content-Length, where a proxy in front
 * may have chosen otherwise (request smuggling). So is a header with
 * whitespace before its colon, which RFC 9112 §5.1 says a server must
 * refuse: libmicrohttpd keeps the space in the name, so it would frame
 * "Transfer-Encoding : chunked" beside a Content-Length by the length,
 * while a proxy that took it for chunked framed it otherwise. Returns why,
 * or NULL. */
static const char *framing_error(const http_req *r)
{
    size_t ncl = 0, nte = 0;
    const char *te = NULL;
    for (size_t i = 0; i < r->nheaders; i++) {
        if (strpbrk(r->headers[i].name, " \t"))
            return "a request header has whitespace before its colon";
        if (strcasecmp(r->headers[i].name, "Content-Length") == 0) {
            ncl++;
        } else if (strcasecmp(r->headers[i].name, "Transfer-Encoding") == 0) {
            nte++;
            te = r->headers[i].value;
        }
    }
    if (ncl > 1)
        return "the request has more than one Content-Length header";
    if (ncl && nte)
        return "the request has both Content-Length and Transfer-Encoding";
    if (nte > 1 || (te && strcasecmp(te, "chunked") != 0))
        return "the request's Transfer-Encoding is not chunked";
    return NULL;
}

/* The request has exactly one Authorization header. */
static bool single_authorization(const http_req *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->nheaders; i++)
        if (strcasecmp(r->headers[i].name, "Authorization") == 0)
            n++;
    return n == 1;
}

/* ---- the access handler's steps ------------------------------------------ */

/* First call: refuse what cannot succeed before reading any body. */
/* Whether r is a change that a page of another site made the browser send.
 * Fire, pause, resume, retry and the dead-letter replay and purge take no
 * body, so a form on any page (a "simple" request, which a browser sends
 * without asking first) could make them in an API without tokens, through
 * the browser of anyone who can reach it (cross-site request forgery).
 * Browsers say where a request comes from in Sec-Fetch-Site: only
 * "same-origin" (the dashboard) and "none" (typed by the user) may change
 * anything; "same-site" is refused too, as another port of the same host is
 * the same site. "Origin: null" (a sandboxed frame, a file) is refused as
 * well. Clients that are not browsers send neither header. */
static bool cross_site(const http_req *r)
{
    if (strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0 || strcmp(r->method, "OPTIONS") == 0)
        return false;
    const char *site = kv_find(r->headers, r->nheaders, "Sec-Fetch-Site", true);
    if (site && strcasecmp(site, "same-origin") != 0 && strcasecmp(site, "none") != 0)
        return true;
    const char *origin = kv_find(r->headers, r->nheaders, "Origin", true);
    return origin && strcmp(origin, "null") == 0;
}

/* Whether word is one of list's space-separated words. */
static bool word_in(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ' ');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && memcmp(p, word, n) == 0)
            return true;
        p = end ? end + 1 : NULL;
    }
    return false;
}

/* A query parameter r's route does not take, or one given twice: a typo
 * ("stat=failed") would otherwise list everything, and of two labels only
 * the first would filter. Fills why (naming the parameter when it is
 * printable) and returns the parameter, or NULL when all are fine. */
static const char *query_error(const http_req *r, char *why, size_t size)
{
    if (r->route->open)
        return NULL;
    for (size_t i = 0; i < r->nquery; i++) {
        const char *name = r->query[i].name;
        bool twice = false;
        for (size_t j = 0; j < i && !twice; j++)
            twice = strcmp(r->query[j].name, name) == 0;
        if (!twice && word_in(r->route->query, name))
            continue;
        size_t len = strlen(name);
        bool printable = len > 0 && len <= 64 && strspn(name, "abcdefghijklmnopqrstuvwxyz"
                                                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == len;
        if (twice)
            snprintf(why, size, "the query parameter %s is given twice", printable ? name : "(not shown)");
        else if (r->route->query)
            snprintf(why, size, "unknown query parameter %s: this endpoint takes %s", printable ? name : "(not shown)",
                     r->route->query);
        else
            snprintf(why, size, "unknown query parameter %s: this endpoint takes none", printable ? name : "(not shown)");
        return printable ? name : "";
    }
    return NULL;
}

static enum MHD_Result req_begin(http_server *s, http_req *r)
{
    if (atomic_load(&s->quiesced))
        return answer_now(r, 503, shutdown_response());
    const char *framing = framing_error(r);
    if (framing) { /* the body's end is unknown: answer and close */
        struct MHD_Response *resp = problem_response(400, framing, NULL, NULL, 0);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
        return answer_now(r, 400, resp);
    }
    if (r->nsegs < 0 || r->bad_query)
        return problem_now(r, 400, "the request target has a malformed percent-encoding");
    bool path_known;
    r->route = route_find(s, r, &path_known);
    if (!r->route && path_known)
        return not_allowed_now(r);
    if (!r->route)
        return problem_now(r, 404, "no such resource");
    if (cross_site(r))
        return problem_now(r, 403, "a change sent by another site's page is refused (Sec-Fetch-Site or Origin)");
    r->ns = "";
    const struct auth *tokens = atomic_load(&s->auth);
    if (tokens && !r->route->open) {
        /* Only one Authorization header: of several, a proxy in front may
         * have checked or added another one than the first. */
        const char *given = kv_find(r->headers, r->nheaders, "Authorization", true);
        r->ns = single_authorization(r) ? auth_check(tokens, given) : NULL;
        if (!r->ns)
            return unauthorized_now(r);
    }
    char why[256];
    const char *param = query_error(r, why, sizeof why);
    if (param)
        return refuse(r, 400, problem_response(400, why, *param ? param : NULL, NULL, 0));
    if (r->route->needs_json_body &&
        !is_json_type(kv_find(r->headers, r->nheaders, "Content-Type", true)))
        return problem_now(r, 415, "the request body must be application/json");
    const char *cl = kv_find(r->headers, r->nheaders, "Content-Length", true);
    if (cl) {
        unsigned long long n = strtoull(cl, NULL, 10); /* libmicrohttpd validated it */
        if (n > max_body_of(r) && !body_readable(r))
            return too_large_now(r, true); /* the body is not sent yet, or too much to read */
        r->body_over = n > max_body_of(r); /* read and dropped, then 413 */
        r->body_hint = r->body_over ? 0 : (size_t)n;
    }
    r->phase = PHASE_BODY;
    return MHD_YES;
}

static void body_grow(http_req *r, size_t need)
{
    size_t cap = r->body_cap ? r->body_cap : (r->body_hint ? r->body_hint : BODY_MIN_CAP) + 1;
    while (cap < need + 1)
        cap *= 2;
    if (cap > max_body_of(r) + 1)
        cap = max_body_of(r) + 1;
    r->body = xrealloc(r->body, cap);
    r->body_cap = cap;
}

/* Upload calls: keep up to max_body bytes, then drop the rest; past
 * discard_max_of, close. A refused request's body is all dropped. */
static enum MHD_Result body_take(http_req *r, const char *data, size_t n)
{
    size_t max = max_body_of(r);
    r->body_seen += n;
    if (r->phase == PHASE_EARLY)
        r->body_over = true;
    if (!r->body_over && n <= max - r->body_len) {
        if (r->body_len + n + 1 > r->body_cap)
            body_grow(r, r->body_len + n);
        memcpy(r->body + r->body_len, data, n);
        r->body_len += n;
        r->body[r->body_len] = '\0';
        return MHD_YES;
    }
    if (!r->body_over) {
        r->body_over = true;
        free(r->body);
        r->body = NULL;
        r->body_len = r->body_cap = 0;
    }
    if (r->body_seen > discard_max_of(r)) {
        LOG(LOG_INFO, "oversized request body, closing the connection", "\"received\":%zu",
            r->body_seen);
        return MHD_NO;
    }
    return MHD_YES;
}

static bool pending_add(http_server *s, http_req *r)
{
    pthread_mutex_lock(&s->lock);
    bool ok = !s->stopping;
    if (ok)
        list_insert_tail(&s->pending, &r->link);
    pthread_mutex_unlock(&s->lock);
    r->registered = ok;
    return ok;
}

static void pending_remove(http_server *s, http_req *r)
{
    pthread_mutex_lock(&s->lock);
    list_remove(&r->link);
    if (s->stopping && list_empty(&s->pending))
        pthread_cond_broadcast(&s->drained);
    pthread_mutex_unlock(&s->lock);
}

/* Last call (body complete): run the handler, then queue or suspend. */
static enum MHD_Result req_dispatch(http_server *s, http_req *r)
{
    if (r->body_over)
        return too_large_now(r, false);
    deadline_set(s, r->conn, 0); /* the handler's time is not the client's */
    if (client_gone(r->conn)) {
        LOG(LOG_INFO, "client left before its request ran; dropped", "\"request_id\":\"%s\"", r->rid);
        return MHD_NO;
    }
    if (!pending_add(s, r))
        return answer_now(r, 503, shutdown_response());
    r->phase = PHASE_HANDLER;
    r->route->handler(r, r->params, s->app);
    if (atomic_load(&r->state) == ANSWER_READY)
        return answer_queue(r);
    MHD_suspend_connection(r->conn);
    int expected = ANSWER_PENDING;
    if (!atomic_compare_exchange_strong(&r->state, &expected, ANSWER_SUSPENDED))
        MHD_resume_connection(r->conn); /* answered between the load and the suspend */
    return MHD_YES;
}

static enum MHD_Result req_resumed(http_req *r)
{
    if (atomic_load(&r->state) != ANSWER_READY) {
        LOG(LOG_ERROR, "request resumed without an answer", "\"status\":%u", r->status);
        return MHD_NO;
    }
    return answer_queue(r);
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_data_size,
                                 void **con_cls)
{
    http_server *s = cls;
    http_req *r = *con_cls;
    (void)version;
    if (!r) {
        r = req_create(s, conn, origin_path(url), method);
        *con_cls = r;
        deadline_set(s, conn, s->body_us); /* the head is in; the body's clock starts */
        return req_begin(s, r);
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return r->phase == PHASE_BODY || r->phase == PHASE_EARLY ? body_take(r, upload_data, n) : MHD_YES;
    }
    switch (r->phase) {
    case PHASE_BODY:
        return req_dispatch(s, r);
    case PHASE_EARLY:
        return answer_queue(r);
    case PHASE_HANDLER:
        return req_resumed(r);
    case PHASE_BEGIN:
    case PHASE_DONE:
        break;
    }
    return MHD_YES;
}

/* The one place a request context is freed. */
static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *s = cls;
    http_req *r = *con_cls;
    struct http_conn *c = conn_of(conn);
    if (c) {
        uint64_t now = clock_mono_us();
        c->answered_us = now;
        /* Kept alive: idle for up to the idle timeout, then the next head. */
        if (s->head_us)
            atomic_store(&c->deadline_us, now + s->idle_us + s->head_us);
    }
    if (!r)
        return;
    *con_cls = NULL;
    if (r->registered)
        pending_remove(s, r);
    log_request(r, toe);
    if (r->answer) /* published but never queued: the connection died first */
        MHD_destroy_response(r->answer);
    free(r->body);
    free(r);
}

/* Keeps the path and query raw: the path is split before decoding (so an
 * encoded '/' stays inside its segment), and the query is decoded in
 * req_create. */
static size_t unescape_none_cb(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    return strlen(s);
}

__attribute__((format(printf, 2, 0))) static void mhd_log_cb(void *cls, const char *fmt,
                                                             va_list ap)
{
    char msg[512], esc[1024];
    (void)cls;
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    /* What clients do (leave mid-request, meet a limit) is no warning: under
     * a flood of such connections a line each would only grow the log. An
     * "internal error" is access_cb's MHD_NO, which it returns only after
     * logging why (a body far over the cap, a client that left, or an answer
     * that could not be queued, logged as an error). */
    static const char *const client_side[] = {"closed by remote side", "connection limit",
                                              "Application reported internal error"};
    int level = LOG_WARN;
    for (size_t i = 0; i < sizeof client_side / sizeof client_side[0]; i++)
        if (strstr(msg, client_side[i]))
            level = LOG_DEBUG;
    LOG(level, "libmicrohttpd", "\"detail\":\"%s\"", log_json_escape(msg, esc, sizeof esc));
}

/* ---- server --------------------------------------------------------------- */

/* Parses "a.b.c.d:port", "localhost:port", ":port" (any IPv4 address) or
 * "[v6]:port". Returns 0 or -EINVAL. */
static int listen_parse(const char *listen, struct sockaddr_storage *ss, bool *v6)
{
    char host[INET6_ADDRSTRLEN + 1];
    const char *hstart = listen, *port;
    size_t hlen;
    if (!listen)
        return -EINVAL;
    *v6 = listen[0] == '[';
    if (*v6) {
        const char *end = strchr(listen, ']');
        if (!end || end[1] != ':')
            return -EINVAL;
        hstart = listen + 1;
        hlen = (size_t)(end - hstart);
        port = end + 2;
    } else {
        const char *colon = strrchr(listen, ':');
        if (!colon || memchr(listen, ':', (size_t)(colon - listen)))
            return -EINVAL;
        hlen = (size_t)(colon - listen);
        port = colon + 1;
    }
    if (hlen >= sizeof host || !isdigit((unsigned char)port[0]))
        return -EINVAL;
    memcpy(host, hstart, hlen);
    host[hlen] = '\0';
    char *end;
    unsigned long p = strtoul(port, &end, 10);
    if (*end || p > 65535)
        return -EINVAL;
    memset(ss, 0, sizeof *ss);
    if (*v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)p);
        return inet_pton(AF_INET6, host, &a->sin6_addr) == 1 ? 0 : -EINVAL;
    }
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)p);
    if (strcmp(host, "localhost") == 0)
        strcpy(host, "127.0.0.1");
    else if (host[0] == '\0')
        strcpy(host, "0.0.0.0");
    return inet_pton(AF_INET, host, &a->sin_addr) == 1 ? 0 : -EINVAL;
}

int http_listen_valid(const char *listen)
{
    struct sockaddr_storage ss;
    bool v6;
    return listen_parse(listen, &ss, &v6) == 0;
}

int http_listen_loopback(const char *listen)
{
    struct sockaddr_storage ss;
    bool v6;
    if (listen_parse(listen, &ss, &v6) != 0)
        return 0;
    if (v6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)&ss)->sin6_addr);
    return (ntohl(((const struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
}

static void server_free(http_server *s)
{
    pthread_cond_destroy(&s->watch_wake);
    pthread_mutex_destroy(&s->conn_lock);
    pthread_cond_destroy(&s->drained);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static http_server *server_create(const http_config *cfg, const http_route *routes, size_t n,
                                  void *app)
{
    http_server *s = xcalloc(1, sizeof *s);
    s->routes = routes;
    s->nroutes = n;
    s->app = app;
    s->max_body = cfg->max_body_bytes;
    s->max_batch_body = cfg->max_batch_body_bytes > cfg->max_body_bytes ? cfg->max_batch_body_bytes
                                                                       : cfg->max_body_bytes;
    atomic_init(&s->auth, cfg->auth);
    s->listen_fd = -1;
    atomic_init(&s->quiesced, false);
    atomic_init(&s->rid_seq, 0);
    list_init(&s->pending);
    list_init(&s->conns);
    if (cfg->head_timeout_ms && cfg->body_timeout_ms) {
        s->head_us = (uint64_t)cfg->head_timeout_ms * 1000u;
        s->body_us = (uint64_t)cfg->body_timeout_ms * 1000u;
        s->idle_us = (uint64_t)cfg->connection_timeout_s * 1000000u;
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->conn_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->drained, &ca);
    pthread_cond_init(&s->watch_wake, &ca);
    pthread_condattr_destroy(&ca);
    return s;
}

http_server *http_start(const http_config *cfg, const http_route *routes, size_t n, void *app)
{
    char esc[128];
    bool v6;
    if (routes_check(routes, n) != 0) {
        LOG(LOG_ERROR, "invalid HTTP route table", "\"routes\":%zu", n);
        return NULL;
    }
    http_server *s = server_create(cfg, routes, n, app);
    if (getrandom(&s->rid_prefix, sizeof s->rid_prefix, 0) != sizeof s->rid_prefix)
        s->rid_prefix = (uint32_t)clock_mono_us(); /* cannot happen on Linux >= 3.17 for 4 bytes */
    if (listen_parse(cfg->listen, &s->addr, &v6) != 0) {
        LOG(LOG_ERROR, "invalid listen address", "\"listen\":\"%s\"",
            log_json_escape(cfg->listen ? cfg->listen : "", esc, sizeof esc));
        server_free(s);
        return NULL;
    }
    /* Options that only apply when set; 0 keeps libmicrohttpd's default. */
    struct MHD_OptionItem opt[4];
    size_t k = 0;
    if (cfg->threads > 1)
        opt[k++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, cfg->threads, NULL};
    if (cfg->max_connections > 0)
        opt[k++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections, NULL};
    /* Beyond it libmicrohttpd accepts and closes at once. */
    if (cfg->max_connections_per_ip > 0)
        opt[k++] = (struct MHD_OptionItem){MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_connections_per_ip, NULL};
    opt[k] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};

    /* The port argument only names the port in libmicrohttpd's messages;
     * MHD_OPTION_SOCK_ADDR is what is bound. */
    uint16_t port = ntohs(v6 ? ((struct sockaddr_in6 *)&s->addr)->sin6_port
                             : ((struct sockaddr_in *)&s->addr)->sin_port);
    /* poll(), not epoll: MHD_quiesce_daemon on an epoll daemon with worker
     * threads races with the workers' own removal of the listening socket
     * from their epoll sets, and libmicrohttpd (0.9.75) aborts the process
     * when it loses ("Failed to remove listen FD from epoll set"): seen at
     * SIGTERM, about once in some hundred stops. With poll() quiescing
     * only signals the workers. poll() scans every connection a worker holds
     * on each wake; at HOOKWHEEL_MAX_CONNECTIONS (1,024) over the worker
     * threads that is a few microseconds. */
    unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC | MHD_USE_TURBO |
                     MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(
        flags, port, NULL, NULL, access_cb, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log_cb, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&s->addr, MHD_OPTION_CONNECTION_TIMEOUT,
        cfg->connection_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY_LIMIT,
        MHD_OPTION_NOTIFY_COMPLETED, completed_cb, s, MHD_OPTION_NOTIFY_CONNECTION,
        notify_connection_cb, s, MHD_OPTION_URI_LOG_CALLBACK, uri_log_cb, s,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape_none_cb, NULL, MHD_OPTION_ARRAY, opt, MHD_OPTION_END);
    if (!s->daemon) {
        LOG(LOG_ERROR, "cannot start the HTTP server", "\"listen\":\"%s\"",
            log_json_escape(cfg->listen, esc, sizeof esc));
        server_free(s);
        return NULL;
    }
    if (s->head_us) {
        int rc = pthread_create(&s->watcher, NULL, watch_main, s);
        s->watching = rc == 0;
        if (!s->watching) {
            LOG(LOG_ERROR, "cannot start the HTTP deadline watcher", "\"errno\":%d", rc);
            MHD_stop_daemon(s->daemon);
            server_free(s);
            return NULL;
        }
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : 0;
    LOG(LOG_INFO, "HTTP server listening", "\"listen\":\"%s\",\"port\":%u,\"threads\":%u",
        log_json_escape(cfg->listen, esc, sizeof esc), s->port,
        cfg->threads ? cfg->threads : 1);
    return s;
}

void http_quiesce(http_server *s)
{
    if (!s || atomic_exchange(&s->quiesced, true))
        return;
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET) {
        /* Shut down now so new connections are refused; close only after
         * MHD_stop_daemon, as a worker thread may still hold the fd. */
        shutdown(fd, SHUT_RDWR);
        s->listen_fd = fd;
    }
    LOG(LOG_INFO, "HTTP server quiesced", "\"port\":%u", s->port);
}

/* Answers 503 to every request a handler owns and has not answered. */
static void answer_pending(http_server *s)
{
    struct list_node mine, *n;
    list_init(&mine);
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    for (n = s->pending.next; n != &s->pending; n = n->next) {
        http_req *r = container_of(n, http_req, link);
        if (answer_claim(r))
            list_insert_tail(&mine, &r->stop_link);
    }
    pthread_mutex_unlock(&s->lock);
    /* Unlocked: MHD_resume_connection takes libmicrohttpd's own locks. A
     * claimed request cannot complete before we publish, so r stays valid. */
    while ((n = list_pop_head(&mine)) != NULL)
        answer_publish(container_of(n, http_req, stop_link), 503, shutdown_response());
}

static void drain_pending(http_server *s)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += STOP_DRAIN_MS / 1000;
    deadline.tv_nsec += (STOP_DRAIN_MS % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    while (!list_empty(&s->pending) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&s->drained, &s->lock, &deadline);
    bool left = !list_empty(&s->pending);
    pthread_mutex_unlock(&s->lock);
    if (left)
        LOG(LOG_WARN, "HTTP requests still open at stop", "\"port\":%u", s->port);
}

/* Every answer still owed when http_stop starts is given here, as 503, so
 * no connection stays suspended (libmicrohttpd would abort). Answering
 * threads must therefore be stopped, or have given their answers, before
 * http_stop returns: an http_respond_* call after that touches freed
 * memory. */
void http_stop(http_server *s)
{
    if (!s)
        return;
    http_quiesce(s);
    answer_pending(s);
    drain_pending(s);
    watch_stop(s);
    MHD_stop_daemon(s->daemon);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    LOG(LOG_INFO, "HTTP server stopped", "\"port\":%u", s->port);
    server_free(s);
}

uint16_t http_port(const http_server *s)
{
    return s->port;
}

void http_set_auth(http_server *s, const struct auth *tokens)
{
    atomic_store(&s->auth, tokens);
}

/* ---- request accessors and answers ---------------------------------------- */

const char *http_req_body(const http_req *r, size_t *len)
{
    if (len)
        *len = r->body_len;
    return r->body ? r->body : "";
}

int http_req_json_type(const http_req *r)
{
    return is_json_type(kv_find(r->headers, r->nheaders, "Content-Type", true));
}

const char *http_req_header(const http_req *r, const char *name)
{
    return kv_find(r->headers, r->nheaders, name, true);
}

const char *http_req_header_nth(const http_req *r, const char *name, size_t i)
{
    for (size_t k = 0; k < r->nheaders; k++)
        if (strcasecmp(r->headers[k].name, name) == 0 && i-- == 0)
            return r->headers[k].value;
    return NULL;
}

const char *http_req_query(const http_req *r, const char *name)
{
    return kv_find(r->query, r->nquery, name, false);
}

const char *http_req_method(const http_req *r)
{
    return r->method;
}

const char *http_req_id(const http_req *r)
{
    return r->rid;
}

const char *http_req_namespace(const http_req *r)
{
    return r->ns ? r->ns : "";
}

const char *http_req_path(const http_req *r)
{
    return r->path;
}

void http_respond_json(http_req *r, unsigned status, json_t *body, const char *location)
{
    if (!answer_claim(r)) {
        json_decref(body);
        answer_dropped(status);
        return;
    }
    /* Only a 204 goes without a body; a NULL body otherwise means the
     * caller's jansson call failed (a json_pack format error, say). */
    struct MHD_Response *resp = body || status == 204 ? json_response_take(body, "application/json") : NULL;
    if (!resp) {
        LOG(LOG_ERROR, "response body cannot be encoded", "\"status\":%u", status);
        status = 500;
        resp = problem_response(500, "the response could not be encoded", NULL, NULL, 0);
    } else if (location) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, location);
    }
    answer_publish(r, status, resp);
}

/* Answers with text (taken) as the body, of type ctype. */
static void respond_text_take(http_req *r, unsigned status, const char *ctype, char *text, size_t len,
                              const char *location)
{
    if (!answer_claim(r)) {
        free(text);
        answer_dropped(status);
        return;
    }
    struct MHD_Response *resp =
        response_check(MHD_create_response_from_buffer_with_free_callback(len, text, free));
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (location)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, location);
    answer_publish(r, status, resp);
}

void http_respond_json_text_take(http_req *r, unsigned status, char *text, size_t len,
                                 const char *location)
{
    respond_text_take(r, status, "application/json", text, len, location);
}

void http_respond_text_take(http_req *r, unsigned status, const char *ctype, char *text, size_t len)
{
    respond_text_take(r, status, ctype, text, len, NULL);
}

/* A streamed body: libmicrohttpd's content reader over the caller's fill. */
typedef struct stream {
    http_fill_cb fill;
    void (*done)(void *);
    void *arg;
} stream;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream *st = cls;
    size_t n = max ? st->fill(st->arg, buf, max) : 0;
    return n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
}

static void stream_free(void *cls)
{
    stream *st = cls;
    st->done(st->arg);
    free(st);
}

void http_respond_stream(http_req *r, unsigned status, const char *ctype, http_fill_cb fill,
                         void (*done)(void *), void *arg)
{
    if (!answer_claim(r)) {
        done(arg);
        answer_dropped(status);
        return;
    }
    stream *st = xmalloc(sizeof *st);
    *st = (stream){fill, done, arg};
    struct MHD_Response *resp = response_check(
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, HTTP_STREAM_BLOCK, stream_read, st, stream_free));
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    answer_publish(r, status, resp);
}

void http_respond_static(http_req *r, unsigned status, const char *ctype, const void *data,
                         size_t len, const http_header *headers, size_t n)
{
    if (!answer_claim(r)) {
        answer_dropped(status);
        return;
    }
    /* PERSISTENT: libmicrohttpd neither copies nor frees nor writes it. */
    struct MHD_Response *resp = response_check(
        MHD_create_response_from_buffer(len, (void *)(uintptr_t)data, MHD_RESPMEM_PERSISTENT));
    if (ctype)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    for (size_t i = 0; i < n; i++)
        MHD_add_response_header(resp, headers[i].name, headers[i].value);
    answer_publish(r, status, resp);
}

void http_respond_problem(http_req *r, unsigned status, const char *detail, const char *field,
                          json_t *extra, unsigned retry_after_s)
{
    if (!answer_claim(r)) {
        json_decref(extra);
        answer_dropped(status);
        return;
    }
    answer_publish(r, status, problem_response(status, detail, field, extra, retry_after_s));
}
