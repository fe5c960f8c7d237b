/* dispatch.c - libcurl multi on the engine's epoll loop.
 *
 * One easy handle per attempt, on a few multi handles (shards) of at most
 * SHARD_RUNNING attempts each. curl looks for a reusable connection by
 * walking every connection its multi handle holds to the target, so one
 * multi handle with a thousand attempts to one receiver spends most of its
 * time in that walk (D at 4,096 in flight: 5,600 deliveries/s, the engine
 * thread busy in curl); a shard's walk stays short. An attempt goes to the
 * first shard with room, so at low concurrency everything runs on shard 0
 * and connections to a target are reused between attempts as with a single
 * multi handle (each shard's connection cache).
 * The request is exactly the timer's: its method, its headers and its body,
 * plus the webhook headers and, when the timer was created with a trace
 * context and its own headers set no traceparent, a traceparent with a span
 * id of this attempt's own (trace.h) and the kept tracestate; curl's own
 * defaults that the timer did not ask for (Accept, a form Content-Type,
 * Expect: 100-continue) are removed.
 * Redirects are not followed, and no proxy is used (not even one from the
 * environment's http_proxy), so the address curl connects to is the
 * target's own, and the destination policy (netpolicy.h) judges exactly
 * that address in the open-socket callback, after DNS: a name that
 * resolves, or re-resolves, to a forbidden address is refused there.
 * The response body is kept up to the snippet
 * size (less a character the cut would split, so that text in UTF-8 stays
 * text) and read up to MAX_RESPONSE_BYTES, and so are the response's headers
 * and trailers; more of either ends the transfer early, with the status
 * already received. So do curl's own, smaller, limits on the headers before
 * the body (curl_header_cap). */
#include "dispatch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <curl/curl.h>

#include "backoff.h"
#include "clock.h"
#include "config.h"
#include "jsonesc.h"
#include "log.h"
#include "trace.h"
#include "xalloc.h"

#define MAX_RESPONSE_BYTES (1u << 20)
#define SHARD_RUNNING 64 /* attempts per multi handle */

typedef struct shard {
    struct dispatch *d;
    CURLM *multi;
    uint64_t deadline_us; /* curl's next timeout for this multi handle, 0: none */
    uint32_t running;
} shard;

struct dispatch {
    shard *sh;
    uint32_t nsh;
    uint8_t *fd_shard;     /* socket fd -> 1 + its shard's index (0: not curl's) */
    uint32_t fd_cap;
    const signer *_Atomic sign; /* dispatch_set_signer */
    const netpolicy *policy;
    CURL **pool;           /* easy handles kept for reuse (curl_easy_reset) */
    uint32_t pooled, pool_cap;
    int epfd;
    uint32_t snippet_bytes;
    uint32_t running;
    struct list_node jobs; /* running attempts, through job.run_node */
    dispatch_done_cb done;
    void *arg;
};

/* ---- curl multi callbacks ---- */

/* Notes which shard a socket belongs to, for dispatch_socket_event. */
static void fd_note(dispatch *d, curl_socket_t s, uint8_t v)
{
    if (s < 0)
        return;
    if ((uint32_t)s >= d->fd_cap) {
        uint32_t cap = d->fd_cap ? d->fd_cap : 1024;
        while (cap <= (uint32_t)s)
            cap *= 2;
        d->fd_shard = xrealloc(d->fd_shard, cap);
        memset(d->fd_shard + d->fd_cap, 0, cap - d->fd_cap);
        d->fd_cap = cap;
    }
    d->fd_shard[s] = v;
}

static int socket_cb(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
    (void)e;
    shard *h = userp;
    dispatch *d = h->d;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(d->epfd, EPOLL_CTL_DEL, s, NULL);
        curl_multi_assign(h->multi, s, NULL);
        fd_note(d, s, 0);
        return 0;
    }
    struct epoll_event ev = {0};
    ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0u) | (what & CURL_POLL_OUT ? EPOLLOUT : 0u);
    ev.data.fd = s;
    int op = socketp ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(d->epfd, op, s, &ev) < 0) {
        op = errno == EEXIST ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
        if (epoll_ctl(d->epfd, op, s, &ev) < 0)
            return -1;
    }
    if (!socketp) {
        curl_multi_assign(h->multi, s, (void *)1);
        fd_note(d, s, (uint8_t)(1 + (h - d->sh)));
    }
    return 0;
}

static int timer_cb(CURLM *m, long timeout_ms, void *userp)
{
    (void)m;
    shard *h = userp;
    h->deadline_us = timeout_ms < 0 ? 0 : clock_now_us() + (uint64_t)timeout_ms * 1000u;
    if (timeout_ms == 0)
        h->deadline_us = 1; /* at once, but not "none" */
    return 0;
}

/* ---- easy callbacks ---- */

static size_t write_cb(char *data, size_t size, size_t n, void *userp)
{
    job *j = userp;
    size_t len = size * n;
    size_t keep = j->resp_cap - j->resp_len;
    if (keep > len)
        keep = len;
    if (keep) {
        memcpy(j->resp + j->resp_len, data, keep);
        j->resp_len += keep;
    }
    j->resp_total += len;
    return j->resp_total > MAX_RESPONSE_BYTES ? 0 : len; /* 0 ends the transfer */
}

/* The value of header line[0..len) when it is the header name (a lower-case
 * "name:"), trimmed into v[size]; NULL otherwise or when it is too long. */
static const char *header_value(const char *line, size_t len, const char *name, char *v, size_t size)
{
    size_t nl = strlen(name), o = nl;
    if (len <= nl || len >= size || strncasecmp(line, name, nl) != 0)
        return NULL;
    while (o < len && (line[o] == ' ' || line[o] == '\t'))
        o++;
    size_t vl = len - o;
    while (vl && (line[o + vl - 1] == '\r' || line[o + vl - 1] == '\n' || line[o + vl - 1] == ' '))
        vl--;
    memcpy(v, line + o, vl);
    v[vl] = '\0';
    return v;
}

/* A non-negative decimal below 2^53, or -1. */
static int64_t parse_ms(const char *v)
{
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    return errno || end == v || *end || n < 0 || n > (1LL << 53) ? -1 : n;
}

static size_t header_cb(char *line, size_t size, size_t n, void *userp)
{
    job *j = userp;
    size_t len = size * n;
    char v[200];
    /* curl caps the headers before the body, but not trailers, and keeps
     * every line it passes here until the transfer ends. */
    j->hdr_total += len;
    if (j->hdr_total > MAX_RESPONSE_BYTES)
        return 0; /* ends the transfer */
    if (header_value(line, len, "retry-after:", v, sizeof v))
        j->retry_after_ms = backoff_parse_retry_after(v, clock_now_ms());
    else if (header_value(line, len, "hookwheel-next-delay-ms:", v, sizeof v))
        j->next_delay_hdr_ms = parse_ms(v);
    return len;
}

/* curl's open-socket callback: the address here is the one curl is about
 * to connect to. A refused address is noted in the job (complete() turns
 * it into the attempt's error) and gets no socket, so curl tries the next
 * address of the name, if any, or fails with CURLE_COULDNT_CONNECT. The
 * attempt counts as refused by the policy only when no address was allowed. So is
 * a socket() that fails: curl reports that as "Couldn't connect to server"
 * too, and only the noted errno tells our own shortage of descriptors or
 * memory from the target's failure. */
static curl_socket_t opensocket_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
    job *j = clientp;
    (void)purpose;
    if (j->policy && !netpolicy_connect_allowed(j->policy, j->spec->url, &a->addr, j->refused, sizeof j->refused))
        return CURL_SOCKET_BAD;
    j->allowed_tried = 1;
    int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    j->sock_errno = fd < 0 ? errno : 0; /* the last address tried decides */
    return fd;
}

/* True when socket() failed for want of a resource of ours: the process or
 * the system is out of descriptors, or of socket buffers. */
static int local_shortage(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

/* ---- request ---- */

static int has_header(const timer_spec *s, const char *name)
{
    size_t n = strlen(name);
    for (uint32_t i = 0; i < s->nheaders; i++)
        if (strncasecmp(s->headers[i], name, n) == 0 && s->headers[i][n] == ':')
            return 1;
    return 0;
}

/* The request's header list, nodes and text in one allocation: curl only
 * reads a curl_slist, so it need not come from curl_slist_append (which
 * costs two allocations a line). Freed with free(), never with
 * curl_slist_free_all. */
typedef struct hdr_block {
    struct curl_slist *nodes;
    uint32_t n;
    char *p, *end;
} hdr_block;

static void hdr_link(hdr_block *b, char *data)
{
    b->nodes[b->n].data = data;
    b->nodes[b->n].next = NULL;
    if (b->n)
        b->nodes[b->n - 1].next = &b->nodes[b->n];
    b->n++;
}

static void hdr_printf(hdr_block *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hdr_printf(hdr_block *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p, (size_t)(b->end - b->p), fmt, ap);
    va_end(ap);
    hdr_link(b, b->p);
    b->p += k + 1;
}

/* "Name: value" as given; an empty value must be sent as "Name;", since
 * curl reads "Name:" as "remove this header". */
static void hdr_user(hdr_block *b, const char *line)
{
    const char *colon = strchr(line, ':');
    const char *v = colon ? colon + 1 : "";
    while (*v == ' ' || *v == '\t')
        v++;
    if (!colon || *v)
        hdr_link(b, (char *)line); /* the spec outlives the attempt */
    else
        hdr_printf(b, "%.*s;", (int)(colon - line), line);
}

static struct curl_slist *build_headers(const dispatch *d, const job *j)
{
    const timer_spec *s = j->spec;
    uint32_t max = s->nheaders + 12;
    size_t text = 6 * 300 + SIGN_HEADER_MAX + 32;
    if (j->traceparent)
        text += sizeof "traceparent: " + TRACE_PARENT_LEN + sizeof "tracestate: " +
                (j->tracestate ? strlen(j->tracestate) : 0);
    uint64_t ts = clock_now_ms() / 1000u;
    for (uint32_t i = 0; i < s->nheaders; i++)
        text += strlen(s->headers[i]) + 2;
    char *block = xmalloc(max * sizeof(struct curl_slist) + text);
    hdr_block b = {(struct curl_slist *)block, 0, block + max * sizeof(struct curl_slist), NULL};
    b.end = b.p + text;
    for (uint32_t i = 0; i < s->nheaders; i++)
        hdr_user(&b, s->headers[i]);
    if (!s->has_content_type)
        hdr_link(&b, s->body_is_json ? "Content-Type: application/json" : "Content-Type:");
    if (!has_header(s, "accept"))
        hdr_link(&b, "Accept:");
    hdr_link(&b, "Expect:");
    const char *slash = strrchr(j->id, '/'), *id = slash ? slash + 1 : j->id; /* without the namespace */
    /* One message identity per run: a one-shot timer's is its id, a recurring
     * timer's "<id>:<run>"; the retries of a run share it. */
    char mid[2 * SPEC_ID_MAX + 16]; /* a lease's on_expire id may be longer than a client's */
    if (spec_recurring(s))
        snprintf(mid, sizeof mid, "%s:%u", id, j->run);
    else
        snprintf(mid, sizeof mid, "%s", id);
    hdr_printf(&b, "webhook-id: %s", mid);
    hdr_printf(&b, "webhook-timestamp: %" PRIu64, ts);
    const signer *sign = atomic_load(&d->sign);
    if (sign) { /* signs exactly what is sent: webhook-id, webhook-timestamp, body */
        char sig[SIGN_HEADER_MAX];
        /* A HEAD request sends no body (set_method), whatever the timer holds. */
        const char *body = strcmp(s->method, "HEAD") == 0 ? NULL : s->body;
        if (signer_sign(signer_for(sign, j->id), mid, ts, body, body ? s->body_len : 0, sig))
            hdr_printf(&b, "webhook-signature: %s", sig);
    }
    hdr_printf(&b, "Hookwheel-Timer-Id: %s", id);
    hdr_printf(&b, "Hookwheel-Run: %u", j->run);
    hdr_printf(&b, "Hookwheel-Attempt: %u", j->attempts);
    if (j->traceparent && !has_header(s, "traceparent")) { /* the timer's own trace context wins */
        char tp[TRACE_PARENT_LEN + 1];
        trace_attempt_parent(j->traceparent, tp);
        hdr_printf(&b, "traceparent: %s", tp);
        if (j->tracestate && !has_header(s, "tracestate"))
            hdr_printf(&b, "tracestate: %s", j->tracestate);
    }
    return b.nodes;
}

static void set_method(CURL *e, const timer_spec *s)
{
    int is_post = strcmp(s->method, "POST") == 0;
    if (strcmp(s->method, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        return;
    }
    if (!is_post)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, s->method);
    int sends_body = s->body || is_post || strcmp(s->method, "PUT") == 0 || strcmp(s->method, "PATCH") == 0;
    if (sends_body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(s->body ? s->body_len : 0));
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, s->body ? s->body : "");
    }
}

void dispatch_set_signer(dispatch *d, const signer *sign)
{
    atomic_store(&d->sign, sign);
}

dispatch *dispatch_create(const dispatch_config *cfg)
{
    dispatch *d = xcalloc(1, sizeof *d);
    list_init(&d->jobs);
    uint32_t n = (cfg->max_inflight + SHARD_RUNNING - 1) / SHARD_RUNNING;
    d->nsh = n < 1 ? 1 : n > 255 ? 255 : n;
    d->sh = xcalloc(d->nsh, sizeof *d->sh);
    for (uint32_t i = 0; i < d->nsh; i++) {
        shard *h = &d->sh[i];
        h->d = d;
        h->multi = curl_multi_init();
        if (!h->multi) {
            dispatch_free(d);
            return NULL;
        }
        curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
        curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
        curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
        curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
        curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, (long)SHARD_RUNNING);
    }
    d->epfd = cfg->epfd;
    atomic_init(&d->sign, cfg->sign);
    d->policy = cfg->policy;
    d->pool_cap = cfg->max_inflight;
    d->pool = xcalloc(d->pool_cap, sizeof *d->pool);
    d->snippet_bytes = cfg->snippet_bytes;
    d->done = cfg->done;
    d->arg = cfg->arg;
    return d;
}

uint32_t dispatch_fds_needed(uint32_t max_inflight)
{
    uint32_t nsh = (max_inflight + SHARD_RUNNING - 1) / SHARD_RUNNING;
    nsh = nsh < 1 ? 1 : nsh > 255 ? 255 : nsh;
    uint32_t cached = nsh * SHARD_RUNNING; /* CURLMOPT_MAXCONNECTS per shard, in use or idle */
    return 2 * nsh + (cached > max_inflight ? cached : max_inflight) + 2 * max_inflight;
}

/* An easy handle costs several kilobytes of allocations to create; a reset
 * one keeps them (and the connection cache lives in the multi handle). */
static CURL *easy_get(dispatch *d)
{
    return d->pooled ? d->pool[--d->pooled] : curl_easy_init();
}

static void easy_put(dispatch *d, CURL *e)
{
    if (d->pooled < d->pool_cap) {
        curl_easy_reset(e);
        d->pool[d->pooled++] = e;
    } else {
        curl_easy_cleanup(e);
    }
}

static void release_attempt(dispatch *d, job *j)
{
    shard *h = &d->sh[j->shard];
    curl_multi_remove_handle(h->multi, j->easy);
    h->running--;
    easy_put(d, j->easy);
    free(j->hdrs); /* one block: see build_headers */
    free(j->resp);
    j->easy = NULL;
    j->hdrs = NULL;
    j->resp = NULL;
    list_remove(&j->run_node);
    d->running--;
}

int dispatch_start(dispatch *d, job *j)
{
    CURL *e = easy_get(d);
    if (!e)
        return -ENOMEM;
    const timer_spec *s = j->spec;
    j->easy = e;
    j->hdrs = build_headers(d, j);
    j->resp_cap = d->snippet_bytes;
    j->resp = xmalloc(j->resp_cap + 1);
    j->resp_len = j->resp_total = j->hdr_total = 0;
    j->retry_after_ms = -1;
    j->next_delay_hdr_ms = -1;
    j->errbuf[0] = '\0';
    j->refused[0] = '\0';
    j->sock_errno = 0;
    j->allowed_tried = 0;
    j->policy = d->policy;
    curl_easy_setopt(e, CURLOPT_URL, s->url);
    curl_easy_setopt(e, CURLOPT_PROXY, ""); /* never a proxy from the environment */
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, opensocket_cb);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, j);
    curl_easy_setopt(e, CURLOPT_PRIVATE, j);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, j->errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)s->timeout_ms);
    /* The connect is part of the attempt and may take all of its time: a
     * connect of its own limit would end a slow one before timeout_ms. At
     * least 2 ms: libcurl 7.88 gives each address half the connect timeout,
     * and half of 1 ms is none, so a 1 ms attempt went on until its
     * happy-eyeballs timer, 200 ms (CURLOPT_TIMEOUT_MS still ends it). */
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(s->timeout_ms < 2 ? 2 : s->timeout_ms));
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, j);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, j);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, j->hdrs);
    if (!has_header(s, "user-agent"))
        curl_easy_setopt(e, CURLOPT_USERAGENT, "hookwheel/" HOOKWHEEL_VERSION);
    set_method(e, s);
    j->started_us = clock_now_us();
    j->started_mono_us = clock_mono_us();
    uint32_t i = 0; /* the first shard with room (shard 0 at low concurrency) */
    while (i + 1 < d->nsh && d->sh[i].running >= SHARD_RUNNING)
        i++;
    j->shard = (uint8_t)i;
    d->sh[i].running++;
    list_insert_tail(&d->jobs, &j->run_node);
    d->running++;
    if (curl_multi_add_handle(d->sh[i].multi, e) != CURLM_OK) {
        release_attempt(d, j);
        return -EIO;
    }
    return 0;
}

/* curl's threaded resolver fails with this when it cannot make its socket
 * pair or its thread: a local shortage as well. */
static int resolver_shortage(const job *j, CURLcode rc)
{
    return rc == CURLE_COULDNT_RESOLVE_HOST && strstr(j->errbuf, "thread failed to start") != NULL;
}

static void describe_error(job *j, CURLcode rc, attempt_result *res)
{
    if (rc == CURLE_COULDNT_CONNECT && j->refused[0] && !j->allowed_tried) {
        res->refused_by_policy = 1;
        snprintf(res->error, sizeof res->error, "destination %s is not allowed (policy)", j->refused);
    } else if (rc == CURLE_COULDNT_CONNECT && j->refused[0] && !local_shortage(j->sock_errno)) {
        /* The name has allowed addresses too and they failed as any target
         * may: retried like any failed connection. */
        snprintf(res->error, sizeof res->error, "%.80s (%.45s: not allowed, not tried)",
                 j->errbuf[0] ? j->errbuf : curl_easy_strerror(rc), j->refused);
    } else if ((rc == CURLE_COULDNT_CONNECT && local_shortage(j->sock_errno)) || resolver_shortage(j, rc)) {
        res->local_error = 1;
        snprintf(res->error, sizeof res->error, "no socket for the attempt here (%s): retried, not counted "
                 "against the target", j->sock_errno ? strerror(j->sock_errno) : "resolver");
    } else if (rc == CURLE_OPERATION_TIMEDOUT)
        snprintf(res->error, sizeof res->error, "timeout after %u ms: %.120s", j->spec->timeout_ms,
                 j->errbuf[0] ? j->errbuf : curl_easy_strerror(rc));
    else
        snprintf(res->error, sizeof res->error, "%.150s", j->errbuf[0] ? j->errbuf : curl_easy_strerror(rc));
}

/* curl ends a transfer whose headers before the body pass its own limits
 * (300 KB in all: "Too large response headers"; 100 KB in one line, which
 * releases before 8.6 report as out of memory) with an error, after the
 * status line: that ends it early with the status received, as our caps do. */
static int curl_header_cap(const job *j, CURLcode rc)
{
#if LIBCURL_VERSION_NUM >= 0x080600
    if (rc == CURLE_TOO_LARGE)
        return 1;
#endif
    return rc == CURLE_OUT_OF_MEMORY ||
           (rc == CURLE_RECV_ERROR && strstr(j->errbuf, "Too large response headers") != NULL);
}

static void complete(dispatch *d, job *j, CURLcode rc)
{
    attempt_result res = {0};
    long status = 0;
    curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &status);
    uint64_t took_us = clock_mono_us() - j->started_mono_us;
    res.started_ms = j->started_us / 1000u;
    res.duration_ms = (uint32_t)(took_us / 1000u);
    res.duration_us = took_us;
    res.curl_code = rc;
    res.retry_after_ms = j->retry_after_ms;
    res.next_delay_ms = j->next_delay_hdr_ms;
    int capped = (rc == CURLE_WRITE_ERROR && status > 0 &&
                  (j->resp_total > MAX_RESPONSE_BYTES || j->hdr_total > MAX_RESPONSE_BYTES)) ||
                 (status >= 200 && curl_header_cap(j, rc));
    if (rc == CURLE_OK || capped) {
        res.status = status;
        res.curl_code = CURLE_OK;
    } else {
        describe_error(j, rc, &res);
    }
    char *resp = j->resp;
    res.snippet = resp;
    res.snippet_len = j->resp_len;
    if (j->resp_total > j->resp_len) /* cut at the snippet size: not in the middle of a character */
        res.snippet_len = utf8_whole_prefix((const unsigned char *)resp, j->resp_len);
    j->resp = NULL; /* kept alive through the callback */
    release_attempt(d, j);
    d->done(d->arg, j, &res);
    free(resp);
}

static void check_done(dispatch *d, shard *h)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(h->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        job *j = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&j);
        complete(d, j, m->data.result);
    }
}

void dispatch_socket_event(dispatch *d, int fd, uint32_t ev)
{
    int flags = (ev & EPOLLIN ? CURL_CSELECT_IN : 0) | (ev & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                (ev & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
    if (fd < 0 || (uint32_t)fd >= d->fd_cap || !d->fd_shard[fd])
        return; /* removed by curl earlier in the same round of events */
    shard *h = &d->sh[d->fd_shard[fd] - 1];
    int running;
    curl_multi_socket_action(h->multi, fd, flags, &running);
    check_done(d, h);
}

uint64_t dispatch_deadline_us(const dispatch *d)
{
    uint64_t min = 0;
    for (uint32_t i = 0; i < d->nsh; i++)
        if (d->sh[i].deadline_us && (!min || d->sh[i].deadline_us < min))
            min = d->sh[i].deadline_us;
    return min;
}

void dispatch_timeout(dispatch *d)
{
    uint64_t now = clock_now_us();
    for (uint32_t i = 0; i < d->nsh; i++) {
        shard *h = &d->sh[i];
        if (!h->deadline_us || h->deadline_us > now)
            continue;
        int running;
        h->deadline_us = 0;
        curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        check_done(d, h);
    }
}

uint32_t dispatch_running(const dispatch *d) { return d->running; }

void dispatch_abort_all(dispatch *d, void (*each)(job *j, void *arg), void *arg)
{
    while (!list_empty(&d->jobs)) {
        job *j = container_of(d->jobs.next, job, run_node);
        release_attempt(d, j);
        each(j, arg);
    }
}

void dispatch_free(dispatch *d)
{
    if (!d)
        return;
    while (!list_empty(&d->jobs))
        release_attempt(d, container_of(d->jobs.next, job, run_node));
    while (d->pooled)
        curl_easy_cleanup(d->pool[--d->pooled]);
    free(d->pool);
    for (uint32_t i = 0; i < d->nsh; i++)
        if (d->sh[i].multi)
            curl_multi_cleanup(d->sh[i].multi);
    free(d->sh);
    free(d->fd_shard);
    free(d);
}
