/* spec.c - validation of timer specs and their canonical form.
 *
 * One table maps each top-level field to its handler. spec_parse rejects
 * unknown keys first, then runs every handler in table order whether its
 * field is present or not, so a handler also applies its default. Each
 * handler validates its value, stores the effective value in the timer_spec
 * and writes its member of the canonical form (sorted compact JSON, written
 * by hand below); the first error stops the parse. The
 * table order, not the key order of the request, decides which error a
 * request with several faults gets, so answers are reproducible.
 *
 * With lim == NULL (a canonical spec read back from Redis) the configured
 * caps are lifted, but the rules that make a spec well-formed still hold:
 * types, minimums, URL scheme, header syntax and reserved names. The engine
 * therefore never runs a spec the API could not have accepted.
 *
 * Jansson allocates the parsed tree itself; an allocation failure there
 * aborts like xalloc does (need()), so there are no untestable out-of-memory
 * branches. */
#include "spec.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "cron.h"
#include "jsonesc.h"
#include "jsonload.h"
#include "netpolicy.h"
#include "tzfile.h"
#include "xalloc.h"

/* Caps lifted; the defaults are the contract's, although a canonical spec
 * carries every field and never needs them. */
static const spec_limits no_limits = {
    .max_url_len = SIZE_MAX,
    .max_headers = UINT32_MAX,
    .max_header_bytes = SIZE_MAX,
    .max_delay_ms = UINT64_MAX,
    .max_timeout_ms = UINT32_MAX,
    .max_attempts = UINT32_MAX,
    .max_backoff_cap_ms = UINT64_MAX,
    .default_timeout_ms = SPEC_DEFAULT_TIMEOUT_MS,
    .default_max_attempts = SPEC_DEFAULT_MAX_ATTEMPTS,
    .default_min_backoff_ms = SPEC_DEFAULT_MIN_BACKOFF_MS,
    .default_max_backoff_ms = SPEC_DEFAULT_MAX_BACKOFF_MS,
};

/* The canonical form's members: its keys, sorted. */
enum member_key {
    M_BODY, M_HEADERS, M_JSON, M_LABELS, M_METHOD, M_ON_FAILURE, M_ON_SUCCESS, M_QUEUE, M_REPEAT, M_RETRY,
    M_TIMEOUT, M_URL, M_COUNT
};
static const char *const member_name[M_COUNT] = {"body",       "headers",    "json",  "labels",
                                                 "method",     "on_failure", "on_success", "queue",
                                                 "repeat",     "retry",      "timeout_ms", "url"};

/* The request's fields, in the order their handlers run (fields[] below). */
enum field_key {
    F_URL, F_METHOD, F_HEADERS, F_BODY, F_JSON, F_DELAY_MS, F_FIRE_AT, F_FIRE_AT_MS, F_ID, F_TIMEOUT_MS,
    F_RETRY, F_QUEUE, F_REPEAT, F_LABELS, F_ON_SUCCESS, F_ON_FAILURE, F_COUNT
};

typedef struct parse_ctx {
    const spec_limits *lim; /* never NULL: no_limits stands in */
    uint64_t now_ms;
    json_t *root;           /* the request object, owned */
    json_t *v[F_COUNT];     /* root's value of each field, NULL: absent (collect_fields) */
    struct member {         /* the canonical form's members, in key order (enum member_key) */
        char *text;         /* "value" as compact sorted JSON; NULL: absent */
        size_t len;
        int dflt;           /* 1: the contract's default, left out of the stored form */
    } m[M_COUNT];
    timer_spec *s;          /* result being built, owned */
    spec_error *err;
} parse_ctx;

/* Room for a dotted path before fail() shortens it to spec_error.field: the
 * extra bytes let copy_utf8 cut at a character boundary rather than keep a
 * character that snprintf split. */
#define PATH_SIZE (sizeof ((spec_error *)0)->field + 4)

/* A field handler; v is the field's value, or NULL when it is absent. */
typedef int (*field_fn)(parse_ctx *c, const char *name, json_t *v);

/* ---- errors ------------------------------------------------------------ */

static void *need(void *p)
{
    if (!p)
        abort(); /* jansson or curl out of memory, see the top comment */
    return p;
}

/* Length of the valid UTF-8 sequence at p (RFC 3629: no overlongs, no
 * surrogates, at most U+10FFFF), or 0 if it is not one. Stops at a NUL. */
static size_t utf8_seq(const unsigned char *p)
{
    unsigned char lo = 0x80, hi = 0xBF;
    size_t n;

    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xC2 && p[0] <= 0xDF) {
        n = 2;
    } else if (p[0] >= 0xE0 && p[0] <= 0xEF) {
        n = 3;
        lo = p[0] == 0xE0 ? 0xA0 : 0x80; /* no overlongs */
        hi = p[0] == 0xED ? 0x9F : 0xBF; /* no surrogates */
    } else if (p[0] >= 0xF0 && p[0] <= 0xF4) {
        n = 4;
        lo = p[0] == 0xF0 ? 0x90 : 0x80; /* no overlongs */
        hi = p[0] == 0xF4 ? 0x8F : 0xBF; /* nothing above U+10FFFF */
    } else {
        return 0;
    }
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

/* Copies src into dst[size], replacing bytes that are not UTF-8 with '?'
 * and never splitting a character, so the HTTP layer can put field and
 * detail into a JSON problem document as they are. Field names come from
 * the client and jansson's messages quote raw input. */
static void copy_utf8(char *dst, size_t size, const char *src)
{
    const unsigned char *p = (const unsigned char *)src;
    size_t o = 0;

    while (*p) {
        size_t n = utf8_seq(p);
        if (o + (n ? n : 1) >= size)
            break;
        if (n == 0) {
            dst[o++] = '?';
            p++;
        } else {
            memcpy(dst + o, p, n);
            o += n;
            p += n;
        }
    }
    dst[o] = '\0';
}

/* Fills err (status 400) and returns -EINVAL. */
__attribute__((format(printf, 3, 4))) static int fail(spec_error *err, const char *field,
                                                      const char *fmt, ...)
{
    char detail[sizeof err->detail];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    err->status = 400;
    copy_utf8(err->field, sizeof err->field, field);
    copy_utf8(err->detail, sizeof err->detail, detail);
    return -EINVAL;
}

/* ---- small checks ------------------------------------------------------ */

/* Dumps j into a buffer of ours (free()), whatever allocator jansson uses. */
/* One pass (json_dumpb would need a second one to size the buffer).
 * jansson allocates with malloc, so the text is free()d like ours. */
static char *dump(const json_t *j, size_t flags, size_t *len)
{
    char *buf = json_dumps(j, flags);

    if (!buf)
        abort(); /* only out of memory: the tree was built or parsed by jansson */
    if (len)
        *len = strlen(buf);
    return buf;
}

/* ---- sorted compact JSON, written by hand -------------------------------
 *
 * Exactly what json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY)
 * writes (tests/unit/test_spec.c checks that against jansson), without its
 * per-character UTF-8 decoding, per-token buffer calls and key-array
 * allocation: dumping the canonical and stored forms was 15 % of the CPU a
 * create costs (perf, workload R). Strings from jansson are valid UTF-8, so
 * only '"', '\\' and control characters need escaping; reals keep jansson's
 * own formatting. */
static int key_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void jb_value(jbuf *b, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v), i = 0;
        const char *stack[16], **keys = n <= 16 ? stack : xmalloc(n * sizeof *keys), *key;
        json_t *m;
        json_object_foreach((json_t *)v, key, m) keys[i++] = key;
        qsort(keys, n, sizeof *keys, key_cmp);
        jb_put(b, "{", 1);
        for (i = 0; i < n; i++) {
            if (i)
                jb_put(b, ",", 1);
            jb_str(b, keys[i], strlen(keys[i]));
            jb_put(b, ":", 1);
            jb_value(b, json_object_get(v, keys[i]));
        }
        jb_put(b, "}", 1);
        if (keys != stack)
            free(keys);
        break;
    }
    case JSON_ARRAY:
        jb_put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                jb_put(b, ",", 1);
            jb_value(b, json_array_get(v, i));
        }
        jb_put(b, "]", 1);
        break;
    case JSON_STRING:
        jb_str(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        jb_int(b, json_integer_value(v));
        break;
    case JSON_REAL: {
        char *t = dump(v, JSON_COMPACT | JSON_ENCODE_ANY, NULL);
        jb_put(b, t, strlen(t));
        free(t);
        break;
    }
    case JSON_TRUE:
        jb_put(b, "true", 4);
        break;
    case JSON_FALSE:
        jb_put(b, "false", 5);
        break;
    case JSON_NULL:
        jb_put(b, "null", 4);
        break;
    }
}

/* v as sorted compact JSON, NUL-terminated, in a buffer of ours (free()). */
static char *dump_sorted(const json_t *v, size_t *len)
{
    jbuf b = {0};
    jb_value(&b, v);
    jb_put(&b, "", 1);
    if (len)
        *len = b.n - 1;
    return b.p;
}


/* Sets member k to the text in b (taken). */
static void member_set(parse_ctx *c, enum member_key k, jbuf *b, int dflt)
{
    free(c->m[k].text);
    jb_put(b, "", 1);
    c->m[k] = (struct member){b->p, b->n - 1, dflt};
    *b = (jbuf){0};
}

static void member_str(parse_ctx *c, enum member_key k, const char *v, size_t len, int dflt)
{
    jbuf b = {0};
    jb_str(&b, v, len);
    member_set(c, k, &b, dflt);
}

static int64_t cap_int64(uint64_t v) { return v > INT64_MAX ? INT64_MAX : (int64_t)v; }

/* Reads an integer in lo..hi from v into *out. */
static int get_int(spec_error *err, const char *path, json_t *v, int64_t lo, uint64_t hi,
                   int64_t *out)
{
    int64_t max = cap_int64(hi);

    if (!json_is_integer(v))
        return fail(err, path, "%s must be an integer", path);
    if (json_integer_value(v) < lo || json_integer_value(v) > max) {
        if (max == INT64_MAX)
            return fail(err, path, "%s must be at least %" PRId64, path, lo);
        return fail(err, path, "%s must be an integer from %" PRId64 " to %" PRId64, path, lo,
                    max);
    }
    *out = json_integer_value(v);
    return 0;
}

/* 1 if s is 1..max characters of [A-Za-z0-9] and punct. */
static int name_valid(const char *s, size_t max, const char *punct)
{
    size_t n = 0;

    if (!s)
        return 0;
    for (; s[n]; n++) {
        char ch = s[n];
        int alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (n == max || (!alnum && !strchr(punct, ch)))
            return 0;
    }
    return n > 0;
}

int spec_id_valid(const char *id) { return name_valid(id, SPEC_ID_MAX, "._:-"); }

int spec_queue_valid(const char *q) { return name_valid(q, 64, "._-"); }

int spec_lookup_id_valid(const char *id)
{
    const char *sep = id ? strchr(id, SPEC_CALLBACK_SEP) : NULL;
    if (!sep)
        return spec_id_valid(id);
    char parent[SPEC_ID_MAX + 1];
    if ((size_t)(sep - id) > SPEC_ID_MAX)
        return 0;
    snprintf(parent, sizeof parent, "%.*s", (int)(sep - id), id);
    const char *ev = sep + 1, *dot;
    if (strncmp(ev, "on_success.", 11) == 0)
        dot = ev + 10;
    else if (strncmp(ev, "on_failure.", 11) == 0)
        dot = ev + 10;
    else
        return 0;
    size_t digits = strspn(dot + 1, "0123456789");
    return spec_id_valid(parent) && digits > 0 && digits <= 10 && dot[1 + digits] == '\0';
}

/* Rejects members of obj for which known() is 0, naming prefix + key. */
static int check_keys(spec_error *err, json_t *obj, const char *prefix, int (*known)(const char *))
{
    const char *key;
    json_t *v;

    json_object_foreach(obj, key, v) {
        if (!known(key)) {
            char path[PATH_SIZE];
            snprintf(path, sizeof path, "%s%s", prefix, key);
            return fail(err, path, "unknown field");
        }
    }
    return 0;
}

/* ---- url --------------------------------------------------------------- */

static int has_part(CURLU *u, CURLUPart part)
{
    char *p = NULL;
    CURLUcode rc = curl_url_get(u, part, &p, 0);

    curl_free(p);
    return rc == CURLUE_OK;
}

/* A URL may name port 0 (curl parses it), but every connect to it fails. */
static int port_is_zero(CURLU *u)
{
    char *p = NULL;
    int zero = curl_url_get(u, CURLUPART_PORT, &p, CURLU_NO_DEFAULT_PORT) == CURLUE_OK && strtoul(p, NULL, 10) == 0;

    curl_free(p);
    return zero;
}

/* Uses curl's own parser so that what passes here is exactly what the
 * dispatcher's curl will accept. */
/* The text itself must read scheme://authority: curl alone would take
 * "http:///x" as host "x" and "http:x" as a relative form. */
static int has_authority(const char *url)
{
    const char *p = strncasecmp(url, "http://", 7) == 0    ? url + 7
                    : strncasecmp(url, "https://", 8) == 0 ? url + 8
                                                           : NULL;
    return p && *p && *p != '/' && *p != '?' && *p != '#';
}

/* 1 when every byte of host is ASCII. */
static int host_is_ascii(const char *host)
{
    for (; *host; host++)
        if ((unsigned char)*host >= 0x80)
            return 0;
    return 1;
}

/* The destination policy at creation time (netpolicy.h): a host that is a
 * forbidden IP literal or localhost is refused here, so the client hears of
 * it now rather than from a failed attempt later. Host names are checked
 * again, by address, when the dispatcher connects.
 *
 * A host must also be ASCII. curl converts an internationalised name to its
 * xn-- form through the process locale, which is "C" here (the service
 * never calls setlocale), so the dispatcher could never send such a URL;
 * and a host like "１２７.0.0.1" (fullwidth digits) would dodge the literal
 * check above while IDNA maps it to 127.0.0.1. The client can give the xn--
 * form, which is exactly what DNS would be asked for. */
static int check_host(spec_error *err, const char *field, CURLU *u, const struct netpolicy *policy)
{
    char *host = NULL;
    int rc = 0;

    if (curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        const char *why = netpolicy_host_refusal(policy, host);
        if (!host_is_ascii(host))
            rc = fail(err, field, "the host of %s must be ASCII: give an internationalised name in its xn-- "
                      "(punycode) form", field);
        else if (why)
            rc = fail(err, field, "destination %.100s is not allowed (%s); see HOOKWHEEL_DESTINATION_ALLOWLIST",
                      host, why);
    }
    curl_free(host);
    return rc;
}

/* The last few URLs that passed, per thread. Timers mostly call a few
 * URLs, and curl's parse of one was ~5 % of a create's CPU (perf, workload
 * R). The check depends only on the text and the policy (a host name is not
 * resolved here), so the same text under the same policy passes again. */
#define URL_SEEN 4
#define URL_SEEN_MAX 256 /* longer URLs are checked every time */
static _Thread_local struct {
    const struct netpolicy *policy;
    char url[URL_SEEN_MAX];
} url_seen[URL_SEEN];
static _Thread_local unsigned url_seen_next;

static int url_was_seen(const char *url, size_t len, const struct netpolicy *policy)
{
    for (unsigned i = 0; i < URL_SEEN && len < URL_SEEN_MAX; i++)
        if (url_seen[i].url[0] && url_seen[i].policy == policy && memcmp(url_seen[i].url, url, len + 1) == 0)
            return 1;
    return 0;
}

int spec_check_url(spec_error *err, const char *field, const char *url, const struct netpolicy *policy)
{
    size_t len = strlen(url);
    if (url_was_seen(url, len, policy))
        return 0;
    CURLU *u = need(curl_url());
    char *scheme = NULL;
    int rc = -EINVAL;
    CURLUcode uc = curl_url_set(u, CURLUPART_URL, url, 0);

    if (uc == CURLUE_UNSUPPORTED_SCHEME || uc == CURLUE_BAD_SCHEME)
        fail(err, field, "only http and https URLs are allowed");
    else if (uc != CURLUE_OK)
        fail(err, field, "%s is not a valid URL (%s)", field, curl_url_strerror(uc));
    else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
             (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0))
        fail(err, field, "only http and https URLs are allowed");
    else if (!has_part(u, CURLUPART_HOST) || !has_authority(url))
        fail(err, field, "%s must have a host", field);
    else if (has_part(u, CURLUPART_USER) || has_part(u, CURLUPART_PASSWORD))
        fail(err, field, "user-info in URLs is not allowed");
    else if (port_is_zero(u))
        fail(err, field, "%s has port 0, which no target can listen on", field);
    else
        rc = policy ? check_host(err, field, u, policy) : 0;
    curl_free(scheme);
    curl_url_cleanup(u);
    if (rc == 0 && len > 0 && len < URL_SEEN_MAX) {
        unsigned i = url_seen_next++ % URL_SEEN;
        url_seen[i].policy = policy;
        memcpy(url_seen[i].url, url, len + 1);
    }
    return rc;
}

static int parse_url(parse_ctx *c, const char *name, json_t *v)
{
    if (!v)
        return fail(c->err, name, "url is required");
    if (!json_is_string(v))
        return fail(c->err, name, "url must be a string");
    if (json_string_length(v) > c->lim->max_url_len)
        return fail(c->err, name, "url is longer than %zu bytes", c->lim->max_url_len);
    if (spec_check_url(c->err, "url", json_string_value(v), c->lim->policy) < 0)
        return -EINVAL;
    c->s->url = xstrdup(json_string_value(v));
    member_str(c, M_URL, json_string_value(v), json_string_length(v), 0);
    return 0;
}

/* ---- method, id, queue, timeout --------------------------------------- */

static int parse_method(parse_ctx *c, const char *name, json_t *v)
{
    static const char *const methods[] = {"GET",   "HEAD",   "POST",    "PUT",
                                          "PATCH", "DELETE", "OPTIONS", NULL};
    const char *m = v ? json_string_value(v) : "POST";

    for (size_t i = 0; m && methods[i]; i++) {
        if (strcmp(m, methods[i]) == 0) {
            strcpy(c->s->method, methods[i]);
            member_str(c, M_METHOD, m, strlen(m), i == 2 /* POST */);
            return 0;
        }
    }
    return fail(c->err, name, "method must be one of GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS");
}

/* The id is not part of the canonical form: it names the spec. */
static int parse_id(parse_ctx *c, const char *name, json_t *v)
{
    if (!v)
        return 0;
    if (!spec_id_valid(json_string_value(v)))
        return fail(c->err, name,
                    "id must be 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'");
    /* A lease's on_expire timer is lease:<key>:<token> (service/leases.c); a
     * client's timer of that id would make the expiry's create a conflict. */
    if (strncmp(json_string_value(v), SPEC_RESERVED_ID_PREFIX, strlen(SPEC_RESERVED_ID_PREFIX)) == 0)
        return fail(c->err, name, "ids that begin with lease: are reserved for the on_expire timers of leases");
    c->s->id = xstrdup(json_string_value(v));
    return 0;
}

static int parse_queue(parse_ctx *c, const char *name, json_t *v)
{
    const char *q = v ? json_string_value(v) : "default";

    if (!spec_queue_valid(q))
        return fail(c->err, name,
                    "queue must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' or '-'");
    c->s->queue = xstrdup(q);
    member_str(c, M_QUEUE, q, strlen(q), strcmp(q, "default") == 0);
    return 0;
}

static int parse_timeout(parse_ctx *c, const char *name, json_t *v)
{
    int64_t t = c->lim->default_timeout_ms;

    if (v && get_int(c->err, name, v, 1, c->lim->max_timeout_ms, &t) < 0)
        return -EINVAL;
    c->s->timeout_ms = (uint32_t)t;
    jbuf b = {0};
    jb_int(&b, t);
    member_set(c, M_TIMEOUT, &b, t == SPEC_DEFAULT_TIMEOUT_MS);
    return 0;
}

/* ---- headers ----------------------------------------------------------- */

/* RFC 9110 tchar. */
static int is_token(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++) {
        char ch = *s;
        int alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (!alnum && !strchr("!#$%&'*+-.^_`|~", ch))
            return 0;
    }
    return 1;
}

/* Headers that hookwheel or the HTTP client set, or that would change the
 * framing of the outbound request. With underscores set, a name with '_' for
 * '-' is reserved too: CGI-style receivers (WSGI, PHP, Rack) read
 * "Hookwheel_Attempt" as HTTP_HOOKWHEEL_ATTEMPT, as they read hookwheel's own
 * "Hookwheel-Attempt", and would take the timer's, sent first, for it. */
static int is_reserved(const char *name, int underscores)
{
    static const char *const reserved[] = {
        "Host",    "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
        "Proxy-Connection", "TE", "Trailer", "Upgrade", "Expect", NULL};

    if (underscores && strchr(name, '_')) {
        char *dashed = xstrdup(name);
        for (char *p = dashed; *p; p++)
            if (*p == '_')
                *p = '-';
        int r = is_reserved(dashed, 0);
        free(dashed);
        return r;
    }
    for (size_t i = 0; reserved[i]; i++)
        if (strcasecmp(name, reserved[i]) == 0)
            return 1;
    return strncasecmp(name, "webhook-", 8) == 0 || strncasecmp(name, "Hookwheel-", 10) == 0;
}

/* Field values may hold HTAB and visible bytes, never CR, LF, NUL or other
 * controls: those would split or truncate the outbound request. */
static int value_valid(const char *v, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)v[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7F)
            return 0;
    }
    return 1;
}

/* 1 if a header accepted so far has this name, ignoring case. */
static int seen_header(const timer_spec *s, const char *name)
{
    size_t n = strlen(name);

    for (uint32_t i = 0; i < s->nheaders; i++)
        if (strncasecmp(s->headers[i], name, n) == 0 && s->headers[i][n] == ':')
            return 1;
    return 0;
}

static int check_header(parse_ctx *c, const char *name, json_t *v)
{
    char path[PATH_SIZE];

    snprintf(path, sizeof path, "headers.%s", name);
    if (!json_is_string(v))
        return fail(c->err, path, "header values must be strings");
    if (!is_token(name))
        return fail(c->err, path, "header names must be HTTP tokens (no spaces or separators)");
    /* a stored timer keeps the names it was created with */
    if (is_reserved(name, c->lim != &no_limits))
        return fail(c->err, path, "this header name is reserved");
    if (seen_header(c->s, name))
        return fail(c->err, path, "this header is given twice (names are case-insensitive)");
    if (!value_valid(json_string_value(v), json_string_length(v)))
        return fail(c->err, path, "header values must not contain CR, LF or other control characters");
    if (strlen(name) + json_string_length(v) > c->lim->max_header_bytes)
        return fail(c->err, path, "header name and value are longer than %zu bytes",
                    c->lim->max_header_bytes);
    return 0;
}

static char *header_line(const char *name, json_t *v)
{
    size_t n = strlen(name), len = json_string_length(v);
    char *line = xmalloc(n + 2 + len + 1);

    memcpy(line, name, n);
    memcpy(line + n, ": ", 2);
    memcpy(line + n + 2, json_string_value(v), len + 1);
    return line;
}

static int parse_headers(parse_ctx *c, const char *name, json_t *v)
{
    json_t *value;
    const char *key;
    jbuf b = {0};

    if (!v) {
        jb_put(&b, "{}", 2);
        member_set(c, M_HEADERS, &b, 1);
        return 0;
    }
    if (!json_is_object(v))
        return fail(c->err, name, "headers must be an object of strings");
    if (json_object_size(v) > c->lim->max_headers)
        return fail(c->err, name, "at most %" PRIu32 " headers are allowed", c->lim->max_headers);
    if (json_object_size(v) > 0)
        c->s->headers = xcalloc(json_object_size(v), sizeof *c->s->headers);
    json_object_foreach(v, key, value) {
        if (check_header(c, key, value) < 0)
            return -EINVAL;
        c->s->headers[c->s->nheaders++] = header_line(key, value);
        c->s->has_content_type |= strcasecmp(key, "Content-Type") == 0;
    }
    jb_value(&b, v); /* every member a valid header, so the whole object as it is */
    member_set(c, M_HEADERS, &b, c->s->nheaders == 0);
    return 0;
}

/* ---- body -------------------------------------------------------------- */

static int parse_body(parse_ctx *c, const char *name, json_t *v)
{
    if (!v)
        return 0;
    if (!json_is_string(v))
        return fail(c->err, name, "body must be a string (use json for a JSON value)");
    c->s->body_len = json_string_length(v);
    c->s->body = xstrndup(json_string_value(v), c->s->body_len);
    member_str(c, M_BODY, c->s->body, c->s->body_len, 0);
    return 0;
}

/* 1 when v nests no more than `room` arrays and objects deep (a scalar is
 * depth 0, [] and {} are 1). Recursion is bounded by jansson's own parse
 * depth (2048) and stops one level past room. */
static int depth_within(json_t *v, int room)
{
    size_t i;
    const char *key;
    json_t *item;

    if (!json_is_array(v) && !json_is_object(v))
        return 1;
    if (room == 0)
        return 0;
    if (json_is_array(v)) {
        json_array_foreach(v, i, item)
            if (!depth_within(item, room - 1))
                return 0;
    } else {
        json_object_foreach(v, key, item)
            if (!depth_within(item, room - 1))
                return 0;
    }
    return 1;
}

/* Sorted keys, so the body is the same whether it comes from the request or
 * from the stored canonical form, which the engine sends from. The nesting
 * cap holds for client input only: a spec stored before it existed still
 * runs. */
static int parse_json(parse_ctx *c, const char *name, json_t *v)
{
    if (!v)
        return 0;
    if (c->v[F_BODY])
        return fail(c->err, name, "give either body or json, not both");
    if (c->lim != &no_limits && !depth_within(v, SPEC_MAX_JSON_DEPTH))
        return fail(c->err, name, "json nests arrays and objects more than %d deep", SPEC_MAX_JSON_DEPTH);
    c->s->body = dump_sorted(v, &c->s->body_len);
    c->s->body_is_json = 1;
    jbuf b = {0};
    jb_put(&b, c->s->body, c->s->body_len);
    member_set(c, M_JSON, &b, 0);
    return 0;
}

/* ---- due time ---------------------------------------------------------- */

/* delay_ms is kept as given in the canonical form, so two requests with the
 * same delay are the same spec whenever they arrive. */
static int time_delay(parse_ctx *c, const char *name, json_t *v)
{
    int64_t d = 0;
    uint64_t room = c->now_ms > INT64_MAX ? 0 : INT64_MAX - c->now_ms;

    if (json_is_integer(v) && json_integer_value(v) < 0) /* (get_int would name room, not the limit) */
        return fail(c->err, name, "%s must be an integer from 0 to %" PRIu64 " (the maximum delay)", name,
                    c->lim->max_delay_ms < room ? c->lim->max_delay_ms : room);
    if (get_int(c->err, name, v, 0, room, &d) < 0)
        return -EINVAL;
    c->s->fire_at_ms = (int64_t)c->now_ms + d;
    snprintf(c->s->when, sizeof c->s->when, "delay_ms=%" PRId64, d);
    return 0;
}

static int time_fire_at(parse_ctx *c, const char *name, json_t *v)
{
    int64_t ms = 0;

    if (!json_is_string(v) || clock_parse_rfc3339(json_string_value(v), &ms) < 0)
        return fail(c->err, name,
                    "fire_at must be an RFC 3339 date-time such as 2026-01-02T03:04:05Z");
    if (ms < 0)
        return fail(c->err, name, "fire_at must not be before 1970-01-01T00:00:00Z");
    c->s->fire_at_ms = ms;
    snprintf(c->s->when, sizeof c->s->when, "fire_at_ms=%" PRId64, ms);
    return 0;
}

static int time_fire_at_ms(parse_ctx *c, const char *name, json_t *v)
{
    int64_t ms = 0;

    if (get_int(c->err, name, v, 0, INT64_MAX, &ms) < 0)
        return -EINVAL;
    c->s->fire_at_ms = ms;
    snprintf(c->s->when, sizeof c->s->when, "fire_at_ms=%" PRId64, ms);
    return 0;
}

static const struct {
    const char *name;
    field_fn parse;
    enum field_key key;
} time_fields[] = {
    {"delay_ms", time_delay, F_DELAY_MS},
    {"fire_at", time_fire_at, F_FIRE_AT},
    {"fire_at_ms", time_fire_at_ms, F_FIRE_AT_MS},
};

/* Resolves the one time field given. Past due times are allowed: the timer
 * fires as soon as possible. */
static int parse_time(parse_ctx *c, const char *unused_name, json_t *unused_v)
{
    size_t n = sizeof time_fields / sizeof *time_fields, chosen = n;
    uint64_t fire;

    (void)unused_name;
    (void)unused_v;
    for (size_t i = 0; i < n; i++) {
        if (!c->v[time_fields[i].key])
            continue;
        if (chosen < n)
            return fail(c->err, time_fields[i].name,
                        "give only one of delay_ms, fire_at or fire_at_ms");
        chosen = i;
    }
    if (chosen == n && c->lim == &no_limits) { /* a stored spec: the caller has the due time */
        c->s->fire_at_ms = (int64_t)c->now_ms;
        return 0;
    }
    json_t *rep = c->v[F_REPEAT];
    if (json_is_object(rep) && json_object_get(rep, "cron")) { /* parse_calendar sets the first slot */
        if (chosen < n)
            return fail(c->err, time_fields[chosen].name,
                        "a calendar schedule (repeat.cron) runs at its slots: give no delay_ms, fire_at or "
                        "fire_at_ms (repeat.start_at sets where the slots begin)");
        return 0;
    }
    if (chosen == n)
        return fail(c->err, "delay_ms", "one of delay_ms, fire_at or fire_at_ms is required");
    const char *name = time_fields[chosen].name;
    if (time_fields[chosen].parse(c, name, c->v[time_fields[chosen].key]) < 0)
        return -EINVAL;
    fire = (uint64_t)c->s->fire_at_ms;
    if (fire > c->now_ms && fire - c->now_ms > c->lim->max_delay_ms)
        return fail(c->err, name, "due time is beyond the maximum delay of %" PRIu64 " ms",
                    c->lim->max_delay_ms);
    return 0;
}

/* ---- retry ------------------------------------------------------------- */

static int is_retry_member(const char *key)
{
    return strcmp(key, "max_attempts") == 0 || strcmp(key, "min_backoff_ms") == 0 ||
           strcmp(key, "max_backoff_ms") == 0 || strcmp(key, "max_duration_ms") == 0;
}

/* Reads retry.<key> into *out if present; *out keeps its default if not. */
static int retry_int(parse_ctx *c, json_t *retry, const char *key, int64_t lo, uint64_t hi,
                     int64_t *out)
{
    json_t *v = retry ? json_object_get(retry, key) : NULL;
    if (!v)
        return 0;
    char path[32]; /* (made only when the key is there: a batch checks thousands of specs) */
    snprintf(path, sizeof path, "retry.%s", key);
    return get_int(c->err, path, v, lo, hi, out);
}

static int parse_retry(parse_ctx *c, const char *name, json_t *v)
{
    const spec_limits *l = c->lim;
    int64_t attempts = l->default_max_attempts;
    int64_t min = cap_int64(l->default_min_backoff_ms), max = cap_int64(l->default_max_backoff_ms);
    int64_t duration = 0; /* none: the count alone bounds the retries */

    if (v && !json_is_object(v))
        return fail(c->err, name, "retry must be an object");
    if (v && check_keys(c->err, v, "retry.", is_retry_member) < 0)
        return -EINVAL;
    if (retry_int(c, v, "max_attempts", 1, l->max_attempts, &attempts) < 0 ||
        retry_int(c, v, "min_backoff_ms", 0, l->max_backoff_cap_ms, &min) < 0 ||
        retry_int(c, v, "max_backoff_ms", 0, l->max_backoff_cap_ms, &max) < 0 ||
        retry_int(c, v, "max_duration_ms", 1, l->max_delay_ms, &duration) < 0)
        return -EINVAL;
    if (!(v && json_object_get(v, "max_backoff_ms")) && max < min)
        max = min; /* only min given, above the default max: widen the default */
    if (max < min)
        return fail(c->err, "retry.max_backoff_ms",
                    "retry.max_backoff_ms must be at least retry.min_backoff_ms");
    c->s->max_attempts = (uint32_t)attempts;
    c->s->min_backoff_ms = (uint64_t)min;
    c->s->max_backoff_ms = (uint64_t)max;
    c->s->max_duration_ms = (uint64_t)duration;
    jbuf b = {0}; /* keys in sorted order */
    jb_put(&b, "{\"max_attempts\":", 16);
    jb_int(&b, attempts);
    jb_put(&b, ",\"max_backoff_ms\":", 18);
    jb_int(&b, max);
    if (duration) {
        jb_put(&b, ",\"max_duration_ms\":", 19);
        jb_int(&b, duration);
    }
    jb_put(&b, ",\"min_backoff_ms\":", 18);
    jb_int(&b, min);
    jb_put(&b, "}", 1);
    member_set(c, M_RETRY, &b,
               attempts == SPEC_DEFAULT_MAX_ATTEMPTS && min == SPEC_DEFAULT_MIN_BACKOFF_MS &&
                   max == SPEC_DEFAULT_MAX_BACKOFF_MS && !duration);
    return 0;
}

/* ---- repeat ------------------------------------------------------------ */

static int is_repeat_member(const char *key)
{
    static const char *const names[] = {"every_ms", "mode",     "times",       "cron",        "tz",
                                        "dst_gap",  "dst_overlap", "start_at", "start_at_ms", "end_at",
                                        "end_at_ms", "misfire"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(key, names[i]) == 0)
            return 1;
    return 0;
}

/* One of the strings in names[n] (the first, names[0], when v is absent):
 * its index, or -1 after fail(). */
static int get_choice(spec_error *err, const char *path, json_t *v, const char *const *names, int n)
{
    if (!v)
        return 0;
    const char *t = json_string_value(v);
    for (int i = 0; t && i < n; i++)
        if (strcmp(t, names[i]) == 0)
            return i;
    return fail(err, path, "%s must be %s or %s", path, names[0], names[1]), -1;
}

/* A bound of a calendar schedule: `<name>` (RFC 3339) or `<name>_ms` (epoch
 * ms), at most one of them; 0 when neither is given. */
static int get_bound(parse_ctx *c, json_t *rep, const char *name, int64_t *out)
{
    char key_ms[24], path[40], path_ms[40];
    snprintf(key_ms, sizeof key_ms, "%s_ms", name);
    snprintf(path, sizeof path, "repeat.%s", name);
    snprintf(path_ms, sizeof path_ms, "repeat.%s", key_ms);
    json_t *v = json_object_get(rep, name), *vms = json_object_get(rep, key_ms);
    int64_t ms = 0, i = 0;
    *out = 0;
    if (v && vms)
        return fail(c->err, path, "give only one of %s or %s", path, path_ms);
    if (v && (!json_is_string(v) || clock_parse_rfc3339(json_string_value(v), &ms) < 0))
        return fail(c->err, path, "%s must be an RFC 3339 date-time", path);
    if (v && ms < 1)
        return fail(c->err, path, "%s must be after 1970-01-01T00:00:00Z", path);
    if (vms && get_int(c->err, path_ms, vms, 1, INT64_MAX, &i) < 0)
        return -EINVAL;
    *out = vms ? i : ms;
    return 0;
}

int spec_next_slot(const timer_spec *s, int64_t after_ms, int64_t *next_ms, int *flags)
{
    cron_instant in;
    if (!s->cron_x)
        return -1;
    if (s->start_at_ms && after_ms < s->start_at_ms - 1)
        after_ms = s->start_at_ms - 1;
    if (cron_next(s->cron_x, s->tz, (enum cron_gap)s->dst_gap, (enum cron_overlap)s->dst_overlap, after_ms, &in) < 0)
        return -1;
    if (s->end_at_ms && in.utc_ms > s->end_at_ms)
        return -1;
    *next_ms = in.utc_ms;
    if (flags)
        *flags = in.flags;
    return 0;
}

static const char *const gap_names[] = {"shift", "skip"};         /* enum cron_gap */
static const char *const overlap_names[] = {"first", "both"};     /* enum cron_overlap */
static const char *const misfire_names[] = {"skip", "fire_once"};

/* repeat {cron, tz, dst_gap, dst_overlap, start_at, end_at, misfire, times}:
 * a calendar schedule. A new one's first run is its first slot from now
 * (or from start_at); the client gives no due time. */
static int parse_calendar(parse_ctx *c, json_t *v, json_t *cv)
{
    timer_spec *s = c->s;
    int64_t times = 0;
    if (json_object_get(v, "every_ms") || json_object_get(v, "mode"))
        return fail(c->err, json_object_get(v, "every_ms") ? "repeat.every_ms" : "repeat.mode",
                    "give either repeat.cron or repeat.every_ms (with repeat.mode), not both");
    const char *expr = json_string_value(cv);
    if (!expr)
        return fail(c->err, "repeat.cron", "repeat.cron must be a string");
    cron_error ce;
    if (cron_parse(expr, &s->cron_x, &ce) < 0)
        return fail(c->err, "repeat.cron", "%s (%s, position %d)", ce.msg, ce.field, ce.position);
    s->cron = xstrdup(expr);
    json_t *zv = json_object_get(v, "tz");
    const char *zone = zv ? json_string_value(zv) : "UTC";
    char zerr[128] = "";
    if (!zone)
        return fail(c->err, "repeat.tz", "repeat.tz must be a string (an IANA time zone name)");
    if (!(s->tz = tz_get(zone, zerr, sizeof zerr)))
        return fail(c->err, "repeat.tz", "%s", zerr);
    int gap = get_choice(c->err, "repeat.dst_gap", json_object_get(v, "dst_gap"), gap_names, 2),
        ov = gap < 0 ? -1 : get_choice(c->err, "repeat.dst_overlap", json_object_get(v, "dst_overlap"), overlap_names, 2),
        mf = ov < 0 ? -1 : get_choice(c->err, "repeat.misfire", json_object_get(v, "misfire"), misfire_names, 2);
    if (mf < 0)
        return -EINVAL;
    s->dst_gap = gap;
    s->dst_overlap = ov;
    s->misfire_fire_once = mf;
    if (get_bound(c, v, "start_at", &s->start_at_ms) < 0 || get_bound(c, v, "end_at", &s->end_at_ms) < 0)
        return -EINVAL;
    if (s->start_at_ms && s->end_at_ms && s->end_at_ms <= s->start_at_ms)
        return fail(c->err, "repeat.end_at", "repeat.end_at must be after repeat.start_at");
    json_t *tv = json_object_get(v, "times");
    if (tv && get_int(c->err, "repeat.times", tv, 1, UINT32_MAX, &times) < 0)
        return -EINVAL;
    s->times = (uint32_t)times;
    if (c->lim != &no_limits) { /* a new timer: its first run is its first slot */
        int64_t first, now = (int64_t)c->now_ms;
        if (spec_next_slot(s, now - 1, &first, NULL) < 0)
            return fail(c->err, "repeat.cron", "the schedule has no slot %s",
                        s->end_at_ms ? "before repeat.end_at" : "within the next 10 years");
        if (first > now && (uint64_t)(first - now) > c->lim->max_delay_ms)
            return fail(c->err, s->start_at_ms ? "repeat.start_at" : "repeat.cron",
                        "the first slot is beyond the maximum delay of %" PRIu64 " ms", c->lim->max_delay_ms);
        s->fire_at_ms = first;
        snprintf(s->when, sizeof s->when, "cron");
    }
    jbuf b = {0}; /* keys in sorted order */
    jb_put(&b, "{\"cron\":", 8);
    jb_str(&b, expr, strlen(expr));
    jb_put(&b, ",\"dst_gap\":", 11);
    jb_str(&b, gap_names[gap], strlen(gap_names[gap]));
    jb_put(&b, ",\"dst_overlap\":", 15);
    jb_str(&b, overlap_names[ov], strlen(overlap_names[ov]));
    if (s->end_at_ms) {
        jb_put(&b, ",\"end_at_ms\":", 13);
        jb_int(&b, s->end_at_ms);
    }
    jb_put(&b, ",\"misfire\":", 11);
    jb_str(&b, misfire_names[mf], strlen(misfire_names[mf]));
    if (s->start_at_ms) {
        jb_put(&b, ",\"start_at_ms\":", 15);
        jb_int(&b, s->start_at_ms);
    }
    if (times) {
        jb_put(&b, ",\"times\":", 9);
        jb_int(&b, times);
    }
    jb_put(&b, ",\"tz\":", 6);
    jb_str(&b, tz_name(s->tz), strlen(tz_name(s->tz)));
    jb_put(&b, "}", 1);
    member_set(c, M_REPEAT, &b, 0);
    return 0;
}

/* repeat {every_ms, mode: fixed_delay | fixed_rate, times}: a recurring
 * timer (recur.h has the rules). times absent means no limit. */
static int parse_repeat(parse_ctx *c, const char *name, json_t *v)
{
    int64_t every = 0, times = 0;
    const char *mode = "fixed_delay";

    if (!v)
        return 0;
    if (!json_is_object(v))
        return fail(c->err, name, "repeat must be an object");
    if (check_keys(c->err, v, "repeat.", is_repeat_member) < 0)
        return -EINVAL;
    json_t *cv = json_object_get(v, "cron");
    if (cv)
        return parse_calendar(c, v, cv);
    static const char *const calendar_only[] = {"tz", "dst_gap", "dst_overlap", "start_at", "start_at_ms",
                                                "end_at", "end_at_ms", "misfire"};
    for (size_t i = 0; i < sizeof calendar_only / sizeof *calendar_only; i++)
        if (json_object_get(v, calendar_only[i]))
            return fail(c->err, "repeat.cron", "repeat.%s belongs to a calendar schedule: give repeat.cron",
                        calendar_only[i]);
    json_t *ev = json_object_get(v, "every_ms"), *mv = json_object_get(v, "mode"),
           *tv = json_object_get(v, "times");
    if (!ev)
        return fail(c->err, "repeat.every_ms", "repeat.every_ms or repeat.cron is required");
    if (get_int(c->err, "repeat.every_ms", ev, SPEC_MIN_EVERY_MS, c->lim->max_delay_ms, &every) < 0)
        return -EINVAL;
    if (mv) {
        mode = json_string_value(mv);
        if (!mode || (strcmp(mode, "fixed_delay") != 0 && strcmp(mode, "fixed_rate") != 0))
            return fail(c->err, "repeat.mode", "repeat.mode must be fixed_delay or fixed_rate");
    }
    if (tv && get_int(c->err, "repeat.times", tv, 1, UINT32_MAX, &times) < 0)
        return -EINVAL;
    c->s->every_ms = (uint64_t)every;
    c->s->fixed_rate = strcmp(mode, "fixed_rate") == 0;
    c->s->times = (uint32_t)times;
    jbuf b = {0}; /* keys in sorted order */
    jb_put(&b, "{\"every_ms\":", 12);
    jb_int(&b, every);
    jb_put(&b, ",\"mode\":", 8);
    jb_str(&b, mode, strlen(mode));
    if (times) {
        jb_put(&b, ",\"times\":", 9);
        jb_int(&b, times);
    }
    jb_put(&b, "}", 1);
    member_set(c, M_REPEAT, &b, 0);
    return 0;
}

/* ---- callbacks ---------------------------------------------------------- */

/* on_success, on_failure: a URL called with a report when the timer ends
 * delivered or failed, under the rules of the timer's url. */
static int parse_callback(parse_ctx *c, const char *name, json_t *v)
{
    if (!v)
        return 0;
    if (!json_is_string(v))
        return fail(c->err, name, "%s must be a URL string", name);
    if (json_string_length(v) > c->lim->max_url_len)
        return fail(c->err, name, "%s is longer than %zu bytes", name, c->lim->max_url_len);
    if (spec_check_url(c->err, name, json_string_value(v), c->lim->policy) < 0)
        return -EINVAL;
    c->s->has_callbacks = 1;
    member_str(c, strcmp(name, "on_success") == 0 ? M_ON_SUCCESS : M_ON_FAILURE, json_string_value(v),
               json_string_length(v), 0);
    return 0;
}

/* ---- labels ------------------------------------------------------------ */

int spec_label_key_valid(const char *k) { return name_valid(k, SPEC_LABEL_KEY_MAX, "._-"); }

char *spec_label_line(const char *key, const char *value)
{
    size_t kl = strlen(key), vl = strlen(value);
    char *line = xmalloc(kl + 1 + vl + 1);
    memcpy(line, key, kl);
    line[kl] = ':';
    memcpy(line + kl + 1, value, vl + 1);
    return line;
}
int spec_label_value_valid(const char *v) { return name_valid(v, SPEC_LABEL_VALUE_MAX, "._:@+=-"); }

/* labels: {"key": "value", ...}, kept as "key:value" lines sorted by key
 * (jansson's object order is not the request's: the canonical form sorts). */
static int parse_labels(parse_ctx *c, const char *name, json_t *v)
{
    json_t *value;
    const char *key;
    char path[PATH_SIZE];

    if (!v || (json_is_object(v) && json_object_size(v) == 0))
        return 0; /* no labels: no member */
    if (!json_is_object(v))
        return fail(c->err, name, "labels must be an object of strings");
    if (json_object_size(v) > SPEC_MAX_LABELS)
        return fail(c->err, name, "at most %d labels are allowed", SPEC_MAX_LABELS);
    c->s->labels = xcalloc(json_object_size(v), sizeof *c->s->labels);
    json_object_foreach(v, key, value) {
        snprintf(path, sizeof path, "labels.%s", key);
        if (!spec_label_key_valid(key))
            return fail(c->err, path, "label keys must be 1 to %d characters of A-Z, a-z, 0-9, '.', '_' or '-'",
                        SPEC_LABEL_KEY_MAX);
        if (!json_is_string(value) || !spec_label_value_valid(json_string_value(value)))
            return fail(c->err, path,
                        "label values must be strings of 1 to %d characters of A-Z, a-z, 0-9 and . _ : @ + = -",
                        SPEC_LABEL_VALUE_MAX);
        c->s->labels[c->s->nlabels++] = spec_label_line(key, json_string_value(value));
    }
    qsort(c->s->labels, c->s->nlabels, sizeof *c->s->labels, key_cmp);
    jbuf b = {0};
    jb_value(&b, v);
    member_set(c, M_LABELS, &b, 0);
    return 0;
}

/* ---- the spec ---------------------------------------------------------- */

/* Every allowed top-level key, in the order errors are looked for. The time
 * fields are resolved together by parse_time under "delay_ms". */
static const struct {
    const char *name;
    size_t len;     /* strlen(name) */
    field_fn parse; /* NULL: handled by another entry */
} fields[F_COUNT] = {
#define FIELD(key, name, fn) [key] = {name, sizeof name - 1, fn}
    FIELD(F_URL, "url", parse_url),
    FIELD(F_METHOD, "method", parse_method),
    FIELD(F_HEADERS, "headers", parse_headers),
    FIELD(F_BODY, "body", parse_body),
    FIELD(F_JSON, "json", parse_json),
    FIELD(F_DELAY_MS, "delay_ms", parse_time),
    FIELD(F_FIRE_AT, "fire_at", NULL),
    FIELD(F_FIRE_AT_MS, "fire_at_ms", NULL),
    FIELD(F_ID, "id", parse_id),
    FIELD(F_TIMEOUT_MS, "timeout_ms", parse_timeout),
    FIELD(F_RETRY, "retry", parse_retry),
    FIELD(F_QUEUE, "queue", parse_queue),
    FIELD(F_REPEAT, "repeat", parse_repeat),
    FIELD(F_LABELS, "labels", parse_labels),
    FIELD(F_ON_SUCCESS, "on_success", parse_callback),
    FIELD(F_ON_FAILURE, "on_failure", parse_callback),
#undef FIELD
};

/* The field key names, or -1 (lengths and first bytes compared before
 * the bytes: this runs for every member of every spec). */
static int field_of(const char *key)
{
    size_t len = strlen(key);
    for (int i = 0; i < F_COUNT; i++)
        if (fields[i].len == len && fields[i].name[0] == key[0] && memcmp(fields[i].name, key, len) == 0)
            return i;
    return -1;
}

static int is_field(const char *key) { return field_of(key) >= 0; }

/* Fills c->v from c->root's members in one pass (rather than a lookup a
 * field) and rejects a member known() does not accept, as check_keys
 * does. */
static int collect_fields(parse_ctx *c, int (*known)(const char *))
{
    const char *key;
    json_t *v;
    json_object_foreach(c->root, key, v) {
        int i = field_of(key);
        if (i < 0 || (known != is_field && !known(key))) /* (is_field: field_of just said yes) */
            return check_keys(c->err, c->root, "", known); /* (names the first unknown member) */
        c->v[i] = v;
    }
    return 0;
}

static int parse_root(parse_ctx *c)
{
    if (!json_is_object(c->root))
        return fail(c->err, "", "request body must be a JSON object");
    if (collect_fields(c, is_field) < 0)
        return -EINVAL;
    for (int i = 0; i < F_COUNT; i++)
        if (fields[i].parse && fields[i].parse(c, fields[i].name, c->v[i]) < 0)
            return -EINVAL;
    return 0;
}

/* The canonical form and the stored form (spec.h: the canonical form less
 * its default members) from the members, in key order. */
static void dump_forms(parse_ctx *pc)
{
    size_t cap = 16;
    for (size_t k = 0; k < M_COUNT; k++)
        cap += pc->m[k].text ? pc->m[k].len + strlen(member_name[k]) + 4 : 0;
    jbuf c = {xmalloc(cap), 0, cap}, st = {xmalloc(cap), 0, cap};
    jb_put(&c, "{", 1);
    jb_put(&st, "{", 1);
    for (size_t k = 0; k < M_COUNT; k++) {
        const struct member *m = &pc->m[k];
        if (!m->text)
            continue;
        if (c.n > 1)
            jb_put(&c, ",", 1);
        size_t from = c.n;
        jb_put(&c, "\"", 1);
        jb_put(&c, member_name[k], strlen(member_name[k]));
        jb_put(&c, "\":", 2);
        jb_put(&c, m->text, m->len);
        if (!m->dflt) {
            if (st.n > 1)
                jb_put(&st, ",", 1);
            jb_put(&st, c.p + from, c.n - from);
        }
    }
    jb_put(&c, "}", 2); /* with the NUL */
    jb_put(&st, "}", 2);
    pc->s->canonical = c.p;
    pc->s->stored = st.p;
    pc->s->stored_len = st.n - 1;
}

static int parse_tree(json_t *root, const spec_limits *lim, uint64_t now_ms, timer_spec **out, spec_error *err);

/* 1 when a string in v holds a NUL character (jansson's JSON_ALLOW_NUL). */
static int holds_nul(json_t *v)
{
    const char *k;
    json_t *m;
    size_t i;

    if (json_is_string(v))
        return strlen(json_string_value(v)) != json_string_length(v);
    if (json_is_object(v)) {
        json_object_foreach(v, k, m)
            if (holds_nul(m))
                return 1;
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, m)
            if (holds_nul(m))
                return 1;
    }
    return 0;
}

/* 1 when a NUL character is anywhere but in the json member's value: the
 * rest of a spec is read as C strings. */
static int nul_outside_json(json_t *root)
{
    const char *k;
    json_t *m;

    if (!json_is_object(root))
        return 1;
    json_object_foreach(root, k, m)
        if (strcmp(k, "json") != 0 && holds_nul(m))
            return 1;
    return 0;
}

int spec_parse(const char *json, size_t len, const spec_limits *lim, uint64_t now_ms,
               timer_spec **out, spec_error *err)
{
    json_error_t jerr;
    json_t *root = json_load_fast(json, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    /* A stored spec (no limits) may hold \u0000 that no client sent: a
     * callback's report (its json member) embeds last_attempt, whose
     * response_snippet keeps a NUL byte of the target's answer (a binary
     * body) as \u0000. Clients are still refused one; stored specs are read
     * again allowing it there only, and only then, as jansson's
     * NUL-allowing parse is not the fast one. */
    if (!root && !lim && json_error_code(&jerr) == json_error_null_character) {
        json_error_t again;
        root = json_loadb(json, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &again);
        if (root && nul_outside_json(root)) {
            json_decref(root);
            root = NULL;
        }
    }
    if (!root)
        return fail(err, "", "malformed JSON: %s at line %d, column %d", jerr.text, jerr.line,
                    jerr.column);
    return parse_tree(root, lim, now_ms, out, err);
}

int spec_parse_value(json_t *v, const spec_limits *lim, uint64_t now_ms, timer_spec **out, spec_error *err)
{
    return parse_tree(json_incref(v), lim, now_ms, out, err);
}

/* Takes root. */
static int parse_tree(json_t *root, const spec_limits *lim, uint64_t now_ms, timer_spec **out, spec_error *err)
{
    parse_ctx c = {.lim = lim ? lim : &no_limits, .now_ms = now_ms, .err = err, .root = root};
    int rc = -EINVAL;

    c.s = xcalloc(1, sizeof *c.s);
    if (parse_root(&c) < 0)
        goto out;
    dump_forms(&c);
    if (c.lim->max_stored_bytes && c.s->stored_len > c.lim->max_stored_bytes) {
        /* POST /timers bounds a timer by its request body; a batch item or a
         * schedule's template is bounded the same way by what it stores. */
        fail(err, "", "the timer is %zu bytes as stored, over the %zu a timer may have (HOOKWHEEL_MAX_BODY_BYTES)",
             c.s->stored_len, c.lim->max_stored_bytes);
        err->status = 413;
        goto out;
    }
    *out = c.s;
    c.s = NULL;
    rc = 0;
out:
    spec_free(c.s);
    for (size_t k = 0; k < M_COUNT; k++)
        free(c.m[k].text);
    json_decref(c.root);
    return rc;
}

static int is_time_field(const char *key)
{
    for (size_t i = 0; i < sizeof time_fields / sizeof *time_fields; i++)
        if (strcmp(key, time_fields[i].name) == 0)
            return 1;
    return 0;
}

int spec_parse_when(const char *json, size_t len, const spec_limits *lim, uint64_t now_ms,
                    int64_t *fire_ms, spec_error *err)
{
    parse_ctx c = {.lim = lim, .now_ms = now_ms, .err = err};
    json_error_t jerr;
    timer_spec s = {0};
    int rc = -EINVAL;

    c.root = json_load_fast(json, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!c.root)
        return fail(err, "", "malformed JSON: %s at line %d, column %d", jerr.text, jerr.line,
                    jerr.column);
    c.s = &s;
    if (!json_is_object(c.root))
        rc = fail(err, "", "request body must be a JSON object");
    else if (collect_fields(&c, is_time_field) == 0 && parse_time(&c, NULL, NULL) == 0) {
        *fire_ms = s.fire_at_ms;
        rc = 0;
    }
    json_decref(c.root);
    return rc;
}

void spec_free(timer_spec *s)
{
    if (!s)
        return;
    for (uint32_t i = 0; i < s->nheaders; i++)
        free(s->headers[i]);
    free(s->headers);
    for (uint32_t i = 0; i < s->nlabels; i++)
        free(s->labels[i]);
    free(s->labels);
    free(s->id);
    free(s->url);
    free(s->body);
    free(s->queue);
    free(s->canonical);
    free(s->stored);
    free(s->cron);
    cron_free(s->cron_x);
    free(s);
}
