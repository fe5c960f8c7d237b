/* queues.c - GET /queues, GET, PUT and DELETE /queues/{name}: a
 * namespace's queue controls (parallelism, pause, dispatch rate).
 *
 * The settings live in Redis under the queue's name "<namespace>/<queue>"
 * (or "<queue>" when the API is open); persistence/queues.h owns how. Every
 * engine asks the settings' change feed every QUEUES_POLL_MS and applies
 * what changed to its limiter, so a PUT or DELETE holds on every instance
 * within a second. A queue without a field has the defaults:
 * HOOKWHEEL_QUEUE_PARALLELISM, not paused, no rate limit. At most
 * HOOKWHEEL_MAX_QUEUES fields exist, all namespaces together: a PUT of a
 * new queue beyond them answers 409 and stores nothing (the check and the
 * write are one Redis function). */
#include "api.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "persistence/queues.h"
#include "queuecfg.h"
#include "xalloc.h"

typedef struct queue_ctx {
    http_req *r;
    api *a;
    char field[QUEUECFG_FIELD_MAX]; /* "<namespace>/<queue>" or "<queue>" */
    queue_controls cfg;              /* PUT: what was written */
} queue_ctx;

static int queue_name_valid(const char *q)
{
    size_t n = strlen(q);
    return n >= 1 && n <= 64 &&
           strspn(q, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

static json_t *queue_json(const char *name, const queue_controls *c, int configured)
{
    return json_pack("{s:s,s:I,s:b,s:f,s:s,s:b}", "name", name, "parallelism", (json_int_t)c->parallelism, "paused",
                     c->paused, "max_dispatches_per_second", c->rate, "scope",
                     c->per_instance ? "instance" : "deployment", "configured", configured);
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

static void list_cb(void *arg, const queues_reply *reply)
{
    queue_ctx *c = arg;
    if (reply->status != QUEUES_OK) {
        api_respond_unavailable(c->r);
        free(c);
        return;
    }
    const char *ns = http_req_namespace(c->r);
    size_t nslen = strlen(ns);
    json_t *list = json_array();
    for (size_t i = 0; i < reply->n; i++) {
        const char *f = reply->entries[i].field;
        const char *slash = strrchr(f, '/');
        size_t flen = slash ? (size_t)(slash - f) : 0;
        if (flen != nslen || (nslen && memcmp(f, ns, nslen) != 0) || (!nslen && slash))
            continue;
        json_array_append_new(list, queue_json(slash ? slash + 1 : f, &reply->entries[i].controls, 1));
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
    int rc = queues_list(a->st, list_cb, c);
    if (rc < 0) {
        api_respond_submit_error(r, rc);
        free(c);
    }
}

/* ---- GET /queues/{name} ---- */

static void get_cb(void *arg, const queues_reply *reply)
{
    queue_ctx *c = arg;
    /* the defaults hold per instance */
    queue_controls q = {.parallelism = (uint32_t)c->a->cfg->queue_parallelism, .per_instance = 1};
    if (reply->status != QUEUES_OK) {
        api_respond_unavailable(c->r);
        free(c);
        return;
    }
    if (reply->found)
        q = reply->controls;
    const char *slash = strrchr(c->field, '/');
    http_respond_json(c->r, 200, queue_json(slash ? slash + 1 : c->field, &q, reply->found), NULL);
    free(c);
}

void api_queue_get(http_req *r, const char *const *params, void *app)
{
    api *a = app;
    queue_ctx *c = ctx_new(r, a, params[0]);
    if (!c)
        return;
    int rc = queues_get(a->st, c->field, get_cb, c);
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

/* Reads {parallelism?, paused?, max_dispatches_per_second?, scope?} into
 * *q; absent members take the defaults (PUT replaces the settings; the
 * scope's default is "deployment"). */
static int parse_put(http_req *r, const config *cfg, queue_controls *q)
{
    size_t len;
    const char *body = http_req_body(r, &len);
    json_error_t err;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &err), *v;
    const char *key;
    int rc = 0;
    *q = (queue_controls){.parallelism = (uint32_t)cfg->queue_parallelism};
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
        } else if (strcmp(key, "scope") == 0) {
            const char *scope = json_string_value(v);
            if (!scope || (strcmp(scope, "deployment") != 0 && strcmp(scope, "instance") != 0)) {
                rc = bad(r, key, "scope must be \"deployment\" (the limits hold for all instances together) or "
                                 "\"instance\" (for each instance)");
                break;
            }
            q->per_instance = strcmp(scope, "instance") == 0;
        } else {
            rc = bad(r, key, "unknown field");
            break;
        }
    }
    json_decref(j);
    return rc;
}

static void put_cb(void *arg, const queues_reply *reply)
{
    queue_ctx *c = arg;
    if (reply->status != QUEUES_OK) {
        api_respond_unavailable(c->r);
    } else if (reply->put == QUEUES_PUT_FULL) {
        char detail[200];
        snprintf(detail, sizeof detail,
                 "Too many queues have controls: at most %" PRIu64 " (HOOKWHEEL_MAX_QUEUES). Nothing was stored; "
                 "DELETE /queues/{name} the controls of a queue that no longer needs them.",
                 c->a->cfg->max_queues);
        http_respond_problem(c->r, 409, detail, NULL, NULL, 0);
    } else {
        const char *slash = strrchr(c->field, '/');
        LOG(LOG_INFO, "queue settings changed",
            "\"queue\":\"%s\",\"parallelism\":%u,\"paused\":%s,\"rate\":%g,\"scope\":\"%s\"", c->field,
            c->cfg.parallelism, c->cfg.paused ? "true" : "false", c->cfg.rate,
            c->cfg.per_instance ? "instance" : "deployment");
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
    int rc = queues_put(a->st, c->field, &c->cfg, a->cfg->max_queues, put_cb, c);
    if (rc < 0) {
        api_respond_submit_error(r, rc);
        free(c);
    }
}

/* ---- DELETE /queues/{name} ---- */

static void delete_cb(void *arg, const queues_reply *reply)
{
    queue_ctx *c = arg;
    if (reply->status != QUEUES_OK) {
        api_respond_unavailable(c->r);
    } else if (!reply->found) {
        http_respond_problem(c->r, 404, "This queue has no stored controls: it has the defaults.", NULL, NULL, 0);
    } else {
        LOG(LOG_INFO, "queue settings deleted", "\"queue\":\"%s\"", c->field);
        http_respond_json(c->r, 204, NULL, NULL);
    }
    free(c);
}

void api_queue_delete(http_req *r, const char *const *params, void *app)
{
    api *a = app;
    queue_ctx *c = ctx_new(r, a, params[0]);
    if (!c)
        return;
    int rc = queues_delete(a->st, c->field, delete_cb, c);
    if (rc < 0) {
        api_respond_submit_error(r, rc);
        free(c);
    }
}
