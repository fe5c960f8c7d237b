/* metrics_api.c - GET /metrics: this instance's metrics in the Prometheus
 * text exposition format (metrics.h).
 *
 * Runs on a libmicrohttpd thread and answers before it returns. It reads the
 * gauges other modules own through their accessors, which read atomics (the
 * store's takes its submit lock for one read), and never asks the engine
 * thread anything: a scrape costs the engine nothing, and answers at once
 * even while Redis is down. */
#include "api.h"

#include "clock.h"

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
        .lease_age_s = lease_age_s(&eg),
        .lease_ttl_s = (double)a->cfg->lease_ttl_ms / 1000.0,
        .redis_masters = store_is_cluster(a->st) ? (double)ss.masters : 1.0,
        .redis_moved = (double)ss.moved,
        .redis_ask = (double)ss.ask,
        .redis_tryagain = (double)ss.tryagain,
        .redis_map_refreshes = (double)ss.map_refreshes,
        .redis_replica_ack_timeouts = (double)ss.replica_ack_timeouts,
    };
    size_t len;
    char *text = metrics_render(a->m, &g, &len);
    http_respond_text_take(r, 200, METRICS_CONTENT_TYPE, text, len);
}
