/* table.h - an aligned text table for hookwheelctl's listings: columns as
 * wide as their widest cell, two spaces apart, a header row first; and the
 * printing of one value from the API on a line of its own.
 * Single-threaded. The table copies every cell it is given. */
#ifndef HW_CLI_TABLE_H
#define HW_CLI_TABLE_H

#include <stdio.h>

typedef struct table table; /* opaque */

/* A table of ncols columns named by headers (copied). */
table *table_create(int ncols, const char *const *headers);
void table_free(table *t); /* NULL is a no-op */

/* Adds a row of ncols cells; a NULL cell prints as "-". A cell prints as
 * table_put prints it. */
void table_add(table *t, const char *const *cells);

/* Prints the header and the rows; the last column is not padded. */
void table_print(const table *t, FILE *out);

/* Prints s with every control character (C0, DEL, and U+0080-U+009F in
 * UTF-8) as one space: a value from the API (a lease's owner is whatever
 * its Redis key holds) stays on its line and sends the terminal text only,
 * never a line break or an escape sequence. */
void table_put(FILE *out, const char *s);

#endif
