/* test_cron_oracle.c - cron_next and tz_offset_at as a line-oriented
 * program, for tests/unit/cron_reference.py, which compares them with an
 * independent computation (Python's zoneinfo over the same tz database).
 *
 * Without arguments it checks one known instant and exits. With --stdin it
 * reads lines and answers one line each:
 *   N<TAB>expr<TAB>zone<TAB>gap(0 shift,1 skip)<TAB>overlap(0 first,1 both)<TAB>after_ms<TAB>count
 *     -> "ms:flags ms:flags ..." (the instants in turn, each after the one before), or "ERR msg"
 *   O<TAB>zone<TAB>t1,t2,...  -> the offsets in seconds, space separated */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cron.h"
#include "tzfile.h"

static void answer(char *line)
{
    char *save = NULL, *kind = strtok_r(line, "\t\n", &save);
    if (!kind) {
        puts("ERR empty line");
        return;
    }
    if (kind[0] == 'O') {
        char *zn = strtok_r(NULL, "\t\n", &save), *ts = strtok_r(NULL, "\t\n", &save), err[200];
        const tz *z = zn ? tz_get(zn, err, sizeof err) : NULL;
        if (!z || !ts) {
            puts("ERR zone");
            return;
        }
        for (char *s2 = NULL, *t = strtok_r(ts, ",", &s2); t; t = strtok_r(NULL, ",", &s2))
            printf("%d ", (int)tz_offset_at(z, strtoll(t, NULL, 10), NULL));
        putchar('\n');
        return;
    }
    char *expr = strtok_r(NULL, "\t", &save), *zn = strtok_r(NULL, "\t", &save), *g = strtok_r(NULL, "\t", &save),
         *o = strtok_r(NULL, "\t", &save), *after = strtok_r(NULL, "\t", &save),
         *count = strtok_r(NULL, "\t\n", &save), err[200];
    if (!count) {
        puts("ERR fields");
        return;
    }
    const tz *z = tz_get(zn, err, sizeof err);
    cron_expr *c = NULL;
    cron_error ce;
    if (!z) {
        printf("ERR %s\n", err);
        return;
    }
    if (cron_parse(expr, &c, &ce) < 0) {
        printf("ERR %s\n", ce.msg);
        return;
    }
    int64_t t = strtoll(after, NULL, 10);
    for (int i = 0, n = atoi(count); i < n; i++) {
        cron_instant in;
        if (cron_next(c, z, (enum cron_gap)atoi(g), (enum cron_overlap)atoi(o), t, &in) < 0)
            break;
        printf("%lld:%d ", (long long)in.utc_ms, in.flags);
        t = in.utc_ms;
    }
    putchar('\n');
    cron_free(c);
}

static void test_one_known_instant(void **state)
{
    (void)state;
    char line[] = "N\t30 2 * * *\tEurope/Berlin\t0\t0\t1824724800000\t1\n"; /* 2027-10-28T12:00Z */
    answer(line);
    char err[200];
    const tz *z = tz_get("Europe/Berlin", err, sizeof err);
    assert_non_null(z);
    assert_int_equal(tz_offset_at(z, 1824724800, NULL), 7200);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--stdin")) {
        char line[65536];
        setvbuf(stdout, NULL, _IOLBF, 0);
        while (fgets(line, sizeof line, stdin))
            answer(line);
        return 0;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_one_known_instant)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
