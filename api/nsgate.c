/* nsgate.c - expensive calls in flight per namespace.
 *
 * A short array of (namespace, count) under one mutex, searched linearly:
 * it holds only namespaces with a call in flight, which the connection cap
 * bounds, and a call costs Redis far more than the search. */
#include "nsgate.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc.h"

typedef struct slot {
    char *ns;
    unsigned n;
} slot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static slot *slots;
static size_t nslots, cap_slots;

static slot *find(const char *ns)
{
    for (size_t i = 0; i < nslots; i++)
        if (strcmp(slots[i].ns, ns) == 0)
            return &slots[i];
    return NULL;
}

int nsgate_enter(const char *ns, unsigned cap)
{
    int rc = 0;
    pthread_mutex_lock(&lock);
    slot *s = find(ns);
    if (!s) {
        if (nslots == cap_slots) {
            cap_slots = cap_slots ? 2 * cap_slots : 16;
            slots = xrealloc(slots, cap_slots * sizeof *slots);
        }
        s = &slots[nslots++];
        s->ns = xstrdup(ns);
        s->n = 0;
    }
    if (s->n >= cap)
        rc = -EBUSY;
    else
        s->n++;
    pthread_mutex_unlock(&lock);
    return rc;
}

int nsgate_admit(http_req *r, unsigned cap)
{
    if (nsgate_enter(http_req_namespace(r), cap) == 0)
        return 0;
    char detail[160];
    snprintf(detail, sizeof detail,
             "This namespace already has %u listings, selector operations or dead-letter calls in flight, the most "
             "it may have. Retry later.",
             cap);
    http_respond_problem(r, 429, detail, NULL, NULL, 1);
    return -EBUSY;
}

void nsgate_leave(const char *ns)
{
    pthread_mutex_lock(&lock);
    slot *s = find(ns);
    if (s && s->n > 0 && --s->n == 0) {
        free(s->ns);
        *s = slots[--nslots];
    }
    pthread_mutex_unlock(&lock);
}
