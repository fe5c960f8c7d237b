/* leases.c - the /leases handlers (watchdog leases, service/leases.h).
 *
 * Like the timer handlers: validate on the libmicrohttpd thread, submit one
 * lease.lua call, answer from its callback on the store's writer thread. A
 * 2xx only ever follows Redis's reply.
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

#include "clock.h"
#include "lease_spec.h"
#include "leases.h"
#include "log.h"
#include "xalloc.h"


/* The lease description lease.lua returns after its code (describe()). */
enum { D_HOLDER = 1, D_PTTL, D_TOKEN, D_TTL, D_ACQUIRED, D_HB, D_PROBE_OK, D_RENEWED, D_ALIVE, D_PROBE,
       D_EXPIRE, D_WHEN };

typedef struct lease_ctx {
    http_req *r;
    const api *a;
    char key[LEASE_KEY_MAX + 1];     /* as the client names it */
    char lid[LEASE_ID_MAX];          /* in the caller's namespace: what Redis keys use */
    char owner[LEASE_OWNER_MAX + 1];
} lease_ctx;

/* ---- answers ---- */

static void respond_not_held(http_req *r)
{
    http_respond_problem(r, 404, "No lease is held under this key (it was never acquired, expired or was "
                                 "released).", NULL, NULL, 0);
}

/* The full Redis key must stay outside hookwheel's own names (hw:...),
 * which an empty or short HOOKWHEEL_LEASE_PREFIX would otherwise let a
 * client name: e.g. release an instance's lease key. */
static int reserved(const char *prefix, const char *lid)
{
    char full[LEASES_KEY_MAX];
    leases_key(full, prefix, lid);
    return strncmp(full, "hw:", 3) == 0;
}

/* The context of a request about the lease `key` (already valid) of the
 * caller's namespace, or NULL after answering 404 when its Redis name
 * would be one of hookwheel's own. */
static lease_ctx *ctx_new(http_req *r, const api *a, const char *key)
{
    lease_ctx *c = xcalloc(1, sizeof *c);
    c->r = r;
    c->a = a;
    snprintf(c->key, sizeof c->key, "%s", key);
    lease_id(c->lid, http_req_namespace(r), key);
    if (!reserved(a->cfg->lease_prefix, c->lid))
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

static const char *dstr(const redisReply *reply, int i)
{
    const char *s = store_reply_str(reply, i, NULL);
    return s ? s : "";
}

/* on_expire as the client gave it: the canonical timer spec plus delay_ms. */
static json_t *on_expire_json(const char *stored, const char *when)
{
    timer_spec *spec = NULL;
    spec_error err;
    if (spec_parse(stored, strlen(stored), NULL, 0, &spec, &err) < 0)
        return json_null();
    json_t *o = json_loads(spec->canonical, 0, NULL);
    spec_free(spec);
    if (!o)
        return json_null();
    json_object_set_new(o, "delay_ms", json_integer((json_int_t)lease_when_delay(when)));
    return o;
}

/* The Lease resource from lease.lua's description (at index 1 on). A key
 * held outside hookwheel shows its holder and TTL, with token null. */
static json_t *lease_json(const char *key, const redisReply *reply)
{
    long long ttl = store_reply_int(reply, D_TTL, 0);
    json_t *o = json_pack("{s:s,s:s,s:I}", "key", key, "owner", dstr(reply, D_HOLDER), "expires_in_ms",
                          (json_int_t)store_reply_int(reply, D_PTTL, -1));
    if (!o)
        return NULL;
    if (!dstr(reply, D_TOKEN)[0]) {
        json_object_set_new(o, "token", json_null());
        return o;
    }
    long long alive = store_reply_int(reply, D_ALIVE, 0);
    json_object_set_new(o, "token", json_integer(store_reply_int(reply, D_TOKEN, 0)));
    json_object_set_new(o, "ttl_ms", json_integer(ttl));
    json_object_set_new(o, "renewing", json_boolean((long long)clock_now_ms() - alive <= ttl));
    json_object_set_new(o, "acquired_at", time_or_null(store_reply_int(reply, D_ACQUIRED, 0)));
    json_object_set_new(o, "last_heartbeat_at", time_or_null(store_reply_int(reply, D_HB, 0)));
    json_object_set_new(o, "last_renewed_at", time_or_null(store_reply_int(reply, D_RENEWED, 0)));
    if (dstr(reply, D_PROBE)[0]) {
        json_object_set_new(o, "probe_url", json_string(dstr(reply, D_PROBE)));
        json_object_set_new(o, "last_probe_ok_at", time_or_null(store_reply_int(reply, D_PROBE_OK, 0)));
    }
    if (dstr(reply, D_EXPIRE)[0])
        json_object_set_new(o, "on_expire", on_expire_json(dstr(reply, D_EXPIRE), dstr(reply, D_WHEN)));
    return o;
}

static void respond_lease(http_req *r, unsigned status, const char *key, const redisReply *reply)
{
    char loc[LEASE_KEY_MAX + 16];
    snprintf(loc, sizeof loc, "/leases/%s", key);
    http_respond_json(r, status, lease_json(key, reply), status == 201 ? loc : NULL);
}

/* 409: the key is held by someone else, or by a later lease of this owner. */
static void respond_conflict(http_req *r, const char *owner, const redisReply *reply)
{
    const char *holder = dstr(reply, D_HOLDER);
    json_t *extra = json_pack("{s:s,s:I}", "owner", holder, "expires_in_ms",
                              (json_int_t)store_reply_int(reply, D_PTTL, -1));
    if (strcmp(holder, owner) != 0)
        http_respond_problem(r, 409, "The lease is held by another owner.", NULL, extra, 0);
    else if (!dstr(reply, D_TOKEN)[0])
        http_respond_problem(r, 409, "The key is held, but not by a hookwheel lease.", NULL, extra, 0);
    else {
        json_object_set_new(extra, "token", json_integer(store_reply_int(reply, D_TOKEN, 0)));
        http_respond_problem(r, 409, "The token is not the current one: the lease was acquired again since.",
                             "token", extra, 0);
    }
}

static void submit(lease_ctx *c, int nkeys, int argc, const char **argv, const size_t *lens, store_reply_cb cb)
{
    int rc = store_eval(c->a->st, SCRIPT_LEASE, nkeys, argc, argv, lens, cb, c);
    if (rc < 0) {
        api_respond_submit_error(c->r, rc);
        free(c);
    }
}

/* ---- POST /leases ---- */

static void acquire_cb(void *arg, const redisReply *reply)
{
    lease_ctx *c = arg;
    long long code = store_reply_int(reply, 0, -9);
    char owner[LEASE_OWNER_MAX * 2 + 8];
    if (code == 1) {
        LOG(LOG_DEBUG, "lease acquired", "\"lease\":\"%s\",\"owner\":\"%s\",\"token\":%lld", c->lid,
            log_json_escape(c->owner, owner, sizeof owner), store_reply_int(reply, D_TOKEN, 0));
        respond_lease(c->r, 201, c->key, reply);
    } else if (code == 0) {
        respond_lease(c->r, 200, c->key, reply);
    } else if (code == 2) {
        respond_conflict(c->r, c->owner, reply);
    } else if (code == 3) {
        json_t *extra = json_pack("{s:I}", "token", (json_int_t)store_reply_int(reply, D_TOKEN, 0));
        http_respond_problem(c->r, 409,
                             "This owner holds the lease already, with other settings (ttl_ms, probe_url or "
                             "on_expire). Release it first to change them.", NULL, extra, 0);
    } else {
        if (reply && reply->type == REDIS_REPLY_ERROR)
            LOG(LOG_ERROR, "lease acquire failed", "\"error\":\"%.200s\"", reply->str);
        api_respond_unavailable(c->r);
    }
    free(c);
}

void api_lease_acquire(http_req *r, const char *const *params, void *app)
{
    (void)params;
    const api *a = app;
    size_t len;
    const char *body = http_req_body(r, &len);
    uint64_t now = clock_now_ms();
    lease_limits lim = {a->cfg->lease_max_ttl_ms, &a->lim};
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
    char lk[LEASES_KEY_MAX], tk[LEASES_KEY_MAX], mk[LEASES_KEY_MAX], ttl[24], t[24];
    leases_key(lk, a->cfg->lease_prefix, c->lid);
    leases_token_key(tk, c->lid);
    leases_meta_key(mk, c->lid);
    snprintf(ttl, sizeof ttl, "%" PRIu64, q->ttl_ms);
    snprintf(t, sizeof t, "%" PRIu64, now);
    const char *argv[] = {lk, tk, mk, LEASES_SCHEDULE, "acquire", c->lid, q->owner, ttl, t, q->probe_url,
                          q->on_expire ? q->on_expire->stored : "", q->on_expire ? q->on_expire->when : "",
                          LEASES_META_PREFIX};
    size_t lens[13];
    for (int i = 0; i < 13; i++)
        lens[i] = i == 10 && q->on_expire ? q->on_expire->stored_len : strlen(argv[i]);
    submit(c, 4, 13, argv, lens, acquire_cb);
    lease_request_free(q);
}

/* ---- POST /leases/{key}/heartbeat ---- */

static void heartbeat_cb(void *arg, const redisReply *reply)
{
    lease_ctx *c = arg;
    long long code = store_reply_int(reply, 0, -9);
    if (code == 1)
        respond_lease(c->r, 200, c->key, reply);
    else if (code == 0)
        respond_conflict(c->r, c->owner, reply);
    else if (code == -1)
        respond_not_held(c->r);
    else
        api_respond_unavailable(c->r);
    free(c);
}

void api_lease_heartbeat(http_req *r, const char *const *params, void *app)
{
    const api *a = app;
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
    char lk[LEASES_KEY_MAX], mk[LEASES_KEY_MAX], t[24], tok[24] = "";
    leases_key(lk, a->cfg->lease_prefix, c->lid);
    leases_meta_key(mk, c->lid);
    snprintf(t, sizeof t, "%" PRIu64, clock_now_ms());
    if (token)
        snprintf(tok, sizeof tok, "%" PRIu64, token);
    const char *argv[] = {lk, mk, LEASES_SCHEDULE, "heartbeat", c->lid, owner, t, tok, "hb"};
    submit(c, 3, 9, argv, NULL, heartbeat_cb);
}

/* ---- GET /leases/{key} ---- */

static void get_cb(void *arg, const redisReply *reply)
{
    lease_ctx *c = arg;
    long long code = store_reply_int(reply, 0, -9);
    if (code == 1)
        respond_lease(c->r, 200, c->key, reply);
    else if (code == -1)
        respond_not_held(c->r);
    else
        api_respond_unavailable(c->r);
    free(c);
}

void api_lease_get(http_req *r, const char *const *params, void *app)
{
    const api *a = app;
    lease_ctx *c = path_ctx(r, a, params[0]);
    if (!c)
        return;
    char lk[LEASES_KEY_MAX], mk[LEASES_KEY_MAX];
    leases_key(lk, a->cfg->lease_prefix, c->lid);
    leases_meta_key(mk, c->lid);
    const char *argv[] = {lk, mk, "get"};
    submit(c, 2, 3, argv, NULL, get_cb);
}

/* ---- DELETE /leases/{key}?owner=...[&token=...] ---- */

static void release_cb(void *arg, const redisReply *reply)
{
    lease_ctx *c = arg;
    long long code = store_reply_int(reply, 0, -9);
    char owner[LEASE_OWNER_MAX * 2 + 8];
    if (code == 1) {
        LOG(LOG_DEBUG, "lease released", "\"lease\":\"%s\",\"owner\":\"%s\",\"token\":%lld", c->lid,
            log_json_escape(c->owner, owner, sizeof owner), store_reply_int(reply, 1, 0));
        http_respond_json(c->r, 204, NULL, NULL);
    } else if (code == 0) {
        respond_conflict(c->r, c->owner, reply);
    } else if (code == -1) {
        respond_not_held(c->r);
    } else {
        api_respond_unavailable(c->r);
    }
    free(c);
}

void api_lease_release(http_req *r, const char *const *params, void *app)
{
    const api *a = app;
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
    char lk[LEASES_KEY_MAX], mk[LEASES_KEY_MAX], t[24] = "";
    leases_key(lk, a->cfg->lease_prefix, c->lid);
    leases_meta_key(mk, c->lid);
    if (tok)
        snprintf(t, sizeof t, "%" PRIu64, tok);
    const char *argv[] = {lk, mk, LEASES_SCHEDULE, "release", c->lid, owner, t};
    submit(c, 3, 7, argv, NULL, release_cb);
}
