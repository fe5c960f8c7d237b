/* tzfile.c - time zones from the system's TZif files (tzfile.h).
 *
 * A zone is its transitions (UTC instants, ascending), the local time type
 * in effect from each (UTC offset, DST or not, abbreviation) and the footer
 * rule for instants after the last transition: a POSIX TZ string such as
 * "CET-1CEST,M3.5.0,M10.5.0/3" (std name and offset, west of UTC positive;
 * dst name and offset, one hour ahead of std unless given; the start and end
 * rules: Jn a day 1-365 without Feb 29, n a day 0-365 counting it, Mm.w.d the
 * d-th weekday of week w (5: last) of month m; each with a local time of
 * day, -167..167 hours as RFC 8536 allows, default 02:00). The start rule's
 * time is in standard time, the end rule's in daylight time; a start later
 * in the year than the end is the southern hemisphere (daylight time
 * spans the new year).
 *
 * Before the first transition the first local time type applies (RFC 8536
 * section 3.2). Dates are computed with civil.h (proleptic Gregorian, any
 * year), never with the C library's time zone functions. */
#include "tzfile.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "civil.h"
#include "xalloc.h"

#define ABBR_MAX 16
#define FILE_MAX (1u << 20)
#define NAME_MAX_LEN 64

typedef struct ttype {
    int32_t off;
    int isdst;
    char abbr[ABBR_MAX];
} ttype;

typedef struct rule_date {
    char kind;    /* 'J' day 1-365 without Feb 29, 'D' day 0-365, 'M' month.week.weekday */
    int m, w, d;  /* 'M' */
    int n;        /* 'J', 'D' */
    int32_t secs; /* local time of day */
} rule_date;

typedef struct footer {
    int valid;
    int has_dst;
    ttype std, dst;
    rule_date start, end;
} footer;

struct tz {
    struct tz *next; /* the cache's list */
    char name[NAME_MAX_LEN + 1];
    int64_t *trans;
    uint8_t *idx;
    size_t ntrans;
    ttype *types;
    size_t ntypes;
    footer f;
};

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tz *cache;

/* The day (days since the epoch) a rule names in year y. */
static int64_t rule_day(const rule_date *r, int64_t y)
{
    int64_t jan1 = civil_days_from(y, 1, 1);
    if (r->kind == 'J')
        return jan1 + r->n - 1 + (civil_is_leap(y) && r->n >= 60);
    if (r->kind == 'D')
        return jan1 + r->n;
    int64_t first = civil_days_from(y, r->m, 1);
    int day = 1 + (r->d - civil_weekday(first) + 7) % 7 + (r->w - 1) * 7;
    while (day > civil_days_in_month(y, r->m))
        day -= 7;
    return first + day - 1;
}

/* ---- the footer: a POSIX TZ string ---- */

static const char *parse_abbr(const char *s, char *out)
{
    size_t n = 0;
    if (*s == '<') {
        for (s++; *s && *s != '>'; s++)
            if (n < ABBR_MAX - 1)
                out[n++] = *s;
        if (*s != '>')
            return NULL;
        s++;
    } else {
        for (; (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z'); s++)
            if (n < ABBR_MAX - 1)
                out[n++] = *s;
    }
    out[n] = '\0';
    return n >= 1 ? s : NULL;
}

static const char *parse_num(const char *s, int lo, int hi, int *out)
{
    int v = 0, digits = 0;
    for (; *s >= '0' && *s <= '9' && digits < 4; s++, digits++)
        v = v * 10 + (*s - '0');
    if (!digits || v < lo || v > hi)
        return NULL;
    *out = v;
    return s;
}

/* [+-]hh[:mm[:ss]] as signed seconds. */
static const char *parse_hms(const char *s, int hours_max, int32_t *out)
{
    int sign = 1, h = 0, m = 0, sec = 0;
    if (*s == '+' || *s == '-')
        sign = *s++ == '-' ? -1 : 1;
    if (!(s = parse_num(s, 0, hours_max, &h)))
        return NULL;
    if (*s == ':' && !(s = parse_num(s + 1, 0, 59, &m)))
        return NULL;
    if (*s == ':' && !(s = parse_num(s + 1, 0, 59, &sec)))
        return NULL;
    *out = sign * (h * 3600 + m * 60 + sec);
    return s;
}

static const char *parse_rule(const char *s, rule_date *r)
{
    if (*s == 'J') {
        r->kind = 'J';
        s = parse_num(s + 1, 1, 365, &r->n);
    } else if (*s == 'M') {
        r->kind = 'M';
        if ((s = parse_num(s + 1, 1, 12, &r->m)) && *s == '.' && (s = parse_num(s + 1, 1, 5, &r->w)) &&
            *s == '.')
            s = parse_num(s + 1, 0, 6, &r->d);
        else
            s = NULL;
    } else {
        r->kind = 'D';
        s = parse_num(s, 0, 365, &r->n);
    }
    r->secs = 7200;
    if (s && *s == '/')
        s = parse_hms(s + 1, 167, &r->secs);
    return s;
}

static int parse_footer(const char *s, footer *f)
{
    int32_t off;
    memset(f, 0, sizeof *f);
    if (!(s = parse_abbr(s, f->std.abbr)) || !(s = parse_hms(s, 24, &off)))
        return -1;
    f->std.off = -off; /* POSIX counts west of Greenwich as positive */
    if (*s) {
        if (!(s = parse_abbr(s, f->dst.abbr)))
            return -1;
        f->dst.off = f->std.off + 3600;
        f->dst.isdst = 1;
        if (*s && *s != ',') {
            if (!(s = parse_hms(s, 24, &off)))
                return -1;
            f->dst.off = -off;
        }
        const char *rules = *s == ',' ? s : ",M3.2.0,M11.1.0"; /* POSIX's default */
        if (!(rules = parse_rule(rules + 1, &f->start)) || *rules != ',' || !(rules = parse_rule(rules + 1, &f->end)) ||
            *rules)
            return -1;
        f->has_dst = 1;
    }
    f->valid = 1;
    return 0;
}

static const ttype *footer_at(const footer *f, int64_t t)
{
    if (!f->has_dst)
        return &f->std;
    int64_t year;
    int m, d;
    civil_from_days(civil_floor_div(t + f->std.off, 86400), &year, &m, &d);
    for (int64_t y = year - 1; y <= year + 1; y++) {
        int64_t start = rule_day(&f->start, y) * 86400 + f->start.secs - f->std.off;
        int64_t end = rule_day(&f->end, y) * 86400 + f->end.secs - f->dst.off;
        if (start < end) {
            if (t >= start && t < end)
                return &f->dst;
        } else if (y == year) { /* southern: daylight time spans the new year */
            return t >= end && t < start ? &f->std : &f->dst;
        }
    }
    return &f->std;
}

/* ---- TZif ---- */

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p) { return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4)); }

static int parse_tzif(struct tz *z, const unsigned char *buf, size_t len)
{
    const unsigned char *p = buf, *end = buf + len;
    size_t tsize = 4;
    if (len < 44 || memcmp(buf, "TZif", 4) != 0)
        return -1;
    for (int pass = 0; pass < 2; pass++) {
        if (end - p < 44 || memcmp(p, "TZif", 4) != 0)
            return -1;
        int version = p[4];
        size_t isut = be32(p + 20), isstd = be32(p + 24), leap = be32(p + 28), timecnt = be32(p + 32),
               typecnt = be32(p + 36), charcnt = be32(p + 40);
        size_t need = timecnt * (tsize + 1) + typecnt * 6 + charcnt + leap * (tsize + 4) + isstd + isut;
        p += 44;
        if ((size_t)(end - p) < need || timecnt > 65536 || typecnt < 1 || typecnt > 256 || charcnt < 1)
            return -1;
        if (pass == 0 && version >= '2') { /* the 64-bit data follows the 32-bit data */
            p += need;
            tsize = 8;
            continue;
        }
        if (leap)
            return -2;
        z->ntrans = timecnt;
        z->trans = xcalloc(timecnt ? timecnt : 1, sizeof *z->trans);
        z->idx = xcalloc(timecnt ? timecnt : 1, 1);
        z->ntypes = typecnt;
        z->types = xcalloc(typecnt, sizeof *z->types);
        for (size_t i = 0; i < timecnt; i++) {
            z->trans[i] = tsize == 8 ? be64(p + 8 * i) : (int32_t)be32(p + 4 * i);
            if (i && z->trans[i] <= z->trans[i - 1])
                return -1;
        }
        p += timecnt * tsize;
        for (size_t i = 0; i < timecnt; i++)
            if ((z->idx[i] = p[i]) >= typecnt)
                return -1;
        p += timecnt;
        const unsigned char *chars = p + typecnt * 6;
        for (size_t i = 0; i < typecnt; i++, p += 6) {
            size_t ai = p[5];
            if (ai >= charcnt)
                return -1;
            z->types[i].off = (int32_t)be32(p);
            z->types[i].isdst = p[4] != 0;
            size_t n = strnlen((const char *)chars + ai, charcnt - ai);
            snprintf(z->types[i].abbr, ABBR_MAX, "%.*s", (int)n, (const char *)chars + ai);
        }
        p = chars + charcnt + leap * (tsize + 4) + isstd + isut;
        if (tsize == 8 && p < end && *p == '\n') { /* the footer: \n<TZ string>\n */
            const unsigned char *nl = memchr(p + 1, '\n', (size_t)(end - p - 1));
            if (nl && nl > p + 1) {
                char s[128];
                snprintf(s, sizeof s, "%.*s", (int)(nl - p - 1), (const char *)p + 1);
                if (parse_footer(s, &z->f) < 0)
                    return -1;
            }
        }
        return 0;
    }
    return -1;
}

/* ---- names and the cache ---- */

static int name_valid(const char *name)
{
    size_t len = strlen(name);
    if (len < 1 || len > NAME_MAX_LEN || name[0] == '/')
        return 0;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
              strchr("/_+-.", *c)))
            return 0;
    for (const char *comp = name; comp;) { /* no empty, "." or ".." component */
        const char *slash = strchr(comp, '/');
        size_t n = slash ? (size_t)(slash - comp) : strlen(comp);
        if (n == 0 || (n == 1 && comp[0] == '.') || (n == 2 && comp[0] == '.' && comp[1] == '.'))
            return 0;
        comp = slash ? slash + 1 : NULL;
    }
    return 1;
}

static int is_utc_name(const char *name)
{
    return !strcmp(name, "UTC") || !strcmp(name, "Etc/UTC") || !strcmp(name, "GMT") || !strcmp(name, "Etc/GMT");
}

static struct tz *load(const char *name, char *err, size_t errlen)
{
    const char *dir = getenv("TZDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "/usr/share/zoneinfo", name);
    struct tz *z = xcalloc(1, sizeof *z);
    snprintf(z->name, sizeof z->name, "%s", name);
    FILE *fp = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t len = 0;
    if (fp) {
        buf = xmalloc(FILE_MAX);
        len = fread(buf, 1, FILE_MAX, fp);
        if (ferror(fp))
            len = 0;
        fclose(fp);
    }
    int rc = len ? parse_tzif(z, buf, len) : -3;
    free(buf);
    if (rc == 0)
        return z;
    free(z->trans);
    free(z->idx);
    free(z->types);
    memset(z, 0, sizeof *z);
    if (rc == -3 && is_utc_name(name)) { /* no tzdata: UTC is UTC all the same */
        snprintf(z->name, sizeof z->name, "%s", name);
        z->ntypes = 1;
        z->types = xcalloc(1, sizeof *z->types);
        snprintf(z->types[0].abbr, ABBR_MAX, "%s", name[0] == 'E' ? name + 4 : name);
        return z;
    }
    free(z);
    snprintf(err, errlen, rc == -3 ? "unknown time zone \"%s\" (not in the tz database)"
                          : rc == -2 ? "time zone \"%s\" counts leap seconds, which is not supported"
                                     : "time zone \"%s\" has an unreadable tz database file",
             name);
    return NULL;
}

const tz *tz_get(const char *name, char *err, size_t errlen)
{
    if (!name || !name_valid(name)) {
        snprintf(err, errlen, "a time zone is an IANA name such as Europe/Berlin (1 to %d characters of "
                              "A-Z a-z 0-9 / _ + - ., no . or .. part)", NAME_MAX_LEN);
        return NULL;
    }
    if (!strcmp(name, "localtime")) { /* a link to /etc/localtime: each host's own, not a zone */
        snprintf(err, errlen, "time zone \"localtime\" is this host's setting, which other hosts need not "
                              "share: give an IANA name such as Europe/Berlin");
        return NULL;
    }
    pthread_mutex_lock(&cache_mu);
    struct tz *z;
    for (z = cache; z; z = z->next)
        if (!strcmp(z->name, name))
            break;
    if (!z && (z = load(name, err, errlen))) {
        z->next = cache;
        cache = z;
    }
    pthread_mutex_unlock(&cache_mu);
    return z;
}

const char *tz_name(const tz *z) { return z->name; }

static const ttype *type_at(const tz *z, int64_t t)
{
    if (!z->ntrans || t < z->trans[0])
        return z->ntrans || !z->f.valid ? &z->types[0] : footer_at(&z->f, t);
    if (t >= z->trans[z->ntrans - 1] && z->f.valid)
        return footer_at(&z->f, t);
    size_t lo = 0, hi = z->ntrans; /* the last transition at or before t */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->trans[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    return &z->types[z->idx[lo]];
}

int32_t tz_offset_at(const tz *z, int64_t t, int *is_dst)
{
    const ttype *tt = type_at(z, t);
    if (is_dst)
        *is_dst = tt->isdst;
    return tt->off;
}

const char *tz_abbrev_at(const tz *z, int64_t t) { return type_at(z, t)->abbr; }
