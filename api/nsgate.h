/* nsgate.h - a cap on the expensive calls (listings, dead-letter replays and
 * purges) one namespace has in flight at once, so one tenant's storm of
 * them cannot take Redis or the process's memory from the others.
 *
 * Any thread. The gate keeps its own copy of each namespace in flight; a
 * caller that entered leaves exactly once, with the same namespace, when
 * its answer is given. */
#ifndef HW_NSGATE_H
#define HW_NSGATE_H

#include "http.h"

/* Counts one more call in flight for namespace ns. Returns 0, or -EBUSY
 * (nothing counted) when ns already has cap in flight. */
int nsgate_enter(const char *ns, unsigned cap) __attribute__((warn_unused_result));

/* nsgate_enter for the caller's namespace (http_req_namespace), answering
 * 429 problem+json with Retry-After when it is at cap. Returns 0 or -EBUSY
 * (answered). */
int nsgate_admit(http_req *r, unsigned cap) __attribute__((warn_unused_result));

/* Counts one call of ns as done; a namespace with none left is forgotten. */
void nsgate_leave(const char *ns);

#endif
