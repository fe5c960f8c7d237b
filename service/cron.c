/* cron.c - cron expressions and their next instants (cron.h).
 *
 * An expression is a set per field (bit masks), plus the day rules that
 * are not sets (L, dL, d#k). cron_next looks for local times that match, in
 * ascending local order, stepping a field at a time: a month not in the set
 * jumps to the next month that is, a day to the next day, and so on, so a
 * yearly expression costs a handful of steps, not a scan.
 *
 * Local to UTC. A local time L maps to the UTC instants u with u + offset(u)
 * = L: one, none (a gap: the clocks jumped over L) or two (an overlap: L
 * happened twice). The offsets that can apply are those in effect a day
 * either side of L; each gives a candidate that is kept when the zone
 * agrees. Local order and UTC order differ only near a transition, so the
 * search keeps the earliest instant after the given one and goes on only
 * while a later local time could still map to an earlier instant (less
 * than the spread of the offsets nearby past it). */
#include "cron.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "civil.h"
#include "xalloc.h"

struct cron_expr {
    uint64_t sec, min; /* bits 0-59 */
    uint32_t hour;     /* bits 0-23 */
    uint32_t dom;      /* bits 1-31 */
    uint16_t mon;      /* bits 1-12 */
    uint8_t dow;       /* bits 0-6 */
    uint8_t dow_last;  /* bit d: the month's last weekday d (dL) */
    uint8_t dow_nth[7]; /* bit k-1 of [d]: the month's k-th weekday d (d#k) */
    int dom_last;      /* L */
    int dom_any, dow_any; /* the field starts with * or ?: unrestricted for the day rule */
    int has_seconds;
};

enum field_id { F_SEC, F_MIN, F_HOUR, F_DOM, F_MON, F_DOW, F_COUNT };

static const struct {
    const char *name;
    int lo, hi;
} fields[F_COUNT] = {
    {"second", 0, 59}, {"minute", 0, 59}, {"hour", 0, 23}, {"day_of_month", 1, 31}, {"month", 1, 12},
    {"day_of_week", 0, 7},
};

static const char *const month_names[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                          "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
static const char *const day_names[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

static const struct {
    const char *macro, *expr;
} macros[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
    {"@daily", "0 0 * * *"},  {"@midnight", "0 0 * * *"}, {"@hourly", "0 * * * *"},
};

/* ---- parsing ---- */

typedef struct parser {
    const char *expr; /* the whole expression, for positions */
    cron_error *err;
} parser;

__attribute__((format(printf, 4, 5))) static int bad(parser *p, enum field_id f, const char *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    snprintf(p->err->field, sizeof p->err->field, "%s", (int)f < F_COUNT ? fields[f].name : "expression");
    p->err->position = (int)(at - p->expr) + 1;
    vsnprintf(p->err->msg, sizeof p->err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* A number or (months, days) a name at *s, end at *s + len. */
static int value(parser *p, enum field_id f, const char *s, size_t len, int *out)
{
    if (len == 0)
        return bad(p, f, s, "%s: a value is missing", fields[f].name);
    if (s[0] >= '0' && s[0] <= '9') {
        int v = 0;
        for (size_t i = 0; i < len; i++) {
            if (s[i] < '0' || s[i] > '9' || v > 1000)
                return bad(p, f, s, "%s: '%.*s' is not a number", fields[f].name, (int)len, s);
            v = v * 10 + (s[i] - '0');
        }
        if (v < fields[f].lo || v > fields[f].hi)
            return bad(p, f, s, "%s %d is out of range %d-%d", fields[f].name, v, fields[f].lo, fields[f].hi);
        *out = v;
        return 0;
    }
    const char *const *names = f == F_MON ? month_names : f == F_DOW ? day_names : NULL;
    int n = f == F_MON ? 12 : 7, base = f == F_MON ? 1 : 0;
    for (int i = 0; names && len == 3 && i < n; i++)
        if (strncasecmp(s, names[i], 3) == 0) {
            *out = i + base;
            return 0;
        }
    return bad(p, f, s, "%s: '%.*s' is not a %s", fields[f].name, (int)len, s,
               names ? (f == F_MON ? "month (1-12 or JAN-DEC)" : "day (0-7 or SUN-SAT)") : "number");
}

static void set_bit(cron_expr *c, enum field_id f, int v)
{
    switch (f) {
    case F_SEC: c->sec |= 1ull << v; break;
    case F_MIN: c->min |= 1ull << v; break;
    case F_HOUR: c->hour |= 1u << v; break;
    case F_DOM: c->dom |= 1u << v; break;
    case F_MON: c->mon |= (uint16_t)(1u << v); break;
    default: c->dow |= (uint8_t)(1u << (v % 7)); break; /* 7 is Sunday too */
    }
}

/* One list item at [s, e). */
static int item(parser *p, cron_expr *c, enum field_id f, const char *s, const char *e)
{
    size_t len = (size_t)(e - s);
    if (len == 0)
        return bad(p, f, s, "%s: an empty list item", fields[f].name);
    if (f == F_DOM && len == 1 && (*s == 'L' || *s == 'l')) {
        c->dom_last = 1;
        return 0;
    }
    if (f == F_DOM && (memchr(s, 'W', len) || memchr(s, 'w', len))) /* not in day-of-week: WED */
        return bad(p, f, s, "%s: W (nearest weekday) is not supported", fields[f].name);
    if (f == F_DOW) {
        const char *hash = memchr(s, '#', len);
        int d, k;
        if (hash) {
            if (value(p, f, s, (size_t)(hash - s), &d) < 0)
                return -1;
            if (e - hash != 2 || hash[1] < '1' || hash[1] > '5')
                return bad(p, f, hash + 1, "day_of_week: the k of d#k must be 1-5");
            k = hash[1] - '0';
            c->dow_nth[d % 7] |= (uint8_t)(1u << (k - 1));
            return 0;
        }
        if (len >= 2 && (e[-1] == 'L' || e[-1] == 'l')) {
            if (value(p, f, s, len - 1, &d) < 0)
                return -1;
            c->dow_last |= (uint8_t)(1u << (d % 7));
            return 0;
        }
    }
    const char *slash = memchr(s, '/', len), *end = slash ? slash : e;
    int lo = fields[f].lo, hi = fields[f].hi, step = 1;
    if (f == F_DOW)
        hi = 6; /* `*` is 0-6; an explicit 7 is Sunday */
    if (slash) {
        int v = 0;
        size_t sl = (size_t)(e - slash - 1);
        if (sl == 0)
            return bad(p, f, slash, "%s: a step is missing after '/'", fields[f].name);
        for (size_t i = 0; i < sl; i++) {
            if (slash[1 + i] < '0' || slash[1 + i] > '9' || v > 1000)
                return bad(p, f, slash + 1, "%s: the step '%.*s' is not a number", fields[f].name, (int)sl, slash + 1);
            v = v * 10 + (slash[1 + i] - '0');
        }
        if (v < 1 || v > fields[f].hi + 1)
            return bad(p, f, slash + 1, "%s: the step %d is out of range 1-%d", fields[f].name, v, fields[f].hi + 1);
        step = v;
    }
    if (!((end - s == 1 && (*s == '*' || (*s == '?' && (f == F_DOM || f == F_DOW)))))) {
        const char *dash = memchr(s, '-', (size_t)(end - s));
        if (value(p, f, s, (size_t)((dash ? dash : end) - s), &lo) < 0)
            return -1;
        if (dash) {
            if (value(p, f, dash + 1, (size_t)(end - dash - 1), &hi) < 0)
                return -1;
            if (hi < lo)
                return bad(p, f, s, "%s: the range %d-%d is reversed", fields[f].name, lo, hi);
        } else if (!slash) {
            hi = lo;
        } else if (f == F_DOW && lo == 7) {
            lo = 0; /* `7/n`: from Sunday, through 0-6 like `0/n` */
        }
    }
    for (int v = lo; v <= hi; v += step)
        set_bit(c, f, v);
    return 0;
}

static int field(parser *p, cron_expr *c, enum field_id f, const char *s, const char *e)
{
    if (f == F_DOM)
        c->dom_any = *s == '*' || *s == '?';
    if (f == F_DOW)
        c->dow_any = *s == '*' || *s == '?';
    for (const char *it = s;;) {
        const char *comma = memchr(it, ',', (size_t)(e - it)), *ie = comma ? comma : e;
        if (item(p, c, f, it, ie) < 0)
            return -1;
        if (!comma)
            return 0;
        it = comma + 1;
    }
}

int cron_parse(const char *expr, cron_expr **out, cron_error *err)
{
    parser p = {expr, err};
    const char *s = expr;
    memset(err, 0, sizeof *err);
    if (!expr || strlen(expr) > CRON_EXPR_MAX) {
        p.expr = s = expr ? expr : "";
        return bad(&p, F_COUNT, s, "the expression is longer than %d bytes", CRON_EXPR_MAX);
    }
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == '@') {
        size_t n = strcspn(s, " \t");
        for (size_t i = 0; i < sizeof macros / sizeof *macros; i++)
            if (strlen(macros[i].macro) == n && strncasecmp(s, macros[i].macro, n) == 0 && !s[n + strspn(s + n, " \t")]) {
                cron_error ignored;
                return cron_parse(macros[i].expr, out, &ignored);
            }
        return bad(&p, F_COUNT, s, "unknown macro '%.*s' (@yearly, @annually, @monthly, @weekly, @daily, "
                                   "@midnight or @hourly)", (int)n, s);
    }
    const char *start[7], *end[7];
    int n = 0;
    while (*s) {
        if (n == 6)
            return bad(&p, F_COUNT, s, "a cron expression has 5 or 6 fields, this one more");
        start[n] = s;
        s += strcspn(s, " \t");
        end[n++] = s;
        while (*s == ' ' || *s == '\t')
            s++;
    }
    if (n < 5)
        return bad(&p, F_COUNT, s, "a cron expression has 5 or 6 fields, this one %d", n);
    cron_expr *c = xcalloc(1, sizeof *c);
    c->has_seconds = n == 6;
    int first = n == 6 ? F_SEC : F_MIN;
    if (n == 5)
        c->sec = 1; /* second 0 */
    for (int i = 0; i < n; i++)
        if (field(&p, c, (enum field_id)(first + i), start[i], end[i]) < 0) {
            free(c);
            return -1;
        }
    *out = c;
    return 0;
}

void cron_free(cron_expr *c) { free(c); }

int cron_has_seconds(const cron_expr *c) { return c->has_seconds; }

/* ---- matching local times ---- */

static int day_matches(const cron_expr *c, int64_t y, int m, int d)
{
    int dim = civil_days_in_month(y, m), wd = civil_weekday(civil_days_from(y, m, d));
    int dom = (c->dom >> d & 1) || (c->dom_last && d == dim);
    int dow = (c->dow >> wd & 1) || (c->dow_last >> wd & 1 && d + 7 > dim) || (c->dow_nth[wd] >> ((d - 1) / 7) & 1);
    /* Vixie cron's rule: either field starting with * or ? makes both
     * apply (its own set still counts: * /10 is the 1st, 11th, ...);
     * otherwise either one matching is enough */
    return c->dom_any || c->dow_any ? dom && dow : dom || dow;
}

/* The lowest set bit of mask at or above from, or -1. */
static int next_bit(uint64_t mask, int from)
{
    if (from > 63)
        return -1;
    uint64_t m = mask & (~0ull << from);
    return m ? __builtin_ctzll(m) : -1;
}

/* The first local time (seconds, as if UTC) at or after L that matches c,
 * at most limit; -1 if none. */
static int64_t next_local(const cron_expr *c, int64_t L, int64_t limit)
{
    int64_t y;
    int mo, d, h, mi, s;
    civil_from_days(civil_floor_div(L, 86400), &y, &mo, &d);
    int64_t sod = L - civil_floor_div(L, 86400) * 86400;
    h = (int)(sod / 3600), mi = (int)(sod / 60 % 60), s = (int)(sod % 60);
    while (civil_days_from(y, mo, d) * 86400 <= limit) {
        if (!(c->mon >> mo & 1)) {
            int nm = next_bit(c->mon, mo + 1);
            if (nm < 0 || nm > 12) {
                y++;
                nm = next_bit(c->mon, 1);
            }
            mo = nm, d = 1, h = mi = s = 0;
            continue;
        }
        if (!day_matches(c, y, mo, d)) {
            if (++d > civil_days_in_month(y, mo)) {
                d = 1;
                if (++mo > 12)
                    mo = 1, y++;
            }
            h = mi = s = 0;
            continue;
        }
        int nh = next_bit(c->hour, h);
        if (nh < 0) { /* no hour left today */
            h = 24;
        } else if (nh != h) {
            h = nh, mi = s = 0;
        }
        if (h < 24) {
            int nmi = next_bit(c->min, mi);
            if (nmi < 0) {
                h++, mi = s = 0;
                if (h < 24)
                    continue;
            } else {
                if (nmi != mi)
                    mi = nmi, s = 0;
                int ns = next_bit(c->sec, s);
                if (ns >= 0 && ns < 60)
                    return civil_days_from(y, mo, d) * 86400 + h * 3600 + mi * 60 + ns;
                mi++, s = 0;
                if (mi >= 60)
                    h++, mi = 0;
                if (h < 24)
                    continue;
            }
        }
        /* the next day */
        if (++d > civil_days_in_month(y, mo)) {
            d = 1;
            if (++mo > 12)
                mo = 1, y++;
        }
        h = mi = s = 0;
    }
    return -1;
}

/* ---- local time to UTC ---- */

/* The offsets that may apply to local time L: those a day either side. */
static void offsets_near(const tz *z, int64_t t, int32_t o[3])
{
    o[0] = tz_offset_at(z, t - 86400, NULL);
    o[1] = tz_offset_at(z, t, NULL);
    o[2] = tz_offset_at(z, t + 86400, NULL);
}

/* The UTC instants of local time L, ascending; returns how many (0: L is
 * in a gap; 2: in an overlap). */
static int local_to_utc(const tz *z, int64_t L, int64_t u[3])
{
    int32_t o[3];
    int n = 0;
    offsets_near(z, L, o);
    for (int i = 0; i < 3; i++) {
        int64_t cand = L - o[i];
        int dup = 0;
        for (int k = 0; k < n; k++)
            dup |= u[k] == cand;
        if (!dup && tz_offset_at(z, cand, NULL) == o[i])
            u[n++] = cand;
    }
    for (int i = 1; i < n; i++) /* at most three: insertion sort */
        for (int k = i; k > 0 && u[k] < u[k - 1]; k--) {
            int64_t t = u[k];
            u[k] = u[k - 1];
            u[k - 1] = t;
        }
    return n;
}

/* The instant a gap around local time L ends: the transition, between
 * L - (the larger offset) and L - (the smaller). */
static int64_t gap_end(const tz *z, int64_t L)
{
    int32_t o[3];
    offsets_near(z, L, o);
    int32_t lo_off = o[0], hi_off = o[0];
    for (int i = 1; i < 3; i++) {
        lo_off = o[i] < lo_off ? o[i] : lo_off;
        hi_off = o[i] > hi_off ? o[i] : hi_off;
    }
    int64_t a = L - hi_off, b = L - lo_off; /* offset(a) is the one before the gap */
    int32_t before = tz_offset_at(z, a, NULL);
    while (b - a > 1) {
        int64_t mid = a + (b - a) / 2;
        if (tz_offset_at(z, mid, NULL) == before)
            a = mid;
        else
            b = mid;
    }
    return b;
}

#define HORIZON_S (10 * 366 * 86400LL)

int cron_next(const cron_expr *c, const tz *z, enum cron_gap gap, enum cron_overlap ov, int64_t after_ms,
              cron_instant *out)
{
    int64_t after = civil_floor_div(after_ms, 1000); /* instants are whole seconds > after */
    int32_t o[3];
    offsets_near(z, after, o);
    int32_t min_off = o[0] < o[1] ? o[0] : o[1];
    min_off = o[2] < min_off ? o[2] : min_off;
    int64_t L = after + 1 + min_off, limit = after + HORIZON_S;
    int64_t best = INT64_MAX, stop = INT64_MAX;
    int best_flags = 0;
    for (int guard = 0; guard < 200000; guard++) {
        int64_t cand = next_local(c, L, limit);
        if (cand < 0 || cand > stop)
            break;
        int64_t u[3];
        int flags[3] = {0, 0, 0}, n = local_to_utc(z, cand, u);
        if (n == 0) {
            if (gap == CRON_GAP_SHIFT) {
                u[0] = gap_end(z, cand);
                flags[0] = CRON_SHIFTED;
                n = 1;
            }
        } else if (n >= 2) {
            if (ov == CRON_OVERLAP_BOTH)
                flags[1] = CRON_SECOND_OCCURRENCE;
            n = ov == CRON_OVERLAP_BOTH ? 2 : 1;
        }
        for (int i = 0; i < n; i++)
            if (u[i] > after && u[i] < best) {
                best = u[i];
                best_flags = flags[i];
                /* a later local time maps no earlier than itself less the
                 * largest offset near there */
                int32_t b[3];
                offsets_near(z, best, b);
                int32_t max_off = b[0] > b[1] ? b[0] : b[1];
                max_off = b[2] > max_off ? b[2] : max_off;
                stop = best + max_off;
            }
        L = cand + 1;
    }
    if (best == INT64_MAX)
        return -1;
    out->utc_ms = best * 1000;
    out->flags = best_flags;
    return 0;
}
