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

void table_add(table *t, const char *const *cells)
{
    t->cells = xrealloc(t->cells, (size_t)(t->nrows + 1) * (size_t)t->ncols * sizeof *t->cells);
    for (int c = 0; c < t->ncols; c++)
        t->cells[t->nrows * t->ncols + c] = xstrdup(cells[c] ? cells[c] : "-");
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
