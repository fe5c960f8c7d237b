/* test_record.c - the stored timer record (record.h). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "record.h"

static void test_a_record_splits_into_its_nine_fields(void **state)
{
    (void)state;
    const char *t = "retrying\n1795\n2\n1700\nnode-1\ndelay_ms=5\n{\"at\":\"x\"}\n3 2\n{\"url\":\"http://h/\"}";
    record r;

    assert_int_equal(record_parse(t, strlen(t), &r), 0);
    assert_memory_equal(r.f[REC_STATE], "retrying", r.len[REC_STATE]);
    assert_int_equal(record_int(&r, REC_FIRE), 1795);
    assert_int_equal(record_int(&r, REC_ATTEMPTS), 2);
    assert_int_equal(record_int(&r, REC_CREATED), 1700);
    assert_memory_equal(r.f[REC_OWNER], "node-1", r.len[REC_OWNER]);
    assert_int_equal(r.len[REC_LAST], strlen("{\"at\":\"x\"}"));
    assert_int_equal(r.len[REC_SPEC], strlen("{\"url\":\"http://h/\"}"));
    assert_memory_equal(r.f[REC_SPEC], "{\"url\":\"http://h/\"}", r.len[REC_SPEC]);
    long long run[RUN_FIELDS];
    record_run(&r, run);
    assert_int_equal(run[RUN_VERSION], 3);
    assert_int_equal(run[RUN_RUNS], 2);
    assert_int_equal(run[RUN_RESERVED], 0);
    assert_int_equal(run[RUN_NEXT], 0);
}

static void test_empty_fields_stay_empty(void **state)
{
    (void)state;
    const char *t = "scheduled\n5\n0\n4\n\nfire_at_ms=5\n\n\n{}";
    record r;

    assert_int_equal(record_parse(t, strlen(t), &r), 0);
    assert_int_equal(r.len[REC_OWNER], 0);
    assert_int_equal(r.len[REC_LAST], 0);
    assert_int_equal(record_int(&r, REC_OWNER), 0);
    long long run[RUN_FIELDS];
    record_run(&r, run);
    for (int i = 0; i < RUN_FIELDS; i++)
        assert_int_equal(run[i], 0);
}

static void test_a_record_with_too_few_lines_is_rejected(void **state)
{
    (void)state;
    record r;

    assert_int_equal(record_parse("scheduled\n5\n0", 13, &r), -EINVAL);
    assert_int_equal(record_parse("", 0, &r), -EINVAL);
}

static void test_a_field_that_is_not_a_number_reads_as_zero(void **state)
{
    (void)state;
    const char *t = "scheduled\n12x\n0\n4\n\n\n\n\n{}";
    record r;

    assert_int_equal(record_parse(t, strlen(t), &r), 0);
    assert_int_equal(record_int(&r, REC_FIRE), 0);
}

static void test_the_created_line_holds_the_time_and_the_creating_request(void **state)
{
    (void)state;
    const char *with = "scheduled\n5\n0\n1700 req-1.a/b\n\n\n\n\n{}";
    const char *without = "scheduled\n5\n0\n1700\n\n\n\n\n{}";
    record r;
    size_t len;

    assert_int_equal(record_parse(with, strlen(with), &r), 0);
    assert_int_equal(record_int(&r, REC_CREATED), 1700);
    const char *rid = record_request_id(&r, &len);
    assert_int_equal(len, strlen("req-1.a/b"));
    assert_memory_equal(rid, "req-1.a/b", len);
    assert_int_equal(record_parse(without, strlen(without), &r), 0);
    assert_int_equal(record_int(&r, REC_CREATED), 1700);
    assert_string_equal(record_request_id(&r, &len), "");
    assert_int_equal(len, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_record_splits_into_its_nine_fields),
        cmocka_unit_test(test_empty_fields_stay_empty),
        cmocka_unit_test(test_a_record_with_too_few_lines_is_rejected),
        cmocka_unit_test(test_a_field_that_is_not_a_number_reads_as_zero),
        cmocka_unit_test(test_the_created_line_holds_the_time_and_the_creating_request),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
