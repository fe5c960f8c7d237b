#include "record.h"

#include <errno.h>
#include <string.h>

int record_parse(const char *text, size_t len, record *r)
{
    const char *p = text, *end = text + len;
    for (int i = 0; i < REC_SPEC; i++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            return -EINVAL;
        r->f[i] = p;
        r->len[i] = (size_t)(nl - p);
        p = nl + 1;
    }
    r->f[REC_SPEC] = p;
    r->len[REC_SPEC] = (size_t)(end - p);
    return 0;
}

long long record_int(const record *r, int field)
{
    long long v = 0;
    for (size_t i = 0; i < r->len[field] && r->f[field][i] != ' '; i++) {
        char c = r->f[field][i];
        if (c < '0' || c > '9')
            return 0;
        v = v * 10 + (c - '0');
    }
    return v;
}

const char *record_request_id(const record *r, size_t *len)
{
    const char *sp = memchr(r->f[REC_CREATED], ' ', r->len[REC_CREATED]);
    if (!sp) {
        *len = 0;
        return "";
    }
    *len = r->len[REC_CREATED] - (size_t)(sp + 1 - r->f[REC_CREATED]);
    return sp + 1;
}

void record_run(const record *r, long long out[RUN_FIELDS])
{
    const char *p = r->f[REC_RUN], *end = p + r->len[REC_RUN];
    for (int i = 0; i < RUN_FIELDS; i++) {
        long long v = 0;
        while (p < end && *p == ' ')
            p++;
        while (p < end && *p >= '0' && *p <= '9')
            v = v * 10 + (*p++ - '0');
        out[i] = v;
    }
}
