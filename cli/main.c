/* main.c - hookwheelctl: the command-line client of the hookwheel API.
 *
 * Reads the global options (--url, --token, --json, --max-time; from
 * HOOKWHEEL_URL and HOOKWHEEL_TOKEN otherwise), picks the command from the
 * table below, parses its options against the same table that prints its
 * help, and runs it. The exit code is the contract of cli.h. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/shellword.h"
#include "cli/table.h"
#include "service/xalloc.h"

#define CLI_DEFAULT_URL "http://127.0.0.1:8080" /* hookwheel's default HOOKWHEEL_LISTEN */
#define CLI_DEFAULT_MAX_TIME_S 30
/* --all stops after this many empty pages in a row that still have a
 * next_cursor, or at a next_cursor equal to the one asked with. The API may
 * answer a page with no timers and a cursor (a page reads a bounded number
 * of entries per partition), but not without end. */
#define CLI_MAX_EMPTY_PAGES 1000

static const cli_opt global_opts[] = {
    {"url", "URL", "the API's root URL (default: $HOOKWHEEL_URL, else " CLI_DEFAULT_URL ")"},
    {"token", "TOKEN", "bearer token (default: $HOOKWHEEL_TOKEN; none when unset)"},
    {"json", NULL, "print the API's JSON answer instead of a table or a line"},
    {"max-time", "SECONDS", "give up on a call after this long (default 30; connecting: at most 5)"},
    {"help", NULL, "show help (-h)"},
    {NULL, NULL, NULL},
};

static const cli_opt create_opts[] = {
    {"url", "URL", "the target to call (required); the API's URL then comes from $HOOKWHEEL_URL or a --url before the command"},
    {"in", "DURATION", "due in this long: 90s, 5m, 1h30m, 1500ms, 0"},
    {"at", "TIME", "due at an RFC 3339 time (2026-12-01T09:00:00Z) or epoch milliseconds"},
    {"cron", "EXPR", "a calendar schedule (repeat.cron), e.g. '0 9 * * MON-FRI'; needs no --in/--at"},
    {"tz", "ZONE", "the schedule's IANA time zone (repeat.tz; default UTC)"},
    {"every", "DURATION", "run again this long after each run (repeat.every_ms)"},
    {"times", "N", "with --every or --cron: runs in total (repeat.times)"},
    {"body", "TEXT|@FILE", "the request body, verbatim (@FILE reads a file, @- standard input)"},
    {"json-body", "JSON|@FILE", "a JSON request body, sent as application/json"},
    {"header", "'NAME: VALUE'", "a request header (repeatable; each name once, in any case)"},
    {"label", "KEY:VALUE", "a label (repeatable; each key once)"},
    {"id", "ID", "the timer id (makes the create idempotent); generated when absent"},
    {"queue", "NAME", "the timer's queue (default: default)"},
    {"method", "METHOD", "GET, HEAD, POST (default), PUT, PATCH, DELETE or OPTIONS"},
    {"retries", "N", "retries after a failed first attempt (retry.max_attempts = N + 1)"},
    {"timeout", "DURATION", "timeout of one attempt (timeout_ms)"},
    {"on-success", "URL", "a URL told when the timer ends delivered"},
    {"on-failure", "URL", "a URL told when the timer ends failed"},
    {NULL, NULL, NULL},
};

static const cli_opt ls_opts[] = {
    {"state", "STATE", "scheduled (default), retrying, paused, delivered, failed or cancelled"},
    {"queue", "NAME", "only this queue's timers"},
    {"label", "KEY:VALUE", "only timers with this label (one)"},
    {"limit", "N", "timers per page, 1-1000 (default 100)"},
    {"cursor", "CURSOR", "start at this page (a next_cursor)"},
    {"all", NULL, "follow next_cursor to the last page"},
    {NULL, NULL, NULL},
};

static const cli_opt queue_opts[] = {
    {"queue", "NAME", "the queue, instead of a timer ID"},
    {NULL, NULL, NULL},
};

static const cli_opt deadletter_opts[] = {
    {"queue", "NAME", "only this queue's failed timers"},
    {"all-queues", NULL, "every queue's failed timers"},
    {NULL, NULL, NULL},
};

static const cli_opt leases_opts[] = {
    {"limit", "N", "leases per page"},
    {"cursor", "CURSOR", "start at this page (a next_cursor)"},
    {"all", NULL, "follow next_cursor to the last page"},
    {NULL, NULL, NULL},
};

static const cli_opt no_opts[] = {{NULL, NULL, NULL}};

const cli_cmd cli_commands[] = {
    {"create", "--url URL (--in D | --at T | --cron EXPR) [options]", "create a timer",
     "Creates a timer (POST /timers) and prints its id (--json: the timer). Exactly one of --in and\n"
     "--at sets the due time, except with --cron, whose first run is its first slot.",
     create_opts, 0, 0, cmd_create},
    {"get", "ID", "show a timer", "Shows a timer (GET /timers/{id}).", no_opts, 1, 1, cmd_get},
    {"cancel", "ID", "cancel a timer",
     "Cancels a timer (DELETE /timers/{id}). Exits 5 when it is too late (an attempt began, or\n"
     "it finished); a recurring timer in a run ends after that run.",
     no_opts, 1, 1, cmd_cancel},
    {"ls", "[options]", "list timers in one state",
     "Lists timers in one state (GET /timers), soonest due first for scheduled and retrying,\n"
     "newest first otherwise. Without --all it prints one page, and on stderr the command that\n"
     "prints the next: the same options, --cursor NEXT.",
     ls_opts, 0, 0, cmd_ls},
    {"fire", "ID", "run a timer now", "Makes a timer's next run due now (POST /timers/{id}/fire).",
     no_opts, 1, 1, cmd_fire},
    {"pause", "ID | --queue NAME", "pause a timer or a queue",
     "Pauses a timer (POST /timers/{id}/pause), or a queue (--queue: its timers wait). A queue is\n"
     "paused by PATCH /queues/{name} {\"paused\": true}, which changes only that member of its\n"
     "controls: the others stay as stored (or the defaults), whoever changes them meanwhile.",
     queue_opts, 0, 1, cmd_pause},
    {"resume", "ID | --queue NAME", "resume a timer or a queue",
     "Resumes a paused timer (POST /timers/{id}/resume), or a paused queue (--queue; as pause).",
     queue_opts, 0, 1, cmd_resume},
    {"retry", "ID", "run a dead letter again",
     "Runs a failed timer again now (POST /timers/{id}/retry). Exits 5 when it is not failed.",
     no_opts, 1, 1, cmd_retry},
    {"replay", "--queue NAME | --all-queues", "run the dead letters again",
     "Runs every failed timer of a queue (or of all) again (POST /dead-letters/replay, repeated\n"
     "while the API says there are more) and prints how many.",
     deadletter_opts, 0, 0, cmd_replay},
    {"purge", "--queue NAME | --all-queues", "delete the dead letters",
     "Deletes every failed timer of a queue (or of all) (POST /dead-letters/purge, repeated while\n"
     "the API says there are more) and prints how many.",
     deadletter_opts, 0, 0, cmd_purge},
    {"queues", "[NAME]", "show queues with their counts",
     "Lists the queues (GET /queues) or shows one (GET /queues/{name}): controls, timers per state,\n"
     "due timers and how long ago the oldest fell due (ms).",
     no_opts, 0, 1, cmd_queues},
    {"leases", "[KEY] [options]", "list leases, or show one",
     "Lists the watchdog leases (GET /leases) or shows one (GET /leases/{key}). A list without\n"
     "--all is one page, and on stderr the command that prints the next (as ls).",
     leases_opts, 0, 1,
     cmd_leases},
};
const size_t cli_command_count = sizeof cli_commands / sizeof cli_commands[0];

static const char exit_codes_help[] =
    "Exit codes:\n"
    "  0  success\n"
    "  1  the API refused the request (a 4xx not listed here; the problem is printed)\n"
    "  2  usage error (bad flags or arguments, a label or header given twice; nothing was sent)\n"
    "  3  not found (404)\n"
    "  4  unauthorized or forbidden (401, 403)\n"
    "  5  conflict (409: too late to cancel, not failed, a different spec under this id)\n"
    "  6  server error or unreachable (5xx, connection refused, timeout)\n";

static void print_opts(FILE *out, const cli_opt *opts)
{
    for (const cli_opt *o = opts; o->name; o++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(out, "  %-28s %s\n", left, o->help);
    }
}

static void print_main_help(FILE *out)
{
    fprintf(out, "usage: hookwheelctl [global options] <command> [arguments]\n\n"
                 "The command-line client of the hookwheel API.\n\nCommands:\n");
    for (size_t i = 0; i < cli_command_count; i++)
        fprintf(out, "  %-8s %s\n", cli_commands[i].name, cli_commands[i].summary);
    fprintf(out, "  %-8s %s\n\nGlobal options (also after the command, where it has no option of the "
                 "same name):\n", "help", "help on a command (hookwheelctl help <command>)");
    print_opts(out, global_opts);
    fprintf(out, "\n%s", exit_codes_help);
}

static void print_cmd_help(FILE *out, const cli_cmd *c)
{
    fprintf(out, "usage: hookwheelctl %s %s\n\n%s\n", c->name, c->usage, c->help);
    if (c->opts[0].name) {
        fprintf(out, "\nOptions:\n");
        print_opts(out, c->opts);
    }
    fprintf(out, "\nGlobal options: --url URL, --token TOKEN, --json, --max-time SECONDS "
                 "(hookwheelctl --help)\n\n%s", exit_codes_help);
}

static const cli_cmd *find_cmd(const char *name)
{
    for (size_t i = 0; i < cli_command_count; i++)
        if (strcmp(cli_commands[i].name, name) == 0)
            return &cli_commands[i];
    return NULL;
}

void cli_print_json(const json_t *json)
{
    char *s = json_dumps(json, JSON_COMPACT | JSON_ENCODE_ANY);
    if (s)
        puts(s);
    free(s);
}

const char *cli_str(const json_t *obj, const char *key, char *buf, size_t size)
{
    const json_t *v = json_object_get(obj, key);
    if (json_is_string(v))
        snprintf(buf, size, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, size, "%g", json_real_value(v));
    else if (json_is_boolean(v))
        snprintf(buf, size, "%s", json_is_true(v) ? "true" : "false");
    else
        return NULL;
    return buf;
}

int cli_call(cli_ctx *ctx, const char *method, const char *path, const json_t *json_body, json_t **body)
{
    client_reply r;
    *body = NULL;
    if (client_call(ctx->http, method, path, json_body, &r) < 0)
        r.status = 0; /* no answer: client_report names the URL */
    ctx->status = r.status;
    int code = client_report(&r);
    if (code == CLI_OK && !r.body && r.raw[0]) {
        /* a 2xx that is not JSON: not hookwheel's API at that URL */
        fprintf(stderr, "hookwheelctl: %s %s: the answer (HTTP %ld) is not JSON: is this hookwheel's API?\n",
                r.method, r.url, r.status);
        code = CLI_UNAVAILABLE;
    } else if (code == CLI_OK) {
        *body = r.body ? json_incref(r.body) : json_object();
    }
    client_reply_clear(&r);
    return code;
}

/* One page: GET path from cursor at (NULL: the first), its items appended
 * to items; *next set to its next_cursor (malloc'd, or NULL). */
static int fetch_page(cli_ctx *ctx, const char *path, const char *member, const char *at, json_t *items,
                      char **next, size_t *got)
{
    char *p = xstrdup(path);
    if (at)
        client_query_add(&p, "cursor", at);
    json_t *page;
    int rc = cli_call(ctx, "GET", p, NULL, &page);
    free(p);
    *next = NULL;
    if (rc != CLI_OK)
        return rc;
    *got = json_array_size(json_object_get(page, member));
    json_array_extend(items, json_object_get(page, member));
    const char *nc = json_string_value(json_object_get(page, "next_cursor"));
    *next = nc ? xstrdup(nc) : NULL;
    json_decref(page);
    return CLI_OK;
}

int cli_fetch_pages(cli_ctx *ctx, const char *path, const char *member, const char *cursor, int all,
                    json_t *items, char **next)
{
    char *at = cursor ? xstrdup(cursor) : NULL, *nc = NULL;
    int rc, empty = 0;
    for (;;) {
        size_t got = 0;
        rc = fetch_page(ctx, path, member, at, items, &nc, &got);
        empty = got ? 0 : empty + 1;
        if (rc == CLI_OK && nc && ((at && strcmp(at, nc) == 0) || empty > CLI_MAX_EMPTY_PAGES)) {
            fprintf(stderr, "hookwheelctl: GET %s: the next_cursor does not move on; stopping\n", path);
            rc = CLI_UNAVAILABLE;
        }
        free(at);
        at = nc;
        if (rc != CLI_OK || !all || !at)
            break;
    }
    *next = rc == CLI_OK ? at : NULL;
    if (rc != CLI_OK)
        free(at);
    return rc;
}

static const char *global_value(const cli_args *g, const cli_args *a, const char *name)
{
    const char *v = cli_arg_global(a, name);
    return v ? v : cli_arg_global(g, name);
}

/* The global options that the command for a next page repeats when they
 * were given: the API it calls and how long a call may take. Not --token,
 * a credential (stderr often ends up in logs), nor --json, with which no
 * such command is printed. */
static const char *const repeated_globals[] = {"url", "max-time"};

/* The options of a listing that say which page it reads rather than which
 * listing it is: the command for the next page gives its own. */
static int paging_opt(const char *name)
{
    return strcmp(name, "cursor") == 0 || strcmp(name, "all") == 0;
}

/* One word of a printed command: an option's name (printed as --name),
 * or a value. */
typedef struct cmd_word {
    const char *text;
    int opt;
} cmd_word;

/* The words after "hookwheelctl" of the command that reads the page at
 * next of command cmd run with a: the repeated globals given, cmd, every
 * option of cmd given that shapes the listing (with its last value),
 * --cursor next. Returns a malloc'd array and sets *count. */
static cmd_word *next_command(const cli_ctx *ctx, const cli_args *a, const char *cmd, const char *next,
                              size_t *count)
{
    const cli_opt *opts = find_cmd(cmd)->opts;
    size_t n = 0, nopts = 0;
    while (opts[nopts].name)
        nopts++;
    cmd_word *w = xcalloc(2 * (sizeof repeated_globals / sizeof repeated_globals[0] + nopts) + 3, sizeof *w);
    for (size_t i = 0; i < sizeof repeated_globals / sizeof repeated_globals[0]; i++) {
        const char *v = global_value(ctx->globals, a, repeated_globals[i]);
        if (v) {
            w[n++] = (cmd_word){repeated_globals[i], 1};
            w[n++] = (cmd_word){v, 0};
        }
    }
    w[n++] = (cmd_word){cmd, 0};
    for (const cli_opt *o = opts; o->name; o++) {
        const char *v = cli_arg(a, o->name);
        if (!v || paging_opt(o->name))
            continue;
        w[n++] = (cmd_word){o->name, 1};
        if (o->arg)
            w[n++] = (cmd_word){v, 0};
    }
    w[n++] = (cmd_word){"cursor", 1};
    w[n++] = (cmd_word){next, 0};
    *count = n;
    return w;
}

/* Prints on stderr the command that reads the page at next of command cmd
 * run with a, each word quoted for a POSIX shell so that it can be pasted
 * as printed. A word with a control character (a cursor from something
 * that is not hookwheel) cannot be shown: the line then says how else to
 * read on. */
static void print_next_command(const cli_ctx *ctx, const cli_args *a, const char *cmd, const char *next)
{
    size_t n, i;
    cmd_word *w = next_command(ctx, a, cmd, next, &n);
    for (i = 0; i < n; i++) {
        if (!shellword_printable(w[i].text)) {
            fputs("more: the next page's cursor or an option holds a control character; read on with --all, "
                  "or --json and its next_cursor\n", stderr);
            free(w);
            return;
        }
    }
    fputs("more: hookwheelctl", stderr);
    for (i = 0; i < n; i++) {
        fputs(w[i].opt ? " --" : " ", stderr);
        if (w[i].opt)
            fputs(w[i].text, stderr);
        else
            shellword_put(stderr, w[i].text);
    }
    fputs(" (or --all)\n", stderr);
    free(w);
}

int cli_list(cli_ctx *ctx, const cli_args *a, const char *cmd, char *path, const char *member,
             const char *const *head, int ncols, void (*row)(table *t, const json_t *item))
{
    json_t *items = json_array();
    char *next = NULL;
    int rc = cli_fetch_pages(ctx, path, member, cli_arg(a, "cursor"), cli_arg(a, "all") != NULL, items, &next);
    free(path);
    if (rc == CLI_OK && ctx->json) {
        json_t *page = json_pack("{s:O,s:s?}", member, items, "next_cursor", next);
        cli_print_json(page);
        json_decref(page);
    } else if (rc == CLI_OK) {
        table *t = table_create(ncols, head);
        size_t i;
        json_t *item;
        json_array_foreach(items, i, item)
            row(t, item);
        table_print(t, stdout);
        table_free(t);
        if (next)
            print_next_command(ctx, a, cmd, next);
    }
    free(next);
    json_decref(items);
    return rc;
}

/* `help [command]`. */
static int run_help(int argc, char **argv)
{
    if (argc == 0) {
        print_main_help(stdout);
        return CLI_OK;
    }
    const cli_cmd *c = find_cmd(argv[0]);
    if (!c)
        return cli_usage_error(NULL, "no command %s", argv[0]);
    print_cmd_help(stdout, c);
    return CLI_OK;
}

/* The global option named by arg ("--url", "--url=X", "-h"), or NULL. */
static const cli_opt *global_named(const char *arg)
{
    if (strcmp(arg, "-h") == 0)
        arg = "--help";
    if (strncmp(arg, "--", 2) != 0)
        return NULL;
    size_t len = strcspn(arg + 2, "=");
    for (const cli_opt *o = global_opts; o->name; o++)
        if (strlen(o->name) == len && strncmp(arg + 2, o->name, len) == 0)
            return o;
    return NULL;
}

/* Parses the global options in argv before the command (argc counts from
 * argv[0], the first argument); sets *cmd_at to the command's index, argc
 * when there is none. Returns 0 or CLI_USAGE. */
static int parse_globals(int argc, char **argv, int *cmd_at, cli_args *g)
{
    int n = 0;
    while (n < argc && argv[n][0] == '-' && argv[n][1] != '\0') {
        const cli_opt *o = global_named(argv[n]);
        n++;
        if (!o)
            break; /* unknown: cli_args_parse reports it */
        if (o->arg && !strchr(argv[n - 1], '='))
            n++; /* its value */
    }
    *cmd_at = n < argc ? n : argc;
    return cli_args_parse(NULL, global_opts, *cmd_at, argv, g);
}

/* Sets up the client from the global options and the environment, and runs
 * the command. */
static int run_cmd(const cli_cmd *c, const cli_args *g, const cli_args *a)
{
    const char *url = global_value(g, a, "url");
    const char *token = global_value(g, a, "token");
    const char *max_time = global_value(g, a, "max-time");
    if (!url)
        url = getenv("HOOKWHEEL_URL") && *getenv("HOOKWHEEL_URL") ? getenv("HOOKWHEEL_URL") : CLI_DEFAULT_URL;
    if (!token)
        token = getenv("HOOKWHEEL_TOKEN");
    char *end = NULL;
    double secs = max_time ? strtod(max_time, &end) : CLI_DEFAULT_MAX_TIME_S;
    if (max_time && (end == max_time || *end || !(secs > 0) || secs > 86400))
        return cli_usage_error(c->name, "--max-time takes seconds, more than 0 and at most 86400");
    if (a->npos < c->min_pos || a->npos > c->max_pos)
        return cli_usage_error(c->name, "usage: hookwheelctl %s %s", c->name, c->usage);
    cli_ctx ctx = {.json = global_value(g, a, "json") != NULL, .globals = g};
    /* at least 1 ms: libcurl reads a timeout of 0 as none at all */
    long max_ms = (long)(secs * 1000);
    ctx.http = client_create(url, token, max_ms > 0 ? max_ms : 1);
    if (!ctx.http) {
        fprintf(stderr, "hookwheelctl: libcurl could not start\n");
        return CLI_UNAVAILABLE;
    }
    int code = c->run(&ctx, a);
    client_free(ctx.http);
    return code;
}

/* Runs command c with its arguments argv[0..argc). */
static int dispatch(const cli_cmd *c, const cli_args *g, int argc, char **argv)
{
    cli_args a;
    int code = cli_args_parse(c, global_opts, argc, argv, &a);
    if (code == CLI_OK) {
        if (cli_arg_global(&a, "help") || cli_arg_global(g, "help"))
            print_cmd_help(stdout, c);
        else
            code = run_cmd(c, g, &a);
    }
    cli_args_free(&a);
    return code;
}

int main(int argc, char **argv)
{
    int at;
    cli_args g;
    int code = parse_globals(argc - 1, argv + 1, &at, &g);
    at++; /* from argv + 1 to argv */
    if (code != CLI_OK) {
        /* the message is out */
    } else if (at >= argc) {
        int help = cli_arg_global(&g, "help") != NULL;
        print_main_help(help ? stdout : stderr);
        code = help ? CLI_OK : CLI_USAGE;
    } else if (strcmp(argv[at], "help") == 0) {
        code = run_help(argc - at - 1, argv + at + 1);
    } else if (!find_cmd(argv[at])) {
        code = cli_usage_error(NULL, "no command %s", argv[at]);
    } else {
        code = dispatch(find_cmd(argv[at]), &g, argc - at - 1, argv + at + 1);
    }
    cli_args_free(&g);
    return code;
}
