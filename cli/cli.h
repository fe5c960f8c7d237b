/* cli.h - what hookwheelctl's files share: the exit codes, the option
 * tables and parsed arguments, and the command table's shape.
 *
 * main.c parses the global options and picks a command from the table;
 * every command is one run function in a cmd_*.c file that calls the API
 * through client.h and prints its result (a table or a line by default,
 * the API's JSON with --json). Single-threaded. */
#ifndef HW_CLI_CLI_H
#define HW_CLI_CLI_H

#include <stddef.h>

#include "cli/client.h"

#define CLI_VERSION "0.1.0"

/* Exit codes, the contract with scripts (README "Command-line client"). */
enum cli_exit {
    CLI_OK = 0,          /* the call succeeded */
    CLI_REFUSED = 1,     /* the API refused the request: a 4xx not listed below */
    CLI_USAGE = 2,       /* bad flags or arguments; nothing was sent */
    CLI_NOT_FOUND = 3,   /* 404 */
    CLI_AUTH = 4,        /* 401 or 403 */
    CLI_CONFLICT = 5,    /* 409 */
    CLI_UNAVAILABLE = 6, /* a 5xx, or no answer (refused, timed out, unresolvable) */
};

/* One option of a command: --name, taking a value shown as arg in help, or
 * a flag when arg is NULL. Any option may be given more than once; commands
 * read the last value, or every value of a repeatable one. */
typedef struct cli_opt {
    const char *name;
    const char *arg;
    const char *help;
} cli_opt;

/* A parsed command line: the positional arguments and the options in the
 * order given. Entries point into argv and the option tables. */
typedef struct cli_args {
    const char **pos;
    int npos;
    struct cli_arg_entry {
        const cli_opt *opt;
        const char *value; /* NULL for a flag */
        int global;
    } *ent;
    int nent;
} cli_args;

typedef struct cli_ctx {
    client *http;
    int json;                /* --json: print the API's JSON instead of a table or a line */
    long status;             /* the HTTP status of the last cli_call (0: no answer) */
    const cli_args *globals; /* the global options given before the command */
} cli_ctx;

typedef struct cli_cmd {
    const char *name;
    const char *usage;   /* what follows the name, e.g. "ID" */
    const char *summary; /* one line for the command list */
    const char *help;    /* a paragraph for `help <cmd>` */
    const cli_opt *opts; /* ends with {NULL} */
    int min_pos, max_pos;
    int (*run)(cli_ctx *ctx, const cli_args *a);
} cli_cmd;

/* Parses argv (after the command name) against the command's options and
 * the global ones; a command option shadows a global one of the same name.
 * "--name value", "--name=value" and "--" are understood. Returns 0, or
 * prints why on stderr and returns CLI_USAGE. a is freed with
 * cli_args_free. */
int cli_args_parse(const cli_cmd *cmd, const cli_opt *globals, int argc, char **argv, cli_args *a);
void cli_args_free(cli_args *a);

/* The last value of the command option name (a flag: "" when given), or
 * NULL when absent; the n-th value (from 0) of a repeatable one; the last
 * value of a global option. */
const char *cli_arg(const cli_args *a, const char *name);
const char *cli_arg_nth(const cli_args *a, const char *name, int n);
const char *cli_arg_global(const cli_args *a, const char *name);

/* A usage error: prints "hookwheelctl: <message>" and the hint to see
 * `help cmd` on stderr; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints the JSON value on stdout, one compact document and a newline. */
void cli_print_json(const json_t *json);

/* Calls the API and, on a 2xx, hands the decoded answer to the caller in
 * *body (a new reference, never NULL: an empty answer is {}). Otherwise
 * prints the problem and returns its exit code; *body is then NULL. */
int cli_call(cli_ctx *ctx, const char *method, const char *path, const json_t *json_body, json_t **body);

/* GETs path (with its query, without a cursor) from cursor (NULL: the
 * first page) on, one page or every page (all), appending each page's
 * array member to items. *next is the cursor after the last page read
 * (malloc'd; NULL after the last page). Returns the exit code. */
int cli_fetch_pages(cli_ctx *ctx, const char *path, const char *member, const char *cursor, int all,
                    json_t *items, char **next);

/* `ls` and `leases`: fetches the pages of path (cli_fetch_pages, the
 * --cursor and --all of a) and prints them: with --json one page
 * {member: [...], next_cursor}, else a table of ncols columns named by
 * head, one row a item (row adds it), and on stderr, when there is a next
 * page, the command that reads it: `hookwheelctl`, the --url and
 * --max-time given, cmd with every option of a but --cursor and --all (its
 * last value), and `--cursor <next_cursor>`, each word quoted for a POSIX
 * shell. --token is never printed: it is a credential. Takes path. Returns
 * the exit code. */
struct table;
int cli_list(cli_ctx *ctx, const cli_args *a, const char *cmd, char *path, const char *member,
             const char *const *head, int ncols, void (*row)(struct table *t, const json_t *item));

/* obj's member key as text in buf (a string as it is, a number in
 * decimal, true/false; NULL when absent or null). Returns buf or NULL. */
const char *cli_str(const json_t *obj, const char *key, char *buf, size_t size);

/* The command table (main.c) and the commands (cmd_timers.c, cmd_ops.c). */
extern const cli_cmd cli_commands[];
extern const size_t cli_command_count;

int cmd_create(cli_ctx *ctx, const cli_args *a);
int cmd_get(cli_ctx *ctx, const cli_args *a);
int cmd_cancel(cli_ctx *ctx, const cli_args *a);
int cmd_ls(cli_ctx *ctx, const cli_args *a);
int cmd_fire(cli_ctx *ctx, const cli_args *a);
int cmd_pause(cli_ctx *ctx, const cli_args *a);
int cmd_resume(cli_ctx *ctx, const cli_args *a);
int cmd_retry(cli_ctx *ctx, const cli_args *a);
int cmd_replay(cli_ctx *ctx, const cli_args *a);
int cmd_purge(cli_ctx *ctx, const cli_args *a);
int cmd_queues(cli_ctx *ctx, const cli_args *a);
int cmd_leases(cli_ctx *ctx, const cli_args *a);

/* Pauses (pause 1) or resumes (0) a queue and prints it (cmd_ops.c). */
int cli_queue_pause(cli_ctx *ctx, const char *name, int pause);

#endif
