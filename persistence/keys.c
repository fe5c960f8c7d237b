#include "keys.h"

#include <inttypes.h>
#include <stdio.h>

uint32_t keys_partition(const char *id, uint32_t partitions)
{
    uint32_t h = 2166136261u;
    /* A callback timer ("<id>#on_failure.<n>", spec.h) is in its parent's
     * partition: the hash stops at '#', which no client id holds. */
    for (const unsigned char *p = (const unsigned char *)id; *p && *p != '#'; p++) {
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

void keys_owner_tag(char tag[17], const char *instance)
{
    uint64_t h = 14695981039346656037ULL;
    for (const unsigned char *c = (const unsigned char *)instance; *c; c++) {
        h ^= *c;
        h *= 1099511628211ULL;
    }
    snprintf(tag, 17, "%016llx", (unsigned long long)(h ? h : 1)); /* all zeros means "no owner" */
}

size_t keys_claimed(char *buf, uint32_t p, const char *tag)
{
    return put(snprintf(buf, KEYS_MAX, "hw:{%u}:cl:%s", p, tag));
}

size_t keys_failed(char *buf, uint32_t p)
{
    return put(snprintf(buf, KEYS_MAX, "hw:{%u}:failed", p));
}

size_t keys_index(char *buf, uint32_t p, const char *ns, const char *state)
{
    return put(snprintf(buf, KEYS_MAX, "hw:{%u}:ix:%s:%s", p, ns, state));
}

size_t keys_select_receipt(char *buf, uint32_t p, const char *ns, const char *idem, uint32_t chunk,
                           const char *after)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a: the id may be 200 bytes, the key has room for 16 */
    for (const char *c = after; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    return put(snprintf(buf, KEYS_MAX, "hw:{%u}:ik:%.64s:%.128s:%u:%016" PRIx64, p, ns, idem, chunk, h));
}

size_t keys_lastclaim(char *buf, uint32_t p, const char *tag)
{
    return put(snprintf(buf, KEYS_MAX, "hw:{%u}:lc:%s", p, tag));
}
