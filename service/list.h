/* list.h - intrusive doubly linked list with a sentinel head.
 *
 * Header only; any thread, no locking (callers own their lists). A node that
 * points at itself is "in no list", so removal is idempotent and O(1), and no
 * operation allocates (the node lives inside its owner; container_of gets the
 * owner back), as in libuv's queue.h and nginx's ngx_queue.h. */
#ifndef HW_LIST_H
#define HW_LIST_H

#include <stddef.h>

struct list_node {
    struct list_node *prev, *next;
};

#define container_of(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))

static inline void list_init(struct list_node *n) { n->prev = n->next = n; }

static inline int list_empty(const struct list_node *head) { return head->next == head; }

/* A node is linked when it is in some list; list_init and list_remove unlink it. */
static inline int list_linked(const struct list_node *n) { return n->next != n; }

static inline void list_insert_tail(struct list_node *head, struct list_node *n)
{
    n->prev = head->prev;
    n->next = head;
    head->prev->next = n;
    head->prev = n;
}

static inline void list_remove(struct list_node *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    list_init(n);
}

/* Moves every node of src to the tail of dst, keeping order; src ends empty. */
static inline void list_splice_tail(struct list_node *dst, struct list_node *src)
{
    if (list_empty(src))
        return;
    src->next->prev = dst->prev;
    dst->prev->next = src->next;
    src->prev->next = dst;
    dst->prev = src->prev;
    list_init(src);
}

static inline struct list_node *list_pop_head(struct list_node *head)
{
    struct list_node *n = head->next;
    if (n == head)
        return NULL;
    list_remove(n);
    return n;
}

#endif
