/* xalloc.h - allocation that aborts on out-of-memory.
 *
 * For fixed-size bookkeeping only (redis zmalloc style): callers need no NULL
 * branch. Anything sized by a client is capped by configuration before it is
 * allocated, so running out here is a fault of the machine, not of input.
 * Any thread. */
#ifndef HW_XALLOC_H
#define HW_XALLOC_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t n);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

#endif
