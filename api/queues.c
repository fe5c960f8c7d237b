/* queues.c - GET /queues, GET, PUT, PATCH and DELETE /queues/{name}: a
 * namespace's queue controls (parallelism, pause, dispatch rate).
 *
 * The settings live in Redis under the queue's name "<namespace>/<queue>"
 * (or "<queue>" when the API is open); persistence/queues.h owns how. Every
 * engine asks the settings' change feed every QUEUES_POLL_MS and applies
 * what changed to its limiter, so a PUT, PATCH or DELETE holds on every
 * instance within a second. A queue without a field has the defaults:
 * HOOKWHEEL_QUEUE_PARALLELISM, not paused, no rate limit, per instance. PUT
 * replaces all the controls; PATCH only the members its body names, merged
 * into the stored ones (or the defaults) inside the Redis function, so
 * concurrent PATCHes of different members all hold. At most
 * HOOKWHEEL_MAX_QUEUES fields exist, all namespaces together: a PUT or PATCH
 * of a new queue beyond them answers 409 and stores nothing (the check and
 * the write are one Redis function).
 *
 * GET answers also say how many of the namespace's timers each queue has in
 * each state and how many are due but not begun (persistence/counts.h: one
 * call per partition, after the controls' read); GET /queues lists every
 * queue that has controls or timers in a counted state. */
#include "api.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "nsgate.h"
#include "persistence/counts.h"
#include "persistence/queues.h"
#include "queuecfg.h"
#include "xalloc.h"

typedef struct queue_ctx {
    http_req *r;
    api *a;
    char field[QUEUECFG_FIELD_MAX]; /* "<namespace>/<queue>" or "<queue>" */
    queue_controls cfg;              /* PUT, PATCH: what was written; GET: the queue's controls */
    int configured;                  /* GET, PATCH: cfg was stored */
    int written;                     /* PATCH: the write is done, so a failed count read still answers 200 */
    json_t *list;                    /* GET /queues: {name: controls} of the namespace's configured queues */
    uint64_t now_ms;                 /* when the counts were asked for */
    char *gate_ns;                   /* GET, PATCH: the namespace counted in nsgate until the answer */
} queue_ctx;

/* Counts the call among its namespace's expensive ones (nsgate.h): the
 * counts read one call per partition, each examining up to
 * COUNTS_DUE_BUDGET due timers, so a storm of them would take Redis from
 * every other namespace's deliveries. Returns 0, or -1 when it answered
 * 429. */
static int gate(queue_ctx *c)
{
    if (nsgate_admit(c->r, (unsigned)c->a->cfg->max_expensive_per_namespace) < 0)
        return -1;
    c->gate_ns = xstrdup(http_req_namespace(c->r));
    return 0;
}

/* Leaves the gate, once; before the answer, so that a client that asks
 * again at once finds room. */
static void ungate(queue_ctx *c)
{
    if (!c->gate_ns)
        return;
    nsgate_leave(c->gate_ns);
    free(c->gate_ns);
    c->gate_ns = NULL;
}

static void ctx_free(queue_ctx *c)
{
    ungate(c);
    free(c);
}

static json_t *queue_json(const char *name, const queue_controls *c, int configured)
{
    return json_pack("{s:s,s:I,s:b,s:f,s:s,s:b}", "name", name, "parallelism", (json_int_t)c->parallelism, "paused",
                     c->paused, "max_dispatches_per_second", c->rate, "scope",
                     c->per_instance ? "instance" : "deployment", "configured", configured);
}

/* Adds the counts of row (NULL: none) to the queue object q:
 * {"timers": {state: n, ...}, "due": n, "oldest_due_age_ms": n,
 * "counts_exact": b}. */
static void add_counts(json_t *q, const counts_row *row, int exact, uint64_t now_ms)
{
    json_t *t = json_object();
    for (int i = 0; i < COUNTS_STATES; i++)
        json_object_set_new(t, counts_state_names[i], json_integer(row ? (json_int_t)row->n[i] : 0));
    json_object_set_new(q, "timers", t);
    uint64_t due = row ? row->due : 0;
    int64_t age = due && (int64_t)now_ms > row->oldest_due_ms ? (int64_t)now_ms - row->oldest_due_ms : 0;
    json_object_set_new(q, "due", json_integer((json_int_t)due));
    json_object_set_new(q, "oldest_due_age_ms", json_integer(age));
    json_object_set_new(q, "counts_exact", json_boolean(exact));
}

/* Asks for the namespace's counts; cb answers. Answers the request itself
 * and returns -1 when the call cannot be queued (c is then the caller's). */
static int ask_counts(queue_ctx *c, counts_cb cb)
{
    c->now_ms = clock_now_ms();
    int rc = counts_read(c->a->st, c->a->cfg->partitions, http_req_namespace(c->r), c->now_ms, cb, c);
    if (rc < 0)
        api_respond_submit_error(c->r, rc);
    return rc < 0 ? -1 : 0;
}

/* The controls of a queue without stored ones, as GET reports them: the
 * defaults hold per instance. */
static queue_controls defaults(const api *a)
{
    return (queue_controls){.parallelism = (uint32_t)a->cfg->queue_parallelism, .per_instance = 1};
}

static queue_ctx *ctx_new(http_req *r, api *a, const char *name)
{
    if (!spec_queue_valid(name)) {
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

static void list_counts_cb(void *arg, const counts_reply *reply)
{
    queue_ctx *c = arg;
    ungate(c);
    if (reply->status != COUNTS_OK) {
        api_respond_unavailable(c->r);
        json_decref(c->list);
        ctx_free(c);
        return;
    }
    queue_controls def = defaults(c->a);
    for (size_t i = 0; i < reply->n; i++)
        if (!json_object_get(c->list, reply->rows[i].queue))
            json_object_set_new(c->list, reply->rows[i].queue, queue_json(reply->rows[i].queue, &def, 0));
    json_t *list = json_array();
    const char *name;
    json_t *q;
    json_object_foreach(c->list, name, q) {
        const counts_row *row = NULL;
        for (size_t i = 0; i < reply->n && !row; i++)
            if (strcmp(reply->rows[i].queue, name) == 0)
                row = &reply->rows[i];
        add_counts(q, row, reply->exact, c->now_ms);
        json_array_append(list, q);
    }
    http_respond_json(c->r, 200, json_pack("{s:o}", "queues", list), NULL);
    json_decref(c->list);
    ctx_free(c);
}

static void list_cb(void *arg, const queues_reply *reply)
{
    queue_ctx *c = arg;
    if (reply->status != QUEUES_OK) {
        api_respond_unavailable(c->r);
        ctx_free(c);
        return;
    }
    const char *ns = http_req_namespace(c->r);
    size_t nslen = strlen(ns);
    c->list = json_object();
    for (size_t i = 0; i < reply->n; i++) {
        const char *f = reply->entries[i].field;
        const char *slash = strrchr(f, '/');
        size_t flen = slash ? (size_t)(slash - f) : 0;
        if (flen != nslen || (nslen && memcmp(f, ns, nslen) != 0) || (!nslen && slash))
            continue;
        const char *name = slash ? slash + 1 : f;
        json_object_set_new(c->list, name, queue_json(name, &reply->entries[i].controls, 1));
    }
    if (ask_counts(c, list_counts_cb) < 0) {
        json_decref(c->list);
        ctx_free(c);
    }
}

void api_queue_list(http_req *r, const char *const *params, void *app)
{
    (void)params;
    api *a = app;
    queue_ctx *c = xcalloc(1, sizeof *c);
    c->r = r;
    c->a = a;
    if (gate(c) < 0) {
        ctx_free(c);
        return;
    }
    int rc = queues_list(a->st, list_cb, c);
    if (rc < 0) {
        api_respond_submit_error(r, rc);
        ctx_free(c);
    }
}

/* ---- GET /queues/{name} ---- */

/* The name part of a field, "<namespace>/<queue>" or "<queue>". */
static const char *field_queue(const char *field)
{
    const char *slash = strrchr(field, '/');
    return slash ? slash + 1 : field;
}

/* Answers GET's 200 (and PATCH's) with reply's counts; without them (reply
 * NULL, or a failed read) only after a write, which must not answer 503. */
static void respond_queue(queue_ctx *c, const counts_reply *reply)
{
    ungate(c);
    if ((!reply || reply->status != COUNTS_OK) && !c->written) {
        api_respond_unavailable(c->r);
        return;
    }
    const char *name = field_queue(c->field);
    json_t *q = queue_json(name, &c->cfg, c->configured);
    if (reply && reply->status == COUNTS_OK) {
        const counts_row *row = NULL;
        for (size_t i = 0; i < reply->n && !row; i++)
            if (strcmp(reply->rows[i].queue, name) == 0)
                row = &reply->rows[i];
        add_counts(q, row, reply->exact, c->now_ms);
    }
    http_respond_json(c->r, 200, q, NULL);
}

static void get_counts_cb(void *arg, const counts_reply *reply)
{
    queue_ctx *c = arg;
    respond_queue(c, reply);
    ctx_free(c);
}

static void get_cb(void *arg, const queues_reply *reply)
{
    queue_ctx *c = arg;
    if (reply->status != QUEUES_OK) {
        api_respond_unavailable(c->r);
        ctx_free(c);
        return;
    }
    c->cfg = defaults(c->a);
    if (reply->found)
        c->cfg = reply->controls;
    c->configured = reply->found;
    if (ask_counts(c, get_counts_cb) < 0)
        ctx_free(c);
}

void api_queue_get(http_req *r, const char *const *params, void *app)
{
    api *a = app;
    queue_ctx *c = ctx_new(r, a, params[0]);
    if (!c)
        return;
    if (gate(c) < 0) {
        ctx_free(c);
        return;
    }
    int rc = queues_get(a->st, c->field, get_cb, c);
    if (rc < 0) {
        api_respond_submit_error(r, rc);
        ctx_free(c);
    }
}

/* ---- PUT and PATCH /queues/{name} ---- */

static int bad(http_req *r, const char *field, const char *detail)
{
    http_respond_problem(r, 400, detail, field, NULL, 0);
    return -EINVAL;
}

/* Reads {parallelism?, paused?, max_dispatches_per_second?, scope?} into
 * *q and sets in *set the queues_member bit of each member present; absent
 * members keep what *q held. Answers the 400 itself (naming the member)
 * and returns -EINVAL when the body is not such an object. */
static int parse_controls(http_req *r, queue_controls *q, unsigned *set)
{
    size_t len;
    const char *body = http_req_body(r, &len);
    json_t *j = api_body_object(r, body, len, "the body must be a JSON object"), *v;
    const char *key;
    int rc = 0;
    *set = 0;
    if (!j)
        return -EINVAL;
    json_object_foreach(j, key, v) {
        if (strcmp(key, "parallelism") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > QUEUES_PARALLELISM_MAX) {
                rc = bad(r, key, "parallelism must be an integer from 1 to 1000000");
                break;
            }
            q->parallelism = (uint32_t)json_integer_value(v);
            *set |= QUEUES_SET_PARALLELISM;
        } else if (strcmp(key, "paused") == 0) {
            if (!json_is_boolean(v)) {
                rc = bad(r, key, "paused must be true or false");
                break;
            }
            q->paused = json_is_true(v);
            *set |= QUEUES_SET_PAUSED;
        } else if (strcmp(key, "max_dispatches_per_second") == 0) {
            if (!json_is_number(v) || !queuecfg_rate_valid(json_number_value(v))) {
                rc = bad(r, key, "max_dispatches_per_second must be 0 (no limit) or a number from 0.001 to 100000");
                break;
            }
            q->rate = json_number_value(v);
            *set |= QUEUES_SET_RATE;
        } else if (strcmp(key, "scope") == 0) {
            const char *scope = json_string_value(v);
            if (!scope || (strcmp(scope, "deployment") != 0 && strcmp(scope, "instance") != 0)) {
                rc = bad(r, key, "scope must be \"deployment\" (the limits hold for all instances together) or "
                                 "\"instance\" (for each instance)");
                break;
            }
            q->per_instance = strcmp(scope, "instance") == 0;
            *set |= QUEUES_SET_SCOPE;
        } else {
            rc = bad(r, key, "unknown field");
            break;
        }
    }
    json_decref(j);
    return rc;
}

/* Answers a PUT's or PATCH's failure: 503, or 409 past HOOKWHEEL_MAX_QUEUES.
 * Returns 0 when the write is done (nothing answered yet) and logs it. */
static int written(queue_ctx *c, const queues_reply *reply)
{
    if (reply->status != QUEUES_OK) {
        if (!api_respond_refused(c->r, reply->refused, "the queue's controls were not changed"))
            api_respond_unavailable(c->r);
        return -1;
    }
    if (reply->put == QUEUES_PUT_FULL) {
        char detail[200];
        snprintf(detail, sizeof detail,
                 "Too many queues have controls: at most %" PRIu64 " (HOOKWHEEL_MAX_QUEUES). Nothing was stored; "
                 "DELETE /queues/{name} the controls of a queue that no longer needs them.",
                 c->a->cfg->max_queues);
        http_respond_problem(c->r, 409, detail, NULL, NULL, 0);
        return -1;
    }
    const queue_controls *q = reply->found ? &reply->controls : &c->cfg;
    LOG(LOG_INFO, "queue settings changed",
        "\"queue\":\"%s\",\"parallelism\":%u,\"paused\":%s,\"rate\":%g,\"scope\":\"%s\"", c->field,
        q->parallelism, q->paused ? "true" : "false", q->rate, q->per_instance ? "instance" : "deployment");
    return 0;
}

static void put_cb(void *arg, const queues_reply *reply)
{
    queue_ctx *c = arg;
    if (written(c, reply) == 0)
        http_respond_json(c->r, 200, queue_json(field_queue(c->field), &c->cfg, 1), NULL);
    ctx_free(c);
}

void api_queue_put(http_req *r, const char *const *params, void *app)
{
    api *a = app;
    queue_ctx *c = ctx_new(r, a, params[0]);
    if (!c)
        return;
    /* PUT replaces the settings: absent members take the defaults, the
     * scope's being "deployment" */
    c->cfg = (queue_controls){.parallelism = (uint32_t)a->cfg->queue_parallelism};
    unsigned set;
    if (parse_controls(r, &c->cfg, &set) < 0) {
        ctx_free(c);
        return;
    }
    int rc = queues_put(a->st, c->field, &c->cfg, a->cfg->max_queues, put_cb, c);
    if (rc < 0) {
        api_respond_submit_error(r, rc);
        ctx_free(c);
    }
}

/* Answers a PATCH as GET /queues/{name} does, once the merged controls
 * are stored: with the queue's counts, or without them when they cannot be
 * read (the write is done: a 503 would say it was not). */
static void patch_cb(void *arg, const queues_reply *reply)
{
    queue_ctx *c = arg;
    if (written(c, reply) < 0) {
        ctx_free(c);
        return;
    }
    c->cfg = reply->controls;
    c->configured = 1;
    c->written = 1;
    c->now_ms = clock_now_ms();
    if (counts_read(c->a->st, c->a->cfg->partitions, http_req_namespace(c->r), c->now_ms, get_counts_cb, c) < 0) {
        respond_queue(c, NULL);
        ctx_free(c);
    }
}

void api_queue_patch(http_req *r, const char *const *params, void *app)
{
    api *a = app;
    queue_ctx *c = ctx_new(r, a, params[0]);
    if (!c)
        return;
    unsigned set;
    if (parse_controls(r, &c->cfg, &set) < 0) {
        ctx_free(c);
        return;
    }
    if (!set) {
        bad(r, "", "the body must name at least one of parallelism, paused, max_dispatches_per_second and scope");
        ctx_free(c);
        return;
    }
    if (gate(c) < 0) {
        ctx_free(c);
        return;
    }
    queue_controls def = defaults(a);
    int rc = queues_patch(a->st, c->field, &c->cfg, set, &def, a->cfg->max_queues, patch_cb, c);
    if (rc < 0) {
        api_respond_submit_error(r, rc);
        ctx_free(c);
    }
}

/* ---- DELETE /queues/{name} ---- */

static void delete_cb(void *arg, const queues_reply *reply)
{
    queue_ctx *c = arg;
    if (reply->status != QUEUES_OK) {
        if (!api_respond_refused(c->r, reply->refused, "the queue's controls were not deleted"))
            api_respond_unavailable(c->r);
    } else if (!reply->found) {
        http_respond_problem(c->r, 404, "This queue has no stored controls: it has the defaults.", NULL, NULL, 0);
    } else {
        LOG(LOG_INFO, "queue settings deleted", "\"queue\":\"%s\"", c->field);
        http_respond_json(c->r, 204, NULL, NULL);
    }
    ctx_free(c);
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
        ctx_free(c);
    }
}
