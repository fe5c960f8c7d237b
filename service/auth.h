/* auth.h - API bearer tokens and the namespaces they map to.
 *
 * HOOKWHEEL_API_TOKENS_FILE holds one token per line,
 *   <namespace> <token>            or
 *   <namespace> sha256:<64 hex digits of the token's SHA-256>
 * with `#` comments and blank lines; a token belongs to one namespace (a
 * file giving it to two is refused). Only SHA-256 digests are kept in
 * memory; a presented token is hashed and compared with every entry in
 * constant time (CRYPTO_memcmp over all of them, no early exit), so neither
 * the token nor which entry matched shows in the timing.
 *
 * Loaded at start and again on SIGHUP (main thread), each time a new table;
 * auth_check is read-only and safe from any thread. */
#ifndef HW_AUTH_H
#define HW_AUTH_H

#include <stddef.h>

typedef struct auth auth; /* opaque */

#define AUTH_MIN_TOKEN_LEN 16 /* plain tokens shorter than this are refused at load */

/* Reads the tokens file at path. Returns the table, or NULL with a one-line
 * reason (file and line) in err[errlen]. */
auth *auth_load(const char *path, char *err, size_t errlen);

/* Frees a. NULL is a no-op. */
void auth_free(auth *a);

/* Number of tokens loaded. */
size_t auth_count(const auth *a);

/* The namespace of the bearer token in an Authorization header value
 * ("Bearer <token>", scheme case-insensitive), or NULL when the header is
 * absent, malformed or holds no known token. */
const char *auth_check(const auth *a, const char *authorization);

/* 1 if a token of a belongs to namespace ns, else 0 (also for a NULL a). */
int auth_has_namespace(const auth *a, const char *ns);

/* 1 if name is a valid namespace: [A-Za-z0-9._-]{1,64}. */
int auth_namespace_valid(const char *name);

#endif
