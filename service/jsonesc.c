#include "jsonesc.h"

#include <stdint.h>
#include <string.h>

#include "xalloc.h"

/* The length of the sequence lead byte c starts (1 to 4), or 0 when c
 * starts none (a continuation byte, or a byte UTF-8 never uses). */
static size_t utf8_lead_len(unsigned char c)
{
    return c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
}

/* The length of the UTF-8 sequence starting at s[0..avail), or 0 when it is
 * not a valid one (RFC 3629's table of well-formed byte sequences). */
static size_t utf8_seq(const unsigned char *s, size_t avail)
{
    unsigned char c = s[0];
    size_t n = utf8_lead_len(c);
    if (!n || n > avail)
        return 0;
    for (size_t k = 1; k < n; k++)
        if ((s[k] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) || (c == 0xf0 && s[1] < 0x90) ||
        (c == 0xf4 && s[1] > 0x8f))
        return 0;
    return n;
}

int utf8_valid(const unsigned char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        size_t n = utf8_seq(s + i, len - i);
        if (!n)
            return 0;
        i += n;
    }
    return 1;
}

size_t utf8_whole_prefix(const unsigned char *s, size_t len)
{
    size_t k = 0; /* continuation bytes at the end */
    while (k < 3 && k < len && (s[len - 1 - k] & 0xc0) == 0x80)
        k++;
    if (k == len)
        return len;
    size_t want = utf8_lead_len(s[len - 1 - k]);
    return want > k + 1 ? len - 1 - k : len;
}

/* Bytes of w (eight bytes, little-endian order) that are zero, flagged by
 * their top bit; the lowest flagged byte is always a true one (a borrow
 * only flags bytes above one), which is all json_plain_prefix uses. */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
static uint64_t zero_bytes(uint64_t w) { return (w - ONES) & ~w & HIGHS; }

size_t json_plain_prefix(const unsigned char *s, size_t len, int ascii)
{
    size_t i = 0;
    uint64_t high = ascii ? HIGHS : 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        uint64_t m = zero_bytes(w ^ (ONES * '"')) | zero_bytes(w ^ (ONES * '\\')) |
                     ((w - ONES * 0x20) & ~w & HIGHS) | (w & high);
        if (m) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            return i + (size_t)__builtin_ctzll(m) / 8;
#else
            break; /* (the bytes below find it) */
#endif
        }
    }
    for (; i < len; i++)
        if (s[i] < 0x20 || s[i] == '"' || s[i] == '\\' || (ascii && s[i] >= 0x80))
            break;
    return i;
}

size_t json_escape(char *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    int valid = utf8_valid((const unsigned char *)s, len);
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20) { /* (by hand: snprintf would write a NUL past the six bytes) */
            memcpy(out + o, "\\u00", 4);
            out[o + 4] = hex[c >> 4];
            out[o + 5] = hex[c & 15];
            o += 6;
        } else {
            out[o++] = c >= 0x80 && !valid ? '?' : (char)c;
        }
    }
    return o;
}

size_t json_int(char *out, long long v)
{
    char tmp[20];
    size_t k = 0, n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[n++] = '-';
    while (k)
        out[n++] = tmp[--k];
    return n;
}

void jb_room(jbuf *b, size_t k)
{
    if (b->n + k <= b->cap)
        return;
    b->cap = b->cap * 2 > b->n + k + 64 ? b->cap * 2 : b->n + k + 64;
    b->p = xrealloc(b->p, b->cap);
}

void jb_put(jbuf *b, const char *s, size_t k)
{
    jb_room(b, k);
    memcpy(b->p + b->n, s, k);
    b->n += k;
}

size_t jb_fill(jbuf *b, size_t *taken, char *buf, size_t max, int (*next)(void *arg), void *arg)
{
    size_t n = 0;
    while (n < max) {
        if (*taken == b->n) {
            b->n = *taken = 0;
            if (!next(arg))
                break;
            continue;
        }
        size_t k = b->n - *taken;
        if (k > max - n)
            k = max - n;
        memcpy(buf + n, b->p + *taken, k);
        n += k;
        *taken += k;
    }
    return n;
}

void jb_str(jbuf *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    jb_room(b, len + 2);
    b->p[b->n++] = '"';
    size_t run = 0; /* s[run..i) is copied as it is */
    for (size_t i = 0; i < len; i++) {
        i += json_plain_prefix((const unsigned char *)s + i, len - i, 0);
        if (i == len)
            break;
        unsigned char ch = (unsigned char)s[i];
        jb_put(b, s + run, i - run);
        run = i + 1;
        const char *e = ch == '"' ? "\\\"" : ch == '\\' ? "\\\\" : ch == '\b' ? "\\b" : ch == '\f' ? "\\f"
                      : ch == '\n' ? "\\n" : ch == '\r' ? "\\r" : ch == '\t' ? "\\t" : NULL;
        if (e) {
            jb_put(b, e, 2);
        } else {
            char u[6] = {'\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15]};
            jb_put(b, u, 6);
        }
    }
    jb_put(b, s + run, len - run);
    jb_put(b, "\"", 1);
}

void jb_text(jbuf *b, const char *s, size_t len)
{
    jb_room(b, 6 * len + 2);
    b->p[b->n++] = '"';
    b->n += json_escape(b->p + b->n, s, len);
    b->p[b->n++] = '"';
}

void jb_int(jbuf *b, long long v)
{
    jb_room(b, 20);
    b->n += json_int(b->p + b->n, v);
}
