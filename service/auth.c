/* auth.c - bearer tokens (auth.h). */
#include "auth.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "hex.h"
#include "xalloc.h"

#define NS_MAX 64

typedef struct entry {
    unsigned char digest[32];
    char ns[NS_MAX + 1];
} entry;

struct auth {
    entry *e;
    size_t n, cap;
};

int auth_namespace_valid(const char *name)
{
    size_t n = 0;
    for (; name[n]; n++) {
        unsigned char c = (unsigned char)name[n];
        if (!isalnum(c) && c != '.' && c != '_' && c != '-')
            return 0;
    }
    return n >= 1 && n <= NS_MAX;
}

static void sha256(const char *s, size_t len, unsigned char out[32])
{
    unsigned int olen = 0;
    if (!EVP_Digest(s, len, out, &olen, EVP_sha256(), NULL) || olen != 32)
        abort(); /* only out of memory: SHA-256 is always there */
}

/* The digest a line's token field stands for; -EINVAL when malformed. */
static int token_digest(const char *tok, unsigned char out[32], const char **why)
{
    if (strncmp(tok, "sha256:", 7) == 0) {
        const char *h = tok + 7;
        if (strlen(h) != 64) {
            *why = "sha256: needs 64 hex digits";
            return -EINVAL;
        }
        for (int i = 0; i < 32; i++) {
            int hi = hex_value(h[2 * i]), lo = hex_value(h[2 * i + 1]);
            if (hi < 0 || lo < 0) {
                *why = "sha256: needs 64 hex digits";
                return -EINVAL;
            }
            out[i] = (unsigned char)(hi << 4 | lo);
        }
        return 0;
    }
    if (strlen(tok) < AUTH_MIN_TOKEN_LEN) {
        *why = "token shorter than 16 characters";
        return -EINVAL;
    }
    sha256(tok, strlen(tok), out);
    return 0;
}

/* Parses one line into a (or skips it). Returns 0, or -EINVAL with *why. */
static int parse_line(auth *a, char *line, const char **why)
{
    char *save = NULL, *ns = strtok_r(line, " \t\r\n", &save);
    if (!ns || ns[0] == '#')
        return 0;
    char *tok = strtok_r(NULL, " \t\r\n", &save), *extra = strtok_r(NULL, " \t\r\n", &save);
    if (!auth_namespace_valid(ns)) {
        *why = "namespace must match [A-Za-z0-9._-]{1,64}";
        return -EINVAL;
    }
    if (!tok || (extra && extra[0] != '#')) {
        *why = "expected <namespace> <token> or <namespace> sha256:<hex>";
        return -EINVAL;
    }
    entry e;
    if (token_digest(tok, e.digest, why) < 0)
        return -EINVAL;
    /* One token, one namespace: auth_check takes the first match, so a token
     * also given to another namespace would act in the first one's. */
    for (size_t i = 0; i < a->n; i++)
        if (memcmp(a->e[i].digest, e.digest, sizeof e.digest) == 0 && strcmp(a->e[i].ns, ns) != 0) {
            *why = "the token is already given to another namespace";
            return -EINVAL;
        }
    snprintf(e.ns, sizeof e.ns, "%s", ns);
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 8;
        a->e = xrealloc(a->e, a->cap * sizeof *a->e);
    }
    a->e[a->n++] = e;
    return 0;
}

auth *auth_load(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    auth *a = xcalloc(1, sizeof *a);
    char line[1024];
    const char *why = NULL;
    for (unsigned no = 1; fgets(line, sizeof line, f); no++) {
        if (!strchr(line, '\n') && !feof(f)) {
            why = "line too long";
        } else if (parse_line(a, line, &why) == 0) {
            continue;
        }
        snprintf(err, errlen, "%s line %u: %s", path, no, why);
        fclose(f);
        auth_free(a);
        return NULL;
    }
    fclose(f);
    if (a->n == 0) {
        snprintf(err, errlen, "%s: no tokens", path);
        auth_free(a);
        return NULL;
    }
    return a;
}

void auth_free(auth *a)
{
    if (!a)
        return;
    OPENSSL_cleanse(a->e, a->cap * sizeof *a->e);
    free(a->e);
    free(a);
}

size_t auth_count(const auth *a) { return a ? a->n : 0; }

int auth_has_namespace(const auth *a, const char *ns)
{
    for (size_t i = 0; a && i < a->n; i++)
        if (strcmp(a->e[i].ns, ns) == 0)
            return 1;
    return 0;
}

const char *auth_check(const auth *a, const char *authorization)
{
    if (!a || !authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return NULL;
    const char *tok = authorization + 7;
    while (*tok == ' ')
        tok++;
    size_t len = strlen(tok);
    while (len && (tok[len - 1] == ' ' || tok[len - 1] == '\t'))
        len--;
    if (!len)
        return NULL;
    unsigned char d[32];
    sha256(tok, len, d);
    const char *found = NULL;
    for (size_t i = 0; i < a->n; i++) { /* every entry, whatever matched */
        int eq = CRYPTO_memcmp(d, a->e[i].digest, sizeof d) == 0;
        if (eq && !found)
            found = a->e[i].ns;
    }
    return found;
}
