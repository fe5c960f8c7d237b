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
#include "jsonesc.h"
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
    struct list_body *list;          /* GET /queues: its answer, made ready while the reads come */
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

/* A real as jansson writes it with JSON_REAL_PRECISION(15): "%.15g", ".0"
 * added to an integral value, an exponent without '+' or leading zeros. */
static void put_real(jbuf *b, double v)
{
    char t[40];
    int n = snprintf(t, sizeof t, "%.15g", v);
    if (!strchr(t, '.') && !strchr(t, 'e') && n + 2 < (int)sizeof t) {
        memcpy(t + n, ".0", 3);
        n += 2;
    }
    char *e = strchr(t, 'e');
    if (e) {
        char *start = e + 1, *end;
        if (*start == '-')
            start++;
        for (end = start; *end == '+' || *end == '0'; end++)
            ;
        memmove(start, end, strlen(end) + 1);
        n = (int)strlen(t);
    }
    jb_put(b, t, (size_t)n);
}

/* A queue's object, written by hand (GET /queues writes thousands):
 * {"name","parallelism","paused","max_dispatches_per_second","scope",
 * "configured"}, and with counts (with_counts; row NULL: none) also
 * "timers": {state: n, ...}, "due", "oldest_due_age_ms", "counts_exact". */
static void queue_text(jbuf *b, const char *name, const queue_controls *c, int configured, int with_counts,
                       const counts_row *row, int exact, uint64_t now_ms)
{
    JB_LIT(b, "{\"name\":");
    jb_str(b, name, strlen(name));
    JB_LIT(b, ",\"parallelism\":");
    jb_int(b, (long long)c->parallelism);
    JB_LIT(b, ",\"paused\":");
    if (c->paused)
        JB_LIT(b, "true");
    else
        JB_LIT(b, "false");
    JB_LIT(b, ",\"max_dispatches_per_second\":");
    put_real(b, c->rate);
    if (c->per_instance)
        JB_LIT(b, ",\"scope\":\"instance\",\"configured\":");
    else
        JB_LIT(b, ",\"scope\":\"deployment\",\"configured\":");
    if (configured)
        JB_LIT(b, "true");
    else
        JB_LIT(b, "false");
    if (with_counts) {
        JB_LIT(b, ",\"timers\":{");
        for (int i = 0; i < COUNTS_STATES; i++) {
            if (i)
                JB_LIT(b, ",");
            jb_str(b, counts_state_names[i], strlen(counts_state_names[i]));
            JB_LIT(b, ":");
            jb_int(b, row ? (long long)row->n[i] : 0);
        }
        uint64_t due = row ? row->due : 0;
        int64_t age = due && (int64_t)now_ms > row->oldest_due_ms ? (int64_t)now_ms - row->oldest_due_ms : 0;
        JB_LIT(b, "},\"due\":");
        jb_int(b, (long long)due);
        JB_LIT(b, ",\"oldest_due_age_ms\":");
        jb_int(b, (long long)age);
        if (exact)
            JB_LIT(b, ",\"counts_exact\":true");
        else
            JB_LIT(b, ",\"counts_exact\":false");
    }
    JB_LIT(b, "}");
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

/* The row of queue name among the n rows of a read of one namespace's
 * counts (by queue), or NULL. By bisection: a namespace may have tens of
 * thousands of queues. */
static const counts_row *counts_row_of(const counts_row *rows, size_t n, const char *name)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int d = strcmp(rows[mid].queue, name);
        if (d == 0)
            return &rows[mid];
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---- GET /queues ---- */

/* GET /queues's answer, written on the HTTP thread as the client takes it
 * (http_respond_stream): a namespace may have tens of thousands of queues,
 * and building and serialising their objects (4.4 MB for 20,000) on the
 * store's writer thread held every namespace's creates and attempts back
 * for as long. The callbacks only copy the configured queues and keep the
 * counts' answers, which the first fill sums (counts_sum: another 15-20 ms
 * for 20,000 queues). The answer lists the configured queues, in the
 * controls' order, then the counted ones without controls, by name. */
typedef struct listed {
    char name[QUEUECFG_FIELD_MAX];
    queue_controls cfg;
} listed;

typedef struct list_body {
    listed *conf;          /* the namespace's configured queues */
    size_t nconf, capconf;
    const char **conf_sorted; /* their names, by strcmp (made on the first fill) */
    counts_answers *ans;   /* the counts' answers, summed on the first fill */
    const counts_row *rows; /* their sum, by queue (ans owns it) */
    size_t nrows;
    int exact;
    uint64_t now_ms;
    queue_controls def;
    size_t i;              /* the next queue: configured ones, then rows */
    int started, ended;
    jbuf pend;             /* text made and not yet taken */
    size_t taken;
} list_body;

static void list_body_free(void *arg)
{
    list_body *b = arg;
    free(b->conf);
    free(b->conf_sorted);
    counts_answers_free(b->ans);
    free(b->pend.p);
    free(b);
}

static int name_cmp(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static int configured_name(const list_body *b, const char *name)
{
    return b->nconf && bsearch(&name, b->conf_sorted, b->nconf, sizeof *b->conf_sorted, name_cmp) != NULL;
}


/* Makes the next piece of text into b->pend; 0 when there is none left. */
static int list_body_next(void *arg)
{
    list_body *b = arg;
    if (!b->conf_sorted) {
        b->conf_sorted = xmalloc((b->nconf ? b->nconf : 1) * sizeof *b->conf_sorted);
        for (size_t i = 0; i < b->nconf; i++)
            b->conf_sorted[i] = b->conf[i].name;
        if (b->nconf)
            qsort(b->conf_sorted, b->nconf, sizeof *b->conf_sorted, name_cmp);
        const counts_reply *sum = counts_sum(b->ans); /* one namespace's: its rows are by queue */
        b->rows = sum->rows;
        b->nrows = sum->n;
        JB_LIT(&b->pend, "{\"queues\":[");
        return 1;
    }
    while (b->i < b->nconf + b->nrows) {
        size_t i = b->i++;
        const counts_row *row = i < b->nconf ? NULL : &b->rows[i - b->nconf];
        if (row && configured_name(b, row->queue))
            continue; /* listed with its controls */
        if (b->started)
            JB_LIT(&b->pend, ",");
        b->started = 1;
        if (row) {
            queue_text(&b->pend, row->queue, &b->def, 0, 1, row, b->exact, b->now_ms);
        } else {
            const char *name = b->conf[i].name;
            const counts_row *counts = counts_row_of(b->rows, b->nrows, name);
            queue_text(&b->pend, name, &b->conf[i].cfg, 1, 1, counts, b->exact, b->now_ms);
        }
        return 1;
    }
    if (b->ended)
        return 0;
    JB_LIT(&b->pend, "]}");
    b->ended = 1;
    return 1;
}

static size_t list_body_fill(void *arg, char *buf, size_t max)
{
    list_body *b = arg;
    return jb_fill(&b->pend, &b->taken, buf, max, list_body_next, b);
}

static void list_counts_cb(void *arg, counts_answers *ans)
{
    queue_ctx *c = arg;
    list_body *b = c->list;
    c->list = NULL;
    ungate(c);
    if (counts_answers_status(ans) != COUNTS_OK) {
        api_respond_unavailable(c->r);
        counts_answers_free(ans);
        list_body_free(b);
        ctx_free(c);
        return;
    }
    b->ans = ans;
    b->exact = counts_answers_exact(ans);
    b->now_ms = c->now_ms;
    b->def = defaults(c->a);
    http_respond_stream(c->r, 200, "application/json", list_body_fill, list_body_free, b);
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
    list_body *b = xcalloc(1, sizeof *b);
    for (size_t i = 0; i < reply->n; i++) {
        const char *f = reply->entries[i].field;
        const char *slash = strrchr(f, '/');
        size_t flen = slash ? (size_t)(slash - f) : 0;
        if (flen != nslen || (nslen && memcmp(f, ns, nslen) != 0) || (!nslen && slash))
            continue;
        const char *name = slash ? slash + 1 : f;
        if (strlen(name) >= sizeof b->conf[0].name)
            continue;
        if (b->nconf == b->capconf) {
            b->capconf = b->capconf ? 2 * b->capconf : 16;
            b->conf = xrealloc(b->conf, b->capconf * sizeof *b->conf);
        }
        listed *e = &b->conf[b->nconf++];
        strcpy(e->name, name);
        e->cfg = reply->entries[i].controls;
    }
    c->list = b;
    if (ask_counts(c, list_counts_cb) < 0) {
        list_body_free(b);
        c->list = NULL;
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

/* Answers 200 with one queue's object, its counts from ans (NULL: none:
 * the object has no "timers"). Only its fields of the answers are looked
 * at (counts_find): a namespace may have tens of thousands of queues, and
 * this runs on the store's writer thread. */
static void respond_queue_text(queue_ctx *c, const queue_controls *cfg, int configured, const counts_answers *ans)
{
    jbuf b = {0};
    const char *name = field_queue(c->field);
    int counted = ans && counts_answers_status(ans) == COUNTS_OK;
    counts_row row;
    int found = counted && counts_find(ans, http_req_namespace(c->r), name, &row);
    queue_text(&b, name, cfg, configured, counted, found ? &row : NULL, counted && counts_answers_exact(ans),
               c->now_ms);
    http_respond_json_text_take(c->r, 200, b.p, b.n, NULL);
}

/* Answers GET's 200 (and PATCH's) with the counts' answers; without them
 * (ans NULL, or a failed read) only after a write, which must not answer
 * 503. */
static void respond_queue(queue_ctx *c, const counts_answers *ans)
{
    ungate(c);
    if ((!ans || counts_answers_status(ans) != COUNTS_OK) && !c->written) {
        api_respond_unavailable(c->r);
        return;
    }
    respond_queue_text(c, &c->cfg, c->configured, ans);
}

static void get_counts_cb(void *arg, counts_answers *ans)
{
    queue_ctx *c = arg;
    respond_queue(c, ans);
    counts_answers_free(ans);
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
        respond_queue_text(c, &c->cfg, 1, NULL);
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
