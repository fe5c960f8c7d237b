/* stats.c - GET /stats?minutes=N[&queue=NAME]: the caller's namespace's
 * delivery figures per minute over the last N minutes (1..60, default 60),
 * summed over every instance sharing the Redis: of every queue summed, or
 * of queue NAME only. Either answer also names the queues with figures in
 * these minutes ("queues") with each one's totals over them
 * ("queue_totals"), so a client draws a per-queue table in one call.
 *
 * The engine counts per namespace, queue and minute in memory and adds the counts
 * to Redis once a second (service/tally.h); this handler scans the N
 * minutes' hashes a few hundred fields a call (persistence/stats.h) and
 * writes the answer on the HTTP thread as the client takes it. The current
 * minute is partial, and the last second or so of it may not be in Redis
 * yet. Lateness p50 and p99 are estimated from the minute's lateness
 * buckets, summed over the queues answered (tally_quantile_ms: linear
 * inside a bucket, so their resolution is the bucket's width). */
#include "api.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "nsgate.h"
#include "persistence/stats.h"
#include "jsonesc.h"
#include "tally.h"
#include "xalloc.h"

#define STATS_DEFAULT_MINUTES 60
#define MINUTE_MS 60000

/* A quantile as JSON: milliseconds to the microsecond, or null. */
static json_t *quantile_json(const uint64_t *buckets, double q)
{
    double ms = tally_quantile_ms(buckets, q);
    return ms < 0 ? json_null() : json_real(round(ms * 1000.0) / 1000.0);
}

static json_t *minute_json(int64_t minute, const stats_minute *m)
{
    char start[32];
    time_t secs = (time_t)(minute * 60);
    struct tm tm;
    gmtime_r(&secs, &tm);
    strftime(start, sizeof start, "%Y-%m-%dT%H:%M:%SZ", &tm);
    const uint64_t *b = &m->v[STATS_LATENESS];
    return json_pack("{s:s,s:I,s:I,s:I,s:I,s:{s:o,s:o}}", "start", start, "delivered",
                     (json_int_t)m->v[STATS_DELIVERED], "failed", (json_int_t)m->v[STATS_FAILED], "attempts",
                     (json_int_t)m->v[STATS_ATTEMPTS], "failed_attempts", (json_int_t)m->v[STATS_FAILED_ATTEMPTS],
                     "lateness_ms", "p50", quantile_json(b, 0.5), "p99", quantile_json(b, 0.99));
}

/* The answer, written as the client takes it (http_respond_stream), on the
 * HTTP thread: a namespace may have tens of thousands of queues, and
 * sorting their names and writing their totals (1.5 MB for 20,000) on the
 * store's writer thread held every namespace's creates and attempts back
 * for as long. Its parts, in order: the head (minute_ms and the minutes),
 * the queues' names, the queues' totals, the end. */
enum { PART_HEAD, PART_NAMES, PART_TOTALS, PART_DONE };

typedef struct body {
    stats_reply *reply;
    const stats_queue **order; /* by name, made on the first fill */
    int part;
    size_t i;                  /* the next queue of the part */
    jbuf pend;                 /* text made and not yet taken */
    size_t taken;              /* bytes of pend already taken */
} body;

static int order_cmp(const void *a, const void *b)
{
    return strcmp((*(const stats_queue *const *)a)->name, (*(const stats_queue *const *)b)->name);
}

static void body_head(body *bd)
{
    const stats_reply *reply = bd->reply;
    json_t *minutes = json_array();
    for (size_t i = 0; i < reply->n; i++)
        json_array_append_new(minutes, minute_json(reply->first + (int64_t)i, &reply->minutes[i]));
    json_t *doc = json_pack("{s:i,s:o}", "minute_ms", MINUTE_MS, "minutes", minutes);
    char *text = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(doc);
    size_t len = text ? strlen(text) : 0;
    if (len > 1)
        jb_put(&bd->pend, text, len - 1); /* without its closing brace */
    else
        JB_LIT(&bd->pend, "{\"minute_ms\":60000,\"minutes\":[]"); /* jansson out of memory */
    free(text);
    JB_LIT(&bd->pend, ",\"queues\":[");
    bd->order = xmalloc((reply->nqueues ? reply->nqueues : 1) * sizeof *bd->order);
    for (size_t i = 0; i < reply->nqueues; i++)
        bd->order[i] = &reply->queues[i];
    if (reply->nqueues)
        qsort(bd->order, reply->nqueues, sizeof *bd->order, order_cmp);
}

static void body_total(jbuf *b, const stats_queue *q)
{
    static const struct {
        const char *name;
        int f;
    } figures[] = {{"delivered", STATS_DELIVERED}, {"failed", STATS_FAILED}, {"attempts", STATS_ATTEMPTS},
                   {"failed_attempts", STATS_FAILED_ATTEMPTS}};
    jb_text(b, q->name, strlen(q->name));
    for (size_t k = 0; k < sizeof figures / sizeof figures[0]; k++) {
        jb_put(b, k ? ",\"" : ":{\"", k ? 2 : 3);
        jb_put(b, figures[k].name, strlen(figures[k].name));
        JB_LIT(b, "\":");
        jb_int(b, (long long)q->total.v[figures[k].f]);
    }
    JB_LIT(b, "}");
}

/* Makes the next piece of text into bd->pend; 0 when there is none left. */
static int body_next(void *arg)
{
    body *bd = arg;
    const stats_reply *reply = bd->reply;
    switch (bd->part) {
    case PART_HEAD:
        body_head(bd);
        bd->part = PART_NAMES;
        return 1;
    case PART_NAMES:
        if (bd->i < reply->nqueues) {
            if (bd->i)
                JB_LIT(&bd->pend, ",");
            const char *name = bd->order[bd->i++]->name;
            jb_text(&bd->pend, name, strlen(name));
            return 1;
        }
        JB_LIT(&bd->pend, "],\"queue_totals\":{");
        bd->part = PART_TOTALS;
        bd->i = 0;
        return 1;
    case PART_TOTALS:
        if (bd->i < reply->nqueues) {
            if (bd->i)
                JB_LIT(&bd->pend, ",");
            body_total(&bd->pend, bd->order[bd->i++]);
            return 1;
        }
        JB_LIT(&bd->pend, "}}");
        bd->part = PART_DONE;
        return 1;
    default:
        return 0;
    }
}

static size_t body_fill(void *arg, char *buf, size_t max)
{
    body *bd = arg;
    return jb_fill(&bd->pend, &bd->taken, buf, max, body_next, bd);
}

static void body_free(void *arg)
{
    body *bd = arg;
    stats_reply_free(bd->reply);
    free(bd->order);
    free(bd->pend.p);
    free(bd);
}

/* A read in flight: counted in its namespace's gate (nsgate.h) until its
 * answer. A read of 60 minutes of a namespace with thousands of queues
 * scans hundreds of thousands of fields, a few hundred a call
 * (persistence/stats.h), so it holds neither Redis nor the store's writer
 * thread for long; the gate bounds how many a namespace has in flight. */
typedef struct read_ctx {
    http_req *r;
    char *ns;
} read_ctx;

static void read_cb(void *arg, stats_reply *reply)
{
    read_ctx *c = arg;
    http_req *r = c->r;
    nsgate_leave(c->ns); /* before the answer: a client that asks again at once finds room */
    free(c->ns);
    free(c);
    if (!reply->ok) {
        stats_reply_free(reply);
        api_respond_unavailable(r);
        return;
    }
    body *bd = xcalloc(1, sizeof *bd);
    bd->reply = reply;
    http_respond_stream(r, 200, "application/json", body_fill, body_free, bd);
}

void api_stats(http_req *r, const char *const *params, void *app)
{
    (void)params;
    api *a = app;
    const char *q = http_req_query(r, "minutes");
    unsigned long long n = STATS_DEFAULT_MINUTES;
    if (q && (api_number(q, strlen(q), STATS_MAX_MINUTES, &n) < 0 || n < 1)) {
        http_respond_problem(r, 400, "minutes must be an integer from 1 to 60", "minutes", NULL, 0);
        return;
    }
    const char *queue = http_req_query(r, "queue");
    if (queue && !spec_queue_valid(queue)) {
        http_respond_problem(r, 400, "queue must match [A-Za-z0-9._-]{1,64}", "queue", NULL, 0);
        return;
    }
    if (nsgate_admit(r, (unsigned)a->cfg->max_expensive_per_namespace) < 0)
        return;
    read_ctx *c = xmalloc(sizeof *c);
    c->r = r;
    c->ns = xstrdup(http_req_namespace(r));
    int64_t now_minute = (int64_t)(clock_now_ms() / MINUTE_MS);
    int rc = stats_read(a->st, c->ns, queue, now_minute - (int64_t)n + 1, n, read_cb, c);
    if (rc < 0) {
        nsgate_leave(c->ns);
        free(c->ns);
        free(c);
        api_respond_submit_error(r, rc);
    }
}
