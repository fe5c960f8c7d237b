/* leases.c - the lease verbs (leases.h): argument vectors of lease.lua,
 * renew.lua and unlock.lua, and the decoding of their replies.
 *
 * Each verb formats its call on the caller's thread and hands the store a
 * small call record (the caller's callback and argument); the store's reply
 * callback decodes the raw reply into a lease_reply on the writer thread,
 * calls the caller once and frees the record. How a verb's reply codes map
 * to outcomes is one table (codes[]), so the scripts' numbers are written
 * down once, next to the scripts' own comments (persistence/lua/lease.lua). */
#include "leases.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "xalloc.h"

#define LEASES_SCHEDULE "hw:lease:schedule"
#define LEASES_META_PREFIX "hw:lease:meta:"
#define LEASES_TOKEN_PREFIX "hw:lease:token:"
#define LEASES_HELD "hw:lease:held"

enum op { OP_ACQUIRE, OP_HEARTBEAT, OP_GET, OP_RELEASE, OP_CONFIRM, OP_EXTEND, OP_UNLOCK, OP_LOOK, OP_LIST };

/* A script's reply code and what it means for the verb. */
typedef struct code_map {
    long long code;
    enum lease_outcome outcome;
} code_map;

/* Per verb: its codes, and whether the reply is a bare integer (else an
 * array whose element 0 is the code, followed by lease.lua's describe()). */
static const struct {
    int ncodes;
    code_map codes[4];
    int integer;
} codes[] = {
    [OP_ACQUIRE] = {4, {{1, LEASE_ACQUIRED}, {0, LEASE_REACQUIRED}, {2, LEASE_HELD_BY_OTHER},
                        {3, LEASE_OTHER_SETTINGS}}, 0},
    [OP_HEARTBEAT] = {3, {{1, LEASE_NOTED}, {0, LEASE_HELD_BY_OTHER}, {-1, LEASE_NOT_HELD}}, 0},
    [OP_GET] = {2, {{1, LEASE_FOUND}, {-1, LEASE_NOT_HELD}}, 0},
    [OP_RELEASE] = {3, {{1, LEASE_RELEASED}, {0, LEASE_HELD_BY_OTHER}, {-1, LEASE_NOT_HELD}}, 0},
    [OP_CONFIRM] = {1, {{1, LEASE_CONFIRMED}}, 1},
    [OP_EXTEND] = {3, {{1, LEASE_RENEWED}, {2, LEASE_RECREATED}, {0, LEASE_LOST}}, 1},
    [OP_UNLOCK] = {2, {{1, LEASE_RELEASED}, {0, LEASE_NOT_HELD}}, 1},
};

/* lease.lua's describe(), after the code: its element indexes. */
enum { D_HOLDER = 1, D_PTTL, D_TOKEN, D_TTL, D_ACQUIRED, D_HB, D_PROBE_OK, D_RENEWED, D_ALIVE, D_PROBE,
       D_EXPIRE, D_WHEN };

typedef struct call {
    enum op op;
    lease_reply_cb cb;
    lease_look_cb look_cb;
    lease_list_cb list_cb;
    void *arg;
} call;

/* ---- names ---- */

void leases_key(char *buf, const char *prefix, const char *lid)
{
    snprintf(buf, LEASES_KEY_MAX, "%s%s", prefix, lid);
}

void leases_meta_key(char *buf, const char *member)
{
    snprintf(buf, LEASES_KEY_MAX, LEASES_META_PREFIX "%s", member);
}

void leases_token_key(char *buf, const char *lid)
{
    snprintf(buf, LEASES_KEY_MAX, LEASES_TOKEN_PREFIX "%s", lid);
}

/* The names of hookwheel's own lease keys. On one Redis: hw:lease:meta:,
 * hw:lease:token:, hw:lease:schedule. On a Redis Cluster the lease prefix's
 * hash tag {X} goes into them (hw:{X}:lease:meta:, ...), so the lease keys,
 * hookwheel's keys of every lease and the schedule are all in the slot of
 * X: one call stays in one slot, and the renewal sweep may touch any lease.
 * -EXDEV: a cluster and a prefix without a hash tag (no leases there). */
typedef struct names {
    char meta[LEASES_KEY_MAX], token[LEASES_KEY_MAX], schedule[LEASES_KEY_MAX], held[LEASES_KEY_MAX];
} names;

static int names_of(store *st, const char *prefix, names *n)
{
    if (!store_is_cluster(st)) {
        snprintf(n->meta, sizeof n->meta, "%s", LEASES_META_PREFIX);
        snprintf(n->token, sizeof n->token, "%s", LEASES_TOKEN_PREFIX);
        snprintf(n->schedule, sizeof n->schedule, "%s", LEASES_SCHEDULE);
        snprintf(n->held, sizeof n->held, "%s", LEASES_HELD);
        return 0;
    }
    size_t len;
    const char *tag = cluster_hash_tag(prefix, strlen(prefix), &len);
    if (!tag)
        return -EXDEV;
    snprintf(n->meta, sizeof n->meta, "hw:%.*s:lease:meta:", (int)len, tag);
    snprintf(n->token, sizeof n->token, "hw:%.*s:lease:token:", (int)len, tag);
    snprintf(n->schedule, sizeof n->schedule, "hw:%.*s:lease:schedule", (int)len, tag);
    snprintf(n->held, sizeof n->held, "hw:%.*s:lease:held", (int)len, tag);
    return 0;
}

int leases_available(store *st, const char *prefix)
{
    names n;
    return names_of(st, prefix, &n) == 0;
}

int leases_name_reserved(const char *prefix, const char *lid)
{
    char full[LEASES_KEY_MAX];
    leases_key(full, prefix, lid);
    return strncmp(full, "hw:", 3) == 0;
}

/* ---- decoding (writer thread) ---- */

/* The string at index i of array r, "" when absent or not a string. */
static const char *str_at(const redisReply *r, int i, size_t *len)
{
    const char *s = store_reply_str(r, i, len);
    if (!s && len)
        *len = 0;
    return s ? s : "";
}

static void describe(const redisReply *r, lease_info *d)
{
    d->holder = str_at(r, D_HOLDER, NULL);
    d->pttl_ms = store_reply_int(r, D_PTTL, -1);
    d->token = (uint64_t)store_reply_int(r, D_TOKEN, 0);
    d->ttl_ms = store_reply_int(r, D_TTL, 0);
    d->acquired_ms = store_reply_int(r, D_ACQUIRED, 0);
    d->heartbeat_ms = store_reply_int(r, D_HB, 0);
    d->probe_ok_ms = store_reply_int(r, D_PROBE_OK, 0);
    d->renewed_ms = store_reply_int(r, D_RENEWED, 0);
    d->alive_ms = store_reply_int(r, D_ALIVE, 0);
    d->probe_url = str_at(r, D_PROBE, NULL);
    d->on_expire = str_at(r, D_EXPIRE, &d->on_expire_len);
    d->when = str_at(r, D_WHEN, NULL);
}

static enum lease_outcome outcome_of(enum op op, long long code)
{
    for (int i = 0; i < codes[op].ncodes; i++)
        if (codes[op].codes[i].code == code)
            return codes[op].codes[i].outcome;
    return LEASE_FAILED;
}

static void decode(enum op op, const redisReply *r, lease_reply *out)
{
    *out = (lease_reply){.info = {.holder = "", .probe_url = "", .on_expire = "", .when = ""}};
    if (!r) {
        out->outcome = LEASE_UNREACHABLE;
        return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        out->outcome = LEASE_FAILED;
        out->error = r->str;
        out->refused = store_reply_refusal(r);
        return;
    }
    long long code = codes[op].integer ? store_reply_int(r, -1, LLONG_MIN) : store_reply_int(r, 0, LLONG_MIN);
    out->outcome = outcome_of(op, code);
    if (out->outcome == LEASE_FAILED)
        out->error = "unexpected reply";
    else if (op == OP_RELEASE && out->outcome == LEASE_RELEASED)
        out->info.token = (uint64_t)store_reply_int(r, 1, 0); /* {1, token} */
    else if (!codes[op].integer && out->outcome != LEASE_NOT_HELD)
        describe(r, &out->info);
}

/* One action of a look's reply (lease.lua "renew") into *a; 0 when the
 * element is not an action this code knows. */
static int action_from(const redisReply *e, lease_action *a)
{
    const char *kind = store_reply_str(e, 0, NULL);
    if (!kind)
        return 0;
    *a = (lease_action){.member = "", .lid = "", .owner = "", .url = "", .on_expire = "", .when = ""};
    if (strcmp(kind, "probe") == 0) { /* {'probe', key, token, owner, ttl, url} */
        a->kind = LEASE_ACTION_PROBE;
        a->member = a->lid = str_at(e, 1, NULL);
        a->token = (uint64_t)store_reply_int(e, 2, 0);
        a->owner = str_at(e, 3, NULL);
        a->ttl_ms = store_reply_int(e, 4, 0);
        a->url = str_at(e, 5, NULL);
    } else if (strcmp(kind, "expire") == 0) { /* {'expire', member, key, token, spec, when} */
        a->kind = LEASE_ACTION_EXPIRE;
        a->member = str_at(e, 1, NULL);
        a->lid = str_at(e, 2, NULL);
        a->token = (uint64_t)store_reply_int(e, 3, 0);
        a->on_expire = str_at(e, 4, &a->on_expire_len);
        a->when = str_at(e, 5, NULL);
    } else if (strcmp(kind, "gone") == 0) { /* {'gone', key, token} */
        a->kind = LEASE_ACTION_GONE;
        a->member = a->lid = str_at(e, 1, NULL);
        a->token = (uint64_t)store_reply_int(e, 2, 0);
    } else {
        return 0;
    }
    return 1;
}

/* {renewed, next_ms, action...}; the actions array is the caller's to free. */
static void decode_look(const redisReply *r, lease_look_reply *out, lease_action **actions)
{
    *out = (lease_look_reply){.next_ms = -1};
    *actions = NULL;
    if (!r) {
        out->outcome = LEASE_UNREACHABLE;
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2) {
        out->outcome = LEASE_FAILED;
        out->error = r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply";
        return;
    }
    long long renewed = store_reply_int(r, 0, 0);
    out->outcome = LEASE_LOOKED;
    out->renewed = renewed > 0 ? (uint64_t)renewed : 0;
    out->next_ms = store_reply_int(r, 1, -1);
    *actions = xcalloc(r->elements - 2 + 1, sizeof **actions);
    for (size_t i = 2; i < r->elements; i++)
        if (action_from(r->element[i], &(*actions)[out->nactions]))
            out->nactions++;
    out->actions = *actions;
}

/* {more, last, {id, describe...}...} (lease.lua "list"); the array is the
 * caller's to free. */
static void decode_list(const redisReply *r, lease_list_reply *out, lease_listed **items)
{
    *out = (lease_list_reply){.last = ""};
    *items = NULL;
    if (!r) {
        out->outcome = LEASE_UNREACHABLE;
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2) {
        out->outcome = LEASE_FAILED;
        out->error = r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply";
        return;
    }
    out->outcome = LEASE_LISTED;
    out->more = store_reply_int(r, 0, 0) == 1;
    out->last = str_at(r, 1, NULL);
    *items = xcalloc(r->elements - 2 + 1, sizeof **items);
    for (size_t i = 2; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < D_WHEN + 1)
            continue;
        lease_listed *it = &(*items)[out->n++];
        it->lid = str_at(e, 0, NULL);
        describe(e, &it->info); /* describe's indexes count from 1: element 0 is the id */
    }
    out->leases = *items;
}

static void reply_cb(void *arg, const redisReply *r)
{
    call *c = arg;
    if (c->op == OP_LIST) {
        lease_list_reply out;
        lease_listed *items;
        decode_list(r, &out, &items);
        c->list_cb(c->arg, &out);
        free(items);
    } else if (c->op == OP_LOOK) {
        lease_look_reply out;
        lease_action *actions;
        decode_look(r, &out, &actions);
        c->look_cb(c->arg, &out);
        free(actions);
    } else {
        lease_reply out;
        decode(c->op, r, &out);
        c->cb(c->arg, &out);
    }
    free(c);
}

static void ignore_cb(void *arg, const redisReply *r)
{
    (void)arg;
    (void)r;
}

/* Sends the call; with neither callback its answer is dropped. */
static int submit(store *st, enum store_script script, enum op op, int nkeys, int argc, const char **argv,
                  const size_t *lens, lease_reply_cb cb, lease_look_cb look_cb, void *arg)
{
    if (!cb && !look_cb)
        return store_eval(st, script, nkeys, argc, argv, lens, ignore_cb, NULL);
    call *c = xmalloc(sizeof *c);
    *c = (call){op, cb, look_cb, NULL, arg};
    int rc = op == OP_GET ? store_eval_read(st, script, nkeys, argc, argv, lens, reply_cb, c)
                          : store_eval(st, script, nkeys, argc, argv, lens, reply_cb, c);
    if (rc < 0)
        free(c);
    return rc;
}

/* ---- watchdog leases ---- */

int leases_acquire(store *st, const lease_acquire_req *q, lease_reply_cb cb, void *arg)
{
    char lk[LEASES_KEY_MAX], tk[LEASES_KEY_MAX], mk[LEASES_KEY_MAX], ttl[24], now[24];
    names n;
    if (names_of(st, q->prefix, &n) < 0)
        return -EXDEV;
    leases_key(lk, q->prefix, q->lid);
    snprintf(tk, sizeof tk, "%s%s", n.token, q->lid);
    snprintf(mk, sizeof mk, "%s%s", n.meta, q->lid);
    snprintf(ttl, sizeof ttl, "%" PRIu64, q->ttl_ms);
    snprintf(now, sizeof now, "%" PRIu64, q->now_ms);
    const char *argv[] = {lk, tk, mk, n.schedule, n.held, "acquire", q->lid, q->owner, ttl, now, q->probe_url,
                          q->on_expire, q->when, n.meta};
    enum { ARGC = sizeof argv / sizeof *argv, SPEC = 11 };
    size_t lens[ARGC];
    for (int i = 0; i < ARGC; i++)
        lens[i] = i == SPEC ? q->on_expire_len : strlen(argv[i]);
    return submit(st, SCRIPT_LEASE_ACQUIRE, OP_ACQUIRE, 5, ARGC, argv, lens, cb, NULL, arg);
}

int leases_heartbeat(store *st, const char *prefix, const char *lid, const char *owner, uint64_t token,
                     uint64_t now_ms, enum lease_sign sign, lease_reply_cb cb, void *arg)
{
    char lk[LEASES_KEY_MAX], mk[LEASES_KEY_MAX], now[24], tok[24] = "";
    names n;
    if (names_of(st, prefix, &n) < 0)
        return -EXDEV;
    leases_key(lk, prefix, lid);
    snprintf(mk, sizeof mk, "%s%s", n.meta, lid);
    snprintf(now, sizeof now, "%" PRIu64, now_ms);
    if (token)
        snprintf(tok, sizeof tok, "%" PRIu64, token);
    const char *field = sign == LEASE_SIGN_PROBE_OK ? "probe_ok" : "hb";
    const char *argv[] = {lk, mk, n.schedule, "heartbeat", lid, owner, now, tok, field};
    return submit(st, SCRIPT_LEASE, OP_HEARTBEAT, 3, 9, argv, NULL, cb, NULL, arg);
}

int leases_get(store *st, const char *prefix, const char *lid, lease_reply_cb cb, void *arg)
{
    char lk[LEASES_KEY_MAX], mk[LEASES_KEY_MAX];
    names n;
    if (names_of(st, prefix, &n) < 0)
        return -EXDEV;
    leases_key(lk, prefix, lid);
    snprintf(mk, sizeof mk, "%s%s", n.meta, lid);
    const char *argv[] = {lk, mk, "get"};
    return submit(st, SCRIPT_LEASE, OP_GET, 2, 3, argv, NULL, cb, NULL, arg);
}

int leases_release(store *st, const char *prefix, const char *lid, const char *owner, uint64_t token,
                   lease_reply_cb cb, void *arg)
{
    char lk[LEASES_KEY_MAX], mk[LEASES_KEY_MAX], tok[24] = "";
    names n;
    if (names_of(st, prefix, &n) < 0)
        return -EXDEV;
    leases_key(lk, prefix, lid);
    snprintf(mk, sizeof mk, "%s%s", n.meta, lid);
    if (token)
        snprintf(tok, sizeof tok, "%" PRIu64, token);
    const char *argv[] = {lk, mk, n.schedule, n.held, "release", lid, owner, tok};
    return submit(st, SCRIPT_LEASE, OP_RELEASE, 4, 8, argv, NULL, cb, NULL, arg);
}

int leases_look(store *st, const lease_look_req *q, lease_look_cb cb, void *arg)
{
    char now[24], limit[16], retry[24], back[24];
    names n;
    if (names_of(st, q->prefix, &n) < 0)
        return -EXDEV;
    snprintf(now, sizeof now, "%" PRIu64, q->now_ms);
    snprintf(limit, sizeof limit, "%" PRIu32, q->limit);
    snprintf(retry, sizeof retry, "%" PRIu64, q->retry_ms);
    snprintf(back, sizeof back, "%" PRIu64, q->back_ms);
    const char *argv[] = {n.schedule, n.held, "renew", now, limit, q->prefix, n.meta, retry, back};
    return submit(st, SCRIPT_LEASE, OP_LOOK, 2, 9, argv, NULL, NULL, cb, arg);
}

int leases_list(store *st, const char *prefix, const char *ns, const char *after, uint32_t limit, uint32_t budget,
                lease_list_cb cb, void *arg)
{
    char min[LEASES_KEY_MAX + 2], max[LEASES_KEY_MAX + 2], nbudget[16], nlimit[16];
    names n;
    if (names_of(st, prefix, &n) < 0)
        return -EXDEV;
    /* The index's members are lease ids, "<ns>/<key>" (or "<key>" when the
     * API runs open): a namespace's are those from "<ns>/" up to, not
     * including, "<ns>0" ('0' follows '/'). */
    if (after && after[0])
        snprintf(min, sizeof min, "(%s", after);
    else if (ns[0])
        snprintf(min, sizeof min, "[%s/", ns);
    else
        snprintf(min, sizeof min, "-");
    if (ns[0])
        snprintf(max, sizeof max, "(%s0", ns);
    else
        snprintf(max, sizeof max, "+");
    snprintf(nbudget, sizeof nbudget, "%" PRIu32, budget);
    snprintf(nlimit, sizeof nlimit, "%" PRIu32, limit);
    const char *argv[] = {n.held, "list", min, max, nbudget, nlimit, prefix, n.meta, ns[0] ? "0" : "1"};
    call *c = xmalloc(sizeof *c);
    *c = (call){.op = OP_LIST, .list_cb = cb, .arg = arg};
    int rc = store_eval_read(st, SCRIPT_LEASE, 1, 9, argv, NULL, reply_cb, c);
    if (rc < 0)
        free(c);
    return rc;
}

int leases_confirm_expiry(store *st, const char *prefix, const char *member, lease_reply_cb cb, void *arg)
{
    char mk[LEASES_KEY_MAX];
    names n;
    if (names_of(st, prefix, &n) < 0)
        return -EXDEV;
    snprintf(mk, sizeof mk, "%s%s", n.meta, member);
    const char *argv[] = {n.schedule, mk, "done", member};
    return submit(st, SCRIPT_LEASE, OP_CONFIRM, 2, 4, argv, NULL, cb, NULL, arg);
}

/* ---- plain lease keys ---- */

int leases_extend(store *st, const char *key, const char *value, uint64_t ttl_ms, int recreate,
                  lease_reply_cb cb, void *arg)
{
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%" PRIu64, ttl_ms);
    const char *argv[] = {key, value, ttl, recreate ? "1" : "0"};
    return submit(st, SCRIPT_RENEW, OP_EXTEND, 1, 4, argv, NULL, cb, NULL, arg);
}

int leases_unlock(store *st, const char *key, const char *value, lease_reply_cb cb, void *arg)
{
    const char *argv[] = {key, value};
    return submit(st, SCRIPT_UNLOCK, OP_UNLOCK, 1, 2, argv, NULL, cb, NULL, arg);
}
