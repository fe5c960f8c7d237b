/* cmd_timers.c - hookwheelctl's timer commands: create, get, cancel, ls,
 * fire, pause, resume, retry (pause and resume of a queue: cmd_ops.c).
 *
 * What the CLI parses itself (durations, numbers, header and label forms,
 * files, JSON) is checked here and refused with exit 2 before anything is
 * sent; what only the API knows (ids, URLs, times, cron expressions, zones)
 * is left to it, and its 400 names the field (exit 1). */
#include "cli/cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/duration.h"
#include "cli/table.h"
#include "service/xalloc.h"

/* A body file larger than this is refused before it is sent (the API's own
 * cap, HOOKWHEEL_MAX_BODY_BYTES, is 64 KiB by default). */
#define CLI_MAX_FILE ((size_t)16 << 20)

/* Parses a whole decimal integer in [min, max]. Returns 0 or -EINVAL. */
static int parse_int(const char *s, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

/* obj[key] = the string v, the value of option opt. Returns 0, or a usage
 * error when key or v is not UTF-8 (JSON carries only UTF-8 text). */
static int put_string(json_t *obj, const char *key, const char *v, const char *opt)
{
    if (json_object_set_new(obj, key, json_string(v)) < 0)
        return cli_usage_error("create", "--%s %s: not UTF-8 text", opt, v);
    return 0;
}

/* Reads path ("-": standard input) into a malloc'd buffer. Returns NULL
 * and prints why when it cannot. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "hookwheelctl: cannot read %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t n = 0, cap = 4096;
    char *buf = xmalloc(cap + 1);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap && cap < CLI_MAX_FILE + 1)
            buf = xrealloc(buf, (cap *= 2) + 1);
        if (n > CLI_MAX_FILE)
            break;
    }
    int bad = ferror(f) || n > CLI_MAX_FILE;
    if (f != stdin)
        fclose(f);
    if (bad) {
        fprintf(stderr, "hookwheelctl: cannot read %s: %s\n", path,
                n > CLI_MAX_FILE ? "larger than 16 MiB" : "read error");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* The text of a --body/--json-body value: itself, or a file's content
 * for @FILE. Returns a malloc'd string or NULL (the message is out). */
static char *value_or_file(const char *v, size_t *len)
{
    if (v[0] == '@')
        return read_file(v + 1, len);
    *len = strlen(v);
    return xstrdup(v);
}

static int set_body(const cli_args *a, json_t *spec)
{
    const char *body = cli_arg(a, "body"), *jbody = cli_arg(a, "json-body");
    if (body && jbody)
        return cli_usage_error("create", "--body and --json-body exclude each other");
    if (!body && !jbody)
        return 0;
    size_t len;
    char *text = value_or_file(body ? body : jbody, &len);
    if (!text)
        return CLI_USAGE;
    json_t *v;
    json_error_t err;
    if (body)
        v = json_stringn(text, len);
    else
        v = json_loadb(text, len, JSON_DECODE_ANY, &err);
    free(text);
    if (!v && body)
        return cli_usage_error("create", "--body is not UTF-8 text (the API carries text bodies)");
    if (!v)
        return cli_usage_error("create", "--json-body is not JSON: %s (line %d)", err.text, err.line);
    json_object_set_new(spec, body ? "body" : "json", v);
    return 0;
}

/* A repeatable option whose values are pairs: --header 'NAME: VALUE'
 * (the value's leading blanks dropped, as HTTP does) into "headers",
 * --label KEY:VALUE into "labels". A key may be given once (a JSON object
 * holds one value a key, and the API refuses a repeated one); header names
 * compare as HTTP compares them, ignoring case. */
static const struct pair_opt {
    const char *opt, *member, *form, *sep;
    int trim, nocase;
} pair_opts[] = {
    {"header", "headers", "'NAME: VALUE'", ": ", 1, 1},
    {"label", "labels", "KEY:VALUE", ":", 0, 0},
};

/* The key of obj that key repeats (ignoring case for p->nocase), or NULL. */
static const char *repeated_key(const json_t *obj, const char *key, const struct pair_opt *p)
{
    for (void *it = json_object_iter((json_t *)obj); it; it = json_object_iter_next((json_t *)obj, it)) {
        const char *k = json_object_iter_key(it);
        if ((p->nocase ? strcasecmp(k, key) : strcmp(k, key)) == 0)
            return k;
    }
    return NULL;
}

/* A usage error for value v of p's option, whose key repeats prev of obj:
 * silently keeping one of the two would send what was not asked for. */
static int repeated_error(const json_t *obj, const char *prev, const char *v, const struct pair_opt *p)
{
    const char *why = p->nocase ? "header names ignore case, give each once" : "a timer has one value per label key";
    return cli_usage_error("create", "--%s: the %s %s is given twice (%s%s%s, then %s); %s", p->opt,
                           p->nocase ? "name" : "key", prev, prev, p->sep,
                           json_string_value(json_object_get(obj, prev)), v, why);
}

/* Adds every value of p's option, split at its first ':', to spec. */
static int set_pairs(const cli_args *a, json_t *spec, const struct pair_opt *p)
{
    const char *v;
    for (int i = 0; (v = cli_arg_nth(a, p->opt, i)) != NULL; i++) {
        const char *colon = strchr(v, ':');
        if (!colon || colon == v)
            return cli_usage_error("create", "--%s %s: give %s", p->opt, v, p->form);
        json_t *obj = json_object_get(spec, p->member);
        if (!obj) {
            obj = json_object();
            json_object_set_new(spec, p->member, obj);
        }
        const char *val = colon + 1;
        while (p->trim && (*val == ' ' || *val == '\t'))
            val++;
        char *key = xstrndup(v, (size_t)(colon - v));
        const char *prev = repeated_key(obj, key, p);
        if (prev) {
            free(key);
            return repeated_error(obj, prev, v, p);
        }
        int bad = json_object_set_new(obj, key, json_string(val)) < 0;
        free(key);
        if (bad)
            return cli_usage_error("create", "--%s %s: not UTF-8 text", p->opt, v);
    }
    return 0;
}

/* --in or --at, unless --cron gives the first run. */
static int set_due(const cli_args *a, json_t *spec)
{
    const char *in = cli_arg(a, "in"), *at = cli_arg(a, "at");
    if (in && at)
        return cli_usage_error("create", "--in and --at exclude each other");
    if (!in && !at && !cli_arg(a, "cron"))
        return cli_usage_error("create", "give the due time: --in DURATION or --at TIME (or --cron EXPR)");
    int64_t ms;
    long long epoch;
    if (in && duration_parse(in, &ms) < 0)
        return cli_usage_error("create", "--in %s: give a duration such as 90s, 5m, 1h30m, 1500ms", in);
    if (in)
        json_object_set_new(spec, "delay_ms", json_integer(ms));
    else if (at && parse_int(at, 0, INT64_MAX, &epoch) == 0)
        json_object_set_new(spec, "fire_at_ms", json_integer(epoch));
    else if (at)
        return put_string(spec, "fire_at", at, "at"); /* RFC 3339: the API checks it */
    return 0;
}

static int set_repeat(const cli_args *a, json_t *spec)
{
    const char *every = cli_arg(a, "every"), *cron = cli_arg(a, "cron");
    const char *tz = cli_arg(a, "tz"), *times = cli_arg(a, "times");
    if (!every && !cron) {
        if (tz || times)
            return cli_usage_error("create", "--%s needs --every or --cron", tz ? "tz" : "times");
        return 0;
    }
    json_t *r = json_object();
    json_object_set_new(spec, "repeat", r);
    int64_t ms;
    long long n;
    if (every && duration_parse(every, &ms) < 0)
        return cli_usage_error("create", "--every %s: give a duration such as 90s, 5m, 1h30m", every);
    if (every)
        json_object_set_new(r, "every_ms", json_integer(ms));
    if ((cron && put_string(r, "cron", cron, "cron")) || (tz && put_string(r, "tz", tz, "tz")))
        return CLI_USAGE;
    if (times && parse_int(times, 1, 4294967295LL, &n) < 0)
        return cli_usage_error("create", "--times %s: give a whole number from 1", times);
    if (times)
        json_object_set_new(r, "times", json_integer(n));
    return 0;
}

/* --retries and --timeout. */
static int set_policy(const cli_args *a, json_t *spec)
{
    const char *retries = cli_arg(a, "retries"), *timeout = cli_arg(a, "timeout");
    long long n;
    int64_t ms;
    if (retries && parse_int(retries, 0, 1000000, &n) < 0)
        return cli_usage_error("create", "--retries %s: give a whole number from 0", retries);
    if (retries)
        json_object_set_new(spec, "retry", json_pack("{s:I}", "max_attempts", (json_int_t)(n + 1)));
    if (timeout && duration_parse(timeout, &ms) < 0)
        return cli_usage_error("create", "--timeout %s: give a duration such as 5s or 1500ms", timeout);
    if (timeout)
        json_object_set_new(spec, "timeout_ms", json_integer(ms));
    return 0;
}

/* Options copied as strings into the spec member of the same meaning. */
static const struct {
    const char *opt, *member;
} string_members[] = {
    {"url", "url"}, {"id", "id"}, {"queue", "queue"}, {"on-success", "on_success"}, {"on-failure", "on_failure"},
};

static int build_spec(const cli_args *a, json_t *spec)
{
    if (!cli_arg(a, "url"))
        return cli_usage_error("create", "give the target: --url URL");
    for (size_t i = 0; i < sizeof string_members / sizeof string_members[0]; i++) {
        const char *v = cli_arg(a, string_members[i].opt);
        if (v && put_string(spec, string_members[i].member, v, string_members[i].opt))
            return CLI_USAGE;
    }
    const char *method = cli_arg(a, "method");
    int rc = 0;
    if (method) {
        char *m = xstrdup(method);
        for (char *p = m; *p; p++)
            *p = (char)toupper((unsigned char)*p);
        rc = put_string(spec, "method", m, "method");
        free(m);
    }
    if (!rc)
        rc = set_due(a, spec);
    if (!rc)
        rc = set_repeat(a, spec);
    if (!rc)
        rc = set_policy(a, spec);
    if (!rc)
        rc = set_body(a, spec);
    for (size_t i = 0; i < sizeof pair_opts / sizeof pair_opts[0] && !rc; i++)
        rc = set_pairs(a, spec, &pair_opts[i]);
    return rc;
}

int cmd_create(cli_ctx *ctx, const cli_args *a)
{
    json_t *spec = json_object(), *timer;
    int rc = build_spec(a, spec);
    if (rc == CLI_OK)
        rc = cli_call(ctx, "POST", "/timers", spec, &timer);
    json_decref(spec);
    if (rc != CLI_OK)
        return rc;
    char id[160];
    if (ctx->json)
        cli_print_json(timer);
    else
        puts(cli_str(timer, "id", id, sizeof id) ? id : "");
    json_decref(timer);
    return CLI_OK;
}

/* "/timers/<escaped id><suffix>", malloc'd. */
static char *timer_path(const char *id, const char *suffix)
{
    char *p = NULL;
    client_path_add(&p, "/timers/");
    client_path_segment(&p, id);
    client_path_add(&p, suffix);
    return p;
}

static void print_field(const char *name, const char *value)
{
    printf("%-12s ", name);
    table_put(stdout, value && *value ? value : "-");
    putchar('\n');
}

/* "key:value, ..." of an object of strings, into buf. */
static const char *join_object(const json_t *obj, const char *sep, char *buf, size_t size)
{
    const char *k;
    const json_t *v;
    size_t n = 0;
    buf[0] = '\0';
    json_object_foreach((json_t *)obj, k, v) {
        int w = snprintf(buf + n, size - n, "%s%s%s%s", n ? ", " : "", k, sep,
                         json_is_string(v) ? json_string_value(v) : "?");
        if (w < 0 || (size_t)w >= size - n)
            break;
        n += (size_t)w;
    }
    return buf;
}

/* The last attempt in a few words: "503 after 12 ms at ..." or its error. */
static const char *last_attempt_text(const json_t *att, char *buf, size_t size)
{
    char status[32], err[256], at[64], dur[32];
    if (!json_is_object(att))
        return NULL;
    const char *e = cli_str(att, "error", err, sizeof err);
    snprintf(buf, size, "%s at %s (%s ms)",
             e ? e : cli_str(att, "status", status, sizeof status) ? status : "?",
             cli_str(att, "at", at, sizeof at) ? at : "?",
             cli_str(att, "duration_ms", dur, sizeof dur) ? dur : "?");
    return buf;
}

static void print_timer(const json_t *t)
{
    char buf[1024], url[2200];
    static const char *const plain[] = {"id", "state", "queue", "fire_at", "attempts", "runs", "created_at"};
    for (size_t i = 0; i < 2; i++)
        print_field(plain[i], cli_str(t, plain[i], buf, sizeof buf));
    char method[16], target[2100];
    snprintf(url, sizeof url, "%s %s", cli_str(t, "method", method, sizeof method) ? method : "?",
             cli_str(t, "url", target, sizeof target) ? target : "?");
    print_field("request", url);
    for (size_t i = 2; i < sizeof plain / sizeof plain[0]; i++)
        print_field(plain[i], cli_str(t, plain[i], buf, sizeof buf));
    const json_t *repeat = json_object_get(t, "repeat");
    if (repeat) {
        char cron[300], every[32], tz[80];
        if (cli_str(repeat, "cron", cron, sizeof cron))
            snprintf(buf, sizeof buf, "cron '%s' in %s", cron, cli_str(repeat, "tz", tz, sizeof tz) ? tz : "UTC");
        else
            snprintf(buf, sizeof buf, "every %s ms", cli_str(repeat, "every_ms", every, sizeof every) ? every : "?");
        print_field("repeat", buf);
    }
    if (json_object_size(json_object_get(t, "labels")))
        print_field("labels", join_object(json_object_get(t, "labels"), ":", buf, sizeof buf));
    if (json_object_size(json_object_get(t, "headers")))
        print_field("headers", join_object(json_object_get(t, "headers"), ": ", buf, sizeof buf));
    print_field("last_attempt", last_attempt_text(json_object_get(t, "last_attempt"), buf, sizeof buf));
}

/* A call on one timer (GET, DELETE or a POST control) and its printing:
 * the timer with --json, else print(t). */
static int timer_call(cli_ctx *ctx, const char *method, const char *id, const char *suffix,
                      void (*print)(cli_ctx *ctx, const json_t *t))
{
    char *path = timer_path(id, suffix);
    json_t *t;
    int rc = cli_call(ctx, method, path, NULL, &t);
    free(path);
    if (rc != CLI_OK)
        return rc;
    if (ctx->json)
        cli_print_json(t);
    else
        print(ctx, t);
    json_decref(t);
    return CLI_OK;
}

static void print_whole(cli_ctx *ctx, const json_t *t)
{
    (void)ctx;
    print_timer(t);
}

/* "<id> <state>", and for a recurring timer cancelled in a run (202) what
 * that means. */
static void print_state(cli_ctx *ctx, const json_t *t)
{
    char id[160], state[16];
    printf("%s %s%s\n", cli_str(t, "id", id, sizeof id) ? id : "?", cli_str(t, "state", state, sizeof state) ? state : "?",
           ctx->status == 202 ? " (the run in progress completes; then it is cancelled)" : "");
}

int cmd_get(cli_ctx *ctx, const cli_args *a)
{
    return timer_call(ctx, "GET", a->pos[0], "", print_whole);
}

int cmd_cancel(cli_ctx *ctx, const cli_args *a)
{
    return timer_call(ctx, "DELETE", a->pos[0], "", print_state);
}

int cmd_fire(cli_ctx *ctx, const cli_args *a)
{
    return timer_call(ctx, "POST", a->pos[0], "/fire", print_state);
}

int cmd_retry(cli_ctx *ctx, const cli_args *a)
{
    return timer_call(ctx, "POST", a->pos[0], "/retry", print_state);
}

/* pause and resume: a timer by ID, or a queue (--queue, cmd_ops.c). */
static int pause_or_resume(cli_ctx *ctx, const cli_args *a, const char *verb)
{
    const char *queue = cli_arg(a, "queue");
    if ((queue != NULL) == (a->npos == 1))
        return cli_usage_error(verb, "give a timer ID or --queue NAME");
    if (queue)
        return cli_queue_pause(ctx, queue, verb[0] == 'p');
    return timer_call(ctx, "POST", a->pos[0], verb[0] == 'p' ? "/pause" : "/resume", print_state);
}

int cmd_pause(cli_ctx *ctx, const cli_args *a)
{
    return pause_or_resume(ctx, a, "pause");
}

int cmd_resume(cli_ctx *ctx, const cli_args *a)
{
    return pause_or_resume(ctx, a, "resume");
}

/* ---- ls -------------------------------------------------------------- */

/* "/timers?state=...&queue=...&label=...&limit=...", malloc'd. */
static char *list_path(const cli_args *a)
{
    char *p = NULL;
    client_path_add(&p, "/timers");
    client_query_add(&p, "state", cli_arg(a, "state") ? cli_arg(a, "state") : "scheduled");
    static const char *const passed[] = {"queue", "label", "limit"};
    for (size_t i = 0; i < sizeof passed / sizeof passed[0]; i++)
        if (cli_arg(a, passed[i]))
            client_query_add(&p, passed[i], cli_arg(a, passed[i]));
    return p;
}

static void add_timer_row(table *t, const json_t *timer)
{
    char id[160], state[16], queue[80], fire_at[40], attempts[16];
    const char *cells[] = {
        cli_str(timer, "id", id, sizeof id),
        cli_str(timer, "state", state, sizeof state),
        cli_str(timer, "queue", queue, sizeof queue),
        cli_str(timer, "fire_at", fire_at, sizeof fire_at),
        cli_str(timer, "attempts", attempts, sizeof attempts),
        json_string_value(json_object_get(timer, "url")),
    };
    table_add(t, cells);
}

int cmd_ls(cli_ctx *ctx, const cli_args *a)
{
    long long n;
    if (cli_arg(a, "limit") && parse_int(cli_arg(a, "limit"), 1, 1000, &n) < 0)
        return cli_usage_error("ls", "--limit %s: give a whole number from 1 to 1000", cli_arg(a, "limit"));
    /* the API filters by one label: the last alone would list more than asked */
    if (cli_arg_nth(a, "label", 1))
        return cli_usage_error("ls", "--label is given twice (%s, then %s): ls lists the timers of one label",
                               cli_arg_nth(a, "label", 0), cli_arg_nth(a, "label", 1));
    static const char *const head[] = {"ID", "STATE", "QUEUE", "FIRE_AT", "ATTEMPTS", "URL"};
    return cli_list(ctx, a, "ls", list_path(a), "items", head, 6, add_timer_row);
}
