/* cmd_ops.c - hookwheelctl's operator commands: replay and purge of dead
 * letters, queues (and pausing one), leases. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/table.h"
#include "service/xalloc.h"

/* ---- replay, purge ---------------------------------------------------- */

/* POSTs path with {"queue": ...} or {} while the answer says "more": true,
 * summing its counter member; prints "<counter> <n>" or, with --json,
 * {"<counter>": n, "more": false}. */
static int dead_letters(cli_ctx *ctx, const cli_args *a, const char *cmd, const char *path, const char *counter)
{
    const char *queue = cli_arg(a, "queue");
    if ((queue != NULL) == (cli_arg(a, "all-queues") != NULL))
        return cli_usage_error(cmd, "give --queue NAME or --all-queues");
    json_t *filter = queue ? json_pack("{s:s}", "queue", queue) : json_object();
    json_int_t total = 0;
    int more = 1, rc = CLI_OK;
    while (more && rc == CLI_OK) {
        json_t *ans;
        rc = cli_call(ctx, "POST", path, filter, &ans);
        if (rc != CLI_OK)
            break;
        total += json_integer_value(json_object_get(ans, counter));
        more = json_is_true(json_object_get(ans, "more"));
        json_decref(ans);
    }
    json_decref(filter);
    if (rc != CLI_OK) {
        if (total)
            fprintf(stderr, "hookwheelctl: %s %" JSON_INTEGER_FORMAT " before the error\n", counter, total);
        return rc;
    }
    if (ctx->json) {
        json_t *out = json_pack("{s:I,s:b}", counter, total, "more", 0);
        cli_print_json(out);
        json_decref(out);
    } else {
        printf("%s %" JSON_INTEGER_FORMAT "\n", counter, total);
    }
    return CLI_OK;
}

int cmd_replay(cli_ctx *ctx, const cli_args *a)
{
    return dead_letters(ctx, a, "replay", "/dead-letters/replay", "replayed");
}

int cmd_purge(cli_ctx *ctx, const cli_args *a)
{
    return dead_letters(ctx, a, "purge", "/dead-letters/purge", "purged");
}

/* ---- queues ------------------------------------------------------------ */

static char *queue_path(const char *name)
{
    char *p = NULL;
    client_path_add(&p, "/queues/");
    client_path_segment(&p, name);
    return p;
}

static void add_queue_row(table *t, const json_t *q)
{
    const json_t *timers = json_object_get(q, "timers");
    char name[80], par[24], rate[32], scope[16], sched[24], retr[24], paused[24], due[24], age[24];
    const char *cells[] = {
        cli_str(q, "name", name, sizeof name),
        json_is_true(json_object_get(q, "paused")) ? "paused" : "active",
        cli_str(q, "parallelism", par, sizeof par),
        cli_str(q, "max_dispatches_per_second", rate, sizeof rate),
        cli_str(q, "scope", scope, sizeof scope),
        cli_str(timers, "scheduled", sched, sizeof sched),
        cli_str(timers, "retrying", retr, sizeof retr),
        cli_str(timers, "paused", paused, sizeof paused),
        cli_str(q, "due", due, sizeof due),
        cli_str(q, "oldest_due_age_ms", age, sizeof age),
    };
    table_add(t, cells);
}

/* Prints queues (an array) as a table. */
static void print_queues(const json_t *queues)
{
    static const char *const head[] = {"NAME",      "STATUS",   "PARALLELISM", "RATE/S", "SCOPE",
                                       "SCHEDULED", "RETRYING", "PAUSED",      "DUE",    "OLDEST_DUE_AGE_MS"};
    table *t = table_create(10, head);
    size_t i;
    json_t *q;
    json_array_foreach(queues, i, q)
        add_queue_row(t, q);
    table_print(t, stdout);
    table_free(t);
}

int cmd_queues(cli_ctx *ctx, const cli_args *a)
{
    char *path = a->npos ? queue_path(a->pos[0]) : xstrdup("/queues");
    json_t *ans;
    int rc = cli_call(ctx, "GET", path, NULL, &ans);
    free(path);
    if (rc != CLI_OK)
        return rc;
    if (ctx->json) {
        cli_print_json(ans);
    } else if (a->npos) {
        json_t *one = json_pack("[O]", ans);
        print_queues(one);
        json_decref(one);
    } else {
        print_queues(json_object_get(ans, "queues"));
    }
    json_decref(ans);
    return CLI_OK;
}

/* Sets only the queue's paused member (PATCH /queues/{name}): the API
 * merges it into the stored controls in one Redis call, so a change another
 * client makes to the others at the same time holds, and a queue without
 * stored controls keeps the defaults for the rest. Prints the queue as
 * stored. */
int cli_queue_pause(cli_ctx *ctx, const char *name, int pause)
{
    char *path = queue_path(name);
    json_t *body = json_pack("{s:b}", "paused", pause), *q;
    int rc = cli_call(ctx, "PATCH", path, body, &q);
    json_decref(body);
    free(path);
    if (rc != CLI_OK)
        return rc;
    if (ctx->json)
        cli_print_json(q);
    else
        printf("%s %s\n", name, json_is_true(json_object_get(q, "paused")) ? "paused" : "active");
    json_decref(q);
    return CLI_OK;
}

/* ---- leases ------------------------------------------------------------ */

static void print_lease(const json_t *l)
{
    static const char *const fields[] = {"key",          "owner",           "token",          "ttl_ms",
                                         "expires_in_ms", "renewing",        "acquired_at",    "last_heartbeat_at",
                                         "last_renewed_at", "probe_url",     "last_probe_ok_at"};
    char buf[512];
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (!json_object_get(l, fields[i]) && i > 4)
            continue;
        const char *v = cli_str(l, fields[i], buf, sizeof buf);
        printf("%-18s ", fields[i]);
        table_put(stdout, v ? v : "-");
        putchar('\n');
    }
}

static void add_lease_row(table *t, const json_t *l)
{
    char key[120], owner[220], token[24], ttl[24], exp[24], ren[8];
    const char *cells[] = {
        cli_str(l, "key", key, sizeof key),       cli_str(l, "owner", owner, sizeof owner),
        cli_str(l, "token", token, sizeof token), cli_str(l, "ttl_ms", ttl, sizeof ttl),
        cli_str(l, "expires_in_ms", exp, sizeof exp), cli_str(l, "renewing", ren, sizeof ren),
    };
    table_add(t, cells);
}

static int list_leases(cli_ctx *ctx, const cli_args *a)
{
    const char *limit = cli_arg(a, "limit");
    if (limit && (strspn(limit, "0123456789") != strlen(limit) || !*limit || strlen(limit) > 9))
        return cli_usage_error("leases", "--limit %s: give a whole number", limit);
    char *path = xstrdup("/leases");
    if (limit)
        client_query_add(&path, "limit", limit);
    static const char *const head[] = {"KEY", "OWNER", "TOKEN", "TTL_MS", "EXPIRES_IN_MS", "RENEWING"};
    return cli_list(ctx, a, "leases", path, "leases", head, 6, add_lease_row);
}

int cmd_leases(cli_ctx *ctx, const cli_args *a)
{
    if (a->npos == 0)
        return list_leases(ctx, a);
    char *path = NULL;
    client_path_add(&path, "/leases/");
    client_path_segment(&path, a->pos[0]);
    json_t *l;
    int rc = cli_call(ctx, "GET", path, NULL, &l);
    free(path);
    if (rc != CLI_OK)
        return rc;
    if (ctx->json)
        cli_print_json(l);
    else
        print_lease(l);
    json_decref(l);
    return CLI_OK;
}
