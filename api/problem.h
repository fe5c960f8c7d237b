/* problem.h - RFC 9457 problem documents; private to the api/ layer.
 *
 * Any thread; pure. */
#ifndef HW_PROBLEM_H
#define HW_PROBLEM_H

#include <jansson.h>

/* Builds {"type":"about:blank","title":...,"status":...[,"detail"][,"field"]}
 * plus the members of extra that do not clash with those (extra is stolen,
 * may be NULL). Returns a new reference, or NULL if jansson is out of
 * memory. */
json_t *http_problem_doc(unsigned status, const char *detail, const char *field, json_t *extra);

#endif
