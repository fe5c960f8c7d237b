/* lease_spec.c - validation of watchdog lease requests.
 *
 * One table of top-level fields, checked in table order after unknown keys
 * are rejected (as spec.c does for timers). on_expire is handed to
 * spec_parse itself, so it obeys exactly the rules of POST /timers; its
 * errors come back with their field prefixed by "on_expire.". */
#include "lease_spec.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "jsonload.h"
#include "netpolicy.h"
#include "xalloc.h"

typedef struct parse_ctx {
    const lease_limits *lim;
    uint64_t now_ms;
    json_t *root;
    lease_request *r;
    spec_error *err;
} parse_ctx;

typedef int (*field_fn)(parse_ctx *c, json_t *v);

/* Fills err (status 400) and returns -EINVAL. field and detail are ASCII
 * or already valid UTF-8 (spec_parse's), cut at a character boundary. */
__attribute__((format(printf, 3, 4))) static int fail(spec_error *err, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->detail, sizeof err->detail, fmt, ap);
    va_end(ap);
    err->status = 400;
    snprintf(err->field, sizeof err->field, "%s", field);
    return -EINVAL;
}

/* Cuts s back to a UTF-8 character boundary (snprintf may have split one). */
static void utf8_trim(char *s)
{
    size_t n = strlen(s), i = n;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
        i--;
    if (i > 0 && (unsigned char)s[i - 1] >= 0xC0) {
        unsigned char lead = (unsigned char)s[i - 1];
        size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
        if (n - (i - 1) < need)
            s[i - 1] = '\0';
    }
}

/* ---- names --------------------------------------------------------------- */

int lease_key_valid(const char *key)
{
    size_t n = 0;
    if (!key)
        return 0;
    for (; key[n]; n++) {
        char ch = key[n];
        int alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (n == LEASE_KEY_MAX || (!alnum && !strchr("._:-", ch)))
            return 0;
    }
    return n > 0;
}

int lease_owner_valid(const char *owner)
{
    size_t n = 0;
    if (!owner)
        return 0;
    for (; owner[n]; n++)
        if (n == LEASE_OWNER_MAX || (unsigned char)owner[n] < 0x21 || (unsigned char)owner[n] > 0x7E)
            return 0;
    return n > 0;
}

int lease_token_parse(const char *text, uint64_t *token)
{
    uint64_t v = 0;
    if (!text || !*text || strlen(text) > 19)
        return -EINVAL;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v == 0 || v > INT64_MAX)
        return -EINVAL;
    *token = v;
    return 0;
}

void lease_id(char *buf, const char *ns, const char *key)
{
    snprintf(buf, LEASE_ID_MAX, "%s%s%s", ns, ns[0] ? "/" : "", key);
}

const char *lease_id_key(const char *lid)
{
    const char *slash = strrchr(lid, '/');
    return slash ? slash + 1 : lid;
}

void lease_timer_id(char *buf, const char *lid, const char *token)
{
    const char *key = lease_id_key(lid);
    snprintf(buf, LEASE_TIMER_ID_MAX, "%.*slease:%s:%s", (int)(key - lid), lid, key, token);
}

uint64_t lease_when_delay(const char *when)
{
    uint64_t v = 0;
    if (!when || strncmp(when, "delay_ms=", 9) != 0)
        return 0;
    for (const char *p = when + 9; *p >= '0' && *p <= '9'; p++)
        v = v * 10 + (uint64_t)(*p - '0');
    return v;
}

/* ---- fields -------------------------------------------------------------- */

static int parse_key(parse_ctx *c, json_t *v)
{
    if (!v)
        return fail(c->err, "key", "key is required");
    if (!lease_key_valid(json_string_value(v)))
        return fail(c->err, "key", "key must be 1 to %d characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'",
                    LEASE_KEY_MAX);
    c->r->key = xstrdup(json_string_value(v));
    return 0;
}

static int parse_owner(parse_ctx *c, json_t *v)
{
    if (!v)
        return fail(c->err, "owner", "owner is required");
    if (!lease_owner_valid(json_string_value(v)))
        return fail(c->err, "owner", "owner must be 1 to %d visible ASCII characters (no spaces)",
                    LEASE_OWNER_MAX);
    c->r->owner = xstrdup(json_string_value(v));
    return 0;
}

uint64_t lease_min_ttl_ms(uint64_t tick_ms)
{
    return 3 * tick_ms > LEASE_TTL_MIN_MS ? 3 * tick_ms : LEASE_TTL_MIN_MS;
}

static int parse_ttl(parse_ctx *c, json_t *v)
{
    uint64_t min = c->lim->min_ttl_ms > LEASE_TTL_MIN_MS ? c->lim->min_ttl_ms : LEASE_TTL_MIN_MS;
    uint64_t max = c->lim->max_ttl_ms;
    if (!v)
        return fail(c->err, "ttl_ms", "ttl_ms is required");
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) < min ||
        (uint64_t)json_integer_value(v) > max)
        return fail(c->err, "ttl_ms", "ttl_ms must be an integer from %" PRIu64 " to %" PRIu64, min, max);
    c->r->ttl_ms = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_probe(parse_ctx *c, json_t *v)
{
    size_t max = c->lim->timer->max_url_len;
    if (!v) {
        c->r->probe_url = xstrdup("");
        return 0;
    }
    if (!json_is_string(v))
        return fail(c->err, "probe_url", "probe_url must be a string");
    if (json_string_length(v) > max)
        return fail(c->err, "probe_url", "probe_url is longer than %zu bytes", max);
    if (spec_check_url(c->err, "probe_url", json_string_value(v), c->lim->timer->policy) < 0)
        return -EINVAL; /* jansson refuses \u0000, so the C string is the whole value */
    c->r->probe_url = xstrdup(json_string_value(v));
    return 0;
}

/* Members of a timer spec that make no sense for a timer fired by an expiry. */
static const struct {
    const char *name, *why;
} expire_banned[] = {
    {"id", "the on_expire timer's id is lease:<key>:<token>"},
    {"fire_at", "on_expire fires when the lease expires; give delay_ms (counted from the expiry) instead"},
    {"fire_at_ms", "on_expire fires when the lease expires; give delay_ms (counted from the expiry) instead"},
    {"repeat", "on_expire is a one-shot timer"},
};

static int parse_on_expire(parse_ctx *c, json_t *v)
{
    char path[sizeof c->err->field + 16];
    spec_error e = {0};
    if (!v)
        return 0;
    if (!json_is_object(v))
        return fail(c->err, "on_expire", "on_expire must be an object (a timer spec, as for POST /timers)");
    for (size_t i = 0; i < sizeof expire_banned / sizeof *expire_banned; i++)
        if (json_object_get(v, expire_banned[i].name)) {
            snprintf(path, sizeof path, "on_expire.%s", expire_banned[i].name);
            return fail(c->err, path, "%s", expire_banned[i].why);
        }
    json_t *copy = json_copy(v); /* shallow: members are shared, not changed */
    if (!copy || (!json_object_get(copy, "delay_ms") && json_object_set_new(copy, "delay_ms", json_integer(0)) < 0))
        abort(); /* out of memory */
    char *text = json_dumps(copy, JSON_COMPACT);
    json_decref(copy);
    if (!text)
        abort();
    int rc = spec_parse(text, strlen(text), c->lim->timer, c->now_ms, &c->r->on_expire, &e);
    free(text);
    if (rc < 0) {
        snprintf(path, sizeof path, "on_expire%s%s", e.field[0] ? "." : "", e.field);
        rc = fail(c->err, path, "%s", e.detail);
        c->err->status = e.status;
        utf8_trim(c->err->field);
    }
    return rc;
}

static const struct {
    const char *name;
    field_fn parse;
} fields[] = {
    {"key", parse_key},
    {"owner", parse_owner},
    {"ttl_ms", parse_ttl},
    {"probe_url", parse_probe},
    {"on_expire", parse_on_expire},
};
#define NFIELDS (sizeof fields / sizeof *fields)

static int check_root(spec_error *err, json_t *root, const char *const *known, size_t n)
{
    const char *key;
    json_t *v;
    if (!json_is_object(root))
        return fail(err, "", "request body must be a JSON object");
    json_object_foreach(root, key, v) {
        size_t i = 0;
        while (i < n && strcmp(key, known[i]) != 0)
            i++;
        if (i == n) {
            int rc = fail(err, key, "unknown field");
            utf8_trim(err->field);
            return rc;
        }
    }
    return 0;
}

static json_t *load(const char *json, size_t len, spec_error *err)
{
    json_error_t jerr;
    json_t *root = json_load_fast(json, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        fail(err, "", "malformed JSON: %s at line %d, column %d", jerr.text, jerr.line, jerr.column);
        utf8_trim(err->detail);
    }
    return root;
}

int lease_request_parse(const char *json, size_t len, const lease_limits *lim, uint64_t now_ms,
                        lease_request **out, spec_error *err)
{
    static const char *const known[] = {"key", "owner", "ttl_ms", "probe_url", "on_expire"};
    parse_ctx c = {.lim = lim, .now_ms = now_ms, .err = err};
    int rc = -EINVAL;
    memset(err, 0, sizeof *err);
    c.root = load(json, len, err);
    if (!c.root)
        return -EINVAL;
    c.r = xcalloc(1, sizeof *c.r);
    if (check_root(err, c.root, known, NFIELDS) < 0)
        goto out;
    for (size_t i = 0; i < NFIELDS; i++)
        if (fields[i].parse(&c, json_object_get(c.root, fields[i].name)) < 0)
            goto out;
    *out = c.r;
    c.r = NULL;
    rc = 0;
out:
    lease_request_free(c.r);
    json_decref(c.root);
    return rc;
}

void lease_request_free(lease_request *r)
{
    if (!r)
        return;
    free(r->key);
    free(r->owner);
    free(r->probe_url);
    spec_free(r->on_expire);
    free(r);
}

int lease_heartbeat_parse(const char *json, size_t len, char *owner, uint64_t *token, spec_error *err)
{
    static const char *const known[] = {"owner", "token"};
    memset(err, 0, sizeof *err);
    json_t *root = load(json, len, err);
    int rc = -EINVAL;
    if (!root)
        return -EINVAL;
    if (check_root(err, root, known, 2) < 0)
        goto out;
    const char *o = json_string_value(json_object_get(root, "owner"));
    json_t *t = json_object_get(root, "token");
    if (!json_object_get(root, "owner"))
        fail(err, "owner", "owner is required");
    else if (!lease_owner_valid(o))
        fail(err, "owner", "owner must be 1 to %d visible ASCII characters (no spaces)", LEASE_OWNER_MAX);
    else if (t && (!json_is_integer(t) || json_integer_value(t) < 1))
        fail(err, "token", "token must be a positive integer (the fencing token acquire returned)");
    else {
        snprintf(owner, LEASE_OWNER_MAX + 1, "%s", o);
        *token = t ? (uint64_t)json_integer_value(t) : 0;
        rc = 0;
    }
out:
    json_decref(root);
    return rc;
}
