/* http.h - the HTTP server: libmicrohttpd glue, routing and responses.
 *
 * http_start runs libmicrohttpd's own threads. For each request the server
 * reads the whole body (up to max_body_bytes, else 413), matches the route
 * table (unknown path: 404, known path with another method: 405 + Allow) and
 * calls the route's handler on a libmicrohttpd thread.
 *
 * A handler answers exactly once, with one of the http_respond_* calls,
 * either before it returns or later from any thread (asynchronous handlers:
 * the connection is suspended until the answer comes, so no libmicrohttpd
 * thread ever waits on Redis). The per-request context is freed in exactly
 * one place, when libmicrohttpd reports the request completed.
 *
 * Hostile clients: a request's head and body each have a deadline (past
 * it the connection is closed unanswered), connections per client address
 * may be capped, a request whose client has already closed its connection
 * is dropped before any handler runs, and ambiguous framing (two
 * Content-Length headers, Content-Length with Transfer-Encoding, a transfer
 * coding other than chunked) is answered 400 and the connection closed. */
#ifndef HW_HTTP_H
#define HW_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef struct http_server http_server; /* opaque */
typedef struct http_req http_req;       /* opaque: one request */

#define HTTP_MAX_PARAMS 4
#define HTTP_REQUEST_ID_MAX 128 /* bytes of a request id (http_req_id) */

/* A handler. params[i] is the i-th {name} path segment of the route's
 * pattern, URL-decoded; valid until the request completes. app is the
 * pointer given to http_start. */
typedef void (*http_handler_cb)(http_req *r, const char *const *params, void *app);

typedef struct http_route {
    const char *method;      /* "GET", "POST", ... */
    const char *pattern;     /* "/timers", "/timers/{id}", "/timers/{id}/fire" */
    http_handler_cb handler;
    int needs_json_body;     /* 1: Content-Type must be application/json (else 415) */
    int open;                /* 1: answered without a bearer token even when tokens are set */
    int big_body;            /* 1: its body may reach max_batch_body_bytes (batches) */
    const char *query;       /* its query parameters, space-separated; NULL: none. Another,
                              * or one given twice, gets 400 (open routes take any) */
} http_route;

typedef struct http_config {
    const char *listen;             /* "host:port"; IPv4 or [IPv6] literal */
    size_t max_body_bytes;          /* larger request bodies get 413 */
    size_t max_batch_body_bytes;    /* the same for routes with big_body */
    unsigned threads;               /* libmicrohttpd worker threads (>= 1) */
    unsigned max_connections;       /* connection limit */
    unsigned max_connections_per_ip;/* connections from one address; 0: no cap */
    unsigned connection_timeout_s;  /* idle connection timeout */
    unsigned head_timeout_ms;       /* deadline for a request's line and headers */
    unsigned body_timeout_ms;       /* deadline for its body, once the headers are in;
                                     * either 0: no deadlines, only the idle timeout */
    const struct auth *auth;        /* bearer tokens (auth.h); NULL: the API is open */
} http_config;


/* 1 when listen is an address http_start takes: "a.b.c.d:port",
 * "localhost:port", ":port" or "[v6]:port", the port 0 to 65535. */
int http_listen_valid(const char *listen);
/* 1 when listen is valid and binds a loopback address only (127.0.0.0/8,
 * "localhost", ::1): nothing but this machine reaches the API. */
int http_listen_loopback(const char *listen);
/* Binds and starts serving. routes (n entries) and app must outlive the
 * server. Returns NULL after logging one error line (bad address, port in
 * use). */
http_server *http_start(const http_config *cfg, const http_route *routes, size_t n, void *app);

/* Stops accepting new connections; requests in progress finish. Requests
 * that arrive on open keep-alive connections afterwards get 503. */
void http_quiesce(http_server *s);

/* Stops the server and joins its threads. NULL is a no-op. */
void http_stop(http_server *s);

/* The port actually bound (useful with port 0). */
uint16_t http_port(const http_server *s);

/* Requests from now on are checked against tokens (the tokens file read
 * again on SIGHUP). The caller keeps the earlier table until http_stop: a
 * request under way may still point at its namespace names. */
void http_set_auth(http_server *s, const struct auth *tokens);

/* Request accessors: valid until the request completes (handler thread or
 * any thread before the answer is given). */
const char *http_req_body(const http_req *r, size_t *len);
const char *http_req_header(const http_req *r, const char *name); /* NULL if absent */
/* The i-th (from 0) header named name, in the order sent; NULL past the last. */
const char *http_req_header_nth(const http_req *r, const char *name, size_t i);
const char *http_req_query(const http_req *r, const char *name);  /* NULL if absent */
/* 1 when the request's Content-Type is application/json (a charset or other
 * parameter may follow), as a route with needs_json_body requires. */
int http_req_json_type(const http_req *r);
const char *http_req_method(const http_req *r);
const char *http_req_path(const http_req *r);
/* The caller's namespace: the one its bearer token maps to, or "" when the
 * API runs without tokens. Valid while the server runs. */
const char *http_req_namespace(const http_req *r);
/* The request's id: the client's X-Request-Id when it is a sane token (1..128
 * of [A-Za-z0-9._:/+=@-], as nginx passes it on), else one the server made
 * (16 hex digits). It is logged with the request and stored with a timer the
 * request creates, so every log line about that timer names it. */
const char *http_req_id(const http_req *r);

/* Answers with a JSON body (body is stolen: the server decrefs it).
 * location, if not NULL, becomes the Location header. Any thread; once. */
void http_respond_json(http_req *r, unsigned status, json_t *body, const char *location);

/* Answers with a JSON body already encoded: text (len bytes, allocated with
 * malloc) is taken and freed by the server. For hot paths that splice text
 * instead of building a jansson tree. Any thread; once. */
void http_respond_json_text_take(http_req *r, unsigned status, char *text, size_t len,
                                 const char *location);

/* Answers with a body of any other type: text (len bytes, allocated with
 * malloc) is taken and freed by the server; ctype becomes the Content-Type.
 * Any thread; once. */
void http_respond_text_take(http_req *r, unsigned status, const char *ctype, char *text, size_t len);

/* Answers with a body written in pieces on the server's thread, as the
 * client takes it (chunked): fill(arg, buf, max) writes 1..max bytes into
 * buf and returns how many, or 0 at the body's end (max may be small: a
 * fill keeps what did not fit for its next call). done(arg) is called once
 * when the answer is gone: sent, dropped with its connection, or refused
 * as a second answer. For answers too large to build on the thread that
 * has them (the store's writer). Any thread; once. */
typedef size_t (*http_fill_cb)(void *arg, char *buf, size_t max);
#define HTTP_STREAM_BLOCK (16 * 1024)
void http_respond_stream(http_req *r, unsigned status, const char *ctype, http_fill_cb fill,
                         void (*done)(void *), void *arg);

/* One extra response header (http_respond_static). */
typedef struct http_header {
    const char *name, *value;
} http_header;

/* Answers with a body the server does not own or free: data (len bytes)
 * must live as long as the server (embedded files). ctype NULL sends no
 * Content-Type (a 304, a redirect); the n headers are copied. A HEAD gets
 * the same headers and no body. Any thread; once. */
void http_respond_static(http_req *r, unsigned status, const char *ctype, const void *data,
                         size_t len, const http_header *headers, size_t n);

/* Answers with an application/problem+json body per RFC 9457:
 * {"type":"about:blank","title":<reason phrase of status>,"status":status,
 *  "detail":detail[,"field":field]} plus the members of extra (stolen, may be
 * NULL). field NULL or "" omits it. retry_after_s > 0 adds Retry-After. Any
 * thread; once. */
/* Counts a create refused because the write queue is full (429); the count
 * is logged at most once a second, within a second of the refusal. */
void http_count_shed(void);

void http_respond_problem(http_req *r, unsigned status, const char *detail, const char *field,
                          json_t *extra, unsigned retry_after_s);

/* The reason phrase of an HTTP status ("Not Found"); "Unknown" otherwise. */
const char *http_reason(unsigned status);

#endif
