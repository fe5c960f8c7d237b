/* routes.c - the API's route table: method + path pattern -> handler
 * (http.h explains the patterns). One table for every resource, so the
 * whole API can be read in one place. */
#include "api.h"

const http_route api_routes[] = {
    {"POST", "/timers", api_timer_create, 1, 0, 0, NULL},
    {"POST", "/timers/batch", api_timer_batch, 1, 0, 1, NULL},
    {"POST", "/timers/cancel", api_timers_cancel, 1, 0, 0, NULL},
    {"POST", "/timers/pause", api_timers_pause, 1, 0, 0, NULL},
    {"POST", "/timers/resume", api_timers_resume, 1, 0, 0, NULL},
    {"POST", "/timers/reschedule", api_timers_reschedule, 1, 0, 0, NULL},
    {"GET", "/timers", api_timer_list, 0, 0, 0, "state queue label limit cursor"},
    {"GET", "/timers/{id}", api_timer_get, 0, 0, 0, NULL},
    {"DELETE", "/timers/{id}", api_timer_cancel, 0, 0, 0, NULL},
    {"POST", "/timers/{id}/fire", api_timer_fire, 0, 0, 0, NULL},
    {"POST", "/timers/{id}/reschedule", api_timer_reschedule, 1, 0, 0, NULL},
    {"POST", "/timers/{id}/pause", api_timer_pause, 0, 0, 0, NULL},
    {"POST", "/timers/{id}/resume", api_timer_resume, 0, 0, 0, NULL},
    {"POST", "/timers/{id}/retry", api_timer_retry, 0, 0, 0, NULL},
    {"GET", "/schedules/preview", api_schedule_preview, 0, 0, 0,
     "cron tz dst_gap dst_overlap start_at end_at every_ms from count"},
    {"POST", "/dead-letters/replay", api_dead_letters_replay, 0, 0, 0, NULL},
    {"POST", "/dead-letters/purge", api_dead_letters_purge, 0, 0, 0, NULL},
    {"GET", "/queues", api_queue_list, 0, 0, 0, NULL},
    {"GET", "/queues/{name}", api_queue_get, 0, 0, 0, NULL},
    {"PUT", "/queues/{name}", api_queue_put, 1, 0, 0, NULL},
    {"PATCH", "/queues/{name}", api_queue_patch, 1, 0, 0, NULL},
    {"DELETE", "/queues/{name}", api_queue_delete, 0, 0, 0, NULL},
    {"POST", "/leases", api_lease_acquire, 1, 0, 0, NULL},
    {"POST", "/leases/{key}/heartbeat", api_lease_heartbeat, 1, 0, 0, NULL},
    {"GET", "/leases", api_lease_list, 0, 0, 0, "limit cursor"},
    {"GET", "/leases/{key}", api_lease_get, 0, 0, 0, NULL},
    {"DELETE", "/leases/{key}", api_lease_release, 0, 0, 0, "owner token"},
    {"GET", "/stats", api_stats, 0, 0, 0, "minutes queue"},
    {"GET", "/healthz", api_healthz, 0, 1, 0, NULL}, /* open: probes carry no token, and */
    {"GET", "/readyz", api_readyz, 0, 1, 0, NULL},   /* neither tells more than up or down */
    {"GET", "/metrics", api_metrics, 0, 0, 0, NULL}, /* not open: it tells a lot (nginx hides it too) */
    {"GET", "/ui", api_ui_redirect, 0, 1, 0, NULL},  /* open: the dashboard's files hold no data; */
    {"GET", "/ui/", api_ui_index, 0, 1, 0, NULL},    /* the page calls the API with the */
    {"GET", "/ui/{file}", api_ui_file, 0, 1, 0, NULL}, /* operator's token */
};
const size_t api_route_count = sizeof api_routes / sizeof api_routes[0];
