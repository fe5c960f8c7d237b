#include "sign.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "auth.h"
#include "keys.h"
#include "xalloc.h"

#define KEY_MAX 128

typedef struct ns_signer {
    char ns[65];
    signer *s;
} ns_signer;

struct signer {
    EVP_MAC *hmac; /* fetched once; contexts are made per request */
    unsigned n;
    unsigned char key[SIGN_MAX_SECRETS][KEY_MAX];
    int key_len[SIGN_MAX_SECRETS];
    ns_signer *nss; /* namespaces with secrets of their own */
    size_t nns;
};

/* Decodes one "whsec_<base64>" secret into s->key[s->n]. */
static int add_secret(signer *s, const char *text, size_t len, char *err, size_t errlen)
{
    static const char prefix[] = "whsec_";
    char b64[KEY_MAX * 2];
    if (len <= sizeof prefix - 1 || memcmp(text, prefix, sizeof prefix - 1) != 0 ||
        len - (sizeof prefix - 1) >= sizeof b64 || (len - (sizeof prefix - 1)) % 4) {
        snprintf(err, errlen, "secret %u is not of the form whsec_<base64 key>", s->n + 1);
        return -1;
    }
    size_t n = len - (sizeof prefix - 1);
    memcpy(b64, text + sizeof prefix - 1, n);
    b64[n] = '\0';
    unsigned char out[KEY_MAX * 2];
    int k = EVP_DecodeBlock(out, (const unsigned char *)b64, (int)n);
    int pad = (n >= 1 && b64[n - 1] == '=') + (n >= 2 && b64[n - 2] == '=');
    OPENSSL_cleanse(b64, sizeof b64);
    if (k < 0 || k - pad < 16 || k - pad > KEY_MAX) {
        OPENSSL_cleanse(out, sizeof out);
        snprintf(err, errlen, "secret %u does not decode to a key of 16 to %d bytes", s->n + 1, KEY_MAX);
        return -1;
    }
    memcpy(s->key[s->n], out, (size_t)(k - pad));
    s->key_len[s->n] = k - pad;
    s->n++;
    OPENSSL_cleanse(out, sizeof out);
    return 0;
}

signer *signer_create(const char *secrets, char *err, size_t errlen)
{
    signer *s = xcalloc(1, sizeof *s);
    s->hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (!s->hmac) {
        snprintf(err, errlen, "OpenSSL offers no HMAC");
        signer_free(s);
        return NULL;
    }
    const char *p = secrets;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && p[0] == ' ')
            p++, len--;
        while (len && p[len - 1] == ' ')
            len--;
        if (s->n == SIGN_MAX_SECRETS) {
            snprintf(err, errlen, "at most %d secrets may be active at once", SIGN_MAX_SECRETS);
            signer_free(s);
            return NULL;
        }
        if (add_secret(s, p, len, err, errlen) < 0) {
            signer_free(s);
            return NULL;
        }
        p = end ? end + 1 : p + len;
    }
    if (!s->n) {
        snprintf(err, errlen, "no secret given");
        signer_free(s);
        return NULL;
    }
    return s;
}

signer *signer_create_empty(void)
{
    signer *s = xcalloc(1, sizeof *s);
    s->hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (!s->hmac)
        abort(); /* OpenSSL 3 always has HMAC */
    return s;
}

static int ns_line(signer *s, char *line, char *err, size_t errlen)
{
    char *save = NULL, *ns = strtok_r(line, " \t\r\n", &save);
    if (!ns || ns[0] == '#')
        return 0;
    char *secrets = strtok_r(NULL, " \t\r\n", &save), *extra = strtok_r(NULL, " \t\r\n", &save);
    if (!secrets || strlen(ns) >= sizeof s->nss->ns) {
        snprintf(err, errlen, "expected <namespace> whsec_...[,whsec_...]");
        return -1;
    }
    if (!auth_namespace_valid(ns)) { /* no timer's namespace: the line could sign nothing */
        snprintf(err, errlen, "namespace must match [A-Za-z0-9._-]{1,64}");
        return -1;
    }
    /* A second field would be a secret of a rotation written after a space
     * ("whsec_a, whsec_b"): dropped, it would leave receivers that verify
     * with it refusing every request. */
    if (extra && extra[0] != '#') {
        snprintf(err, errlen, "expected <namespace> whsec_...[,whsec_...], the secrets one field (no spaces)");
        return -1;
    }
    for (size_t i = 0; i < s->nns; i++)
        if (strcmp(s->nss[i].ns, ns) == 0) {
            snprintf(err, errlen, "namespace %s is given twice", ns);
            return -1;
        }
    signer *sub = signer_create(secrets, err, errlen);
    OPENSSL_cleanse(secrets, strlen(secrets));
    if (!sub)
        return -1;
    s->nss = xrealloc(s->nss, (s->nns + 1) * sizeof *s->nss);
    snprintf(s->nss[s->nns].ns, sizeof s->nss->ns, "%s", ns);
    s->nss[s->nns++].s = sub;
    return 0;
}

int signer_load_namespaces(signer *s, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot be read", path);
        return -1;
    }
    char line[2048], why[160];
    int rc = 0;
    for (unsigned no = 1; rc == 0 && fgets(line, sizeof line, f); no++) {
        if (ns_line(s, line, why, sizeof why) < 0) {
            snprintf(err, errlen, "%s line %u: %s", path, no, why);
            rc = -1;
        }
    }
    OPENSSL_cleanse(line, sizeof line);
    fclose(f);
    return rc;
}

const char *signer_namespace(const signer *s, size_t i)
{
    return s && i < s->nns ? s->nss[i].ns : NULL;
}

const signer *signer_for(const signer *s, const char *key_id)
{
    size_t len = keys_ns_len(key_id);
    if (!len || !s->nns)
        return s;
    for (size_t i = 0; i < s->nns; i++)
        if (strlen(s->nss[i].ns) == len && memcmp(s->nss[i].ns, key_id, len) == 0)
            return s->nss[i].s;
    return s;
}

void signer_free(signer *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nns; i++)
        signer_free(s->nss[i].s);
    free(s->nss);
    EVP_MAC_free(s->hmac);
    OPENSSL_cleanse(s, sizeof *s);
    free(s);
}

size_t signer_sign(const signer *s, const char *msg_id, uint64_t timestamp, const char *body, size_t body_len,
                   char *out)
{
    /* signed: "<msg_id>.<timestamp>.<body>"; the id goes in on its own, so
     * no buffer bounds its length */
    char ts[32];
    int tlen = snprintf(ts, sizeof ts, ".%" PRIu64 ".", timestamp);
    size_t o = 0;
    for (unsigned i = 0; i < s->n; i++) {
        unsigned char mac[EVP_MAX_MD_SIZE];
        size_t mlen = 0;
        OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
                               OSSL_PARAM_construct_end()};
        EVP_MAC_CTX *h = EVP_MAC_CTX_new(s->hmac);
        if (!h || !EVP_MAC_init(h, s->key[i], (size_t)s->key_len[i], params) ||
            !EVP_MAC_update(h, (const unsigned char *)msg_id, strlen(msg_id)) ||
            !EVP_MAC_update(h, (const unsigned char *)ts, (size_t)tlen) ||
            !EVP_MAC_update(h, (const unsigned char *)(body ? body : ""), body_len) ||
            !EVP_MAC_final(h, mac, &mlen, sizeof mac))
            abort(); /* only out of memory: HMAC-SHA256 is always there once fetched */
        EVP_MAC_CTX_free(h);
        if (i)
            out[o++] = ' ';
        memcpy(out + o, "v1,", 3);
        o += 3;
        o += (size_t)EVP_EncodeBlock((unsigned char *)out + o, mac, (int)mlen);
    }
    out[o] = '\0';
    return o;
}
