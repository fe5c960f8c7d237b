/* leases.c - the /leases handlers (watchdog leases, service/leases.h).
 *
 * Like the timer handlers: validate on the libmicrohttpd thread, submit one
 * lease verb (persistence/leases.h), answer from its callback on the store's
 * writer thread. A 2xx only ever follows Redis's reply.
 *
 * Choices a user sees (openapi.yaml has the contract):
 * - POST /leases by the owner that holds the lease already, with the same
 *   ttl_ms, probe_url and on_expire, answers 200 with the lease as it is
 *   (same token) and counts as a heartbeat: a retried acquire whose answer
 *   was lost is harmless. Different settings answer 409, as a timer id with
 *   a different spec does.
 * - DELETE takes the owner (and optionally the token) as query parameters:
 *   DELETE bodies are unusual and some proxies drop them.
 * - The token, when given (heartbeat, DELETE), must be the current one: an
 *   owner name reused by a later holder cannot act for an earlier one. */
#include "api.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "clock.h"
#include "lease_spec.h"
#include "log.h"
#include "nsgate.h"
#include "persistence/leases.h"
#include "xalloc.h"

typedef struct lease_ctx {
    http_req *r;
    const api *a;
    char key[LEASE_KEY_MAX + 1];     /* as the client names it */
    char lid[LEASE_ID_MAX];          /* in the caller's namespace: what Redis keys use */
    char owner[LEASE_OWNER_MAX + 1];
    uint64_t token;                  /* the token the request gave (heartbeat, DELETE); 0: none */
} lease_ctx;

/* ---- answers ---- */

static void respond_not_held(http_req *r)
{
    http_respond_problem(r, 404, "No lease is held under this key (it was never acquired, expired or was "
                                 "released).", NULL, NULL, 0);
}

/* The context of a request about the lease `key` (already valid) of the
 * caller's namespace, or NULL when its Redis name would be one of
 * hookwheel's own (hw:...), which an empty or short HOOKWHEEL_LEASE_PREFIX
 * would otherwise let a client name: e.g. release an instance's lease key. */
static lease_ctx *ctx_new(http_req *r, const api *a, const char *key)
{
    lease_ctx *c = xcalloc(1, sizeof *c);
    c->r = r;
    c->a = a;
    snprintf(c->key, sizeof c->key, "%s", key);
    lease_id(c->lid, http_req_namespace(r), key);
    if (!leases_name_reserved(a->cfg->lease_prefix, c->lid))
        return c;
    free(c);
    return NULL;
}

/* The context for a key from the path, or NULL after answering 404. */
static lease_ctx *path_ctx(http_req *r, const api *a, const char *key)
{
    lease_ctx *c = lease_key_valid(key) ? ctx_new(r, a, key) : NULL;
    if (!c)
        respond_not_held(r);
    return c;
}

static json_t *time_or_null(long long ms)
{
    char at[32];
    if (ms <= 0)
        return json_null();
    clock_format_rfc3339((uint64_t)ms, at, sizeof at);
    return json_string(at);
}

/* on_expire as the client gave it: the canonical timer spec plus delay_ms. */
static json_t *on_expire_json(const char *stored, size_t len, const char *when)
{
    timer_spec *spec = NULL;
    spec_error err;
    if (spec_parse(stored, len, NULL, 0, &spec, &err) < 0)
        return json_null();
    json_t *o = json_loads(spec->canonical, 0, NULL);
    spec_free(spec);
    if (!o)
        return json_null();
    json_object_set_new(o, "delay_ms", json_integer((json_int_t)lease_when_delay(when)));
    return o;
}

/* The Lease resource from a lease as Redis holds it. A key held outside
 * hookwheel shows its holder and TTL, with token null. */
static json_t *lease_json(const char *key, const lease_info *d)
{
    json_t *o = json_pack("{s:s,s:s,s:I}", "key", key, "owner", d->holder, "expires_in_ms",
                          (json_int_t)d->pttl_ms);
    if (!o)
        return NULL;
    if (!d->token) {
        json_object_set_new(o, "token", json_null());
        return o;
    }
    json_object_set_new(o, "token", json_integer((json_int_t)d->token));
    json_object_set_new(o, "ttl_ms", json_integer(d->ttl_ms));
    json_object_set_new(o, "renewing", json_boolean((int64_t)clock_now_ms() - d->alive_ms <= d->ttl_ms));
    json_object_set_new(o, "acquired_at", time_or_null(d->acquired_ms));
    json_object_set_new(o, "last_heartbeat_at", time_or_null(d->heartbeat_ms));
    json_object_set_new(o, "last_renewed_at", time_or_null(d->renewed_ms));
    if (d->probe_url[0]) {
        json_object_set_new(o, "probe_url", json_string(d->probe_url));
        json_object_set_new(o, "last_probe_ok_at", time_or_null(d->probe_ok_ms));
    }
    if (d->on_expire[0])
        json_object_set_new(o, "on_expire", on_expire_json(d->on_expire, d->on_expire_len, d->when));
    return o;
}

static void respond_lease(http_req *r, unsigned status, const char *key, const lease_info *d)
{
    char loc[LEASE_KEY_MAX + 16];
    api_location(loc, sizeof loc, "/leases/", key);
    http_respond_json(r, status, lease_json(key, d), status == 201 ? loc : NULL);
}

/* 409: the key is held by someone else, or by this owner under another
 * token than `token` (the request's; 0: none). A lower token is an earlier
 * lease's: the key was acquired again since. A higher one was never given
 * by an acquire of this key: tokens come from a counter that only grows,
 * and the current lease drew the last one. */
static void respond_conflict(http_req *r, const char *owner, uint64_t token, const lease_info *d)
{
    json_t *extra = json_pack("{s:s,s:I}", "owner", d->holder, "expires_in_ms", (json_int_t)d->pttl_ms);
    if (strcmp(d->holder, owner) != 0)
        http_respond_problem(r, 409, "The lease is held by another owner.", NULL, extra, 0);
    else if (!d->token)
        http_respond_problem(r, 409, "The key is held, but not by a hookwheel lease.", NULL, extra, 0);
    else {
        json_object_set_new(extra, "token", json_integer((json_int_t)d->token));
        http_respond_problem(r, 409,
                             token > d->token
                                 ? "The token is not the current one: it is higher than the current lease's, "
                                   "and no acquire of this key has given it."
                                 : "The token is not the current one: the lease was acquired again since.",
                             "token", extra, 0);
    }
}

/* 503 for a lease write that failed: refused by Redis before it ran (its
 * reply says so, and that not_done), or unanswered. */
static void respond_failed(http_req *r, const lease_reply *reply, const char *not_done)
{
    if (reply->outcome != LEASE_FAILED || !api_respond_refused(r, reply->refused, not_done))
        api_respond_unavailable(r);
}

/* Answers a verb that could not be submitted. Returns rc. */
static int submitted(lease_ctx *c, int rc)
{
    if (rc < 0) {
        api_respond_submit_error(c->r, rc);
        free(c);
    }
    return rc;
}

/* ---- POST /leases ---- */

static void acquire_cb(void *arg, const lease_reply *reply)
{
    lease_ctx *c = arg;
    char owner[LEASE_OWNER_MAX * 2 + 8];
    if (reply->outcome == LEASE_ACQUIRED) {
        LOG(LOG_DEBUG, "lease acquired", "\"lease\":\"%s\",\"owner\":\"%s\",\"token\":%" PRIu64, c->lid,
            log_json_escape(c->owner, owner, sizeof owner), reply->info.token);
        respond_lease(c->r, 201, c->key, &reply->info);
    } else if (reply->outcome == LEASE_REACQUIRED) {
        respond_lease(c->r, 200, c->key, &reply->info);
    } else if (reply->outcome == LEASE_HELD_BY_OTHER) {
        respond_conflict(c->r, c->owner, c->token, &reply->info);
    } else if (reply->outcome == LEASE_OTHER_SETTINGS) {
        json_t *extra = json_pack("{s:I}", "token", (json_int_t)reply->info.token);
        http_respond_problem(c->r, 409,
                             "This owner holds the lease already, with other settings (ttl_ms, probe_url or "
                             "on_expire). Release it first to change them.", NULL, extra, 0);
    } else {
        char eb[256];
        if (reply->outcome == LEASE_FAILED && !reply->refused) /* a refusal: the store says it once */
            LOG(LOG_ERROR, "lease acquire failed", "\"error\":\"%s\"", log_json_escape(reply->error, eb, sizeof eb));
        respond_failed(c->r, reply, "the lease was not acquired");
    }
    free(c);
}

/* On a Redis Cluster every lease key must be in one slot, which the lease
 * prefix's hash tag decides (persistence/leases.h: leases_available); with
 * a prefix that has none the lease endpoints answer 501 and write nothing. */
static int refused_on_cluster(http_req *r, const api *a)
{
    if (leases_available(a->st, a->cfg->lease_prefix))
        return 0;
    http_respond_problem(r, 501,
                         "Watchdog leases on a Redis Cluster need HOOKWHEEL_LEASE_PREFIX with a hash tag, "
                         "e.g. lease:{l}: (every lease then lives in that slot).",
                         NULL, NULL, 0);
    return 1;
}

void api_lease_acquire(http_req *r, const char *const *params, void *app)
{
    (void)params;
    const api *a = app;
    if (refused_on_cluster(r, a))
        return;
    size_t len;
    const char *body = http_req_body(r, &len);
    uint64_t now = clock_now_ms();
    lease_limits lim = {lease_min_ttl_ms(a->cfg->lease_tick_ms), a->cfg->lease_max_ttl_ms, &a->lim};
    lease_request *q = NULL;
    spec_error err;
    if (lease_request_parse(body, len, &lim, now, &q, &err) < 0) {
        http_respond_problem(r, (unsigned)err.status, err.detail, err.field, NULL, 0);
        return;
    }
    lease_ctx *c = ctx_new(r, a, q->key);
    if (!c) {
        http_respond_problem(r, 400, "keys whose Redis name starts with hw: are hookwheel's own", "key", NULL, 0);
        lease_request_free(q);
        return;
    }
    snprintf(c->owner, sizeof c->owner, "%s", q->owner);
    lease_acquire_req req = {
        .prefix = a->cfg->lease_prefix,
        .lid = c->lid,
        .owner = q->owner,
        .ttl_ms = q->ttl_ms,
        .now_ms = now,
        .probe_url = q->probe_url,
        .on_expire = q->on_expire ? q->on_expire->stored : "",
        .on_expire_len = q->on_expire ? q->on_expire->stored_len : 0,
        .when = q->on_expire ? q->on_expire->when : "",
    };
    submitted(c, leases_acquire(a->st, &req, acquire_cb, c));
    lease_request_free(q);
}

/* ---- POST /leases/{key}/heartbeat ---- */

static void heartbeat_cb(void *arg, const lease_reply *reply)
{
    lease_ctx *c = arg;
    if (reply->outcome == LEASE_NOTED)
        respond_lease(c->r, 200, c->key, &reply->info);
    else if (reply->outcome == LEASE_HELD_BY_OTHER)
        respond_conflict(c->r, c->owner, c->token, &reply->info);
    else if (reply->outcome == LEASE_NOT_HELD)
        respond_not_held(c->r);
    else
        respond_failed(c->r, reply, "the heartbeat was not recorded");
    free(c);
}

void api_lease_heartbeat(http_req *r, const char *const *params, void *app)
{
    const api *a = app;
    if (refused_on_cluster(r, a))
        return;
    size_t len;
    const char *body = http_req_body(r, &len);
    char owner[LEASE_OWNER_MAX + 1];
    uint64_t token = 0;
    spec_error err;
    if (lease_key_valid(params[0]) && lease_heartbeat_parse(body, len, owner, &token, &err) < 0) {
        http_respond_problem(r, (unsigned)err.status, err.detail, err.field, NULL, 0);
        return;
    }
    lease_ctx *c = path_ctx(r, a, params[0]);
    if (!c)
        return;
    snprintf(c->owner, sizeof c->owner, "%s", owner);
    c->token = token;
    submitted(c, leases_heartbeat(a->st, a->cfg->lease_prefix, c->lid, owner, token, clock_now_ms(),
                                  LEASE_SIGN_HEARTBEAT, heartbeat_cb, c));
}

/* ---- GET /leases/{key} ---- */

static void get_cb(void *arg, const lease_reply *reply)
{
    lease_ctx *c = arg;
    if (reply->outcome == LEASE_FOUND)
        respond_lease(c->r, 200, c->key, &reply->info);
    else if (reply->outcome == LEASE_NOT_HELD)
        respond_not_held(c->r);
    else
        api_respond_unavailable(c->r);
    free(c);
}

void api_lease_get(http_req *r, const char *const *params, void *app)
{
    const api *a = app;
    if (refused_on_cluster(r, a))
        return;
    lease_ctx *c = path_ctx(r, a, params[0]);
    if (!c)
        return;
    submitted(c, leases_get(a->st, a->cfg->lease_prefix, c->lid, get_cb, c));
}

/* ---- DELETE /leases/{key}?owner=...[&token=...] ---- */

static void release_cb(void *arg, const lease_reply *reply)
{
    lease_ctx *c = arg;
    char owner[LEASE_OWNER_MAX * 2 + 8];
    if (reply->outcome == LEASE_RELEASED) {
        LOG(LOG_DEBUG, "lease released", "\"lease\":\"%s\",\"owner\":\"%s\",\"token\":%" PRIu64, c->lid,
            log_json_escape(c->owner, owner, sizeof owner), reply->info.token);
        http_respond_json(c->r, 204, NULL, NULL);
    } else if (reply->outcome == LEASE_HELD_BY_OTHER) {
        respond_conflict(c->r, c->owner, c->token, &reply->info);
    } else if (reply->outcome == LEASE_NOT_HELD) {
        respond_not_held(c->r);
    } else {
        respond_failed(c->r, reply, "the lease was not released");
    }
    free(c);
}

void api_lease_release(http_req *r, const char *const *params, void *app)
{
    const api *a = app;
    if (refused_on_cluster(r, a))
        return;
    const char *owner = http_req_query(r, "owner"), *token = http_req_query(r, "token");
    uint64_t tok = 0;
    if (!lease_key_valid(params[0])) {
        respond_not_held(r);
        return;
    }
    if (!lease_owner_valid(owner)) {
        http_respond_problem(r, 400,
                             owner ? "owner must be 1 to 200 visible ASCII characters (no spaces)"
                                   : "the owner query parameter is required: DELETE /leases/{key}?owner=...",
                             "owner", NULL, 0);
        return;
    }
    if (token && lease_token_parse(token, &tok) < 0) {
        http_respond_problem(r, 400, "token must be a positive integer (the fencing token acquire returned)",
                             "token", NULL, 0);
        return;
    }
    lease_ctx *c = path_ctx(r, a, params[0]);
    if (!c)
        return;
    snprintf(c->owner, sizeof c->owner, "%s", owner);
    c->token = tok;
    submitted(c, leases_release(a->st, a->cfg->lease_prefix, c->lid, owner, tok, release_cb, c));
}

/* ---- GET /leases?limit=&cursor= ----
 *
 * The caller's namespace's live leases by key, each as GET /leases/{key}
 * answers it. A page is read in slices (persistence/leases.h: leases_list
 * examines at most LEASE_LIST_BUDGET index entries a call, so no call holds
 * Redis long), one after the other until the page has `limit` leases or
 * the namespace's end is reached; a page that needed more than
 * LEASE_LIST_CALLS slices ends early, with a next_cursor. The cursor is the
 * last key the page examined: the next page starts after it, so a lease
 * acquired meanwhile with an earlier key is not seen by the pages to come,
 * one with a later key is. Listings share the namespace's cap on expensive
 * calls in flight (nsgate.h).
 *
 * With tokens a namespace's ids are a range of the index of their own
 * ("<ns>/" up to "<ns>0"), so the last id examined is always the caller's
 * and the cursor its key. The open API reads the whole index and steps
 * over the ids of leases acquired under tokens ("<ns>/<key>", kept when
 * hookwheel restarts open), which it does not list (its keys hold no '/').
 * A slice or a page that ends on such an id goes on after "<ns>/~", past
 * every id of that namespace ('~' follows every character of a key) and
 * before anything else: the open API's ids hold no '/', so none sorts
 * among them. That position is the open API's cursor then ("<ns>/~", as
 * the timer listings' past a namespace), naming the namespace, never a
 * lease of it; the key alone would restart the next page before the
 * namespace ("k02046" < "team-a/..."), and a page examining the same
 * skipped ids again and again would never end. */

#define LEASE_LIST_DEFAULT 100
#define LEASE_LIST_MAX 1000
#define LEASE_LIST_BUDGET 256
#define LEASE_LIST_CALLS 8
#define LEASE_CURSOR_MAX (LEASE_ID_MAX + 2) /* "<ns>/~" or a key */

typedef struct lease_list_ctx {
    http_req *r;
    const api *a;
    char *ns;      /* the caller's namespace, entered in the gate */
    uint32_t limit;
    int calls;
    json_t *leases;
} lease_list_ctx;

static void list_end(lease_list_ctx *c, int ok, const char *cursor)
{
    nsgate_leave(c->ns); /* before the answer: a client that asks again at once finds room */
    if (!ok) {
        api_respond_unavailable(c->r);
        json_decref(c->leases);
    } else {
        json_t *next = cursor ? json_string(cursor) : json_null();
        http_respond_json(c->r, 200, json_pack("{s:o,s:o}", "leases", c->leases, "next_cursor", next), NULL);
    }
    free(c->ns);
    free(c);
}

/* Where the listing goes on after the id `last` examined (in the open API,
 * another namespace's id: past that namespace, "<ns>/~"), as a lease id
 * (*after, for leases_list) and as the cursor the client gets (*cursor:
 * "<ns>/~" or the key). after and cursor hold LEASE_CURSOR_MAX bytes. */
static void list_position(const char *ns, const char *last, char *after, char *cursor)
{
    const char *slash = strchr(last, '/');
    if (!ns[0] && slash) {
        snprintf(after, LEASE_CURSOR_MAX, "%.*s/~", (int)(slash - last), last);
        snprintf(cursor, LEASE_CURSOR_MAX, "%s", after);
        return;
    }
    snprintf(after, LEASE_CURSOR_MAX, "%s", last);
    snprintf(cursor, LEASE_CURSOR_MAX, "%s", lease_id_key(last));
}

/* Asks for the next slice, after lease id `after` (NULL: from the start).
 * Returns 0, or a negative errno when it could not be queued. */
static int list_next(lease_list_ctx *c, const char *after);

static void list_cb(void *arg, const lease_list_reply *reply)
{
    lease_list_ctx *c = arg;
    if (reply->outcome != LEASE_LISTED) {
        char eb[256];
        if (reply->outcome == LEASE_FAILED)
            LOG(LOG_ERROR, "lease listing failed", "\"error\":\"%s\"", log_json_escape(reply->error, eb, sizeof eb));
        list_end(c, 0, NULL);
        return;
    }
    for (size_t i = 0; i < reply->n; i++) {
        const lease_listed *l = &reply->leases[i];
        json_array_append_new(c->leases, lease_json(lease_id_key(l->lid), &l->info));
    }
    size_t have = json_array_size(c->leases);
    if (!reply->more || !reply->last[0]) {
        list_end(c, 1, NULL);
        return;
    }
    char after[LEASE_CURSOR_MAX], cursor[LEASE_CURSOR_MAX];
    list_position(c->ns, reply->last, after, cursor);
    if (have >= c->limit || c->calls >= LEASE_LIST_CALLS) {
        list_end(c, 1, cursor);
        return;
    }
    int rc = list_next(c, after);
    if (rc < 0)
        list_end(c, 0, NULL);
}

static int list_next(lease_list_ctx *c, const char *after)
{
    c->calls++;
    uint32_t left = c->limit - (uint32_t)json_array_size(c->leases);
    return leases_list(c->a->st, c->a->cfg->lease_prefix, c->ns, after, left, LEASE_LIST_BUDGET, list_cb, c);
}

/* A cursor this API gives the namespace ns: a key, or without tokens also
 * "<namespace>/~" (list_position). */
static int cursor_valid(const char *ns, const char *cursor)
{
    if (lease_key_valid(cursor))
        return 1;
    const char *slash = strchr(cursor, '/');
    char other[LEASE_NS_MAX + 1];
    if (ns[0] || !slash || strcmp(slash, "/~") != 0 || (size_t)(slash - cursor) >= sizeof other)
        return 0;
    snprintf(other, sizeof other, "%.*s", (int)(slash - cursor), cursor);
    return auth_namespace_valid(other);
}

void api_lease_list(http_req *r, const char *const *params, void *app)
{
    (void)params;
    const api *a = app;
    if (refused_on_cluster(r, a))
        return;
    const char *l = http_req_query(r, "limit"), *cursor = http_req_query(r, "cursor");
    unsigned long long limit = LEASE_LIST_DEFAULT;
    if (l && (api_number(l, strlen(l), LEASE_LIST_MAX, &limit) < 0 || limit < 1)) {
        http_respond_problem(r, 400, "limit must be an integer from 1 to 1000", "limit", NULL, 0);
        return;
    }
    if (cursor && !cursor_valid(http_req_namespace(r), cursor)) {
        http_respond_problem(r, 400, "cursor is not one this API gave", "cursor", NULL, 0);
        return;
    }
    if (nsgate_admit(r, (unsigned)a->cfg->max_expensive_per_namespace) < 0)
        return;
    lease_list_ctx *c = xcalloc(1, sizeof *c);
    c->r = r;
    c->a = a;
    c->ns = xstrdup(http_req_namespace(r));
    c->limit = (uint32_t)limit;
    c->leases = json_array();
    char after[LEASE_CURSOR_MAX];
    if (cursor && lease_key_valid(cursor))
        lease_id(after, c->ns, cursor);
    else if (cursor)
        snprintf(after, sizeof after, "%s", cursor); /* "<ns>/~", open API only (cursor_valid) */
    int rc = list_next(c, cursor ? after : NULL);
    if (rc < 0) {
        nsgate_leave(c->ns);
        json_decref(c->leases);
        free(c->ns);
        free(c);
        api_respond_submit_error(r, rc);
    }
}
