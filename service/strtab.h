/* strtab.h - intrusive hash table keyed by strings.
 *
 * Any thread, no locking (callers own their tables). The node lives inside
 * its owner (container_of gets the owner back) and points at the owner's
 * key, so adding allocates nothing but, now and then, a bigger bucket array
 * (chained, FNV-1a, power-of-two buckets doubled when the load passes 1).
 * Several nodes may share a key: strtab_find returns the first and
 * strtab_next the others. Used by the limiter (queues by name) and the
 * engine (jobs by timer id). */
#ifndef HW_STRTAB_H
#define HW_STRTAB_H

#include <stddef.h>
#include <stdint.h>

typedef struct strtab_node {
    struct strtab_node *next; /* private: chain */
    const char *key;          /* private: the owner's key, unchanged while added */
    uint32_t hash;            /* private */
} strtab_node;

typedef struct strtab {
    strtab_node **buckets;
    uint32_t nbuckets; /* power of two */
    uint32_t n;
} strtab;

void strtab_init(strtab *t);

/* Frees the bucket array; the nodes are their owners'. */
void strtab_free(strtab *t);

/* Adds n under key (which must outlive its stay in the table). O(1). */
void strtab_add(strtab *t, strtab_node *n, const char *key);

/* Removes n from t (a no-op when n is in no table). O(length of its chain). */
void strtab_remove(strtab *t, strtab_node *n);

/* The first node added under key and still in t, or NULL; then the next
 * node with the same key after n, or NULL. */
strtab_node *strtab_find(const strtab *t, const char *key);
strtab_node *strtab_next(const strtab_node *n);

/* Calls fn on every node; fn may free the node's owner but must not add to
 * or remove from t (to free every owner before strtab_free). */
void strtab_each(strtab *t, void (*fn)(strtab_node *n, void *arg), void *arg);

/* 1 while n is in a table (a zeroed node is in none). */
static inline int strtab_linked(const strtab_node *n) { return n->key != NULL; }

static inline uint32_t strtab_count(const strtab *t) { return t->n; }

#endif
