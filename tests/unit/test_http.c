/* test_http.c - unit tests of the HTTP layer: a real server on 127.0.0.1:0
 * with a small route table, driven by libcurl. Asynchronous answers come from
 * a pool of responder threads, as the persistence writer will give them. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include "http.h"
#include "log.h"

#define MAX_BODY 1024u

/* ---- responder pool --------------------------------------------------------- */

typedef struct job {
    http_req *r;
    unsigned delay_ms;
    struct job *next;
} job;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    job *head, *tail;
    bool stop;
    pthread_t threads[3];
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, false, {0}};

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void pool_push(http_req *r, unsigned delay_ms)
{
    job *j = calloc(1, sizeof *j);
    j->r = r;
    j->delay_ms = delay_ms;
    pthread_mutex_lock(&pool.lock);
    if (pool.tail)
        pool.tail->next = j;
    else
        pool.head = j;
    pool.tail = j;
    pthread_cond_signal(&pool.cond);
    pthread_mutex_unlock(&pool.lock);
}

/* Answers from a thread that is not libmicrohttpd's; reads the request's
 * headers and query there too, after the connection was suspended. */
static void answer_async(http_req *r)
{
    const char *n = http_req_query(r, "n");
    const char *test = http_req_header(r, "X-Test");
    json_t *body = json_pack("{s:b,s:s?,s:s?}", "async", 1, "n", n, "x_test", test);
    http_respond_json(r, 200, body, NULL);
}

static void *pool_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&pool.lock);
        while (!pool.head && !pool.stop)
            pthread_cond_wait(&pool.cond, &pool.lock);
        job *j = pool.head;
        if (j) {
            pool.head = j->next;
            if (!pool.head)
                pool.tail = NULL;
        }
        pthread_mutex_unlock(&pool.lock);
        if (!j)
            return NULL;
        if (j->delay_ms)
            sleep_ms(j->delay_ms);
        answer_async(j->r);
        free(j);
    }
}

static void pool_start(void)
{
    pool.stop = false;
    for (size_t i = 0; i < 3; i++)
        pthread_create(&pool.threads[i], NULL, pool_main, NULL);
}

static void pool_stop(void)
{
    pthread_mutex_lock(&pool.lock);
    pool.stop = true;
    pthread_cond_broadcast(&pool.cond);
    pthread_mutex_unlock(&pool.lock);
    for (size_t i = 0; i < 3; i++)
        pthread_join(pool.threads[i], NULL);
}

/* ---- handlers and routes ------------------------------------------------------ */

static atomic_int never_calls;

static void h_sync(http_req *r, const char *const *params, void *app)
{
    (void)params;
    (void)app;
    http_respond_json(r, 200, json_pack("{s:b,s:s}", "ok", 1, "method", http_req_method(r)),
                      NULL);
}

static void h_echo(http_req *r, const char *const *params, void *app)
{
    size_t len;
    const char *body = http_req_body(r, &len);
    (void)params;
    (void)app;
    json_t *doc = json_loadb(body, len, 0, NULL);
    if (!doc) {
        http_respond_problem(r, 400, "the body is not valid JSON", NULL, NULL, 0);
        return;
    }
    http_respond_json(r, 200, json_pack("{s:o,s:I}", "got", doc, "len", (json_int_t)len), NULL);
}

static void h_item(http_req *r, const char *const *params, void *app)
{
    (void)app;
    http_respond_json(r, 200, json_pack("{s:s,s:s}", "id", params[0], "path", http_req_path(r)),
                      NULL);
}

static void h_item_delete(http_req *r, const char *const *params, void *app)
{
    (void)app;
    http_respond_json(r, 200, json_pack("{s:s}", "deleted", params[0]), NULL);
}

static void h_sub(http_req *r, const char *const *params, void *app)
{
    (void)app;
    http_respond_json(r, 200, json_pack("{s:s,s:s}", "id", params[0], "name", params[1]), NULL);
}

static void h_query(http_req *r, const char *const *params, void *app)
{
    (void)params;
    (void)app;
    http_respond_json(r, 200,
                      json_pack("{s:s?,s:s?,s:s?,s:s?}", "state", http_req_query(r, "state"),
                                "queue", http_req_query(r, "queue"), "flag",
                                http_req_query(r, "flag"), "cursor", http_req_query(r, "cursor")),
                      NULL);
}

static void h_async(http_req *r, const char *const *params, void *app)
{
    const char *d = http_req_query(r, "delay_ms");
    (void)params;
    (void)app;
    pool_push(r, d ? (unsigned)atoi(d) : 0);
}

/* Hands the request over and keeps running a little, so the answer often
 * arrives before this returns, between the check and the suspend, or after. */
static void h_async_now(http_req *r, const char *const *params, void *app)
{
    (void)params;
    (void)app;
    pool_push(r, 0);
    for (int i = rand() % 3; i > 0; i--)
        sched_yield();
}

static void h_problem(http_req *r, const char *const *params, void *app)
{
    (void)params;
    (void)app;
    http_respond_problem(r, 409, "the timer is already firing", "id",
                         json_pack("{s:s,s:s}", "state", "firing", "title", "ignored"), 0);
}

/* A body jansson failed to build (NULL) where the status needs one. */
static void h_no_body(http_req *r, const char *const *params, void *app)
{
    (void)params;
    (void)app;
    http_respond_json(r, 200, json_pack("{s:I,s:b}", "count", (json_int_t)1, 0), NULL);
}

static void h_busy(http_req *r, const char *const *params, void *app)
{
    (void)params;
    (void)app;
    http_respond_problem(r, 503, "redis is unreachable", "", NULL, 7);
}

static void h_created(http_req *r, const char *const *params, void *app)
{
    (void)params;
    (void)app;
    http_respond_json(r, 201, json_pack("{s:s}", "id", "abc"), "/timers/abc");
}

static void h_never(http_req *r, const char *const *params, void *app)
{
    (void)r;
    (void)params;
    (void)app;
    atomic_fetch_add(&never_calls, 1);
}

/* A streamed body: STREAM_LEN bytes of a repeating pattern, at most 7 a
 * fill; done counts the frees. */
#define STREAM_LEN 12000
static atomic_int stream_done;

typedef struct streamed {
    size_t pos;
} streamed;

static size_t stream_fill(void *arg, char *buf, size_t max)
{
    streamed *st = arg;
    size_t n = 0;
    while (n < max && n < 7 && st->pos < STREAM_LEN) {
        buf[n++] = (char)('a' + st->pos % 26);
        st->pos++;
    }
    return n;
}

static void stream_free(void *arg)
{
    free(arg);
    atomic_fetch_add(&stream_done, 1);
}

static void h_stream(http_req *r, const char *const *params, void *app)
{
    (void)params;
    (void)app;
    http_respond_stream(r, 200, "text/plain", stream_fill, stream_free, calloc(1, sizeof(streamed)));
    /* a second answer is refused and its body freed at once */
    http_respond_stream(r, 500, "text/plain", stream_fill, stream_free, calloc(1, sizeof(streamed)));
}

static const http_route routes[] = {
    {"GET", "/sync", h_sync, 0, 0, 0, NULL},
    {"POST", "/echo", h_echo, 1, 0, 0, NULL},
    {"GET", "/items/{id}", h_item, 0, 0, 0, NULL},
    {"DELETE", "/items/{id}", h_item_delete, 0, 0, 0, NULL},
    {"GET", "/items/{id}/sub/{name}", h_sub, 0, 0, 0, NULL},
    {"GET", "/query", h_query, 0, 0, 0, "state queue flag cursor"},
    {"GET", "/async", h_async, 0, 0, 0, "delay_ms n"},
    {"GET", "/async-now", h_async_now, 0, 0, 0, "n"},
    {"GET", "/problem", h_problem, 0, 0, 0, NULL},
    {"GET", "/no-body", h_no_body, 0, 0, 0, NULL},
    {"GET", "/busy", h_busy, 0, 0, 0, NULL},
    {"POST", "/created", h_created, 0, 0, 0, NULL},
    {"GET", "/never", h_never, 0, 0, 0, NULL},
    {"GET", "/stream", h_stream, 0, 0, 0, NULL},
};

static const http_config config = {
    .listen = "127.0.0.1:0",
    .max_body_bytes = MAX_BODY,
    .threads = 4,
    .max_connections = 64,
    .connection_timeout_s = 10,
};

static http_server *srv;

static http_server *start_server(void)
{
    http_server *s = http_start(&config, routes, sizeof routes / sizeof routes[0], NULL);
    assert_non_null(s);
    assert_true(http_port(s) > 0);
    return s;
}

/* ---- the client ---------------------------------------------------------------- */

typedef struct request {
    const char *method;
    const char *path;
    const char *ctype;    /* NULL: none */
    const char *body;     /* NULL: no body */
    size_t body_len;      /* 0: strlen(body) */
    bool chunked;         /* send the body with Transfer-Encoding: chunked */
    const char *header;   /* one extra header line, or NULL */
    const char *header2;
} request;

typedef struct reply {
    CURLcode rc;
    long status;
    char body[16384];
    size_t body_len;
    char headers[8192];
    size_t headers_len;
} reply;

typedef struct upload {
    const char *p;
    size_t left;
} upload;

static size_t append(char *dst, size_t cap, size_t *len, const char *src, size_t n)
{
    size_t room = cap - 1 - *len;
    size_t k = n < room ? n : room;
    memcpy(dst + *len, src, k);
    *len += k;
    dst[*len] = '\0';
    return n;
}

static size_t body_cb(char *p, size_t size, size_t n, void *ud)
{
    reply *rp = ud;
    return append(rp->body, sizeof rp->body, &rp->body_len, p, size * n);
}

static size_t header_cb(char *p, size_t size, size_t n, void *ud)
{
    reply *rp = ud;
    return append(rp->headers, sizeof rp->headers, &rp->headers_len, p, size * n);
}

/* Feeds the upload in odd-sized pieces so it arrives in several chunks. */
static size_t read_cb(char *buf, size_t size, size_t n, void *ud)
{
    upload *u = ud;
    size_t k = size * n;
    if (k > 777)
        k = 777;
    if (k > u->left)
        k = u->left;
    memcpy(buf, u->p, k);
    u->p += k;
    u->left -= k;
    return k;
}

/* The value of response header name (last occurrence), or NULL. */
static const char *reply_header(const reply *rp, const char *name, char *out, size_t size)
{
    const char *found = NULL;
    size_t nlen = strlen(name);
    for (const char *line = rp->headers; *line;) {
        const char *end = strstr(line, "\r\n");
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > nlen && strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
            const char *v = line + nlen + 1;
            while (*v == ' ')
                v++;
            size_t vlen = len - (size_t)(v - line);
            if (vlen >= size)
                vlen = size - 1;
            memcpy(out, v, vlen);
            out[vlen] = '\0';
            found = out;
        }
        line += len + (end ? 2 : 0);
    }
    return found;
}

static void perform_on(CURL *h, uint16_t port, const request *rq, reply *rp)
{
    char url[512], ct[128];
    struct curl_slist *hdrs = NULL;
    upload up = {rq->body, rq->body ? (rq->body_len ? rq->body_len : strlen(rq->body)) : 0};
    memset(rp, 0, sizeof *rp);
    curl_easy_reset(h);
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", port, rq->path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, rp);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, rp);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (strcmp(rq->method, "HEAD") == 0)
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    else
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, rq->method);
    snprintf(ct, sizeof ct, "Content-Type: %s", rq->ctype ? rq->ctype : "");
    hdrs = curl_slist_append(hdrs, ct); /* "Content-Type:" alone removes curl's default */
    if (rq->header)
        hdrs = curl_slist_append(hdrs, rq->header);
    if (rq->header2)
        hdrs = curl_slist_append(hdrs, rq->header2);
    if (rq->body && rq->chunked) {
        hdrs = curl_slist_append(hdrs, "Transfer-Encoding: chunked");
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, read_cb);
        curl_easy_setopt(h, CURLOPT_READDATA, &up);
    } else if (rq->body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)up.left);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    rp->rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &rp->status);
    curl_slist_free_all(hdrs);
}

static void perform(const request *rq, reply *rp)
{
    CURL *h = curl_easy_init();
    perform_on(h, http_port(srv), rq, rp);
    curl_easy_cleanup(h);
}

static void get(const char *path, reply *rp)
{
    request rq = {.method = "GET", .path = path};
    perform(&rq, rp);
}

static json_t *reply_json(const reply *rp)
{
    json_t *doc = json_loadb(rp->body, rp->body_len, 0, NULL);
    assert_non_null(doc);
    return doc;
}

static const char *json_str(json_t *doc, const char *key)
{
    return json_string_value(json_object_get(doc, key));
}

/* Checks a problem reply: status, Content-Type, and the RFC 9457 members. */
static json_t *assert_problem(const reply *rp, long status, const char *title)
{
    char ct[128];
    assert_int_equal(rp->rc, CURLE_OK);
    assert_int_equal(rp->status, status);
    assert_non_null(reply_header(rp, "Content-Type", ct, sizeof ct));
    assert_string_equal(ct, "application/problem+json");
    json_t *doc = reply_json(rp);
    assert_string_equal(json_str(doc, "type"), "about:blank");
    assert_string_equal(json_str(doc, "title"), title);
    assert_int_equal(json_integer_value(json_object_get(doc, "status")), status);
    assert_true(json_is_string(json_object_get(doc, "detail")));
    return doc;
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_only_loopback_listen_addresses_count_as_loopback(void **state)
{
    (void)state;
    assert_true(http_listen_loopback("127.0.0.1:8080"));
    assert_true(http_listen_loopback("127.3.2.1:0"));
    assert_true(http_listen_loopback("localhost:8080"));
    assert_true(http_listen_loopback("[::1]:8080"));
    assert_false(http_listen_loopback(":8080"));
    assert_false(http_listen_loopback("0.0.0.0:8080"));
    assert_false(http_listen_loopback("10.0.0.1:8080"));
    assert_false(http_listen_loopback("[::]:8080"));
    assert_false(http_listen_loopback("128.0.0.1:8080"));
    assert_false(http_listen_loopback("nope"));
}

static void test_sync_handler_answers_json(void **state)
{
    reply rp;
    char ct[128];
    (void)state;
    request rq = {.method = "GET", .path = "/sync", .header = "X-Request-Id: req-\"1\""};
    perform(&rq, &rp);
    assert_int_equal(rp.rc, CURLE_OK);
    assert_int_equal(rp.status, 200);
    assert_string_equal(reply_header(&rp, "Content-Type", ct, sizeof ct), "application/json");
    json_t *doc = reply_json(&rp);
    assert_true(json_is_true(json_object_get(doc, "ok")));
    assert_string_equal(json_str(doc, "method"), "GET");
    json_decref(doc);
}

static void test_a_streamed_body_arrives_whole_in_order_and_is_freed_once(void **state)
{
    reply rp;
    char ct[128], te[64];
    (void)state;
    atomic_store(&stream_done, 0);
    request rq = {.method = "GET", .path = "/stream"};
    perform(&rq, &rp);
    assert_int_equal(rp.rc, CURLE_OK);
    assert_int_equal(rp.status, 200);
    assert_string_equal(reply_header(&rp, "Content-Type", ct, sizeof ct), "text/plain");
    assert_string_equal(reply_header(&rp, "Transfer-Encoding", te, sizeof te), "chunked");
    assert_int_equal(rp.body_len, STREAM_LEN);
    for (size_t i = 0; i < STREAM_LEN; i++)
        if (rp.body[i] != (char)('a' + i % 26))
            fail_msg("byte %zu is '%c'", i, rp.body[i]);
    for (int i = 0; i < 200 && atomic_load(&stream_done) < 2; i++)
        sleep_ms(5);
    assert_int_equal(atomic_load(&stream_done), 2); /* the answer's and the refused one's */
}

static void test_head_is_served_by_the_get_route_without_a_body(void **state)
{
    reply rp;
    (void)state;
    request rq = {.method = "HEAD", .path = "/sync"};
    perform(&rq, &rp);
    assert_int_equal(rp.rc, CURLE_OK);
    assert_int_equal(rp.status, 200);
    assert_int_equal(rp.body_len, 0);
}

static void test_async_answer_after_a_delay_resumes_the_connection(void **state)
{
    reply rp;
    (void)state;
    uint64_t t0 = now_ms();
    request rq = {.method = "GET", .path = "/async?delay_ms=150&n=7", .header = "X-Test: seen"};
    perform(&rq, &rp);
    assert_int_equal(rp.rc, CURLE_OK);
    assert_int_equal(rp.status, 200);
    assert_true(now_ms() - t0 >= 150);
    json_t *doc = reply_json(&rp);
    assert_true(json_is_true(json_object_get(doc, "async")));
    assert_string_equal(json_str(doc, "n"), "7");
    assert_string_equal(json_str(doc, "x_test"), "seen");
    json_decref(doc);
}

#define STRESS_THREADS 8
#define STRESS_PER_THREAD 25

static atomic_int stress_failures;

/* Each client thread reuses one connection; every answer must carry the
 * n of its own request. No cmocka asserts off the main thread. */
static void *stress_client(void *arg)
{
    int base = (int)(intptr_t)arg;
    CURL *h = curl_easy_init();
    reply *rp = malloc(sizeof *rp);
    for (int i = 0; i < STRESS_PER_THREAD; i++) {
        char path[64], want[16];
        int n = base * 1000 + i;
        snprintf(path, sizeof path, "/async-now?n=%d", n);
        snprintf(want, sizeof want, "%d", n);
        request rq = {.method = "GET", .path = path};
        perform_on(h, http_port(srv), &rq, rp);
        json_t *doc = json_loadb(rp->body, rp->body_len, 0, NULL);
        const char *got = json_string_value(json_object_get(doc, "n"));
        if (rp->rc != CURLE_OK || rp->status != 200 || !got || strcmp(got, want) != 0)
            atomic_fetch_add(&stress_failures, 1);
        json_decref(doc);
    }
    free(rp);
    curl_easy_cleanup(h);
    return NULL;
}

static void test_immediate_async_answers_race_the_suspend_safely(void **state)
{
    pthread_t t[STRESS_THREADS];
    (void)state;
    atomic_store(&stress_failures, 0);
    for (intptr_t i = 0; i < STRESS_THREADS; i++)
        pthread_create(&t[i], NULL, stress_client, (void *)i);
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&stress_failures), 0);
}

static void test_unknown_path_is_a_404_problem(void **state)
{
    reply rp;
    (void)state;
    get("/nope", &rp);
    json_t *doc = assert_problem(&rp, 404, "Not Found");
    assert_null(json_object_get(doc, "field"));
    json_decref(doc);
    get("/items/", &rp); /* {id} needs a non-empty segment */
    json_decref(assert_problem(&rp, 404, "Not Found"));
    get("/sync/extra", &rp);
    json_decref(assert_problem(&rp, 404, "Not Found"));
    get("/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r", &rp); /* more segments than any route */
    json_decref(assert_problem(&rp, 404, "Not Found"));
}

static void test_wrong_method_is_a_405_problem_with_allow(void **state)
{
    reply rp;
    char allow[128];
    (void)state;
    request rq = {.method = "PUT", .path = "/items/1"};
    perform(&rq, &rp);
    json_decref(assert_problem(&rp, 405, "Method Not Allowed"));
    assert_string_equal(reply_header(&rp, "Allow", allow, sizeof allow), "GET, HEAD, DELETE");
    request rq2 = {.method = "POST", .path = "/sync", .ctype = "application/json", .body = "{}"};
    perform(&rq2, &rp);
    json_decref(assert_problem(&rp, 405, "Method Not Allowed"));
    assert_string_equal(reply_header(&rp, "Allow", allow, sizeof allow), "GET, HEAD");
}

static void test_json_route_refuses_other_content_types_with_415(void **state)
{
    reply rp;
    (void)state;
    request rq = {.method = "POST", .path = "/echo", .ctype = "text/plain", .body = "{}"};
    perform(&rq, &rp);
    json_decref(assert_problem(&rp, 415, "Unsupported Media Type"));
    request none = {.method = "POST", .path = "/echo", .body = "{}"};
    perform(&none, &rp);
    json_decref(assert_problem(&rp, 415, "Unsupported Media Type"));
    request near = {.method = "POST", .path = "/echo", .ctype = "application/jsonx", .body = "{}"};
    perform(&near, &rp);
    json_decref(assert_problem(&rp, 415, "Unsupported Media Type"));
}

static void test_json_content_type_may_carry_parameters(void **state)
{
    reply rp;
    (void)state;
    const char *types[] = {"application/json", "application/json; charset=utf-8",
                           "Application/JSON;charset=UTF-8"};
    for (size_t i = 0; i < 3; i++) {
        request rq = {.method = "POST", .path = "/echo", .ctype = types[i], .body = "{\"a\":1}"};
        perform(&rq, &rp);
        assert_int_equal(rp.rc, CURLE_OK);
        assert_int_equal(rp.status, 200);
        json_t *doc = reply_json(&rp);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "got"), "a")), 1);
        json_decref(doc);
    }
}

static char *filled_json(size_t len)
{
    char *s = malloc(len + 1);
    memset(s, ' ', len);
    s[0] = '[';
    s[len - 1] = ']';
    s[len] = '\0';
    return s;
}

static void test_body_over_the_limit_by_content_length_is_413(void **state)
{
    reply rp;
    (void)state;
    char *big = filled_json(MAX_BODY + 1);
    /* With Expect: 100-continue the client waits: the 413 comes instead of
     * 100 Continue and the body is never sent. */
    request rq = {.method = "POST", .path = "/echo", .ctype = "application/json", .body = big,
                  .header = "Expect: 100-continue"};
    perform(&rq, &rp);
    json_t *doc = assert_problem(&rp, 413, "Content Too Large");
    assert_null(json_object_get(doc, "field"));
    json_decref(doc);
    /* Without it the body is already on its way; the answer is the same. */
    request rq2 = {.method = "POST", .path = "/echo", .ctype = "application/json", .body = big,
                   .header = "Expect:"};
    perform(&rq2, &rp);
    json_decref(assert_problem(&rp, 413, "Content Too Large"));
    free(big);
}

static void test_body_exactly_at_the_limit_is_accepted(void **state)
{
    reply rp;
    (void)state;
    char *body = filled_json(MAX_BODY);
    request rq = {.method = "POST", .path = "/echo", .ctype = "application/json", .body = body};
    perform(&rq, &rp);
    assert_int_equal(rp.status, 200);
    json_t *doc = reply_json(&rp);
    assert_int_equal(json_integer_value(json_object_get(doc, "len")), MAX_BODY);
    json_decref(doc);
    free(body);
}

static void test_chunked_body_over_the_limit_is_413(void **state)
{
    reply rp;
    (void)state;
    char *big = filled_json(5 * MAX_BODY);
    request rq = {.method = "POST", .path = "/echo", .ctype = "application/json", .body = big,
                  .chunked = true};
    perform(&rq, &rp);
    json_decref(assert_problem(&rp, 413, "Content Too Large"));
    free(big);
}

static void test_chunked_body_under_the_limit_is_read_whole(void **state)
{
    reply rp;
    (void)state;
    char *body = filled_json(MAX_BODY - 10);
    request rq = {.method = "POST", .path = "/echo", .ctype = "application/json", .body = body,
                  .chunked = true};
    perform(&rq, &rp);
    assert_int_equal(rp.rc, CURLE_OK);
    assert_int_equal(rp.status, 200);
    json_t *doc = reply_json(&rp);
    assert_int_equal(json_integer_value(json_object_get(doc, "len")), MAX_BODY - 10);
    json_decref(doc);
    free(body);
}

static void test_endless_oversized_upload_is_cut_off(void **state)
{
    reply rp;
    (void)state;
    size_t len = 3 * 1024 * 1024;
    char *big = filled_json(len);
    request rq = {.method = "POST", .path = "/echo", .ctype = "application/json", .body = big,
                  .chunked = true};
    perform(&rq, &rp);
    assert_true(rp.rc != CURLE_OK || rp.status == 413);
    free(big);
    get("/sync", &rp); /* the server is fine */
    assert_int_equal(rp.status, 200);
}

static void test_problem_has_the_rfc9457_members_and_extras(void **state)
{
    reply rp;
    (void)state;
    get("/problem", &rp);
    json_t *doc = assert_problem(&rp, 409, "Conflict");
    assert_string_equal(json_str(doc, "detail"), "the timer is already firing");
    assert_string_equal(json_str(doc, "field"), "id");
    assert_string_equal(json_str(doc, "state"), "firing");
    assert_int_equal(json_object_size(doc), 6); /* extra "title" did not override */
    json_decref(doc);
}

static void test_retry_after_is_sent_and_empty_field_omitted(void **state)
{
    reply rp;
    char v[32];
    (void)state;
    get("/busy", &rp);
    json_t *doc = assert_problem(&rp, 503, "Service Unavailable");
    assert_null(json_object_get(doc, "field"));
    assert_string_equal(reply_header(&rp, "Retry-After", v, sizeof v), "7");
    json_decref(doc);
    get("/problem", &rp);
    assert_null(reply_header(&rp, "Retry-After", v, sizeof v));
}

static void test_a_missing_body_is_a_500_not_an_empty_200(void **state)
{
    reply rp;
    (void)state;
    get("/no-body", &rp);
    json_t *doc = assert_problem(&rp, 500, "Internal Server Error");
    json_decref(doc);
}

static void test_created_answer_carries_location(void **state)
{
    reply rp;
    char v[64];
    (void)state;
    request rq = {.method = "POST", .path = "/created", .ctype = "application/json", .body = "{}"};
    perform(&rq, &rp);
    assert_int_equal(rp.status, 201);
    assert_string_equal(reply_header(&rp, "Location", v, sizeof v), "/timers/abc");
    assert_string_equal(reply_header(&rp, "Content-Type", v, sizeof v), "application/json");
}

static void test_path_params_are_percent_decoded(void **state)
{
    reply rp;
    (void)state;
    static const char *const cases[][2] = {
        {"/items/a:b.c-d_e", "a:b.c-d_e"},
        {"/items/a%3Ab.c-d_e", "a:b.c-d_e"},
        {"/items/x%2Fy", "x/y"},
        {"/items/a%20b+c", "a b+c"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        get(cases[i][0], &rp);
        assert_int_equal(rp.status, 200);
        json_t *doc = reply_json(&rp);
        assert_string_equal(json_str(doc, "id"), cases[i][1]);
        assert_string_equal(json_str(doc, "path"), cases[i][0]);
        json_decref(doc);
    }
    get("/items/one/sub/t%C3%A9", &rp);
    assert_int_equal(rp.status, 200);
    json_t *doc = reply_json(&rp);
    assert_string_equal(json_str(doc, "id"), "one");
    assert_string_equal(json_str(doc, "name"), "t\xc3\xa9");
    json_decref(doc);
    request del = {.method = "DELETE", .path = "/items/k%2E1"};
    perform(&del, &rp);
    assert_int_equal(rp.status, 200);
    doc = reply_json(&rp);
    assert_string_equal(json_str(doc, "deleted"), "k.1");
    json_decref(doc);
}

static void test_malformed_percent_encoding_is_a_400(void **state)
{
    reply rp;
    (void)state;
    const char *paths[] = {"/items/a%zz", "/items/a%2", "/items/a%00b", "/query?state=%G1"};
    for (size_t i = 0; i < 4; i++) {
        get(paths[i], &rp);
        json_decref(assert_problem(&rp, 400, "Bad Request"));
    }
}

static void test_query_values_are_decoded(void **state)
{
    reply rp;
    (void)state;
    get("/query?state=failed&queue=a%20b+c%2Bd&flag", &rp);
    assert_int_equal(rp.status, 200);
    json_t *doc = reply_json(&rp);
    assert_string_equal(json_str(doc, "state"), "failed");
    assert_string_equal(json_str(doc, "queue"), "a b c+d");
    assert_string_equal(json_str(doc, "flag"), "");
    assert_true(json_is_null(json_object_get(doc, "cursor"))); /* absent */
    json_decref(doc);
}

static void test_an_unknown_or_repeated_query_parameter_is_refused_naming_it(void **state)
{
    reply rp;
    (void)state;
    get("/query?state=failed&stat=failed", &rp);
    json_t *doc = assert_problem(&rp, 400, "Bad Request");
    assert_string_equal(json_str(doc, "field"), "stat");
    assert_string_equal(json_str(doc, "detail"),
                        "unknown query parameter stat: this endpoint takes state queue flag cursor");
    json_decref(doc);
    get("/query?queue=a&queue=b", &rp);
    doc = assert_problem(&rp, 400, "Bad Request");
    assert_string_equal(json_str(doc, "field"), "queue");
    assert_string_equal(json_str(doc, "detail"), "the query parameter queue is given twice");
    json_decref(doc);
    get("/sync?x", &rp);
    doc = assert_problem(&rp, 400, "Bad Request");
    assert_string_equal(json_str(doc, "detail"), "unknown query parameter x: this endpoint takes none");
    json_decref(doc);
    /* a name that is not printable is not echoed */
    get("/query?%FF%FE=1", &rp);
    doc = assert_problem(&rp, 400, "Bad Request");
    assert_null(json_object_get(doc, "field"));
    json_decref(doc);
}

static void test_quiesce_refuses_new_connections_and_503s_kept_alive_ones(void **state)
{
    reply rp;
    (void)state;
    http_server *s = start_server();
    CURL *h = curl_easy_init();
    request rq = {.method = "GET", .path = "/sync"};
    perform_on(h, http_port(s), &rq, &rp);
    assert_int_equal(rp.status, 200);
    http_quiesce(s);
    perform_on(h, http_port(s), &rq, &rp); /* same kept-alive connection */
    json_t *doc = assert_problem(&rp, 503, "Service Unavailable");
    assert_string_equal(json_str(doc, "detail"), "shutting down");
    json_decref(doc);
    CURL *fresh = curl_easy_init();
    perform_on(fresh, http_port(s), &rq, &rp);
    assert_int_equal(rp.rc, CURLE_COULDNT_CONNECT);
    curl_easy_cleanup(fresh);
    curl_easy_cleanup(h);
    http_stop(s);
}

typedef struct never_client {
    uint16_t port;
    reply rp;
} never_client;

static void *never_main(void *arg)
{
    never_client *c = arg;
    CURL *h = curl_easy_init();
    request rq = {.method = "GET", .path = "/never"};
    perform_on(h, c->port, &rq, &c->rp);
    curl_easy_cleanup(h);
    return NULL;
}

static void test_stop_answers_suspended_requests_with_503(void **state)
{
    enum { N = 3 };
    never_client c[N];
    pthread_t t[N];
    (void)state;
    http_server *s = start_server();
    atomic_store(&never_calls, 0);
    for (int i = 0; i < N; i++) {
        c[i].port = http_port(s);
        pthread_create(&t[i], NULL, never_main, &c[i]);
    }
    for (int i = 0; i < 500 && atomic_load(&never_calls) < N; i++)
        sleep_ms(10);
    assert_int_equal(atomic_load(&never_calls), N);
    sleep_ms(20); /* let the handlers return and the connections suspend */
    http_stop(s);
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        json_t *doc = assert_problem(&c[i].rp, 503, "Service Unavailable");
        assert_string_equal(json_str(doc, "detail"), "shutting down");
        json_decref(doc);
    }
}

static void test_start_refuses_bad_addresses_and_busy_ports(void **state)
{
    (void)state;
    static const char *const bad[] = {"nonsense", "127.0.0.1", "127.0.0.1:99999", "1.2.3:80",
                                      "[::1]80", "::1:80", "127.0.0.1:-1", "127.0.0.1:"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http_config c = config;
        c.listen = bad[i];
        assert_null(http_start(&c, routes, 1, NULL));
    }
    char busy[32];
    snprintf(busy, sizeof busy, "127.0.0.1:%u", http_port(srv));
    http_config c = config;
    c.listen = busy;
    assert_null(http_start(&c, routes, 1, NULL));
    http_route bad_route = {"GET", "no-slash", h_sync, 0, 0, 0, NULL};
    assert_null(http_start(&config, &bad_route, 1, NULL));
}

/* Some CI containers have no IPv6 loopback; the IPv6 case is skipped there. */
static bool ipv6_loopback_available(void)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static void test_start_accepts_localhost_and_ipv6_literals(void **state)
{
    reply rp;
    (void)state;
    const char *ok[] = {"localhost:0", "[::1]:0"};
    for (size_t i = 0; i < (ipv6_loopback_available() ? 2u : 1u); i++) {
        http_config c = config;
        c.listen = ok[i];
        c.threads = 1;
        c.max_connections = 0;
        http_server *s = http_start(&c, routes, 1, NULL);
        assert_non_null(s);
        char url[64];
        CURL *h = curl_easy_init();
        snprintf(url, sizeof url, "http://%s:%u/sync", i ? "[::1]" : "127.0.0.1", http_port(s));
        memset(&rp, 0, sizeof rp);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body_cb);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &rp);
        assert_int_equal(curl_easy_perform(h), CURLE_OK);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &rp.status);
        assert_int_equal(rp.status, 200);
        curl_easy_cleanup(h);
        http_stop(s);
    }
}

static void test_reason_phrases_follow_rfc9110(void **state)
{
    (void)state;
    assert_string_equal(http_reason(200), "OK");
    assert_string_equal(http_reason(404), "Not Found");
    assert_string_equal(http_reason(413), "Content Too Large");
    assert_string_equal(http_reason(429), "Too Many Requests");
    assert_string_equal(http_reason(599), "Unknown");
}

static void test_stop_of_null_is_a_no_op(void **state)
{
    (void)state;
    http_stop(NULL);
    http_quiesce(NULL);
}

/* Runs in a group of its own: log_min_level is a plain int, set while no
 * server thread runs (thread start and join order the accesses). */
static void test_debug_access_log_line_is_written(void **state)
{
    reply rp;
    (void)state;
    log_min_level = LOG_DEBUG;
    srv = start_server();
    request rq = {.method = "GET", .path = "/sync", .header = "X-Request-Id: req-\"1\""};
    perform(&rq, &rp);
    http_stop(srv);
    srv = NULL;
    log_min_level = LOG_ERROR;
    assert_int_equal(rp.status, 200);
}

static int group_setup(void **state)
{
    (void)state;
    pool_start();
    srv = start_server();
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    http_stop(srv);
    srv = NULL;
    pool_stop();
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as service/main.c: a peer gone mid-write is an error, not a death */
    log_min_level = LOG_ERROR;
    curl_global_init(CURL_GLOBAL_ALL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_only_loopback_listen_addresses_count_as_loopback),
        cmocka_unit_test(test_sync_handler_answers_json),
        cmocka_unit_test(test_head_is_served_by_the_get_route_without_a_body),
        cmocka_unit_test(test_a_streamed_body_arrives_whole_in_order_and_is_freed_once),
        cmocka_unit_test(test_async_answer_after_a_delay_resumes_the_connection),
        cmocka_unit_test(test_immediate_async_answers_race_the_suspend_safely),
        cmocka_unit_test(test_unknown_path_is_a_404_problem),
        cmocka_unit_test(test_wrong_method_is_a_405_problem_with_allow),
        cmocka_unit_test(test_json_route_refuses_other_content_types_with_415),
        cmocka_unit_test(test_json_content_type_may_carry_parameters),
        cmocka_unit_test(test_body_over_the_limit_by_content_length_is_413),
        cmocka_unit_test(test_body_exactly_at_the_limit_is_accepted),
        cmocka_unit_test(test_chunked_body_over_the_limit_is_413),
        cmocka_unit_test(test_chunked_body_under_the_limit_is_read_whole),
        cmocka_unit_test(test_endless_oversized_upload_is_cut_off),
        cmocka_unit_test(test_problem_has_the_rfc9457_members_and_extras),
        cmocka_unit_test(test_a_missing_body_is_a_500_not_an_empty_200),
        cmocka_unit_test(test_retry_after_is_sent_and_empty_field_omitted),
        cmocka_unit_test(test_created_answer_carries_location),
        cmocka_unit_test(test_path_params_are_percent_decoded),
        cmocka_unit_test(test_malformed_percent_encoding_is_a_400),
        cmocka_unit_test(test_query_values_are_decoded),
        cmocka_unit_test(test_an_unknown_or_repeated_query_parameter_is_refused_naming_it),
        cmocka_unit_test(test_quiesce_refuses_new_connections_and_503s_kept_alive_ones),
        cmocka_unit_test(test_stop_answers_suspended_requests_with_503),
        cmocka_unit_test(test_start_refuses_bad_addresses_and_busy_ports),
        cmocka_unit_test(test_start_accepts_localhost_and_ipv6_literals),
        cmocka_unit_test(test_reason_phrases_follow_rfc9110),
        cmocka_unit_test(test_stop_of_null_is_a_no_op),
    };
    const struct CMUnitTest logging[] = {
        cmocka_unit_test(test_debug_access_log_line_is_written),
    };
    int failed = cmocka_run_group_tests_name("logging", logging, NULL, NULL);
    failed += cmocka_run_group_tests_name("http", tests, group_setup, group_teardown);
    curl_global_cleanup();
    return failed;
}
