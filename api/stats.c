/* stats.c - GET /stats?minutes=N[&queue=NAME]: the caller's namespace's
 * delivery figures per minute over the last N minutes (1..60, default 60),
 * summed over every instance sharing the Redis: of every queue summed, or
 * of queue NAME only. Either answer also names the queues with figures in
 * these minutes ("queues") with each one's totals over them
 * ("queue_totals"), so a client draws a per-queue table in one call.
 *
 * The engine counts per namespace, queue and minute in memory and adds the counts
 * to Redis once a second (service/tally.h); this handler reads the N
 * minutes' hashes in one pipelined round (persistence/stats.h) and answers
 * from the store's writer thread. The current minute is partial, and the
 * last second or so of it may not be in Redis yet. Lateness p50 and p99
 * are estimated from the minute's lateness buckets, summed over the queues
 * answered (tally_quantile_ms: linear inside a bucket, so their resolution
 * is the bucket's width). */
#include "api.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "nsgate.h"
#include "persistence/stats.h"
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

/* The queues' names, and their totals over the minutes read. */
static void queues_json(const stats_reply *reply, json_t **names, json_t **totals)
{
    *names = json_array();
    *totals = json_object();
    for (size_t i = 0; i < reply->nqueues; i++) {
        const stats_queue *q = &reply->queues[i];
        json_array_append_new(*names, json_string(q->name));
        json_object_set_new(*totals, q->name,
                            json_pack("{s:I,s:I,s:I,s:I}", "delivered", (json_int_t)q->total.v[STATS_DELIVERED],
                                      "failed", (json_int_t)q->total.v[STATS_FAILED], "attempts",
                                      (json_int_t)q->total.v[STATS_ATTEMPTS], "failed_attempts",
                                      (json_int_t)q->total.v[STATS_FAILED_ATTEMPTS]));
    }
}

/* A read in flight: counted in its namespace's gate (nsgate.h) until its
 * answer. A read of 60 minutes of a namespace with thousands of queues
 * decodes hundreds of thousands of fields on the store's writer thread,
 * which every namespace's creates and attempts share. */
typedef struct read_ctx {
    http_req *r;
    char *ns;
} read_ctx;

static void read_cb(void *arg, const stats_reply *reply)
{
    read_ctx *c = arg;
    http_req *r = c->r;
    nsgate_leave(c->ns); /* before the answer: a client that asks again at once finds room */
    free(c->ns);
    free(c);
    if (!reply->ok) {
        api_respond_unavailable(r);
        return;
    }
    json_t *minutes = json_array(), *names, *totals;
    for (size_t i = 0; i < reply->n; i++)
        json_array_append_new(minutes, minute_json(reply->first + (int64_t)i, &reply->minutes[i]));
    queues_json(reply, &names, &totals);
    http_respond_json(r, 200,
                      json_pack("{s:i,s:o,s:o,s:o}", "minute_ms", MINUTE_MS, "minutes", minutes, "queues", names,
                                "queue_totals", totals),
                      NULL);
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
