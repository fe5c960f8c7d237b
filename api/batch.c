/* batch.c - POST /timers/batch: up to max_batch timers in one request.
 *
 * Every item is validated on its own, exactly as POST /timers validates a
 * body, and answered on its own, in order. The valid ones are written per
 * partition, in slices of at most BATCH_SLICE timers a call (create_batch.lua:
 * each item as create.lua would do it), all slices pipelined at once; the
 * answer is sent once every slice's reply is in. With "atomic": true the
 * batch is refused whole (400, nothing written) when an item is invalid,
 * and each partition's items are written by one call that stores all of
 * them or none (a conflicting id leaves its partition's new items unstored,
 * 424); across partitions there is no such guarantee.
 *
 * Handler on a libmicrohttpd thread; replies on the store's writer thread;
 * whichever side drops the last reference answers. */
#include "api.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "jsonesc.h"
#include "jsonload.h"
#include "log.h"
#include "xalloc.h"

/* Timers per call of a batch: about 3 us of Redis each in a plain call
 * (persistence/timers.c), about 5 in one of timers written one by one, and
 * about 8 more a label, so a call holds Redis for well under a millisecond
 * unless its timers carry many labels. */
#define BATCH_SLICE 128

typedef struct bitem {
    timer_spec *spec;      /* NULL: invalid (field, detail) */
    char kid[KEY_ID_MAX];  /* key id */
    int status;            /* HTTP status of the item */
    int claim;             /* held in this instance's wheel at once when written */
    char state[12];        /* 409: the holder's state */
    char field[128];
    char detail[256];
} bitem;

typedef struct batch_ctx {
    http_req *r;
    api *a;
    int atomic;
    uint64_t now_ms;
    char rid[HTTP_REQUEST_ID_MAX + 1];
    api_trace tr; /* the request's W3C trace context, kept with every timer */
    size_t n;
    bitem *items;
    atomic_int refs; /* one per slice in flight, one for the submitter */
} batch_ctx;

typedef struct slice {
    batch_ctx *b;
    size_t n;
    size_t *idx; /* the items of the slice */
} slice;

static void batch_free(batch_ctx *b)
{
    for (size_t i = 0; i < b->n; i++)
        spec_free(b->items[i].spec);
    free(b->items);
    free(b);
}


/* Appends ,"key":"s" (key_lit a literal with its comma and colon). */
static void jb_field(jbuf *j, const char *key_lit, size_t key_len, const char *s)
{
    jb_put(j, key_lit, key_len);
    jb_text(j, s, strlen(s)); /* (a field or detail cut at its buffer's size may end mid-character) */
}
#define JB_FIELD(b, key_lit, s) jb_field((b), (key_lit), sizeof(key_lit) - 1, (s))

/* The answer: {"atomic", the counts, "items": every item's outcome in
 * order}, or with items_only the array alone; count gets created, existing
 * and failed. Written as text: a jansson tree of 1,000 items (five
 * allocations an item, then the dump) cost more than the text itself. */
static char *batch_text(const batch_ctx *b, int items_only, size_t *len, size_t count[3])
{
    count[0] = count[1] = count[2] = 0;
    for (size_t i = 0; i < b->n; i++)
        count[b->items[i].status == 201 ? 0 : b->items[i].status == 200 ? 1 : 2]++;
    jbuf j = {0};
    jb_room(&j, 100 * b->n + 128);
    if (!items_only) {
        j.n += (size_t)sprintf(j.p, "{\"atomic\":%s,\"created\":%zu,\"existing\":%zu,\"failed\":%zu,\"items\":",
                               b->atomic ? "true" : "false", count[0], count[1], count[2]);
    }
    JB_LIT(&j, "[");
    for (size_t i = 0; i < b->n; i++) {
        const bitem *it = &b->items[i];
        int stored = it->status == 201 || it->status == 200;
        if (i)
            JB_LIT(&j, ",");
        JB_LIT(&j, "{\"index\":");
        jb_int(&j, (long long)i);
        JB_LIT(&j, ",\"status\":");
        jb_int(&j, it->status);
        if (it->kid[0])
            JB_FIELD(&j, ",\"id\":", api_public_id(it->kid));
        if (stored) {
            JB_LIT(&j, ",\"stored\":true}");
            continue;
        }
        JB_LIT(&j, ",\"stored\":false");
        if (it->field[0])
            JB_FIELD(&j, ",\"field\":", it->field);
        JB_FIELD(&j, ",\"detail\":", it->detail);
        if (it->state[0])
            JB_FIELD(&j, ",\"state\":", it->state);
        JB_LIT(&j, "}");
    }
    if (items_only)
        JB_LIT(&j, "]");
    else
        JB_LIT(&j, "]}");
    *len = j.n;
    return j.p;
}

static void batch_answer(batch_ctx *b)
{
    size_t len, count[3];
    char *text = batch_text(b, 0, &len, count);
    LOG(LOG_DEBUG, "timer batch written",
        "\"request_id\":\"%s\",\"created\":%zu,\"existing\":%zu,\"failed\":%zu", b->rid, count[0], count[1],
        count[2]);
    http_respond_json_text_take(b->r, 200, text, len, NULL);
}

static void batch_unref(batch_ctx *b)
{
    if (atomic_fetch_sub(&b->refs, 1) != 1)
        return;
    batch_answer(b);
    batch_free(b);
}

static void item_fail(bitem *it, int status, const char *field, const char *detail)
{
    it->status = status;
    snprintf(it->field, sizeof it->field, "%s", field ? field : "");
    snprintf(it->detail, sizeof it->detail, "%s", detail);
}

/* A written timer this instance holds goes to its engine, with its spec. */
static void item_hold(batch_ctx *b, bitem *it)
{
    engine_add_take(b->a->eng, xstrdup(it->kid), it->spec, (uint64_t)it->spec->fire_at_ms, 0, 0, b->rid,
                    &b->tr.trace);
    it->spec = NULL;
}

static void slice_cb(void *arg, int status, size_t n, const timer_created *res)
{
    slice *s = arg;
    batch_ctx *b = s->b;
    /* Created ones are counted per run of one queue. The name is copied:
     * an item held goes to the engine with its spec, which may free it at
     * once (a stop). */
    char queue[65] = "";
    uint64_t created = 0;
    const bitem *unclaimed = NULL; /* one of the items claimed for and not held */
    long unclaimed_n = 0;
    int unsent = status == TIMERS_UNREACHABLE && store_call_unsent(); /* the call never reached Redis */
    for (size_t k = 0; k < s->n; k++) {
        bitem *it = &b->items[s->idx[k]];
        int st = status == TIMERS_OK && k < n ? res[k].status : status == TIMERS_OK ? TIMERS_FAILED : status;
        if (st == TIMERS_OK) {
            it->status = 201;
            if (created && strcmp(queue, it->spec->queue)) {
                metrics_count_n(b->a->m, queue, MT_CREATED, created);
                created = 0;
            }
            snprintf(queue, sizeof queue, "%s", it->spec->queue);
            created++;
        } else if (st == TIMERS_EXISTS) {
            it->status = 200;
        } else if (st == TIMERS_CONFLICT && !(res[k].state && res[k].state[0])) {
            /* held by an earlier item of this atomic batch, which was not stored either */
            item_fail(it, 409, "id",
                      "Not stored: another item of the batch has this id with a different spec, and the batch is "
                      "atomic.");
        } else if (st == TIMERS_CONFLICT) {
            item_fail(it, 409, "id", "A timer with this id already exists with a different spec.");
            snprintf(it->state, sizeof it->state, "%s", res[k].state);
        } else if (st == TIMERS_NOT_STORED) {
            item_fail(it, 424, NULL,
                      "Not stored: the batch is atomic and another item of its partition conflicts (409).");
        } else if (timers_refusal(st)) {
            char detail[160];
            snprintf(detail, sizeof detail, "Redis refuses writes (%s): the timer was not stored.",
                     store_refusal_text(timers_refusal(st)));
            item_fail(it, 503, NULL, detail);
        } else if (unsent) {
            item_fail(it, 503, NULL, "Redis is unreachable: the timer was not stored. Repeat the batch later.");
        } else {
            item_fail(it, 503, NULL,
                      "Redis did not answer; the timer may or may not be stored. Repeat the batch: a timer with "
                      "an id is created once.");
        }
        /* A lost reply may still have written and claimed it: its begin
         * finds nothing when it was not (oneshot.c does the same). */
        if (it->claim && it->spec && (st == TIMERS_OK || (st == TIMERS_UNREACHABLE && !unsent)))
            item_hold(b, it);
        else if (it->claim)
            unclaimed = it;
        unclaimed_n += it->claim && it->spec;
    }
    if (unclaimed) /* their room back (the items are all of one namespace) */
        engine_unreserve(b->a->eng, unclaimed->kid, unclaimed_n);
    if (created)
        metrics_count_n(b->a->m, queue, MT_CREATED, created);
    free(s->idx);
    free(s);
    batch_unref(b);
}

/* Validates item i into b->items[i]. */
static void item_parse(batch_ctx *b, size_t i, json_t *v)
{
    bitem *it = &b->items[i];
    spec_error err;
    if (spec_parse_value(v, &b->a->lim, b->now_ms, &it->spec, &err) < 0) {
        char field[128];
        snprintf(field, sizeof field, "timers[%zu]%s%s", i, err.field[0] ? "." : "", err.field);
        item_fail(it, (int)err.status, field, err.detail);
        if (json_is_object(v) && json_is_string(json_object_get(v, "id")) &&
            spec_id_valid(json_string_value(json_object_get(v, "id"))))
            api_key_id(it->kid, sizeof it->kid, http_req_namespace(b->r), json_string_value(json_object_get(v, "id")));
        return;
    }
    char *given = it->spec->id ? xstrdup(it->spec->id) : api_new_id();
    api_key_id(it->kid, sizeof it->kid, http_req_namespace(b->r), given);
    free(given);
}

/* The valid items due within the window are held at once as far as the
 * engine has room for the request's namespace (the items are all of it):
 * the room is reserved in one call and given in request order. */
static void reserve_claims(batch_ctx *b)
{
    long due = 0;
    const char *kid = NULL;
    for (size_t i = 0; i < b->n; i++)
        if (b->items[i].spec && (uint64_t)b->items[i].spec->fire_at_ms <= b->now_ms + b->a->cfg->window_ms) {
            due++;
            kid = b->items[i].kid;
        }
    long room = due ? engine_reserve(b->a->eng, kid, due) : 0;
    for (size_t i = 0; i < b->n && room > 0; i++)
        if (b->items[i].spec && (uint64_t)b->items[i].spec->fire_at_ms <= b->now_ms + b->a->cfg->window_ms) {
            b->items[i].claim = 1;
            room--;
        }
}

/* Submits items idx[0..n) (one partition) as one call. Returns 0, or the
 * store's error (the items are then answered with it). */
static int submit_slice(batch_ctx *b, uint32_t p, const size_t *idx, size_t n)
{
    timer_new *tn = xmalloc(n * sizeof *tn);
    for (size_t k = 0; k < n; k++) {
        const bitem *it = &b->items[idx[k]];
        const timer_spec *sp = it->spec;
        tn[k] = (timer_new){it->kid, sp->stored, sp->stored_len, sp->when, sp->fire_at_ms,
                            sp->cron_x ? TIMERS_CALENDAR : sp->every_ms, sp->queue, b->rid, b->now_ms,
                            it->claim, sp->labels, sp->nlabels, sp->has_callbacks, b->tr.trace};
    }
    slice *s = xmalloc(sizeof *s);
    *s = (slice){b, n, xmalloc(n * sizeof *s->idx)};
    memcpy(s->idx, idx, n * sizeof *idx);
    atomic_fetch_add(&b->refs, 1);
    int rc = timers_create_batch(b->a->tm, p, n, tn, b->atomic, slice_cb, s);
    free(tn);
    if (rc < 0) {
        atomic_fetch_sub(&b->refs, 1);
        free(s->idx);
        free(s);
    }
    return rc;
}

/* Reads {"timers": [...], "atomic": bool}; answers 400 and returns NULL on
 * a bad request. */
static json_t *read_request(http_req *r, const api *a, int *atomic)
{
    size_t len;
    const char *body = http_req_body(r, &len);
    json_error_t jerr;
    json_t *root = json_load_fast(body, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    char detail[256];
    if (!root || !json_is_object(root)) {
        snprintf(detail, sizeof detail, root ? "the body must be a JSON object" : "malformed JSON: %s", jerr.text);
        http_respond_problem(r, 400, detail, "", NULL, 0);
        json_decref(root);
        return NULL;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "timers") != 0 && strcmp(key, "atomic") != 0) {
            http_respond_problem(r, 400, "unknown field", key, NULL, 0);
            json_decref(root);
            return NULL;
        }
    }
    json_t *at = json_object_get(root, "atomic"), *specs = json_object_get(root, "timers");
    if (at && !json_is_boolean(at)) {
        http_respond_problem(r, 400, "atomic must be true or false", "atomic", NULL, 0);
        json_decref(root);
        return NULL;
    }
    if (!json_is_array(specs) || json_array_size(specs) == 0 || json_array_size(specs) > a->cfg->max_batch) {
        snprintf(detail, sizeof detail, "timers must be an array of 1 to %" PRIu64 " timer specs",
                 a->cfg->max_batch);
        http_respond_problem(r, 400, detail, "timers", NULL, 0);
        json_decref(root);
        return NULL;
    }
    *atomic = json_is_true(at);
    return root;
}

static int cmp_partition(const void *x, const void *y, void *arg)
{
    const uint32_t *part = arg;
    size_t i = *(const size_t *)x, j = *(const size_t *)y;
    return part[i] < part[j] ? -1 : part[i] > part[j] ? 1 : i < j ? -1 : i > j;
}

void api_timer_batch(http_req *r, const char *const *params, void *app)
{
    (void)params;
    api *a = app;
    int atomic = 0;
    json_t *root = read_request(r, a, &atomic);
    if (!root)
        return;
    json_t *arr = json_object_get(root, "timers");
    batch_ctx *b = xcalloc(1, sizeof *b);
    b->r = r;
    b->a = a;
    b->atomic = atomic;
    b->now_ms = clock_now_ms();
    snprintf(b->rid, sizeof b->rid, "%s", http_req_id(r));
    api_request_trace(r, &b->tr);
    b->n = json_array_size(arr);
    b->items = xmalloc((b->n ? b->n : 1) * sizeof *b->items); /* (not zeroed whole: an item is about 600 bytes) */
    for (size_t i = 0; i < b->n; i++) {
        bitem *it = &b->items[i];
        it->spec = NULL;
        it->status = it->claim = 0;
        it->kid[0] = it->state[0] = it->field[0] = it->detail[0] = '\0';
    }
    atomic_init(&b->refs, 1);
    size_t invalid = 0;
    for (size_t i = 0; i < b->n; i++) {
        item_parse(b, i, json_array_get(arr, i));
        invalid += b->items[i].spec == NULL;
    }
    json_decref(root);

    if (atomic && invalid) { /* refused whole: nothing is written */
        for (size_t i = 0; i < b->n; i++)
            if (b->items[i].spec)
                item_fail(&b->items[i], 424, NULL, "Not stored: the batch is atomic and another item is invalid.");
        size_t len, count[3];
        char *text = batch_text(b, 1, &len, count);
        json_t *items = json_loadb(text, len, 0, NULL); /* (a rare answer: the problem's extension is a tree) */
        free(text);
        char detail[128];
        snprintf(detail, sizeof detail, "The batch is atomic and %zu of its items are invalid; nothing was stored.",
                 invalid);
        http_respond_problem(r, 400, detail, NULL, json_pack("{s:o}", "items", items), 0);
        batch_free(b);
        return;
    }

    reserve_claims(b);
    /* The valid items by partition, in request order within each. */
    size_t nv = 0, *order = xmalloc(b->n * sizeof *order);
    uint32_t *part = xmalloc(b->n * sizeof *part);
    for (size_t i = 0; i < b->n; i++) {
        if (!b->items[i].spec)
            continue;
        part[i] = timers_partition(a->tm, b->items[i].kid);
        order[nv++] = i;
    }
    qsort_r(order, nv, sizeof *order, cmp_partition, part);
    int rc = 0;
    for (size_t from = 0; from < nv;) {
        size_t to = from + 1;
        while (to < nv && part[order[to]] == part[order[from]] && (atomic || to - from < BATCH_SLICE))
            to++;
        if (rc == 0)
            rc = submit_slice(b, part[order[from]], order + from, to - from);
        if (rc < 0) { /* not queued (the store is full or stopping): these are not written */
            long unclaimed = 0;
            for (size_t k = from; k < to; k++) {
                bitem *it = &b->items[order[k]];
                item_fail(it, rc == -EAGAIN ? 429 : 503, NULL,
                          rc == -EAGAIN ? "Too many writes are waiting for Redis; not stored. Retry later."
                                        : "The service is shutting down; not stored.");
                unclaimed += it->claim;
                it->claim = 0;
            }
            engine_unreserve(a->eng, b->items[order[from]].kid, unclaimed);
        }
        from = to;
    }
    free(order);
    free(part);
    batch_unref(b);
}
