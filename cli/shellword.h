/* shellword.h - a value as one word of a POSIX shell command, for the
 * commands hookwheelctl prints for its user to run (the next page of a
 * listing). Pure; any thread. */
#ifndef HW_CLI_SHELLWORD_H
#define HW_CLI_SHELLWORD_H

#include <stdio.h>

/* 1 when s holds no control character (C0, DEL, U+0080-U+009F in UTF-8):
 * printed, even quoted, such a word would reach the terminal as a line
 * break or an escape sequence, so it cannot be shown as a command to copy. */
int shellword_printable(const char *s);

/* Prints s so that a POSIX shell reads it back as exactly one word equal
 * to s: as it is when every character is one the shell takes literally
 * wherever it stands (letters, digits, _ @ % + , . / : -; = and ~ past
 * the first character, ~ not after = or :), else in single quotes, each '
 * as '\'' (the empty string as ''). */
void shellword_put(FILE *out, const char *s);

#endif
