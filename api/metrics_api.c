/* metrics_api.c - GET /metrics: this instance's metrics in the Prometheus
 * text exposition format (metrics.h).
 *
 * Runs on a libmicrohttpd thread and answers before it returns. It reads the
 * gauges other modules own through their accessors, which read atomics (the
 * store's takes its submit lock for one read), and never asks the engine
 * thread anything: a scrape costs the engine nothing, and answers at once
 * even while Redis is down. The queue counts (hookwheel_queue_timers and
 * the due backlog) live in Redis: a scrape renders the last read and, at
 * most once every COUNTS_REFRESH_MS, asks for a new one (persistence/
 * counts.h), which the next scrape sums and shows. So they are one scrape
 * interval old, and a scrape never waits for Redis. The sum is made here, on
 * the HTTP thread, not in the read's callback: for tens of thousands of
 * queues it takes milliseconds of the store's writer thread, which every
 * request's Redis calls wait for. */
#include "api.h"

#include "clock.h"
#include "persistence/counts.h"
#include "xalloc.h"

#define COUNTS_REFRESH_MS 1000

/* Writer thread: a read of every namespace's counts answered; the next
 * scrape sums it (take_counts). */
static void counts_done_cb(void *arg, counts_answers *ans)
{
    api *a = arg;
    if (counts_answers_status(ans) == COUNTS_OK && a->m)
        ans = atomic_exchange(&a->counts_new, ans); /* (the one no scrape took yet goes) */
    counts_answers_free(ans);
    atomic_store(&a->counts_busy, 0);
}

/* Sums the counts of the last read, if no scrape took them yet, per queue
 * name (metrics_set_queue_counts, as the other queue metrics are). */
static void take_counts(api *a)
{
    counts_answers *ans = atomic_exchange(&a->counts_new, NULL);
    if (!ans)
        return;
    const counts_reply *r = counts_sum(ans);
    metrics_queue_counts *rows = xcalloc(r->n + 1, sizeof *rows);
    for (size_t i = 0; i < r->n; i++) {
        rows[i].queue = r->rows[i].queue;
        for (int s = 0; s < COUNTS_STATES; s++)
            rows[i].n[s] = r->rows[i].n[s]; /* counts.h and metrics.h list the states in one order */
        rows[i].n[MQ_DUE] = r->rows[i].due;
        rows[i].oldest_due_ms = r->rows[i].oldest_due_ms;
    }
    metrics_set_queue_counts(a->m, rows, r->n);
    free(rows);
    counts_answers_free(ans);
}

void api_fini(api *a) { counts_answers_free(atomic_exchange(&a->counts_new, NULL)); }

/* Asks for the queue counts when the last read is older than
 * COUNTS_REFRESH_MS and none is in flight. */
static void refresh_counts(api *a)
{
    uint64_t now = clock_now_ms();
    int idle = 0;
    if (now - atomic_load(&a->counts_read_ms) < COUNTS_REFRESH_MS ||
        !atomic_compare_exchange_strong(&a->counts_busy, &idle, 1))
        return;
    atomic_store(&a->counts_read_ms, now);
    if (counts_read(a->st, a->cfg->partitions, NULL, now, counts_done_cb, a) < 0)
        atomic_store(&a->counts_busy, 0);
}

/* Seconds since Redis last confirmed the lease's renewal, or since the
 * engine started when it never did (so an instance that never got its
 * lease looks as stale as it is). */
static double lease_age_s(const engine_gauges *eg)
{
    uint64_t since = eg->lease_renewed_ms ? eg->lease_renewed_ms : eg->started_ms;
    uint64_t now = clock_now_ms();
    return since && now > since ? (double)(now - since) / 1000.0 : 0.0;
}

void api_metrics(http_req *r, const char *const *params, void *app)
{
    (void)params;
    api *a = app;
    if (!a->m) {
        http_respond_problem(r, 503, "This instance does not collect metrics.", NULL, NULL, 0);
        return;
    }
    engine_gauges eg;
    engine_read_gauges(a->eng, &eg);
    store_stats ss;
    store_get_stats(a->st, &ss);
    metrics_gauges g = {
        .claimed = (double)eg.claimed,
        .in_wheel = (double)eg.in_wheel,
        .redis_queued_writes = (double)store_queued(a->st),
        .redis_up = store_ready(a->st) ? 1.0 : 0.0,
        .redis_refusing = store_refusing_writes(a->st) ? 1.0 : 0.0,
        .lease_age_s = lease_age_s(&eg),
        .lease_ttl_s = (double)a->cfg->lease_ttl_ms / 1000.0,
        .redis_masters = store_is_cluster(a->st) ? (double)ss.masters : 1.0,
        .redis_moved = (double)ss.moved,
        .redis_ask = (double)ss.ask,
        .redis_tryagain = (double)ss.tryagain,
        .redis_map_refreshes = (double)ss.map_refreshes,
        .redis_replica_ack_timeouts = (double)ss.replica_ack_timeouts,
    };
    /* After the gauges are read: the counts read queues a call per
     * partition, which this scrape must not report as queued writes. */
    take_counts(a);
    refresh_counts(a);
    size_t len;
    char *text = metrics_render(a->m, &g, &len);
    http_respond_text_take(r, 200, METRICS_CONTENT_TYPE, text, len);
}
