/* duration.c - see duration.h. */
#include "cli/duration.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

#define DURATION_MAX_MS ((int64_t)1 << 53)

static const struct unit {
    const char *name;
    int64_t ms;
} units[] = {
    /* "ms" before "m", so the longest name matches first */
    {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000},
};

/* The unit at s (its length in *len), or NULL. */
static const struct unit *unit_at(const char *s, size_t *len)
{
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        size_t n = strlen(units[i].name);
        if (strncmp(s, units[i].name, n) == 0 && !isalpha((unsigned char)s[n])) {
            *len = n;
            return &units[i];
        }
    }
    return NULL;
}

int duration_parse(const char *s, int64_t *ms)
{
    if (strcmp(s, "0") == 0) {
        *ms = 0;
        return 0;
    }
    int64_t total = 0;
    if (!*s)
        return -EINVAL;
    while (*s) {
        if (!isdigit((unsigned char)*s))
            return -EINVAL;
        int64_t n = 0;
        for (; isdigit((unsigned char)*s); s++) {
            n = n * 10 + (*s - '0');
            if (n > DURATION_MAX_MS)
                return -EINVAL;
        }
        size_t len;
        const struct unit *u = unit_at(s, &len);
        if (!u || n > DURATION_MAX_MS / u->ms)
            return -EINVAL;
        total += n * u->ms;
        if (total > DURATION_MAX_MS)
            return -EINVAL;
        s += len;
    }
    *ms = total;
    return 0;
}
