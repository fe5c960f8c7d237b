/* queues.c - GET /queues, GET and PUT /queues/{name}: a namespace's queue
 * controls (parallelism, pause, dispatch rate).
 *
 * The settings live in Redis, in the hash QUEUES_KEY, field "<namespace>/<queue>"
 * (or "<queue>" when the API is open), value "<parallelism> <paused> <rate>"
 * (service/queuecfg.h parses it). Every engine reads the hash every
 * QUEUES_POLL_MS and applies it to its limiter, so a PUT holds on every
 * instance within a second. A queue without a field has the defaults:
 * HOOKWHEEL_QUEUE_PARALLELISM, not paused, no rate limit. */
#include "api.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "queuecfg.h"
#include "xalloc.h"

typedef struct queue_ctx {
    http_req *r;
    api *a;
    char field[QUEUECFG_FIELD_MAX]; /* "<namespace>/<queue>" or "<queue>" */
    queuecfg cfg;                    /* PUT: what was written */
} queue_ctx;

static int queue_name_valid(const char *q)
{
    size_t n = strlen(q);
    return n >= 1 && n <= 64 &&
           strspn(q, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

static json_t *queue_json(const char *name, const queuecfg *c, int configured)
{
    return json_pack("{s:s,s:I,s:b,s:f,s:b}", "name", name, "parallelism", (json_int_t)c->parallelism, "paused",
                     c->paused, "max_dispatches_per_second", c->rate, "configured", configured);
}

static queue_ctx *ctx_new(http_req *r, api *a, const char *name)
{
    if (!queue_name_valid(name)) {
        http_respond_problem(r, 404, "No queue has this name: names match [A-Za-z0-9._-]{1,64}.", NULL, NULL, 0);
        return NULL;
    }
    queue_ctx *c = xcalloc(1, sizeof *c);
    c->r = r;
    c->a = a;
    queuecfg_field(c->field, sizeof c->field, http_req_namespace(r), name);
    return c;
}

/* ---- GET /queues ---- */

static void list_cb(void *arg, const redisReply *reply)
{
    queue_ctx *c = arg;
    if (!reply || reply->type != REDIS_REPLY_ARRAY) {
        api_respond_unavailable(c->r);
        free(c);
        return;
    }
    const char *ns = http_req_namespace(c->r);
    size_t nslen = strlen(ns);
    json_t *list = json_array();
    for (size_t i = 0; i + 1 < reply->elements; i += 2) {
        const char *f = store_reply_str(reply, (int)i, NULL), *v = store_reply_str(reply, (int)i + 1, NULL);
        const char *slash = f ? strrchr(f, '/') : NULL;
        size_t flen = slash ? (size_t)(slash - f) : 0;
        queuecfg q;
        if (!f || !v || flen != nslen || (nslen && memcmp(f, ns, nslen) != 0) || (!nslen && slash) ||
            queuecfg_parse(v, &q) < 0)
            continue;
        json_array_append_new(list, queue_json(slash ? slash + 1 : f, &q, 1));
    }
    http_respond_json(c->r, 200, json_pack("{s:o}", "queues", list), NULL);
    free(c);
}

void api_queue_list(http_req *r, const char *const *params, void *app)
{
    (void)params;
    api *a = app;
    queue_ctx *c = xcalloc(1, sizeof *c);
    c->r = r;
    c->a = a;
    const char *argv[] = {"HGETALL", QUEUES_KEY};
    int rc = store_command(a->st, 2, argv, NULL, list_cb, c);
    if (rc < 0) {
        api_respond_submit_error(r, rc);
        free(c);
    }
}

/* ---- GET /queues/{name} ---- */

static void get_cb(void *arg, const redisReply *reply)
{
    queue_ctx *c = arg;
    queuecfg q = {.parallelism = (uint32_t)c->a->cfg->queue_parallelism};
    int configured = 0;
    if (!reply || (reply->type != REDIS_REPLY_STRING && reply->type != REDIS_REPLY_NIL)) {
        api_respond_unavailable(c->r);
        free(c);
        return;
    }
    if (reply->type == REDIS_REPLY_STRING && queuecfg_parse(reply->str, &q) == 0)
        configured = 1;
    const char *slash = strrchr(c->field, '/');
    http_respond_json(c->r, 200, queue_json(slash ? slash + 1 : c->field, &q, configured), NULL);
    free(c);
}

void api_queue_get(http_req *r, const char *const *params, void *app)
{
    api *a = app;
    queue_ctx *c = ctx_new(r, a, params[0]);
    if (!c)
        return;
    const char *argv[] = {"HGET", QUEUES_KEY, c->field};
    int rc = store_command(a->st, 3, argv, NULL, get_cb, c);
    if (rc < 0) {
        api_respond_submit_error(r, rc);
        free(c);
    }
}

/* ---- PUT /queues/{name} ---- */

static int bad(http_req *r, const char *field, const char *detail)
{
    http_respond_problem(r, 400, detail, field, NULL, 0);
    return -EINVAL;
}

/* Reads {parallelism?, paused?, max_dispatches_per_second?} into *q; absent
 * members take the defaults (PUT replaces the settings). */
static int parse_put(http_req *r, const config *cfg, queuecfg *q)
{
    size_t len;
    const char *body = http_req_body(r, &len);
    json_error_t err;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &err), *v;
    const char *key;
    int rc = 0;
    *q = (queuecfg){.parallelism = (uint32_t)cfg->queue_parallelism};
    if (!json_is_object(j)) {
        json_decref(j);
        return bad(r, "", "the body must be a JSON object");
    }
    json_object_foreach(j, key, v) {
        if (strcmp(key, "parallelism") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (json_int_t)cfg->max_inflight) {
                rc = bad(r, key, "parallelism must be an integer from 1 to HOOKWHEEL_MAX_INFLIGHT");
                break;
            }
            q->parallelism = (uint32_t)json_integer_value(v);
        } else if (strcmp(key, "paused") == 0) {
            if (!json_is_boolean(v)) {
                rc = bad(r, key, "paused must be true or false");
                break;
            }
            q->paused = json_is_true(v);
        } else if (strcmp(key, "max_dispatches_per_second") == 0) {
            if (!json_is_number(v) || !queuecfg_rate_valid(json_number_value(v))) {
                rc = bad(r, key, "max_dispatches_per_second must be 0 (no limit) or a number from 0.001 to 100000");
                break;
            }
            q->rate = json_number_value(v);
        } else {
            rc = bad(r, key, "unknown field");
            break;
        }
    }
    json_decref(j);
    return rc;
}

static void put_cb(void *arg, const redisReply *reply)
{
    queue_ctx *c = arg;
    if (!reply || reply->type != REDIS_REPLY_INTEGER) {
        api_respond_unavailable(c->r);
    } else {
        const char *slash = strrchr(c->field, '/');
        LOG(LOG_INFO, "queue settings changed", "\"queue\":\"%s\",\"parallelism\":%u,\"paused\":%s,\"rate\":%g",
            c->field, c->cfg.parallelism, c->cfg.paused ? "true" : "false", c->cfg.rate);
        http_respond_json(c->r, 200, queue_json(slash ? slash + 1 : c->field, &c->cfg, 1), NULL);
    }
    free(c);
}

void api_queue_put(http_req *r, const char *const *params, void *app)
{
    api *a = app;
    queue_ctx *c = ctx_new(r, a, params[0]);
    if (!c)
        return;
    if (parse_put(r, a->cfg, &c->cfg) < 0) {
        free(c);
        return;
    }
    char value[QUEUECFG_VALUE_MAX];
    queuecfg_format(&c->cfg, value, sizeof value);
    const char *argv[] = {"HSET", QUEUES_KEY, c->field, value};
    int rc = store_command(a->st, 4, argv, NULL, put_cb, c);
    if (rc < 0) {
        api_respond_submit_error(r, rc);
        free(c);
    }
}
