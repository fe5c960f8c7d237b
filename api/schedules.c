/* schedules.c - GET /schedules/preview: the next instants of a schedule.
 *
 * The schedule is given as query parameters with the names and rules of a
 * timer's `repeat` (cron, tz, dst_gap, dst_overlap, start_at, end_at; or
 * every_ms) and is validated by the timer parser itself (spec_parse), so a
 * preview refuses exactly what POST /timers refuses, naming the same
 * fields. The instants come from the same function the engine calls after
 * each run (spec_next_slot), so the runs a timer makes are its preview. A
 * slot that a DST rule moved (gap, shift) or that is the second of two
 * instants with its local time (overlap, both) is marked; with dst_gap
 * "skip" the slots a gap swallows are listed too, marked "skipped", and do
 * not count. No Redis: the answer is computed here. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api.h"
#include "civil.h"
#include "clock.h"
#include "cron.h"
#include "jsonesc.h"
#include "tzfile.h"

#define PREVIEW_MAX 100     /* instants one preview lists at most */
#define PREVIEW_DEFAULT 10
#define PREVIEW_LAST_MS 253402300799999LL /* 9999-12-31T23:59:59.999Z: RFC 3339's last instant */

/* "2027-03-28T03:00:00+02:00": t (seconds) in its zone's local time. */
static void local_text(const tz *z, int64_t t, char *out, size_t size)
{
    int32_t off = tz_offset_at(z, t, NULL), a = off < 0 ? -off : off;
    int64_t lt = t + off, y, sod = lt - civil_floor_div(lt, 86400) * 86400;
    int m, d;
    civil_from_days(civil_floor_div(lt, 86400), &y, &m, &d);
    snprintf(out, size, "%04lld-%02d-%02dT%02d:%02d:%02d%c%02d:%02d", (long long)y, m, d, (int)(sod / 3600),
             (int)(sod / 60 % 60), (int)(sod % 60), off < 0 ? '-' : '+', (int)(a / 3600), (int)(a % 3600 / 60));
}

static json_t *instant(const timer_spec *s, int64_t at_ms, const char *dst)
{
    char utc[40], local[64];
    clock_format_rfc3339((uint64_t)at_ms, utc, sizeof utc);
    json_t *o = json_pack("{s:s, s:I}", "at", utc, "at_ms", (json_int_t)at_ms);
    if (s->cron_x) {
        local_text(s->tz, at_ms / 1000, local, sizeof local);
        json_object_set_new(o, "local", json_string(local));
        json_object_set_new(o, "abbrev", json_string(tz_abbrev_at(s->tz, at_ms / 1000)));
    }
    if (dst)
        json_object_set_new(o, "dst", json_string(dst));
    return o;
}

/* The repeat members given as query parameters of the same name, as text
 * (every_ms, a number, is taken apart). */
static const char *const repeat_strs[] = {"cron", "tz", "dst_gap", "dst_overlap", "start_at", "end_at"};

static bool utf8_param(http_req *r, const char *name)
{
    const char *v = http_req_query(r, name);
    return !v || utf8_valid((const unsigned char *)v, strlen(v));
}

/* The first schedule parameter whose value is not UTF-8, or NULL. jansson
 * makes no string of such a value, so it would drop out of the spec unseen:
 * a tz of "Europe/Par\xffis" would preview in UTC. */
static const char *non_utf8_param(http_req *r)
{
    for (size_t i = 0; i < sizeof repeat_strs / sizeof *repeat_strs; i++)
        if (!utf8_param(r, repeat_strs[i]))
            return repeat_strs[i];
    return utf8_param(r, "every_ms") ? NULL : "every_ms";
}

/* The query as a timer spec's JSON text: {"url", "delay_ms"?, "repeat"}.
 * Every value is UTF-8 (non_utf8_param). */
static char *query_spec(http_req *r)
{
    json_t *rep = json_object();
    for (size_t i = 0; i < sizeof repeat_strs / sizeof *repeat_strs; i++) {
        const char *v = http_req_query(r, repeat_strs[i]);
        if (v)
            json_object_set_new(rep, repeat_strs[i], json_string(v));
    }
    const char *every = http_req_query(r, "every_ms");
    if (every) {
        /* not a number (digits, after a '-' or not): a string, which the
         * parser refuses by name */
        const char *d = every + (*every == '-');
        int number = *d && strlen(d) <= 18 && strspn(d, "0123456789") == strlen(d);
        json_object_set_new(rep, "every_ms", number ? json_integer(strtoll(every, NULL, 10)) : json_string(every));
        json_object_set_new(rep, "mode", json_string("fixed_rate"));
    }
    json_t *root = json_pack("{s:s, s:o}", "url", "http://preview.invalid/", "repeat", rep);
    if (every && !http_req_query(r, "cron")) /* (with cron too, the parser names the pair) */
        json_object_set_new(root, "delay_ms", json_integer(0));
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return text;
}

void api_schedule_preview(http_req *r, const char *const *params, void *app)
{
    api *a = app;
    (void)params;
    int64_t from = (int64_t)clock_now_ms();
    long count = PREVIEW_DEFAULT;
    const char *fv = http_req_query(r, "from"), *cv = http_req_query(r, "count");
    if (fv) {
        unsigned long long ms = 0;
        if (api_number(fv, strlen(fv), PREVIEW_LAST_MS, &ms) == 0)
            from = (int64_t)ms;
        else if (clock_parse_rfc3339(fv, &from) < 0)
            from = -1;
        if (from < 0 || from > PREVIEW_LAST_MS) { /* later instants overflow and cannot be written */
            http_respond_problem(r, 400,
                                 "from must be an RFC 3339 date-time or epoch milliseconds, at most "
                                 "9999-12-31T23:59:59.999Z",
                                 "from", NULL, 0);
            return;
        }
    }
    if (cv) {
        unsigned long long n = 0;
        if (api_number(cv, strlen(cv), PREVIEW_MAX, &n) < 0 || n < 1) {
            http_respond_problem(r, 400, "count must be an integer from 1 to 100", "count", NULL, 0);
            return;
        }
        count = (long)n;
    }
    if (!http_req_query(r, "cron") && !http_req_query(r, "every_ms")) {
        http_respond_problem(r, 400, "give cron (with tz, dst_gap, dst_overlap, start_at, end_at) or every_ms",
                             "cron", NULL, 0);
        return;
    }
    const char *bad = non_utf8_param(r);
    if (bad) {
        char detail[64], field[32];
        snprintf(detail, sizeof detail, "repeat.%s must be UTF-8 text", bad);
        snprintf(field, sizeof field, "repeat.%s", bad);
        http_respond_problem(r, 400, detail, field, NULL, 0);
        return;
    }
    spec_limits lim = a->lim;
    lim.policy = NULL; /* the URL is a placeholder */
    lim.max_delay_ms = UINT64_MAX / 2;
    char *text = query_spec(r);
    timer_spec *s = NULL;
    spec_error err;
    int rc = spec_parse(text, strlen(text), &lim, (uint64_t)from, &s, &err);
    free(text);
    if (rc < 0) {
        http_respond_problem(r, 400, err.detail, err.field, NULL, 0);
        return;
    }
    /* The maximum delay was lifted for a calendar's first slot (start_at may
     * lie far ahead); a period stays within it, as POST /timers checks. */
    if (!s->cron_x && s->every_ms > a->lim.max_delay_ms) {
        char detail[96];
        snprintf(detail, sizeof detail, "repeat.every_ms must be an integer from %d to %" PRIu64, SPEC_MIN_EVERY_MS,
                 a->lim.max_delay_ms);
        http_respond_problem(r, 400, detail, "repeat.every_ms", NULL, 0);
        spec_free(s);
        return;
    }
    json_t *list = json_array();
    if (s->cron_x) {
        /* The slots as shift places them; with skip, a shifted one is a slot
         * the gap swallowed: listed, not counted. */
        int64_t after = s->start_at_ms && from < s->start_at_ms ? s->start_at_ms - 1 : from - 1;
        long runs = 0, listed = 0;
        cron_instant in;
        while (runs < count && listed < 2 * PREVIEW_MAX &&
               cron_next(s->cron_x, s->tz, CRON_GAP_SHIFT, (enum cron_overlap)s->dst_overlap, after, &in) == 0 &&
               !(s->end_at_ms && in.utc_ms > s->end_at_ms) && in.utc_ms <= PREVIEW_LAST_MS) {
            const char *dst = NULL;
            cron_instant own;
            if (in.flags & CRON_SHIFTED)
                dst = s->dst_gap != CRON_GAP_SKIP ? "shifted"
                      /* the gap's end may be a slot of its own too, which skip runs */
                      : cron_next(s->cron_x, s->tz, CRON_GAP_SKIP, (enum cron_overlap)s->dst_overlap, after, &own) == 0 &&
                                own.utc_ms == in.utc_ms
                          ? NULL
                          : "skipped";
            else if (in.flags & CRON_SECOND_OCCURRENCE)
                dst = "second_occurrence";
            json_array_append_new(list, instant(s, in.utc_ms, dst));
            listed++;
            if (!dst || strcmp(dst, "skipped") != 0)
                runs++;
            after = in.utc_ms;
        }
    } else {
        /* every_ms and from are bounded above, so the sum cannot overflow */
        for (int64_t at = from, i = 0; i < count && at <= PREVIEW_LAST_MS; i++, at += (int64_t)s->every_ms)
            json_array_append_new(list, instant(s, at, NULL));
    }
    char fts[40];
    clock_format_rfc3339((uint64_t)from, fts, sizeof fts);
    json_t *body = json_pack("{s:s, s:o}", "from", fts, "instants", list);
    if (s->cron_x) {
        json_object_set_new(body, "cron", json_string(s->cron));
        json_object_set_new(body, "tz", json_string(tz_name(s->tz)));
    } else {
        json_object_set_new(body, "every_ms", json_integer((json_int_t)s->every_ms));
    }
    spec_free(s);
    http_respond_json(r, 200, body, NULL); /* takes body */
}
