/* jsonload.c - json_loadb, fast for the documents the API receives.
 *
 * A recursive descent over the buffer (RFC 8259), building the tree with
 * jansson's constructors. Every function returns NULL to give up: on
 * malformed input and on what this file leaves to jansson (jsonload.h), and
 * the caller then runs json_loadb on the whole buffer. So this file only has
 * to be right about what it accepts: that tree must be the one jansson
 * builds (tests/unit/test_jsonload.c and the fuzz target compare the two).
 * jansson's rules it follows: strings are UTF-8 without control characters,
 * \u escapes decode to UTF-8 with surrogate pairs joined; an integer is
 * -?(0|[1-9][0-9]*) in a long long, -0 being 0; objects keep their keys in
 * the order they came; whitespace is space, tab, CR and LF. */
#include "jsonload.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hex.h"
#include "jsonesc.h"

/* Deeper documents go to jansson (its own limit is JSON_PARSER_MAX_DEPTH). */
#define DEPTH_MAX 64
/* Longer integers might not fit in a long long: jansson decides. */
#define DIGITS_MAX 18

typedef struct reader {
    const unsigned char *p, *end;
    int depth;
} reader;

static void skip_ws(reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t'))
        r->p++;
}

static int hex4(const unsigned char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_value(p[i]);
        if (d < 0)
            return -1;
        v = v << 4 | (unsigned)d;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes the escapes of the string body s[0..n) (valid UTF-8 and no
 * control characters: string() checked) into out (room for n bytes: no
 * escape decodes to more bytes than it has). Returns the length, or -1 for
 * what jansson refuses or this file leaves to it. */
static long unescape(const unsigned char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\') {
            out[o++] = (char)s[i++];
            continue;
        }
        if (i + 1 >= n)
            return -1;
        unsigned char e = s[i + 1];
        i += 2;
        switch (e) {
        case '"': out[o++] = '"'; break;
        case '\\': out[o++] = '\\'; break;
        case '/': out[o++] = '/'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (i + 4 > n || hex4(s + i, &cp) < 0 || cp == 0 || (cp >= 0xDC00 && cp <= 0xDFFF))
                return -1; /* (\u0000 needs JSON_ALLOW_NUL; a lone low surrogate is an error) */
            i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate: its low one must follow */
                if (i + 6 > n || s[i] != '\\' || s[i + 1] != 'u' || hex4(s + i + 2, &lo) < 0 ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return -1;
                i += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            o += put_utf8(out + o, cp);
            break;
        }
        default:
            return -1;
        }
    }
    return (long)o;
}

/* The string whose opening quote is at r->p: its bytes in *s, *n (pointing
 * into the buffer when it has no escapes, else into *heap, which the caller
 * frees). Returns 0, or -1 to give up. */
static int string(reader *r, const char **s, size_t *n, char **heap)
{
    const unsigned char *start = ++r->p, *q = start;
    int escaped = 0;

    *heap = NULL;
    for (;;) {
        q += json_plain_prefix(q, (size_t)(r->end - q), 1);
        if (q >= r->end || *q < 0x20)
            return -1; /* unterminated, or a control character */
        if (*q == '"')
            break;
        if (*q == '\\') {
            escaped = 1;
            if (q + 1 >= r->end)
                return -1;
            q += 2; /* (the escape itself is checked by unescape) */
            continue;
        }
        const unsigned char *u = q; /* a run of bytes >= 0x80: valid UTF-8? */
        while (q < r->end && *q >= 0x80)
            q++;
        if (!utf8_valid(u, (size_t)(q - u)))
            return -1;
    }
    r->p = q + 1;
    if (!escaped) {
        *s = (const char *)start;
        *n = (size_t)(q - start);
        return 0;
    }
    char *out = malloc((size_t)(q - start) + 1);
    if (!out)
        return -1;
    long len = unescape(start, (size_t)(q - start), out);
    if (len < 0) {
        free(out);
        return -1;
    }
    *heap = out;
    *s = out;
    *n = (size_t)len;
    return 0;
}

static json_t *value(reader *r);

/* After the opening bracket (first: 1) or after a member (first: 0) of a
 * container that ends with `close`: 1 when a member follows (a ',' between
 * members taken), 0 at the end (`close` taken), -1 else. */
static int more(reader *r, unsigned char close, int first)
{
    skip_ws(r);
    if (r->p < r->end && *r->p == close) {
        r->p++;
        return 0;
    }
    if (first)
        return 1;
    if (r->p < r->end && *r->p == ',') {
        r->p++;
        skip_ws(r);
        return 1;
    }
    return -1;
}

static json_t *object(reader *r)
{
    json_t *o = json_object();
    int m;
    if (!o)
        return NULL;
    r->p++;
    for (m = more(r, '}', 1); m > 0; m = more(r, '}', 0)) {
        const char *k;
        size_t kn;
        char *heap;
        if (r->p >= r->end || *r->p != '"' || string(r, &k, &kn, &heap) < 0)
            break;
        skip_ws(r);
        json_t *v = NULL;
        if (r->p < r->end && *r->p == ':') {
            r->p++;
            skip_ws(r);
            v = value(r);
        }
        /* A repeated key (an error with JSON_REJECT_DUPLICATES, else its
         * last value wins) is left to jansson: the set then replaced a
         * member rather than adding one (one lookup a key, not two). */
        size_t had = json_object_size(o);
        int ok = v && json_object_setn_new_nocheck(o, k, kn, v) == 0 && json_object_size(o) > had;
        free(heap);
        if (!ok)
            break;
    }
    if (m == 0)
        return o;
    json_decref(o);
    return NULL;
}

static json_t *array(reader *r)
{
    json_t *a = json_array();
    int m;
    if (!a)
        return NULL;
    r->p++;
    for (m = more(r, ']', 1); m > 0; m = more(r, ']', 0)) {
        json_t *v = value(r);
        if (!v || json_array_append_new(a, v) < 0)
            break;
    }
    if (m == 0)
        return a;
    json_decref(a);
    return NULL;
}

static json_t *number(reader *r)
{
    const unsigned char *q = r->p;
    int neg = 0;
    if (*q == '-') {
        neg = 1;
        q++;
    }
    const unsigned char *digits = q;
    long long v = 0;
    while (q < r->end && *q >= '0' && *q <= '9') {
        if (q - digits == DIGITS_MAX)
            return NULL;
        v = v * 10 + (*q - '0');
        q++;
    }
    if (q == digits || (*digits == '0' && q - digits > 1))
        return NULL; /* no digits, or a leading zero */
    if (q < r->end && (*q == '.' || *q == 'e' || *q == 'E'))
        return NULL; /* a real: jansson's strtod and its formatting decide */
    r->p = q;
    return json_integer(neg ? -v : v);
}

static int literal(reader *r, const char *word, size_t n)
{
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
        return -1;
    r->p += n;
    return 0;
}

static json_t *value(reader *r)
{
    if (r->p >= r->end)
        return NULL;
    switch (*r->p) {
    case '{':
    case '[': {
        if (++r->depth > DEPTH_MAX)
            return NULL;
        json_t *v = *r->p == '{' ? object(r) : array(r);
        r->depth--;
        return v;
    }
    case '"': {
        const char *s;
        size_t n;
        char *heap;
        if (string(r, &s, &n, &heap) < 0)
            return NULL;
        json_t *v = json_stringn_nocheck(s, n);
        free(heap);
        return v;
    }
    case 't':
        return literal(r, "true", 4) == 0 ? json_true() : NULL;
    case 'f':
        return literal(r, "false", 5) == 0 ? json_false() : NULL;
    case 'n':
        return literal(r, "null", 4) == 0 ? json_null() : NULL;
    default:
        if (*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))
            return number(r);
        return NULL;
    }
}

json_t *json_load_fast_only(const char *buf, size_t len, size_t flags)
{
    if (!buf || (flags & ~(size_t)(JSON_REJECT_DUPLICATES | JSON_DECODE_ANY)))
        return NULL;
    reader r = {(const unsigned char *)buf, (const unsigned char *)buf + len, 0};
    skip_ws(&r);
    if (r.p >= r.end || !((flags & JSON_DECODE_ANY) || *r.p == '{' || *r.p == '['))
        return NULL;
    json_t *root = value(&r);
    if (!root)
        return NULL;
    skip_ws(&r);
    if (r.p == r.end)
        return root;
    json_decref(root); /* something after the value: jansson's error */
    return NULL;
}

json_t *json_load_fast(const char *buf, size_t len, size_t flags, json_error_t *err)
{
    json_t *root = json_load_fast_only(buf, len, flags);
    return root ? root : json_loadb(buf, len, flags, err);
}
