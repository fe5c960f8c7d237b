/* deadletters.c - POST /dead-letters/replay and /dead-letters/purge: the
 * caller's failed timers, all or one queue's, replayed (a new series of
 * attempts under the same id, due now) or deleted.
 *
 * Each partition runs deadletters.lua once per call on at most
 * DL_BATCH of its failed timers, so one call never holds Redis long; the
 * answer counts what was done and says whether more may be left, and the
 * client repeats the call until `more` is false. Handler on a
 * libmicrohttpd thread; partition replies on the store's writer thread;
 * whichever side drops the last reference answers. */
#include "api.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "nsgate.h"
#include "xalloc.h"

/* Failed timers replayed or purged per partition per call (five times as
 * many examined at most): about 10 us each, so a call holds Redis for a few
 * milliseconds. */
#define DL_BATCH 200

typedef struct dl_ctx {
    http_req *r;
    api *a;
    char *ns;            /* the caller's namespace, entered in the gate */
    const char *op;      /* "replay" or "purge" */
    atomic_int refs;     /* one per partition command, one for the submitter */
    atomic_int failed;   /* a partition got no reply, or a command was not queued */
    atomic_int refused;  /* a partition's call Redis refused (a status timers_refusal names); 0 none */
    atomic_llong done;
    atomic_int more;
} dl_ctx;

static void dl_unref(dl_ctx *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    nsgate_leave(c->ns); /* before the answer: a client that asks again at once finds room */
    if (atomic_load(&c->failed)) {
        http_respond_problem(c->r, 503, "Redis is unreachable; some dead letters may have been handled. "
                             "Retry later.", NULL, NULL, 1);
    } else if (atomic_load(&c->refused)) { /* (every partition that failed was refused: none unanswered) */
        char not_done[96];
        snprintf(not_done, sizeof not_done, "%s dead letters were %s", atomic_load(&c->done) ? "not all" : "no",
                 strcmp(c->op, "replay") == 0 ? "replayed" : "purged");
        api_respond_timers_failed(c->r, atomic_load(&c->refused), not_done);
    } else {
        json_t *doc = json_pack("{s:I,s:b}", strcmp(c->op, "replay") == 0 ? "replayed" : "purged",
                                (json_int_t)atomic_load(&c->done), "more", atomic_load(&c->more));
        LOG(LOG_INFO, "dead letters handled", "\"op\":\"%s\",\"count\":%lld", c->op,
            (long long)atomic_load(&c->done));
        http_respond_json(c->r, 200, doc, NULL);
    }
    free(c->ns);
    free(c);
}

static void dl_cb(void *arg, int status, long long done, int more)
{
    dl_ctx *c = arg;
    if (timers_refusal(status)) {
        atomic_store(&c->refused, status);
    } else if (status != TIMERS_OK) {
        atomic_store(&c->failed, 1);
    } else {
        atomic_fetch_add(&c->done, done);
        if (more)
            atomic_store(&c->more, 1);
        if (done > 0 && !strcmp(c->op, "replay")) /* due now, held by no instance */
            engine_sweep_soon(c->a->eng);
    }
    dl_unref(c);
}

/* The optional body {"queue": "<name>"}: 0 and *queue (NULL: every queue),
 * or -1 after answering 400 (415: a body that is not application/json, as
 * every other JSON body is refused). */
static int parse_body(http_req *r, char *queue, size_t size)
{
    size_t len;
    const char *body = http_req_body(r, &len);
    queue[0] = '\0';
    if (len == 0 || strspn(body, " \t\r\n") == len)
        return 0;
    if (!http_req_json_type(r)) {
        http_respond_problem(r, 415, "the request body must be application/json", NULL, NULL, 0);
        return -1;
    }
    json_t *j = api_body_object(r, body, len, "the body must be empty or a JSON object");
    const char *key;
    json_t *v;
    int rc = 0;
    if (!j)
        return -1;
    json_object_foreach(j, key, v) {
        const char *q = json_string_value(v);
        if (strcmp(key, "queue") != 0) {
            http_respond_problem(r, 400, "unknown field", key, NULL, 0);
            rc = -1;
            break;
        }
        if (!q || strlen(q) >= size || !spec_queue_valid(q)) {
            http_respond_problem(r, 400, "queue must match [A-Za-z0-9._-]{1,64}", "queue", NULL, 0);
            rc = -1;
            break;
        }
        snprintf(queue, size, "%s", q);
    }
    json_decref(j);
    return rc;
}

static void dead_letters(http_req *r, api *a, const char *op)
{
    char queue[65];
    if (parse_body(r, queue, sizeof queue) < 0)
        return;
    if (nsgate_admit(r, (unsigned)a->cfg->max_expensive_per_namespace) < 0)
        return;
    uint32_t parts = (uint32_t)a->cfg->partitions;
    dl_ctx *c = xcalloc(1, sizeof *c);
    c->r = r;
    c->a = a;
    c->ns = xstrdup(http_req_namespace(r));
    c->op = op;
    atomic_init(&c->refs, (int)parts + 1);
    atomic_init(&c->failed, 0);
    atomic_init(&c->done, 0);
    atomic_init(&c->more, 0);
    uint64_t now = clock_now_ms();
    for (uint32_t p = 0; p < parts; p++) {
        if (timers_deadletters(a->tm, p, http_req_namespace(r), op, queue[0] ? queue : NULL, now, DL_BATCH, dl_cb,
                               c) < 0) {
            atomic_fetch_sub(&c->refs, (int)(parts - p));
            atomic_store(&c->failed, 1);
            break;
        }
    }
    dl_unref(c);
}

void api_dead_letters_replay(http_req *r, const char *const *params, void *app)
{
    (void)params;
    dead_letters(r, app, "replay");
}

void api_dead_letters_purge(http_req *r, const char *const *params, void *app)
{
    (void)params;
    dead_letters(r, app, "purge");
}
