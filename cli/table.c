/* table.c - see table.h. Rows are kept until printed, since a column's
 * width is known only once every row is in. */
#include "cli/table.h"

#include <stdlib.h>
#include <string.h>

#include "service/xalloc.h"

struct table {
    int ncols;
    int nrows; /* the header included */
    char **cells; /* nrows * ncols */
};

table *table_create(int ncols, const char *const *headers)
{
    table *t = xcalloc(1, sizeof *t);
    t->ncols = ncols;
    table_add(t, headers);
    return t;
}

void table_free(table *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t);
}

/* A copy of s with each control character as one space (table_put). */
static char *clean_dup(const char *s)
{
    char *out = xmalloc(strlen(s) + 1), *o = out;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7F) {
            *o++ = ' ';
        } else if (*p == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F) {
            *o++ = ' '; /* a C1 control: 0x9B is a CSI to some terminals */
            p++;
        } else {
            *o++ = (char)*p;
        }
    }
    *o = '\0';
    return out;
}

void table_put(FILE *out, const char *s)
{
    char *c = clean_dup(s);
    fputs(c, out);
    free(c);
}

void table_add(table *t, const char *const *cells)
{
    t->cells = xrealloc(t->cells, (size_t)(t->nrows + 1) * (size_t)t->ncols * sizeof *t->cells);
    for (int c = 0; c < t->ncols; c++)
        t->cells[t->nrows * t->ncols + c] = clean_dup(cells[c] ? cells[c] : "-");
    t->nrows++;
}

void table_print(const table *t, FILE *out)
{
    size_t *width = xcalloc((size_t)t->ncols, sizeof *width);
    for (int r = 0; r < t->nrows; r++)
        for (int c = 0; c < t->ncols; c++) {
            size_t n = strlen(t->cells[r * t->ncols + c]);
            if (n > width[c])
                width[c] = n;
        }
    for (int r = 0; r < t->nrows; r++) {
        for (int c = 0; c < t->ncols; c++) {
            const char *cell = t->cells[r * t->ncols + c];
            if (c == t->ncols - 1)
                fprintf(out, "%s\n", cell);
            else
                fprintf(out, "%-*s  ", (int)width[c], cell);
        }
    }
    free(width);
}
