/* fuzz_spec.c - libFuzzer target for spec_parse, the path from a raw POST
 * /timers body to a validated timer spec.
 *
 * Each input is parsed twice: with the limits the API uses (the defaults of
 * service/config.c) and with lim NULL, as the engine reads specs back from
 * Redis. A rejected input must leave *out alone and fill a well-formed
 * error. An accepted one must keep the promises of spec.h, checked below;
 * a broken promise traps, so libFuzzer keeps the input as a crash. The most
 * important one is the round trip: the engine fires from the stored form,
 * so parsing it (and the canonical form) without limits must give back the
 * same canonical text and the same outbound request.
 *
 * Each input is also loaded by json_load_fast and by json_loadb, which
 * must agree (check_loader).
 *
 * Build and run with tests/fuzz/fuzz.mk (make fuzz, fuzz-ci, fuzz-regress).
 * The clock is fixed so that every run of an input behaves the same. */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "jsonload.h"
#include "spec.h"

/* 2026-01-02T03:04:05.678Z, as in tests/unit/test_spec.c. */
#define NOW 1767323045678ULL

/* The API's limits: service/config.c's defaults, mapped as api/timers.c
 * maps them. */
static const spec_limits api_limits = {
    .max_url_len = 2048,
    .max_headers = 32,
    .max_header_bytes = 8192,
    .max_delay_ms = 31536000000ULL,
    .max_timeout_ms = 300000,
    .max_attempts = 100,
    .max_backoff_cap_ms = 86400000,
    .default_timeout_ms = 10000,
    .default_max_attempts = 5,
    .default_min_backoff_ms = 1000,
    .default_max_backoff_ms = 300000,
};

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Says which promise broke, then traps so libFuzzer saves the input. */
#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "fuzz_spec: invariant broken at %s:%d: %s\n", __FILE__,         \
                    __LINE__, #cond);                                                      \
            __builtin_trap();                                                              \
        }                                                                                  \
    } while (0)

/* 1 if s is valid UTF-8 (RFC 3629): the API puts error texts into JSON. */
static int utf8_valid(const char *s)
{
    json_t *j = json_string(s); /* jansson validates UTF-8 and rejects otherwise */
    int ok = j != NULL;

    json_decref(j);
    return ok;
}

/* A rejection fills err and leaves *out as it was. */
static void check_error(int rc, const timer_spec *out, const timer_spec *sentinel,
                        const spec_error *err)
{
    CHECK(rc == -EINVAL);
    CHECK(out == sentinel);
    CHECK(err->status == 400);
    CHECK(memchr(err->field, '\0', sizeof err->field) != NULL);
    CHECK(memchr(err->detail, '\0', sizeof err->detail) != NULL);
    CHECK(err->detail[0] != '\0');
    CHECK(utf8_valid(err->field));
    CHECK(utf8_valid(err->detail));
}

/* Parses text (NUL-terminated) as a JSON object, or returns NULL. */
/* (JSON_ALLOW_NUL: a stored spec's json member may hold \u0000, see
 * spec_parse; a client's never passes) */
static json_t *load_object(const char *text)
{
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);

    if (j && !json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static int method_allowed(const char *m)
{
    static const char *const methods[] = {"GET",   "HEAD",   "POST",    "PUT",
                                          "PATCH", "DELETE", "OPTIONS"};

    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++)
        if (strcmp(m, methods[i]) == 0)
            return 1;
    return 0;
}

/* Schemes are case-insensitive (RFC 3986 3.1) and spec.c accepts
 * "HTTP://host", so the check ignores case too. */
static int url_is_http(const char *url)
{
    return strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0;
}

static void check_headers(const timer_spec *s, const spec_limits *lim)
{
    int content_type = 0;

    CHECK(s->nheaders == 0 || s->headers != NULL);
    if (lim)
        CHECK(s->nheaders <= lim->max_headers);
    for (uint32_t i = 0; i < s->nheaders; i++) {
        const char *line = s->headers[i];
        CHECK(line != NULL);
        CHECK(strchr(line, ':') != NULL);
        CHECK(strpbrk(line, "\r\n") == NULL);
        if (lim)
            CHECK(strlen(line) - 2 <= lim->max_header_bytes); /* less the ": " */
        content_type |= strncasecmp(line, "Content-Type:", 13) == 0;
    }
    CHECK(s->has_content_type == content_type);
}

/* The body to send is the canonical form's `body` string or the compact
 * sorted dump of its `json` value, and nothing when it has neither. */
static void check_body(const timer_spec *s, const json_t *canon)
{
    const json_t *body = json_object_get(canon, "body");
    const json_t *js = json_object_get(canon, "json");

    CHECK(!(body && js));
    if (body) {
        CHECK(!s->body_is_json);
        CHECK(json_is_string(body));
        CHECK(s->body != NULL && s->body_len == json_string_length(body));
        CHECK(memcmp(s->body, json_string_value(body), s->body_len) == 0);
    } else if (js) {
        char *text = json_dumps(js, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
        CHECK(text != NULL);
        CHECK(s->body_is_json);
        CHECK(s->body != NULL && s->body_len == strlen(text));
        CHECK(memcmp(s->body, text, s->body_len) == 0);
        free(text);
    } else {
        CHECK(s->body == NULL && s->body_len == 0 && !s->body_is_json);
    }
}

/* With limits every value is within the API's caps. */
static void check_limits(const timer_spec *s, const spec_limits *lim)
{
    CHECK(s->when[0] != '\0');
    CHECK(strlen(s->url) <= lim->max_url_len);
    CHECK(s->timeout_ms >= 1 && s->timeout_ms <= lim->max_timeout_ms);
    CHECK(s->max_attempts >= 1 && s->max_attempts <= lim->max_attempts);
    CHECK(s->min_backoff_ms <= s->max_backoff_ms);
    CHECK(s->max_backoff_ms <= lim->max_backoff_cap_ms);
    CHECK(s->fire_at_ms >= 0);
    CHECK((uint64_t)s->fire_at_ms <= NOW + lim->max_delay_ms);
}

/* b, parsed from a's canonical or stored form, sends the same request. */
static void check_same_request(const timer_spec *a, const timer_spec *b)
{
    CHECK(strcmp(a->canonical, b->canonical) == 0);
    CHECK(strcmp(a->stored, b->stored) == 0);
    CHECK(strcmp(a->url, b->url) == 0);
    CHECK(strcmp(a->method, b->method) == 0);
    CHECK(strcmp(a->queue, b->queue) == 0);
    CHECK(a->nheaders == b->nheaders);
    CHECK(a->has_content_type == b->has_content_type);
    CHECK(a->body_len == b->body_len && a->body_is_json == b->body_is_json);
    CHECK(a->body_len == 0 || memcmp(a->body, b->body, a->body_len) == 0);
    CHECK(a->timeout_ms == b->timeout_ms && a->max_attempts == b->max_attempts);
    CHECK(a->min_backoff_ms == b->min_backoff_ms && a->max_backoff_ms == b->max_backoff_ms);
    CHECK(b->id == NULL);
    CHECK(b->when[0] == '\0' && b->fire_at_ms == (int64_t)NOW);
}

/* Parses text without limits, as the engine reads a spec back from Redis. */
static void check_reparse(const timer_spec *s, const char *text, size_t len)
{
    timer_spec *again = NULL;
    spec_error err;
    int rc = spec_parse(text, len, NULL, NOW, &again, &err);

    if (rc != 0)
        fprintf(stderr, "fuzz_spec: %s rejected: field '%s': %s\n", text, err.field, err.detail);
    CHECK(rc == 0 && again != NULL);
    check_same_request(s, again);
    spec_free(again);
}

static int same_as_jansson(const json_t *v, const char *text)
{
    char *d = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    int same = d && strcmp(d, text) == 0;
    free(d);
    return same;
}

static void check_spec(const timer_spec *s, const spec_limits *lim)
{
    json_t *canon, *stored;

    CHECK(s->canonical != NULL && s->stored != NULL && s->url != NULL && s->queue != NULL);
    CHECK(s->stored_len == strlen(s->stored));
    canon = load_object(s->canonical);
    stored = load_object(s->stored);
    CHECK(canon != NULL);
    CHECK(stored != NULL);
    /* written by hand (spec.c), byte for byte what jansson writes */
    CHECK(same_as_jansson(canon, s->canonical));
    CHECK(same_as_jansson(stored, s->stored));
    CHECK(url_is_http(s->url));
    CHECK(method_allowed(s->method));
    CHECK(s->id == NULL || spec_id_valid(s->id));
    check_headers(s, lim);
    check_body(s, canon);
    if (lim)
        check_limits(s, lim);
    check_reparse(s, s->stored, s->stored_len);
    check_reparse(s, s->canonical, strlen(s->canonical));
    json_decref(canon);
    json_decref(stored);
}

static void run_one(const uint8_t *data, size_t size, const spec_limits *lim)
{
    timer_spec *sentinel = (timer_spec *)&api_limits, *s = sentinel;
    spec_error err;
    int rc;

    memset(&err, 'x', sizeof err); /* so a missing terminator shows */
    rc = spec_parse((const char *)data, size, lim, NOW, &s, &err);
    if (rc != 0) {
        check_error(rc, s, sentinel, &err);
        return;
    }
    CHECK(s != sentinel && s != NULL);
    check_spec(s, lim);
    spec_free(s);
}

/* As service/main.c does before any request. jansson's hash seed is fixed so
 * that a run can be reproduced exactly. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    curl_global_init(CURL_GLOBAL_ALL);
    json_object_seed(1);
    return 0;
}

/* data[0..size) is exactly the request body; it is not NUL-terminated, so
 * AddressSanitizer catches a parser that reads it as a C string. */
/* json_load_fast (jsonload.h), which spec_parse reads bodies with, gives
 * json_loadb's answer for every flag set the API uses: the same tree, keys
 * in the same order, or the same error. */
static void check_loader(const uint8_t *data, size_t size)
{
    for (int f = 0; f < 4; f++) {
        size_t flags = (f & 1 ? JSON_REJECT_DUPLICATES : 0) | (f & 2 ? JSON_DECODE_ANY : 0);
        json_error_t e1, e2;
        json_t *a = json_load_fast((const char *)data, size, flags, &e1);
        json_t *b = json_loadb((const char *)data, size, flags, &e2);
        CHECK(!a == !b);
        if (a) {
            char *da = json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
            char *db = json_dumps(b, JSON_COMPACT | JSON_ENCODE_ANY);
            CHECK(json_equal(a, b));
            CHECK(da && db && strcmp(da, db) == 0);
            free(da);
            free(db);
        } else {
            CHECK(strcmp(e1.text, e2.text) == 0);
            CHECK(e1.line == e2.line && e1.column == e2.column && e1.position == e2.position);
        }
        json_decref(a);
        json_decref(b);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_loader(data, size);
    run_one(data, size, &api_limits);
    run_one(data, size, NULL);
    return 0;
}
