/* select.c - POST /timers/cancel, /timers/pause, /timers/resume and
 * /timers/reschedule: one instruction to every timer a selector matches.
 *
 * A selector names labels (at least one: the first one's index is walked),
 * and optionally a queue and a state. Each match gets the instruction
 * exactly as the one-timer call gives it (select.lua), and the answer is a
 * receipt: what was done, what was too late (an attempt began, or the timer
 * finished) and where the walk stopped. A page walks the partitions in
 * order, one call at a time (at most SELECT_CALL_LIMIT matches and
 * SELECT_CALL_BUDGET index entries a call), until `limit` matches, the end,
 * or SELECT_MAX_CALLS calls; next_cursor continues it. Under an
 * Idempotency-Key every call keeps its answer for 24 h where it started, so
 * repeating a page (same key, same body, same cursor) gives the same
 * receipt, and a page cut short by Redis can be repeated exactly; the key
 * itself keeps the request it came with first, and a page under it with
 * another request is refused (422) before anything is done.
 *
 * Handler on a libmicrohttpd thread; each call's reply, on the store's
 * writer thread, submits the next one or answers. */
#include "api.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "jsonload.h"
#include "log.h"
#include "nsgate.h"
#include "xalloc.h"

#define SELECT_DEFAULT_LIMIT 1000
#define SELECT_MAX_LIMIT 10000
#define SELECT_CALL_LIMIT 128   /* matches a call (each ~10 us of Redis for an instruction) */
#define SELECT_CALL_BUDGET 1024 /* index entries a call examines */
#define SELECT_MAX_CALLS 256    /* calls a page makes at most */
#define IDEM_MAX 128

typedef struct sel_ctx {
    http_req *r;
    api *a;
    char op[16];       /* cancel, pause, resume, reschedule */
    int dry;           /* dry_run: the matches are listed, nothing is done */
    char *ns;          /* entered in the gate */
    timer_selector sel;
    char *labels[SPEC_MAX_LABELS];
    char queue[72], state[16], idem[IDEM_MAX + 1];
    char *fingerprint;
    uint32_t partition, chunk;
    char after[KEY_ID_MAX];
    uint32_t remaining, calls;
    uint64_t now_ms;
    int replayed_all;
    int key_asked;     /* the Idempotency-Key's record answered (its first use, or the same request) */
    json_t *done, *too_late, *matches;
    size_t matched;
} sel_ctx;

static const char *const done_name[] = {"cancel", "cancelled", "pause", "paused", "resume", "resumed",
                                        "reschedule", "rescheduled"};

static const char *done_key(const char *op)
{
    for (size_t i = 0; i < sizeof done_name / sizeof *done_name; i += 2)
        if (!strcmp(done_name[i], op))
            return done_name[i + 1];
    return "done";
}

static void sel_free(sel_ctx *c)
{
    for (uint32_t i = 0; i < c->sel.nlabels; i++)
        free(c->labels[i]);
    free(c->fingerprint);
    free(c->ns);
    json_decref(c->done);
    json_decref(c->too_late);
    json_decref(c->matches);
    free(c);
}

/* The cursor: "<partition>.<chunk>.<id>" (the public id; "" from the
 * chunk's start). */
static void answer(sel_ctx *c, int finished)
{
    json_t *body = json_pack("{s:I}", "matched", (json_int_t)c->matched);
    if (c->dry) {
        json_object_set_new(body, "dry_run", json_true());
        json_object_set(body, "matches", c->matches);
    } else {
        json_object_set_new(body, "dry_run", json_false());
        json_object_set(body, done_key(c->op), c->done);
        json_object_set(body, "too_late", c->too_late);
    }
    if (finished) {
        json_object_set_new(body, "next_cursor", json_null());
    } else {
        char cur[KEY_ID_MAX + 32];
        snprintf(cur, sizeof cur, "%" PRIu32 ".%" PRIu32 ".%s", c->partition, c->chunk,
                 c->after[0] ? api_public_id(c->after) : "");
        json_object_set_new(body, "next_cursor", json_string(cur));
    }
    if (c->calls && c->replayed_all)
        json_object_set_new(body, "replayed", json_true());
    LOG(LOG_INFO, "selector operation", "\"op\":\"%s\",\"matched\":%zu,\"request_id\":\"%s\",\"finished\":%s",
        c->op, c->matched, http_req_id(c->r), finished ? "true" : "false");
    nsgate_leave(c->ns);
    http_respond_json(c->r, 200, body, NULL);
    sel_free(c);
}

static int next_call(sel_ctx *c);

static void select_cb(void *arg, int status, int replayed, uint32_t next_chunk, const char *next_after, int more,
                      size_t n, const timer_selected *items)
{
    sel_ctx *c = arg;
    if (status == TIMERS_CONFLICT) {
        nsgate_leave(c->ns);
        http_respond_problem(c->r, 422, "This Idempotency-Key was used with another request.", NULL, NULL, 0);
        sel_free(c);
        return;
    }
    if (status == TIMERS_OK && !c->key_asked) { /* the key is this request's: the walk starts */
        c->key_asked = 1;
        int rc = next_call(c);
        if (rc < 0) {
            nsgate_leave(c->ns);
            api_respond_submit_error(c->r, rc);
            sel_free(c);
        }
        return;
    }
    if (status != TIMERS_OK) {
        if (c->calls == 0) { /* nothing was done: say so */
            nsgate_leave(c->ns);
            api_respond_timers_failed(c->r, status, "no timer was changed");
            sel_free(c);
        } else { /* the page so far, and where to go on (this call may have run: an
                  * Idempotency-Key makes its repeat exact) */
            answer(c, 0);
        }
        return;
    }
    c->calls++;
    c->replayed_all &= replayed;
    for (size_t i = 0; i < n; i++) {
        const char *id = api_public_id(items[i].id);
        c->matched++;
        if (c->dry) {
            json_array_append_new(c->matches, json_pack("{s:s,s:s}", "id", id, "state", items[i].state));
        } else if (items[i].code == 1 || (items[i].code == 2 && strcmp(c->op, "cancel") != 0)) {
            json_array_append_new(c->done, json_string(id));
            if (items[i].cancelled_queue[0] && !replayed) /* a replayed receipt cancelled nothing now */
                metrics_count(c->a->m, items[i].cancelled_queue, MT_CANCELLED);
        } else {
            json_t *o = json_pack("{s:s,s:s}", "id", id, "state", items[i].state);
            if (items[i].code == 2) /* a recurring timer's run: cancelled when it ends */
                json_object_set_new(o, "after_run", json_true());
            json_array_append_new(c->too_late, o);
        }
    }
    /* Timers resumed or rescheduled to within the claim window wait in
     * Redis held by no instance: this instance sweeps for them soon. */
    if (!c->dry && !replayed && n && (!strcmp(c->op, "resume") ||
                                     (!strcmp(c->op, "reschedule") &&
                                      c->sel.fire_ms <= (int64_t)(clock_now_ms() + c->a->cfg->window_ms))))
        engine_sweep_soon(c->a->eng);
    c->remaining -= n < c->remaining ? (uint32_t)n : c->remaining;
    if (more) {
        c->chunk = next_chunk;
        snprintf(c->after, sizeof c->after, "%s", next_after);
    } else {
        c->partition++;
        c->chunk = 0;
        c->after[0] = '\0';
    }
    int finished = c->partition >= (uint32_t)c->a->cfg->partitions;
    if (finished || c->remaining == 0 || c->calls >= SELECT_MAX_CALLS || next_call(c) < 0)
        answer(c, finished);
}

/* Under an Idempotency-Key, a page first asks the key's own record
 * (select.lua, op "key", in the partition its key id hashes to) whether
 * it came with this request: a repeat with another one is refused before
 * anything is done, whatever its cursor. */
static int ask_key(sel_ctx *c)
{
    char kid[KEY_ID_MAX];
    api_key_id(kid, sizeof kid, c->ns, c->idem);
    timer_selector ks = c->sel;
    ks.op = "key";
    return timers_select(c->a->tm, timers_partition(c->a->tm, kid), c->ns, &ks, TIMERS_SELECT_CHUNKS, "", 0, 0,
                         c->now_ms, select_cb, c);
}

static int next_call(sel_ctx *c)
{
    uint32_t limit = c->remaining < SELECT_CALL_LIMIT ? c->remaining : SELECT_CALL_LIMIT;
    return timers_select(c->a->tm, c->partition, c->ns, &c->sel, c->chunk, c->after, limit, SELECT_CALL_BUDGET,
                         c->now_ms, select_cb, c);
}

static int bad(http_req *r, const char *field, const char *detail)
{
    http_respond_problem(r, 400, detail, field, NULL, 0);
    return -EINVAL;
}

static int is_select_field(const char *op, const char *k)
{
    static const char *const common[] = {"labels", "queue", "state", "dry_run", "cursor", "limit"};
    for (size_t i = 0; i < sizeof common / sizeof *common; i++)
        if (!strcmp(common[i], k))
            return 1;
    return !strcmp(op, "reschedule") && (!strcmp(k, "delay_ms") || !strcmp(k, "fire_at") || !strcmp(k, "fire_at_ms"));
}

static const char *const states[] = {"scheduled", "retrying", "firing", "paused", "delivered", "failed", "cancelled"};

/* Reads the body into c; answers 400 and returns -EINVAL on a bad one. */
static int read_selector(sel_ctx *c, json_t *root)
{
    http_req *r = c->r;
    const char *key;
    json_t *v;
    if (!json_is_object(root))
        return bad(r, "", "the body must be a JSON object");
    json_object_foreach(root, key, v) {
        if (!is_select_field(c->op, key))
            return bad(r, key, "unknown field");
    }
    json_t *labels = json_object_get(root, "labels");
    if (!json_is_object(labels) || json_object_size(labels) == 0 || json_object_size(labels) > SPEC_MAX_LABELS)
        return bad(r, "labels", "labels is required: an object of 1 to 16 labels the timers must all have");
    json_object_foreach(labels, key, v) {
        char path[96];
        snprintf(path, sizeof path, "labels.%.80s", key);
        if (!spec_label_key_valid(key) || !json_is_string(v) || !spec_label_value_valid(json_string_value(v)))
            return bad(r, path, "not a label a timer may have (see Timer.labels)");
        c->labels[c->sel.nlabels++] = spec_label_line(key, json_string_value(v));
    }
    json_t *q = json_object_get(root, "queue"), *st = json_object_get(root, "state");
    if (q) {
        const char *qs = json_string_value(q);
        if (!spec_queue_valid(qs))
            return bad(r, "queue", "queue must match [A-Za-z0-9._-]{1,64}");
        snprintf(c->queue, sizeof c->queue, "%s", qs);
        c->sel.queue = c->queue;
    }
    if (st) {
        size_t i, n = sizeof states / sizeof *states;
        for (i = 0; i < n && !(json_is_string(st) && !strcmp(json_string_value(st), states[i])); i++)
            ;
        if (i == n)
            return bad(r, "state", "state must be scheduled, retrying, firing, paused, delivered, failed or cancelled");
        snprintf(c->state, sizeof c->state, "%s", states[i]);
        c->sel.state = c->state;
    }
    json_t *dry = json_object_get(root, "dry_run");
    if (dry && !json_is_boolean(dry))
        return bad(r, "dry_run", "dry_run must be true or false");
    c->dry = json_is_true(dry);
    json_t *lim = json_object_get(root, "limit");
    c->remaining = SELECT_DEFAULT_LIMIT;
    if (lim) {
        if (!json_is_integer(lim) || json_integer_value(lim) < 1 || json_integer_value(lim) > SELECT_MAX_LIMIT)
            return bad(r, "limit", "limit must be an integer from 1 to 10000");
        c->remaining = (uint32_t)json_integer_value(lim);
    }
    json_t *cur = json_object_get(root, "cursor");
    if (cur && !json_is_null(cur)) {
        const char *cs = json_string_value(cur), *d1 = cs ? strchr(cs, '.') : NULL, *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
        unsigned long long p = 0, ch = 0;
        if (!d2 || api_number(cs, (size_t)(d1 - cs), c->a->cfg->partitions - 1, &p) < 0 ||
            api_number(d1 + 1, (size_t)(d2 - d1 - 1), TIMERS_SELECT_CHUNKS - 1, &ch) < 0 ||
            (d2[1] && !spec_lookup_id_valid(d2 + 1)))
            return bad(r, "cursor", "cursor is not one this API gave");
        c->partition = (uint32_t)p;
        c->chunk = (uint32_t)ch;
        if (d2[1])
            api_key_id(c->after, sizeof c->after, c->ns, d2 + 1);
    }
    if (!strcmp(c->op, "reschedule")) {
        json_t *when = json_object();
        const char *tf[] = {"delay_ms", "fire_at", "fire_at_ms"};
        for (size_t i = 0; i < 3; i++)
            if (json_object_get(root, tf[i]))
                json_object_set(when, tf[i], json_object_get(root, tf[i]));
        char *text = json_dumps(when, JSON_COMPACT | JSON_SORT_KEYS);
        spec_error err;
        int64_t fire_ms = 0;
        int rc = spec_parse_when(text, strlen(text), &c->a->lim, c->now_ms, &fire_ms, &err);
        free(text);
        json_decref(when);
        if (rc < 0)
            return bad(r, err.field, err.detail);
        c->sel.fire_ms = fire_ms;
    }
    return 0;
}

static void selector(http_req *r, api *a, const char *op)
{
    size_t len;
    const char *body = http_req_body(r, &len);
    const char *idem = http_req_header(r, "Idempotency-Key");
    if (idem && (strlen(idem) > IDEM_MAX || !spec_id_valid(idem))) {
        http_respond_problem(r, 400, "Idempotency-Key must be 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'",
                             "Idempotency-Key", NULL, 0);
        return;
    }
    json_error_t jerr;
    json_t *root = json_load_fast(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        char detail[200];
        snprintf(detail, sizeof detail, "malformed JSON: %s", jerr.text);
        http_respond_problem(r, 400, detail, "", NULL, 0);
        return;
    }
    sel_ctx *c = xcalloc(1, sizeof *c);
    c->r = r;
    c->a = a;
    c->now_ms = clock_now_ms();
    c->ns = xstrdup(http_req_namespace(r));
    snprintf(c->op, sizeof c->op, "%s", op);
    int rc = read_selector(c, root);
    if (rc == 0) {
        /* What a repeat under the same key must equal: the selector and the
         * instruction (the due time as given, not as resolved). Not the cursor
         * or the limit: the receipt key holds where a call started, and a page
         * repeated from a next_cursor must replay the call that got no reply. */
        json_object_del(root, "cursor");
        json_object_del(root, "limit");
        char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
        size_t n = strlen(text) + strlen(op) + 2;
        c->fingerprint = xmalloc(n);
        snprintf(c->fingerprint, n, "%s %s", op, text);
        free(text);
    }
    json_decref(root);
    if (rc < 0) {
        sel_free(c);
        return;
    }
    if (idem)
        snprintf(c->idem, sizeof c->idem, "%s", idem);
    c->sel = (timer_selector){c->dry ? "list" : c->op, c->labels, c->sel.nlabels, c->sel.queue, c->sel.state, c->sel.fire_ms,
                              idem ? c->idem : NULL, c->fingerprint};
    c->done = json_array();
    c->too_late = json_array();
    c->matches = json_array();
    c->replayed_all = 1;
    c->key_asked = !idem;
    if (nsgate_admit(r, (unsigned)a->cfg->max_expensive_per_namespace) < 0) {
        sel_free(c);
        return;
    }
    rc = idem ? ask_key(c) : next_call(c);
    if (rc < 0) {
        nsgate_leave(c->ns);
        api_respond_submit_error(r, rc);
        sel_free(c);
    }
}

void api_timers_cancel(http_req *r, const char *const *params, void *app)
{
    (void)params;
    selector(r, app, "cancel");
}

void api_timers_pause(http_req *r, const char *const *params, void *app)
{
    (void)params;
    selector(r, app, "pause");
}

void api_timers_resume(http_req *r, const char *const *params, void *app)
{
    (void)params;
    selector(r, app, "resume");
}

void api_timers_reschedule(http_req *r, const char *const *params, void *app)
{
    (void)params;
    selector(r, app, "reschedule");
}
