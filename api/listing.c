/* listing.c - GET /timers?state=&queue=&label=&limit=&cursor=: a namespace's timers
 * in one state, page by page.
 *
 * Each partition keeps one index per namespace and state, and a listing of a
 * waiting state also reads the partition's claimed sets (list.lua has the
 * layout). A page is a lazy k-way merge of the partitions. The first round
 * asks every partition, pipelined, for its share: about twice limit /
 * partitions timers after the cursor (LIST_SHARE_MIN at least, limit at
 * most). A partition that stopped before its end (it had more, or hit its
 * scan or byte budget) bounds the page at the last entry it examined, so
 * nothing past that is returned before the entries of that partition that
 * come first. When fewer than `limit` timers come before the earliest bound,
 * the next round asks the one partition that set that bound for the timers
 * still missing, from the last entry it examined; at most LIST_ROUNDS
 * rounds. Timers of one partition are clumped (a finish batch gives them
 * one time), so a share can fall short there while the others' shares are
 * more than enough. The cursor is the position of the last entry returned
 * (or of the earliest bound), a (score, id) pair, which stays valid while
 * entries come and go. A page therefore costs about twice `limit` records
 * read, never partitions x limit, never a scan of everything, and each
 * entry is returned once as long as it stays in its state.
 *
 * Cost bounds, so one client's listings cannot hold Redis or memory from
 * everyone else: a partition's call examines at most LIST_SCAN_BUDGET
 * entries whatever the limit and filter, and returns records of at most
 * about list_max_bytes / partitions bytes; the page's text stops before it
 * would pass list_max_bytes (after its first timer), and its cursor is then
 * the last timer listed. A page that ran out of budget has fewer than
 * `limit` timers and a next_cursor. A namespace has at most
 * max_expensive_per_namespace listings and dead-letter calls in flight
 * (nsgate.h); beyond that the answer is 429.
 *
 * Handler on a libmicrohttpd thread; replies on the store's writer thread;
 * whichever side drops the last reference merges and answers. */
#include "api.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "jsonesc.h"
#include "log.h"
#include "nsgate.h"
#include "xalloc.h"

#define LIST_DEFAULT_LIMIT 100
#define LIST_MAX_LIMIT 1000
#define LIST_QUEUE_BUDGET 10 /* with a queue filter, examine up to limit x this per partition */
/* Entries one partition's call examines at most, whatever the limit and
 * filter: 4-8 us each (records of 500 bytes), so a call holds Redis for 1 to
 * 2 ms. */
#define LIST_SCAN_BUDGET 256
/* A partition's share of a page in the first round: twice its part of
 * `limit`, and at least this many. */
#define LIST_SHARE_MIN 8
/* Rounds of calls a page makes at most; after them a page holds what came
 * before the earliest bound (fewer than `limit`) and a next_cursor. */
#define LIST_ROUNDS 8

static const struct {
    const char *state;
    int asc; /* 1: soonest due first; 0: newest first */
} list_states[] = {
    {"scheduled", 1}, {"retrying", 1}, {"paused", 0},
    {"delivered", 0}, {"failed", 0},   {"cancelled", 0},
};

typedef struct pos {
    long long score;
    char id[KEY_ID_MAX]; /* key id */
} pos;

typedef struct item {
    pos at;
    char *raw; /* the stored record, then its history */
    size_t raw_len, hist_len;
} item;

struct list_ctx;

/* A partition's progress in the page: where its next call starts. */
typedef struct part {
    struct list_ctx *c;
    uint32_t index;
    int more; /* its last call stopped before its end, at last */
    pos last; /* the last entry its last call examined */
} part;

typedef struct list_ctx {
    http_req *r;
    api *a;
    char *ns;          /* the caller's namespace, entered in the gate */
    char *queue, *label; /* the filters (NULL: none) */
    const char *state;
    int asc;
    uint32_t limit, budget;
    size_t max_bytes;  /* the page's text stops growing past this */
    uint64_t part_bytes; /* a partition's call returns records of about this many bytes at most */
    atomic_int refs;   /* one per partition command of the round, one for the submitter */
    atomic_int failed; /* a partition got no reply, or a command was not queued */
    int rounds;
    part *parts;
    uint32_t nparts;
    item *items;
    size_t n, cap, bytes; /* the timers taken so far, in no order, and their records' bytes */
} list_ctx;

/* Order of the listing: <0 when a comes first. */
static int pos_cmp(int asc, const pos *a, const pos *b)
{
    int c = a->score < b->score ? -1 : a->score > b->score;
    if (!c)
        c = strcmp(a->id, b->id);
    return asc ? c : -c;
}

static int pos_set(pos *p, const char *score, const char *id)
{
    char *end;
    if (!score || !id || !*score || strlen(id) >= sizeof p->id)
        return -EINVAL;
    p->score = strtoll(score, &end, 10);
    if (*end && *end != '.')
        return -EINVAL;
    snprintf(p->id, sizeof p->id, "%s", id);
    return 0;
}

static void take_reply(part *pt, int status, int more, const char *last_score, const char *last_id, size_t n,
                       const timer_listed *items)
{
    list_ctx *c = pt->c;
    if (status != TIMERS_OK) {
        atomic_store(&c->failed, 1);
        return;
    }
    pt->more = more && pos_set(&pt->last, last_score, last_id) == 0;
    for (size_t i = 0; i < n; i++) {
        item it;
        if (pos_set(&it.at, items[i].score, items[i].id) < 0)
            continue;
        it.raw = xmalloc(items[i].rec_len + items[i].history_len + 1);
        memcpy(it.raw, items[i].rec, items[i].rec_len);
        memcpy(it.raw + items[i].rec_len, items[i].history, items[i].history_len);
        it.raw_len = items[i].rec_len;
        it.hist_len = items[i].history_len;
        if (c->n == c->cap) {
            c->cap = c->cap ? 2 * c->cap : 64;
            c->items = xrealloc(c->items, c->cap * sizeof *c->items);
        }
        c->items[c->n++] = it;
        c->bytes += it.raw_len + it.hist_len;
    }
}

static int item_cmp(const void *a, const void *b, void *asc)
{
    return pos_cmp(*(const int *)asc, &((const item *)a)->at, &((const item *)b)->at);
}

/* "<score>~<public id>": the position after which the next page starts.
 * A page that ran out of budget among another namespace's timers (a waiting
 * state's listing steps over them in the claimed zsets, list.lua) stopped at
 * one of theirs, whose id and due time the caller must not learn. Key ids
 * sort by namespace first, so the caller's entries with that score all
 * come before it (it sorts after "<ns>/") or all after it (before "<ns>/"):
 * the cursor is then "<score + 1>~" or "<score>~", an empty id, which
 * parse_query reads as "<ns>/", the place before the namespace's first id.
 * The open API's ids hold no '/' and may sort anywhere among a namespace's
 * (timers kept from a run with tokens): its cursor is then "<score>~<that
 * namespace>/~", after every id of that namespace ('~' follows every
 * character of an id) and before any other, naming the namespace only.
 * Only ascending listings read claimed zsets; a descending one reads the
 * namespace's own index alone. */
static void cursor_text(const char *ns, const pos *p, char *buf, size_t size)
{
    size_t nslen = strlen(ns);
    const char *slash = strchr(p->id, '/');
    if (!nslen && slash) {
        snprintf(buf, size, "%lld~%.*s/~", p->score, (int)(slash - p->id), p->id);
        return;
    }
    if (!nslen || (strncmp(p->id, ns, nslen) == 0 && p->id[nslen] == '/')) {
        snprintf(buf, size, "%lld~%s", p->score, api_public_id(p->id));
        return;
    }
    char own[KEY_ID_MAX];
    api_key_id(own, sizeof own, ns, "");
    snprintf(buf, size, "%lld~", p->score + (strcmp(p->id, own) > 0));
}

/* Sorts the timers taken and returns the partition that bounds the page
 * (the one whose last call stopped earliest before its end; NULL: none
 * did); *before: how many timers come up to its last entry. */
static part *page_bound(list_ctx *c, size_t *before)
{
    part *min = NULL;
    for (uint32_t i = 0; i < c->nparts; i++)
        if (c->parts[i].more && (!min || pos_cmp(c->asc, &c->parts[i].last, &min->last) < 0))
            min = &c->parts[i];
    if (c->n > 1) /* qsort_r must not get NULL, which it would with no item */
        qsort_r(c->items, c->n, sizeof *c->items, item_cmp, &c->asc);
    size_t k = 0;
    while (k < c->n && (!min || pos_cmp(c->asc, &c->items[k].at, &min->last) <= 0))
        k++;
    *before = k;
    return min;
}

/* A page's answer, written on the HTTP thread as the client takes it
 * (http_respond_stream): decoding and writing a page of 1,000 timers took
 * the store's writer thread, which every namespace's creates and attempts
 * share, 15 to 25 ms. It holds the page's timers (taken from the listing)
 * and writes them one by one, until the text would pass max_bytes; then the
 * cursor: the last timer written when the page is cut or full, else the
 * bound. */
typedef struct page {
    char *ns;
    item *items;
    size_t n;       /* items held (all freed at the end) */
    size_t keep;    /* the first `keep` are the page's, at most */
    size_t i;       /* the next one to write */
    size_t len;     /* the text's bytes so far */
    size_t max_bytes;
    uint32_t limit;
    int has_bound, ended;
    pos bound;
    jbuf pend;      /* text made and not yet taken */
    size_t taken;
} page;

static void page_free(void *arg)
{
    page *pg = arg;
    for (size_t i = 0; i < pg->n; i++)
        free(pg->items[i].raw);
    free(pg->items);
    free(pg->ns);
    free(pg->pend.p);
    free(pg);
}

/* The page's end: the cursor after the `written` timers, then "}". */
static void page_end(page *pg, size_t written, int cut)
{
    char cur[KEY_ID_MAX + 32] = "";
    if ((cut || written == pg->limit) && written > 0)
        cursor_text(pg->ns, &pg->items[written - 1].at, cur, sizeof cur);
    else if (pg->has_bound)
        cursor_text(pg->ns, &pg->bound, cur, sizeof cur);
    if (cur[0]) {
        JB_LIT(&pg->pend, "],\"next_cursor\":\"");
        jb_put(&pg->pend, cur, strlen(cur));
        JB_LIT(&pg->pend, "\"}");
    } else {
        JB_LIT(&pg->pend, "],\"next_cursor\":null}");
    }
    pg->ended = 1;
}

static int page_next(void *arg)
{
    page *pg = arg;
    if (pg->ended)
        return 0;
    if (pg->i == 0 && pg->len == 0) {
        JB_LIT(&pg->pend, "{\"items\":[");
        pg->len = pg->pend.n;
        if (pg->keep == 0)
            page_end(pg, 0, 0);
        return 1;
    }
    /* written: the timers whose text went out; a record that cannot be
     * decoded is left out (it counts as written: the cursor goes past it) */
    while (pg->i < pg->keep) {
        const item *it = &pg->items[pg->i];
        size_t tlen = 0;
        timer_view v;
        char *t = timers_decode(it->raw, it->raw_len, it->raw + it->raw_len, it->hist_len, &v) == 0
                      ? api_timer_from_view(it->at.id, &v, &tlen)
                      : NULL;
        if (!t) {
            pg->i++;
            continue;
        }
        int first = pg->len == sizeof "{\"items\":[" - 1;
        if (!first && pg->len + tlen + 1 + sizeof "],\"next_cursor\":\"\"}" + KEY_ID_MAX + 32 > pg->max_bytes) {
            free(t);
            page_end(pg, pg->i, 1);
            return 1;
        }
        if (!first)
            JB_LIT(&pg->pend, ",");
        jb_put(&pg->pend, t, tlen);
        pg->len += tlen + !first;
        free(t);
        pg->i++;
        return 1;
    }
    page_end(pg, pg->keep, 0);
    return 1;
}

static size_t page_fill(void *arg, char *buf, size_t max)
{
    page *pg = arg;
    return jb_fill(&pg->pend, &pg->taken, buf, max, page_next, pg);
}

/* Answers with the page from the timers taken, as page_bound left them:
 * the first `before` of them come up to the bound (NULL: none), `limit` at
 * most. The page takes c's timers. */
static void answer(list_ctx *c, const pos *bound, size_t before)
{
    page *pg = xcalloc(1, sizeof *pg);
    pg->ns = xstrdup(c->ns);
    pg->items = c->items;
    pg->n = c->n;
    c->items = NULL;
    c->n = 0;
    pg->keep = before < c->limit ? before : c->limit;
    pg->limit = c->limit;
    pg->max_bytes = c->max_bytes;
    if (bound) {
        pg->has_bound = 1;
        pg->bound = *bound;
    }
    http_respond_stream(c->r, 200, "application/json", page_fill, page_free, pg);
}

static void list_cb(void *arg, int status, int more, const char *last_score, const char *last_id, size_t n,
                    const timer_listed *items);

/* Asks partition pt for up to want timers after from (NULL: from the start). */
static int ask(list_ctx *c, part *pt, uint32_t want, const pos *from)
{
    char score[24] = "";
    if (from)
        snprintf(score, sizeof score, "%lld", from->score);
    return timers_list(c->a->tm, pt->index, c->ns, c->state, c->asc, from ? score : NULL, from ? from->id : NULL,
                       want, c->queue, c->label, c->budget, c->part_bytes, list_cb, pt);
}

/* Drops a reference; the last one of a round either asks the partition that
 * bounds the page for the timers still missing (another round) or answers. */
static void ctx_unref(list_ctx *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    size_t before = 0;
    part *next = atomic_load(&c->failed) ? NULL : page_bound(c, &before);
    if (next && before < c->limit && c->bytes < c->max_bytes && c->rounds < LIST_ROUNDS) {
        c->rounds++;
        atomic_store(&c->refs, 2); /* the call, and this side */
        if (ask(c, next, c->limit - (uint32_t)before, &next->last) < 0) {
            atomic_store(&c->failed, 1);
            atomic_fetch_sub(&c->refs, 1);
        }
        ctx_unref(c);
        return;
    }
    nsgate_leave(c->ns); /* before the answer: a client that asks again at once finds room */
    if (atomic_load(&c->failed))
        http_respond_problem(c->r, 503, "Redis is unreachable. Retry later.", NULL, NULL, 1);
    else
        answer(c, next ? &next->last : NULL, before);
    for (size_t i = 0; i < c->n; i++)
        free(c->items[i].raw);
    free(c->items);
    free(c->parts);
    free(c->queue);
    free(c->label);
    free(c->ns);
    free(c);
}

static void list_cb(void *arg, int status, int more, const char *last_score, const char *last_id, size_t n,
                    const timer_listed *items)
{
    part *pt = arg;
    take_reply(pt, status, more, last_score, last_id, n, items);
    ctx_unref(pt->c);
}

/* s is "<namespace>/~" (an open API's cursor past a namespace's ids). */
static int past_namespace(const char *s)
{
    const char *slash = strchr(s, '/');
    char ns[72];
    if (!slash || strcmp(slash, "/~") != 0 || (size_t)(slash - s) >= sizeof ns)
        return 0;
    snprintf(ns, sizeof ns, "%.*s", (int)(slash - s), s);
    return auth_namespace_valid(ns);
}

/* Reads limit, state, queue and cursor; answers 400 and returns -EINVAL on
 * a bad one. */
static int parse_query(http_req *r, int *asc, const char **state, uint32_t *limit, pos *cur, int *has_cur)
{
    const char *s = http_req_query(r, "state"), *l = http_req_query(r, "limit"), *q = http_req_query(r, "queue");
    const char *cs = http_req_query(r, "cursor"), *lb = http_req_query(r, "label");
    size_t i, n = sizeof list_states / sizeof *list_states;
    for (i = 0; s && i < n && strcmp(s, list_states[i].state) != 0; i++)
        ;
    if (!s || i == n) {
        http_respond_problem(r, 400, "state is required: scheduled, retrying, paused, delivered, failed or cancelled",
                             "state", NULL, 0);
        return -EINVAL;
    }
    *state = list_states[i].state;
    *asc = list_states[i].asc;
    unsigned long long v = LIST_DEFAULT_LIMIT;
    if (l && (api_number(l, strlen(l), LIST_MAX_LIMIT, &v) < 0 || v < 1)) {
        http_respond_problem(r, 400, "limit must be an integer from 1 to 1000", "limit", NULL, 0);
        return -EINVAL;
    }
    *limit = (uint32_t)v;
    if (q && !spec_queue_valid(q)) {
        http_respond_problem(r, 400, "queue must match [A-Za-z0-9._-]{1,64}", "queue", NULL, 0);
        return -EINVAL;
    }
    if (lb && !api_label_valid(lb)) {
        http_respond_problem(r, 400, "label must be key:value, a label's key and value (see Timer.labels)", "label",
                             NULL, 0);
        return -EINVAL;
    }
    *has_cur = 0;
    if (cs) {
        const char *tilde = strchr(cs, '~');
        char score[24];
        /* an empty id: before the namespace's first at that score; without
         * tokens "<namespace>/~": after that namespace's last (cursor_text) */
        const char *ns = http_req_namespace(r);
        int empty = tilde && !tilde[1] && ns[0], past = tilde && !ns[0] && past_namespace(tilde + 1);
        if (!tilde || tilde == cs || (size_t)(tilde - cs) >= sizeof score ||
            (!empty && !past && !spec_lookup_id_valid(tilde + 1)) ||
            strspn(cs, "0123456789") != (size_t)(tilde - cs)) {
            http_respond_problem(r, 400, "cursor is not one this API gave", "cursor", NULL, 0);
            return -EINVAL;
        }
        snprintf(score, sizeof score, "%.*s", (int)(tilde - cs), cs);
        char kid[KEY_ID_MAX];
        api_key_id(kid, sizeof kid, ns, tilde + 1);
        pos_set(cur, score, kid);
        *has_cur = 1;
    }
    return 0;
}

void api_timer_list(http_req *r, const char *const *params, void *app)
{
    (void)params;
    api *a = app;
    int asc, has_cur;
    const char *state;
    uint32_t limit;
    pos cur;
    if (parse_query(r, &asc, &state, &limit, &cur, &has_cur) < 0)
        return;
    if (nsgate_admit(r, (unsigned)a->cfg->max_expensive_per_namespace) < 0)
        return;
    const char *queue = http_req_query(r, "queue"), *label = http_req_query(r, "label");
    uint32_t parts = (uint32_t)a->cfg->partitions;
    list_ctx *c = xcalloc(1, sizeof *c);
    c->r = r;
    c->a = a;
    c->ns = xstrdup(http_req_namespace(r));
    c->queue = queue ? xstrdup(queue) : NULL;
    c->label = label ? xstrdup(label) : NULL;
    c->state = state; /* (list_states' text) */
    c->max_bytes = (size_t)a->cfg->list_max_bytes;
    c->asc = asc;
    c->limit = limit;
    c->rounds = 1;
    c->nparts = parts;
    c->parts = xcalloc(parts, sizeof *c->parts);
    atomic_init(&c->refs, (int)parts + 1);
    atomic_init(&c->failed, 0);
    /* A waiting state also steps over the other namespaces' and states' timers
     * held in the claimed zsets (list.lua), as a queue filter steps over
     * other queues. */
    c->budget = queue || label || asc ? limit * LIST_QUEUE_BUDGET : limit;
    if (c->budget > LIST_SCAN_BUDGET)
        c->budget = LIST_SCAN_BUDGET;
    c->part_bytes = a->cfg->list_max_bytes / parts;
    if (!c->part_bytes)
        c->part_bytes = 1;
    uint32_t share = (2 * limit + parts - 1) / parts;
    if (share < LIST_SHARE_MIN)
        share = LIST_SHARE_MIN;
    if (share > limit)
        share = limit;
    for (uint32_t p = 0; p < parts; p++) {
        c->parts[p] = (part){.c = c, .index = p};
        if (ask(c, &c->parts[p], share, has_cur ? &cur : NULL) < 0) { /* the writer still answers those already queued */
            atomic_fetch_sub(&c->refs, (int)(parts - p));
            atomic_store(&c->failed, 1);
            break;
        }
    }
    ctx_unref(c);
}
