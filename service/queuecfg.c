/* queuecfg.c - a queue's stored controls (queuecfg.h). */
#include "queuecfg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void queuecfg_field(char *buf, size_t size, const char *ns, const char *queue)
{
    snprintf(buf, size, "%s%s%s", ns, ns[0] ? "/" : "", queue);
}

void queuecfg_field_of(char *buf, size_t size, const char *key_id, const char *queue)
{
    const char *slash = strchr(key_id, '/');
    if (slash)
        snprintf(buf, size, "%.*s/%s", (int)(slash - key_id), key_id, queue);
    else
        snprintf(buf, size, "%s", queue);
}

void queuecfg_format(const queuecfg *c, char *buf, size_t size)
{
    snprintf(buf, size, "%u %d %.6g", c->parallelism, c->paused ? 1 : 0, c->rate);
}

int queuecfg_rate_valid(double rate)
{
    return rate == 0 || (rate >= QUEUECFG_MIN_RATE && rate <= QUEUECFG_MAX_RATE); /* NaN fails both */
}

int queuecfg_parse(const char *text, queuecfg *c)
{
    unsigned par = 0;
    int paused = 0, n = 0;
    double rate = 0;
    if (sscanf(text, "%u %d %lf%n", &par, &paused, &rate, &n) != 3 || text[n] || par < 1 ||
        (paused != 0 && paused != 1) || !isfinite(rate) || rate < 0 || rate > QUEUECFG_MAX_RATE)
        return -1;
    c->parallelism = par;
    c->paused = paused;
    c->rate = rate > 0 && rate < QUEUECFG_MIN_RATE ? QUEUECFG_MIN_RATE : rate;
    return 0;
}
