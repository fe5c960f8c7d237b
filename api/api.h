/* api.h - hookwheel's HTTP API: the route table and its handlers.
 *
 * Handlers run on libmicrohttpd threads; they validate, queue their Redis
 * work on the store and return; the store's writer thread answers from the
 * command's callback. No handler waits on Redis. */
#ifndef HW_API_H
#define HW_API_H

#include <stddef.h>

#include "config.h"
#include "engine.h"
#include "http.h"
#include "spec.h"
#include "store.h"

typedef struct api {
    const config *cfg;
    store *st;
    engine *eng;
    spec_limits lim;
} api;

extern const http_route api_routes[];
extern const size_t api_route_count;

/* Fills a for the handlers (http_start's app pointer); cfg, st and eng must
 * outlive the server. */
void api_init(api *a, const config *cfg, store *st, engine *eng);

/* Builds the Timer resource (openapi.yaml) from a timer's stored fields. The
 * spec text is the canonical spec; last may be NULL. Returns a new reference
 * or NULL when the spec does not parse. Any thread. */
json_t *api_timer_json(const char *id, const char *spec, size_t spec_len, const char *state,
                       long long fire_ms, long long created_ms, long long attempts, const char *last,
                       size_t last_len);

#endif
