/* args.c - command-line parsing against the option tables of cli.h.
 *
 * getopt_long would need one struct option array per command built from
 * the same tables that print the help; parsing the tables directly keeps
 * one source for both, and lets a command option shadow a global one of
 * the same name (create --url is the target, the global --url the API). */
#include "cli/cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/xalloc.h"

static const cli_opt *find_opt(const cli_opt *opts, const char *name, size_t len)
{
    for (const cli_opt *o = opts; o && o->name; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
            return o;
    return NULL;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fputs("hookwheelctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (cmd)
        fprintf(stderr, " (see: hookwheelctl help %s)\n", cmd);
    else
        fputs(" (see: hookwheelctl --help)\n", stderr);
    return CLI_USAGE;
}

static void add_entry(cli_args *a, const cli_opt *o, const char *value, int global)
{
    a->ent = xrealloc(a->ent, (size_t)(a->nent + 1) * sizeof *a->ent);
    a->ent[a->nent].opt = o;
    a->ent[a->nent].value = value;
    a->ent[a->nent].global = global;
    a->nent++;
}

/* Parses the option at argv[*i] ("--name", "--name=value", "-h"); moves *i
 * past its value. Returns 0 or CLI_USAGE. */
static int parse_option(const cli_cmd *cmd, const cli_opt *globals, int argc, char **argv, int *i,
                        cli_args *a)
{
    const char *arg = argv[*i];
    const char *name = strcmp(arg, "-h") == 0 ? "help" : arg + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    int global = 0;
    const cli_opt *o = find_opt(cmd ? cmd->opts : NULL, name, len);
    if (!o) {
        o = find_opt(globals, name, len);
        global = 1;
    }
    if (!o || (arg[1] != '-' && strcmp(arg, "-h") != 0))
        return cli_usage_error(cmd ? cmd->name : NULL, "unknown option %s", arg);
    if (!o->arg) {
        if (eq)
            return cli_usage_error(cmd ? cmd->name : NULL, "--%s takes no value", o->name);
        add_entry(a, o, "", global);
        return 0;
    }
    if (eq) {
        add_entry(a, o, eq + 1, global);
        return 0;
    }
    if (*i + 1 >= argc)
        return cli_usage_error(cmd ? cmd->name : NULL, "--%s needs a value (%s)", o->name, o->arg);
    add_entry(a, o, argv[++*i], global);
    return 0;
}

int cli_args_parse(const cli_cmd *cmd, const cli_opt *globals, int argc, char **argv, cli_args *a)
{
    memset(a, 0, sizeof *a);
    a->pos = xcalloc((size_t)argc + 1, sizeof *a->pos);
    int only_pos = 0;
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        if (!only_pos && strcmp(s, "--") == 0) {
            only_pos = 1;
        } else if (!only_pos && s[0] == '-' && s[1] != '\0') {
            int rc = parse_option(cmd, globals, argc, argv, &i, a);
            if (rc)
                return rc;
        } else {
            a->pos[a->npos++] = s;
        }
    }
    return 0;
}

void cli_args_free(cli_args *a)
{
    free(a->pos);
    free(a->ent);
    memset(a, 0, sizeof *a);
}

static const char *last_value(const cli_args *a, const char *name, int global)
{
    const char *v = NULL;
    for (int i = 0; i < a->nent; i++)
        if (a->ent[i].global == global && strcmp(a->ent[i].opt->name, name) == 0)
            v = a->ent[i].value;
    return v;
}

const char *cli_arg(const cli_args *a, const char *name)
{
    return last_value(a, name, 0);
}

const char *cli_arg_global(const cli_args *a, const char *name)
{
    return last_value(a, name, 1);
}

const char *cli_arg_nth(const cli_args *a, const char *name, int n)
{
    for (int i = 0; i < a->nent; i++)
        if (!a->ent[i].global && strcmp(a->ent[i].opt->name, name) == 0 && n-- == 0)
            return a->ent[i].value;
    return NULL;
}
