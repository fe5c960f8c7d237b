/* strtab.c - intrusive hash table keyed by strings (strtab.h). */
#include "strtab.h"

#include <stdlib.h>
#include <string.h>

#include "xalloc.h"

#define INITIAL_BUCKETS 16

static uint32_t hash_of(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

void strtab_init(strtab *t)
{
    t->nbuckets = INITIAL_BUCKETS;
    t->buckets = xcalloc(t->nbuckets, sizeof *t->buckets);
    t->n = 0;
}

void strtab_free(strtab *t)
{
    free(t->buckets);
    t->buckets = NULL;
    t->nbuckets = t->n = 0;
}

/* Doubles the bucket array, keeping each chain's order (strtab_find returns
 * the first node added under a key). */
static void grow(strtab *t)
{
    uint32_t nb = t->nbuckets * 2;
    strtab_node **b = xcalloc(nb, sizeof *b), **tail = xcalloc(nb, sizeof *tail);
    for (uint32_t i = 0; i < t->nbuckets; i++) {
        strtab_node *n = t->buckets[i], *next;
        for (; n; n = next) {
            next = n->next;
            uint32_t k = n->hash & (nb - 1);
            n->next = NULL;
            if (tail[k])
                tail[k]->next = n;
            else
                b[k] = n;
            tail[k] = n;
        }
    }
    free(tail);
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = nb;
}

void strtab_add(strtab *t, strtab_node *n, const char *key)
{
    if (t->n >= t->nbuckets)
        grow(t);
    n->key = key;
    n->hash = hash_of(key);
    n->next = NULL;
    strtab_node **p = &t->buckets[n->hash & (t->nbuckets - 1)];
    while (*p) /* at the tail: the first added is found first */
        p = &(*p)->next;
    *p = n;
    t->n++;
}

void strtab_remove(strtab *t, strtab_node *n)
{
    if (!n->key)
        return;
    strtab_node **p = &t->buckets[n->hash & (t->nbuckets - 1)];
    while (*p && *p != n)
        p = &(*p)->next;
    if (!*p)
        return;
    *p = n->next;
    n->next = NULL;
    n->key = NULL;
    t->n--;
}

static strtab_node *match(strtab_node *n, uint32_t h, const char *key)
{
    for (; n; n = n->next)
        if (n->hash == h && strcmp(n->key, key) == 0)
            return n;
    return NULL;
}

strtab_node *strtab_find(const strtab *t, const char *key)
{
    uint32_t h = hash_of(key);
    return match(t->buckets[h & (t->nbuckets - 1)], h, key);
}

strtab_node *strtab_next(const strtab_node *n) { return match(n->next, n->hash, n->key); }

void strtab_each(strtab *t, void (*fn)(strtab_node *n, void *arg), void *arg)
{
    for (uint32_t i = 0; i < t->nbuckets; i++) {
        strtab_node *n = t->buckets[i], *next;
        for (; n; n = next) {
            next = n->next;
            fn(n, arg);
        }
    }
}
