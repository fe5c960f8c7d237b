/* queuecfg.c - a queue's name (queuecfg.h). */
#include "queuecfg.h"

#include <stdio.h>
#include <string.h>

#include "keys.h"

void queuecfg_field(char *buf, size_t size, const char *ns, const char *queue)
{
    snprintf(buf, size, "%s%s%s", ns, ns[0] ? "/" : "", queue);
}

void queuecfg_field_of(char *buf, size_t size, const char *key_id, const char *queue)
{
    size_t n = keys_ns_len(key_id);
    if (n)
        snprintf(buf, size, "%.*s/%s", (int)n, key_id, queue);
    else
        snprintf(buf, size, "%s", queue);
}

int queuecfg_rate_valid(double rate)
{
    return rate == 0 || (rate >= QUEUECFG_MIN_RATE && rate <= QUEUECFG_MAX_RATE); /* NaN fails both */
}
