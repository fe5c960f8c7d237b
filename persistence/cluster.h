/* cluster.h - what the store needs to talk to a Redis Cluster: the slot of a
 * key, the slot map a node reports, and the redirections a node answers.
 *
 * Pure functions and a plain value type, any thread; the store (store.c)
 * owns the connections and calls these on its writer thread.
 *
 * A key's slot is CRC16-XMODEM of the key mod 16384, or of its hash tag when
 * the key has one: the text between the first '{' and the next '}', when
 * that text is not empty (Redis Cluster specification, "Hash tags"). Every key
 * of one hookwheel call carries the same tag, so a call is in one slot. */
#ifndef HW_CLUSTER_H
#define HW_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#define CLUSTER_SLOTS 16384
#define CLUSTER_MAX_NODES 64 /* masters one store keeps connections to */
#define CLUSTER_HOST_MAX 256

/* The key's hash tag with its braces ("{tag}"), *tag_len bytes; NULL when
 * the key has none (no '{', no '}' after it, or "{}"). */
const char *cluster_hash_tag(const char *key, size_t len, size_t *tag_len);

/* The slot of a key of len bytes. */
uint16_t cluster_slot(const char *key, size_t len);

typedef struct cluster_node {
    char host[CLUSTER_HOST_MAX];
    int port;
} cluster_node;

/* Which master serves each slot. */
typedef struct cluster_map {
    cluster_node nodes[CLUSTER_MAX_NODES];
    int nnodes;
    int16_t slot_node[CLUSTER_SLOTS]; /* index into nodes, -1: no master known */
} cluster_map;

/* Fills m from a CLUSTER SLOTS reply: each range's first node is its
 * master. A node that reports an empty host (it does not know its own
 * address) is reached at fallback_host. Returns the number of slots
 * covered (0..16384), or -EPROTO when the reply is not a slot table, or
 * -E2BIG when it names more than CLUSTER_MAX_NODES masters. */
int cluster_map_parse(cluster_map *m, const redisReply *r, const char *fallback_host);

/* The index of host:port in m, added when absent; -E2BIG when m is full. */
int cluster_map_node(cluster_map *m, const char *host, int port);

enum cluster_redirect {
    CLUSTER_NOT_REDIRECT = 0,
    CLUSTER_MOVED,    /* the slot lives elsewhere for good: update the map */
    CLUSTER_ASK,      /* the slot is being migrated: ask there once (ASKING) */
    CLUSTER_TRYAGAIN, /* a multi-key call met a slot half migrated: retry soon */
    CLUSTER_DOWN,     /* the cluster cannot serve the slot now */
};

/* Classifies an error reply's text. For MOVED and ASK, *slot, host (of
 * CLUSTER_HOST_MAX bytes) and *port name the target; a target without a
 * host (":6379") gets fallback_host. Anything else is NOT_REDIRECT. */
enum cluster_redirect cluster_redirect_parse(const char *err, uint16_t *slot, char *host, int *port,
                                             const char *fallback_host);

#endif
