/* sign.h - Standard Webhooks signatures (webhook-signature).
 *
 * The secrets come from HOOKWHEEL_SIGNING_SECRET: one or more secrets in the
 * Standard Webhooks form "whsec_<base64 key>", comma-separated; during a
 * rotation two are active and every request carries both signatures
 * ("v1,<sig> v1,<sig>"), so receivers verify with either. A signature is
 * base64(HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<body>")).
 *
 * Namespaces (auth.h) may have secrets of their own, from
 * HOOKWHEEL_NAMESPACE_SECRETS_FILE (lines "<namespace> whsec_...[,whsec_...]");
 * a namespace without a line uses HOOKWHEEL_SIGNING_SECRET, and with
 * neither its requests go unsigned.
 *
 * Created once at start-up; afterwards read-only, any thread. The keys never
 * leave this module (no log line, no API answer shows them). */
#ifndef HW_SIGN_H
#define HW_SIGN_H

#include <stddef.h>
#include <stdint.h>

#define SIGN_MAX_SECRETS 4
#define SIGN_HEADER_MAX (SIGN_MAX_SECRETS * 48 + 32) /* "webhook-signature: " + sigs */

typedef struct signer signer; /* opaque */

/* Parses the secrets. Returns the signer, or NULL with a one-sentence reason
 * in err (never quoting the secret) when a secret is malformed. */
signer *signer_create(const char *secrets, char *err, size_t errlen);

/* A signer without default secrets, for namespace secrets only. */
signer *signer_create_empty(void);

/* Adds the namespace secrets of the file at path. Returns 0, or -1 with a
 * one-sentence reason (file and line, never the secret) in err. */
int signer_load_namespaces(signer *s, const char *path, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* The namespace of s's i-th namespace secrets line, or NULL when it has
 * fewer (for the start-up check against the tokens file). */
const char *signer_namespace(const signer *s, size_t i);

/* The signer for a timer's key id ("<namespace>/<id>" or "<id>"): its
 * namespace's, or s itself. */
const signer *signer_for(const signer *s, const char *key_id);

/* Frees s (wiping its keys). NULL is a no-op. */
void signer_free(signer *s);

/* Writes the header value ("v1,<base64> v1,<base64>") for one request into
 * out (SIGN_HEADER_MAX bytes). Returns its length: 0 when s has no secret
 * (the request goes unsigned). */
size_t signer_sign(const signer *s, const char *msg_id, uint64_t timestamp, const char *body, size_t body_len,
                   char *out);

#endif
