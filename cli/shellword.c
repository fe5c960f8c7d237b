/* shellword.c - see shellword.h. Single quotes are the one quoting a POSIX
 * shell (and bash, zsh, ksh, dash) reads the same way everywhere: nothing
 * inside them is special but the closing quote, so no character needs an
 * escape but ' itself. A word that needs no quotes keeps them off, since
 * the command reads better and most words (options, numbers, cursors) are
 * plain. */
#include "cli/shellword.h"

#include <string.h>

int shellword_printable(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7F || (*p == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F))
            return 0;
    return 1;
}

/* Characters a shell takes literally anywhere in a word. */
#define LITERAL "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+,./:-"

/* 1 when no character of s needs quoting. = and ~ may not lead: a leading
 * ~ is a home directory to every shell, a leading = a command's path to
 * zsh; nor may ~ follow = or :, where bash expands it in a word shaped
 * like an assignment (a=~/x). */
static int plain(const char *s)
{
    if (!*s)
        return 0;
    for (const char *p = s; *p; p++) {
        int ok = strchr(LITERAL, *p) != NULL || (p > s && *p == '=') ||
                 (p > s && *p == '~' && p[-1] != '=' && p[-1] != ':');
        if (!ok)
            return 0;
    }
    return 1;
}

void shellword_put(FILE *out, const char *s)
{
    if (plain(s)) {
        fputs(s, out);
        return;
    }
    fputc('\'', out);
    for (; *s; s++) {
        if (*s == '\'')
            fputs("'\\''", out);
        else
            fputc(*s, out);
    }
    fputc('\'', out);
}
