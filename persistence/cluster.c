#include "cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no reflection,
 * as Redis Cluster's key hashing; computed bitwise, since a key is short
 * and routing is not where the store's time goes. */
static uint16_t crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

const char *cluster_hash_tag(const char *key, size_t len, size_t *tag_len)
{
    const char *open = memchr(key, '{', len);
    if (!open)
        return NULL;
    size_t from = (size_t)(open - key) + 1;
    const char *close = memchr(key + from, '}', len - from);
    if (!close || close == key + from)
        return NULL;
    *tag_len = (size_t)(close - open) + 1;
    return open;
}

uint16_t cluster_slot(const char *key, size_t len)
{
    size_t n;
    const char *tag = cluster_hash_tag(key, len, &n);
    return tag ? crc16(tag + 1, n - 2) & (CLUSTER_SLOTS - 1) : crc16(key, len) & (CLUSTER_SLOTS - 1);
}

int cluster_map_node(cluster_map *m, const char *host, int port)
{
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].port == port && strcmp(m->nodes[i].host, host) == 0)
            return i;
    if (m->nnodes == CLUSTER_MAX_NODES)
        return -E2BIG;
    cluster_node *n = &m->nodes[m->nnodes];
    snprintf(n->host, sizeof n->host, "%s", host);
    n->port = port;
    return m->nnodes++;
}

static const char *node_host(const redisReply *e, const char *fallback)
{
    if (e->type != REDIS_REPLY_STRING || e->len == 0 || strcmp(e->str, "?") == 0)
        return fallback;
    return e->str;
}

/* One range of a CLUSTER SLOTS reply: {from, to, {host, port, id...}, replicas...}. */
static int parse_range(cluster_map *m, const redisReply *e, const char *fallback)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2 || e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
        return -EPROTO;
    long long from = e->element[0]->integer, to = e->element[1]->integer;
    if (from < 0 || to >= CLUSTER_SLOTS || from > to)
        return -EPROTO;
    const redisReply *master = e->element[2];
    long long port = master->element[1]->integer;
    if (port <= 0 || port > 65535)
        return -EPROTO;
    int idx = cluster_map_node(m, node_host(master->element[0], fallback), (int)port);
    if (idx < 0)
        return idx;
    for (long long s = from; s <= to; s++)
        m->slot_node[s] = (int16_t)idx;
    return (int)(to - from + 1);
}

int cluster_map_parse(cluster_map *m, const redisReply *r, const char *fallback_host)
{
    m->nnodes = 0;
    for (int s = 0; s < CLUSTER_SLOTS; s++)
        m->slot_node[s] = -1;
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return -EPROTO;
    int covered = 0;
    for (size_t i = 0; i < r->elements; i++) {
        int n = parse_range(m, r->element[i], fallback_host);
        if (n < 0)
            return n;
        covered += n;
    }
    return covered > CLUSTER_SLOTS ? CLUSTER_SLOTS : covered;
}

/* "<slot> <host>:<port>", the port after the last ':' (an IPv6 host has colons). */
static int parse_target(const char *p, uint16_t *slot, char *host, int *port, const char *fallback)
{
    char *end;
    long s = strtol(p, &end, 10);
    if (end == p || *end != ' ' || s < 0 || s >= CLUSTER_SLOTS)
        return -EPROTO;
    const char *addr = end + 1, *colon = strrchr(addr, ':');
    if (!colon)
        return -EPROTO;
    long pt = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || (*end && *end != ' ' && *end != '\r') || pt <= 0 || pt > 65535)
        return -EPROTO;
    size_t hl = (size_t)(colon - addr);
    if (hl == 0)
        snprintf(host, CLUSTER_HOST_MAX, "%s", fallback);
    else if (hl < CLUSTER_HOST_MAX)
        snprintf(host, CLUSTER_HOST_MAX, "%.*s", (int)hl, addr);
    else
        return -EPROTO;
    *slot = (uint16_t)s;
    *port = (int)pt;
    return 0;
}

enum cluster_redirect cluster_redirect_parse(const char *err, uint16_t *slot, char *host, int *port,
                                             const char *fallback_host)
{
    if (strncmp(err, "MOVED ", 6) == 0)
        return parse_target(err + 6, slot, host, port, fallback_host) == 0 ? CLUSTER_MOVED : CLUSTER_NOT_REDIRECT;
    if (strncmp(err, "ASK ", 4) == 0)
        return parse_target(err + 4, slot, host, port, fallback_host) == 0 ? CLUSTER_ASK : CLUSTER_NOT_REDIRECT;
    if (strncmp(err, "TRYAGAIN", 8) == 0)
        return CLUSTER_TRYAGAIN;
    if (strncmp(err, "CLUSTERDOWN", 11) == 0)
        return CLUSTER_DOWN;
    return CLUSTER_NOT_REDIRECT;
}
