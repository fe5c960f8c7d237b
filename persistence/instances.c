/* instances.c - the instance registry and lease keys over the store. */
#include "instances.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "xalloc.h"

#define REGISTRY "hw:instances"

void instances_lease_key(char *buf, const char *id)
{
    snprintf(buf, KEYS_MAX, "hw:instance:%s", id);
}

typedef struct ctx {
    void *cb;
    void *arg;
} ctx;

static ctx *ctx_new(void *cb, void *arg)
{
    ctx *c = xmalloc(sizeof *c);
    *c = (ctx){cb, arg};
    return c;
}

static int send(store *st, int argc, const char **argv, store_reply_cb done, ctx *c)
{
    int rc = store_command(st, argc, argv, NULL, done, c);
    if (rc < 0)
        free(c);
    return rc;
}

static void done_cb(void *arg, const redisReply *r)
{
    ctx *c = arg;
    ((instances_done_cb)c->cb)(c->arg, r && r->type == REDIS_REPLY_INTEGER);
    free(c);
}

int instances_register(store *st, const char *id, instances_done_cb cb, void *arg)
{
    const char *argv[] = {"SADD", REGISTRY, id};
    return send(st, 3, argv, done_cb, ctx_new((void *)cb, arg));
}

int instances_forget(store *st, const char *id, instances_done_cb cb, void *arg)
{
    const char *argv[] = {"SREM", REGISTRY, id};
    return send(st, 3, argv, done_cb, ctx_new((void *)cb, arg));
}

static void list_cb(void *arg, const redisReply *r)
{
    ctx *c = arg;
    size_t n = r && r->type == REDIS_REPLY_ARRAY ? r->elements : 0, k = 0;
    const char **ids = xmalloc((n ? n : 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        const char *id = store_reply_str(r, (int)i, NULL);
        if (id)
            ids[k++] = id;
    }
    ((instances_list_cb)c->cb)(c->arg, k, ids);
    free(ids);
    free(c);
}

int instances_list(store *st, instances_list_cb cb, void *arg)
{
    const char *argv[] = {"SMEMBERS", REGISTRY};
    return send(st, 2, argv, list_cb, ctx_new((void *)cb, arg));
}

static void alive_cb(void *arg, const redisReply *r)
{
    ctx *c = arg;
    long long n = store_reply_int(r, -1, -1);
    ((instances_alive_cb)c->cb)(c->arg, n < 0 ? -1 : n > 0);
    free(c);
}

int instances_alive(store *st, const char *id, instances_alive_cb cb, void *arg)
{
    char lk[KEYS_MAX];
    instances_lease_key(lk, id);
    const char *argv[] = {"EXISTS", lk};
    return send(st, 2, argv, alive_cb, ctx_new((void *)cb, arg));
}
