/* instances.h - the registry of instances that may hold claims and their
 * lease keys (the only code that names them):
 *   hw:instances        set: ids of instances that registered (reapers read it)
 *   hw:instance:<id>    string: an instance's lease, renewed by its watchdog
 *
 * Any thread may call a verb; a verb that returns 0 calls its callback
 * exactly once, on the store's writer thread; one that returns an error
 * (-EAGAIN, -ESHUTDOWN) never does. */
#ifndef HW_INSTANCES_H
#define HW_INSTANCES_H

#include <stddef.h>

#include "store.h"

#define INSTANCES_ID_MAX 136 /* ids longer than this are not reaped */

/* Writes instance id's lease key into buf (KEYS_MAX bytes). */
void instances_lease_key(char *buf, const char *id);

/* ok: 1 when Redis answered (the change is made), 0 when it did not. */
typedef void (*instances_done_cb)(void *arg, int ok);

/* Adds id to the registry, or takes it out. */
int instances_register(store *st, const char *id, instances_done_cb cb, void *arg)
    __attribute__((warn_unused_result));
int instances_forget(store *st, const char *id, instances_done_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* The registered ids (n 0 when Redis did not answer). */
typedef void (*instances_list_cb)(void *arg, size_t n, const char *const *ids);
int instances_list(store *st, instances_list_cb cb, void *arg) __attribute__((warn_unused_result));

/* alive: 1 when id's lease exists, 0 when it lapsed, -1 when Redis did not
 * answer. */
typedef void (*instances_alive_cb)(void *arg, int alive);
int instances_alive(store *st, const char *id, instances_alive_cb cb, void *arg)
    __attribute__((warn_unused_result));

#endif
