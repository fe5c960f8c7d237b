#include "keys.h"

#include <stdio.h>

uint32_t keys_partition(const char *id, uint32_t partitions)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++) {
        h ^= *p;
        h *= 16777619u;
    }
    return partitions ? h % partitions : 0;
}

static size_t put(int n)
{
    return n < 0 ? 0 : (size_t)n >= KEYS_MAX ? KEYS_MAX - 1 : (size_t)n;
}

size_t keys_timer(char *buf, uint32_t p, const char *id)
{
    return put(snprintf(buf, KEYS_MAX, "hw:{%u}:t:%s", p, id));
}

size_t keys_timer_prefix(char *buf, uint32_t p)
{
    return put(snprintf(buf, KEYS_MAX, "hw:{%u}:t:", p));
}

size_t keys_namespaces(char *buf, uint32_t p)
{
    return put(snprintf(buf, KEYS_MAX, "hw:{%u}:nss", p));
}

size_t keys_claimed(char *buf, uint32_t p, const char *instance)
{
    return put(snprintf(buf, KEYS_MAX, "hw:{%u}:claimed:%s", p, instance));
}

size_t keys_claimed_prefix(char *buf, uint32_t p)
{
    return put(snprintf(buf, KEYS_MAX, "hw:{%u}:claimed:", p));
}

size_t keys_failed(char *buf, uint32_t p)
{
    return put(snprintf(buf, KEYS_MAX, "hw:{%u}:failed", p));
}

size_t keys_index(char *buf, uint32_t p, const char *ns, const char *state)
{
    return put(snprintf(buf, KEYS_MAX, "hw:{%u}:ix:%s:%s", p, ns, state));
}

size_t keys_lastclaim(char *buf, uint32_t p, const char *instance)
{
    return put(snprintf(buf, KEYS_MAX, "hw:{%u}:lastclaim:%s", p, instance));
}
