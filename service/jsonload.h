/* jsonload.h - json_loadb, fast for the documents the API receives.
 *
 * Any thread; no shared state. jansson's parser reads its input a byte at a
 * time through a stream and appends every string's bytes to a growing
 * buffer, one call each: a 300-byte timer spec took ~4.5 us to parse, where
 * building the same tree with jansson's constructors takes ~0.2 us, and the
 * parse was half of hookwheel's CPU in a batch create (perf,
 * bench/batch.py). json_load_fast parses the JSON it meets in requests and
 * stored specs itself and builds the tree with those constructors; whatever
 * it does not handle (reals, integers of more than 18 digits, \u0000, lone
 * surrogates, duplicate keys, nesting deeper than 64, other flags) and any
 * malformed input it hands to json_loadb whole, so the answer, and every
 * error's text, line and column, are jansson's own. */
#ifndef HW_JSONLOAD_H
#define HW_JSONLOAD_H

#include <jansson.h>
#include <stddef.h>

/* The tree json_loadb(buf, len, flags, err) returns, by the same rules and
 * with the same errors. flags: JSON_REJECT_DUPLICATES and JSON_DECODE_ANY
 * are handled here; any other flag goes to json_loadb. err (may be NULL) is
 * filled only when the result is NULL. */
json_t *json_load_fast(const char *buf, size_t len, size_t flags, json_error_t *err);

/* json_load_fast without the fallback: the tree, or NULL where
 * json_load_fast would hand buf to json_loadb (the tests check that the
 * documents the API meets take the fast path). */
json_t *json_load_fast_only(const char *buf, size_t len, size_t flags);

#endif
