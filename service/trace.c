/* trace.c - W3C Trace Context: the traceparent a create brings, the
 * tracestate kept with it, and the traceparent each attempt sends
 * (trace.h). */
#include "trace.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>

#include "backoff.h"
#include "clock.h"

static int is_lhex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

/* 1 when v[0..n) is lower-case hex, and not all zeros when nonzero is set. */
static int hex_field(const char *v, size_t n, int nonzero)
{
    int any = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_lhex(v[i]))
            return 0;
        any |= v[i] != '0';
    }
    return any || !nonzero;
}

static int blank(char c) { return c == ' ' || c == '\t'; }

int trace_parent_parse(const char *v, char *out)
{
    if (!v)
        return -EINVAL;
    while (blank(*v))
        v++;
    size_t n = strnlen(v, 1024);
    while (n && blank(v[n - 1]))
        n--;
    if (n < TRACE_PARENT_LEN || !hex_field(v, 2, 0) || (v[0] == 'f' && v[1] == 'f'))
        return -EINVAL;
    /* Version 00 is exactly 55 characters; a later version may add fields
     * after a '-', which a version-00 reader skips. */
    int v00 = v[0] == '0' && v[1] == '0';
    if (v00 ? n != TRACE_PARENT_LEN : n > TRACE_PARENT_LEN && v[TRACE_PARENT_LEN] != '-')
        return -EINVAL;
    if (v[2] != '-' || v[35] != '-' || v[52] != '-' || !hex_field(v + 3, 32, 1) || !hex_field(v + 36, 16, 1) ||
        !hex_field(v + 53, 2, 0))
        return -EINVAL;
    memcpy(out, v, TRACE_PARENT_LEN);
    out[TRACE_PARENT_LEN] = '\0';
    return 0;
}

/* 1 when m[0..n), a list member without its surrounding blanks, has a key
 * before its '=' and no byte outside printable ASCII. */
static int member_valid(const char *m, size_t n)
{
    const char *eq = memchr(m, '=', n);
    if (!eq || eq == m)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (m[i] < 0x20 || m[i] > 0x7E)
            return 0;
    return 1;
}

size_t trace_state_keep(const char *v, char *out, size_t max)
{
    out[0] = '\0';
    if (!v || strnlen(v, TRACE_STATE_MAX + 1) > TRACE_STATE_MAX)
        return 0;
    size_t kept = 0;
    int full = 0; /* a member did not fit: the rest are only checked */
    for (const char *p = v; *p;) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        const char *m = p;
        size_t n = (size_t)(end - p);
        p = *end ? end + 1 : end;
        while (n && blank(*m))
            m++, n--;
        while (n && blank(m[n - 1]))
            n--;
        if (!n)
            continue; /* an empty member is allowed and means nothing */
        if (!member_valid(m, n)) {
            out[0] = '\0';
            return 0;
        }
        if (full || kept + (kept ? 1 : 0) + n > max) {
            full = 1;
            continue;
        }
        if (kept)
            out[kept++] = ',';
        memcpy(out + kept, m, n);
        kept += n;
        out[kept] = '\0';
    }
    return kept;
}

static __thread uint64_t span_state;
static __thread int span_seeded;

void trace_attempt_parent(const char *parent, char *out)
{
    static const char hex[] = "0123456789abcdef";
    if (!span_seeded) {
        if (getrandom(&span_state, sizeof span_state, 0) != sizeof span_state)
            span_state = clock_now_us() ^ (uint64_t)(uintptr_t)&span_state;
        span_seeded = 1;
    }
    uint64_t span = splitmix64_next(&span_state);
    if (!span) /* all zeros is no span id; the generator gives it once in 2^64 */
        span = splitmix64_next(&span_state);
    memcpy(out, "00-", 3);
    memcpy(out + 3, parent + 3, 32);
    out[35] = '-';
    for (int i = 15; i >= 0; i--, span >>= 4)
        out[36 + i] = hex[span & 15];
    out[52] = '-';
    out[53] = parent[53];
    out[54] = parent[54];
    out[TRACE_PARENT_LEN] = '\0';
}
