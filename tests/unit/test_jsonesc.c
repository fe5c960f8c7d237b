/* test_jsonesc.c - hand-written JSON strings (jsonesc.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "jsonesc.h"

/* Escapes s, wraps it in quotes and checks jansson reads back want. */
static void assert_round_trip(const char *s, size_t len, const char *want, size_t want_len)
{
    char buf[512];
    buf[0] = '"';
    size_t n = 1 + json_escape(buf + 1, s, len);
    buf[n++] = '"';
    json_error_t err;
    json_t *v = json_loadb(buf, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!v)
        fail_msg("not JSON: %.*s (%s)", (int)n, buf, err.text);
    assert_int_equal(json_string_length(v), want_len);
    assert_memory_equal(json_string_value(v), want, want_len);
    json_decref(v);
}

static void test_quotes_backslashes_and_control_characters_are_escaped(void **state)
{
    (void)state;
    const char s[] = "a\"b\\c\nd\te\x01 f";
    assert_round_trip(s, sizeof s - 1, s, sizeof s - 1);
}

static void test_a_nul_byte_survives_as_an_escape(void **state)
{
    (void)state;
    assert_round_trip("a\0b", 3, "a\0b", 3);
}

/* json_escape writes at most 6 * len bytes, as jsonesc.h promises: a control
 * character at the end of the input must not leave a NUL past them. */
static void test_escaping_stays_within_six_bytes_a_byte(void **state)
{
    (void)state;
    for (size_t len = 1; len <= 4; len++) {
        char s[4], out[6 * 4 + 1];
        memset(s, '\x01', sizeof s);
        memset(out, 'G', sizeof out);
        assert_int_equal(json_escape(out, s, len), 6 * len);
        assert_memory_equal(out + 6 * (len - 1), "\\u0001", 6);
        assert_int_equal(out[6 * len], 'G');
    }
}

static void test_valid_utf8_is_kept(void **state)
{
    (void)state;
    const char s[] = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80";
    assert_round_trip(s, sizeof s - 1, s, sizeof s - 1);
}

static void test_invalid_utf8_becomes_question_marks(void **state)
{
    (void)state;
    assert_round_trip("ok\xff\xfe", 4, "ok??", 4);
    assert_round_trip("\xc3", 1, "?", 1);
}

static void test_utf8_validation_rejects_overlongs_surrogates_and_beyond_the_last_code_point(void **state)
{
    (void)state;
    assert_int_equal(utf8_valid((const unsigned char *)"\xc0\xaf", 2), 0);
    assert_int_equal(utf8_valid((const unsigned char *)"\xe0\x80\xaf", 3), 0);
    assert_int_equal(utf8_valid((const unsigned char *)"\xed\xa0\x80", 3), 0);
    assert_int_equal(utf8_valid((const unsigned char *)"\xf4\x90\x80\x80", 4), 0);
    assert_int_equal(utf8_valid((const unsigned char *)"\xf4\x8f\xbf\xbf", 4), 1);
    assert_int_equal(utf8_valid((const unsigned char *)"", 0), 1);
}

/* The builder: an array of every string form, grown from empty past many
 * reallocations, reads back in jansson as written. */
static void test_the_builder_writes_json_jansson_reads_back(void **state)
{
    (void)state;
    jbuf b = {0};
    jb_put(&b, "[", 1);
    for (int i = 0; i < 500; i++) {
        jb_str(&b, "a\"b\\c\n\x01\xc3\xa9", 9);
        jb_put(&b, ",", 1);
        jb_text(&b, "cut\xc3", 4);
        jb_put(&b, ",", 1);
        jb_int(&b, -1234567890123LL + i);
        jb_put(&b, i < 499 ? "," : "]", 1);
    }
    json_error_t err;
    json_t *v = json_loadb(b.p, b.n, 0, &err);
    if (!v)
        fail_msg("not JSON: %s", err.text);
    assert_int_equal(json_array_size(v), 1500);
    assert_string_equal(json_string_value(json_array_get(v, 0)), "a\"b\\c\n\x01\xc3\xa9");
    assert_string_equal(json_string_value(json_array_get(v, 1)), "cut?");
    assert_int_equal(json_integer_value(json_array_get(v, 1499)), -1234567890123LL + 499);
    json_decref(v);
    free(b.p);
}

/* json_plain_prefix against the byte-at-a-time rule, for every byte value
 * at every place of strings up to 40 bytes long (so at every offset within
 * an eight-byte step, and after a byte that borrows), in both modes. */
static size_t plain_naive(const unsigned char *s, size_t len, int ascii)
{
    size_t i = 0;
    while (i < len && s[i] >= 0x20 && s[i] != '"' && s[i] != '\\' && !(ascii && s[i] >= 0x80))
        i++;
    return i;
}

static void test_the_plain_prefix_stops_where_a_byte_needs_attention(void **state)
{
    (void)state;
    unsigned char s[41];
    for (size_t len = 0; len <= 40; len++) {
        for (size_t at = 0; at < len; at++) {
            for (int c = 0; c < 256; c++) {
                for (size_t k = 0; k < len; k++)
                    s[k] = (unsigned char)('a' + k % 26);
                s[at] = (unsigned char)c;
                if (at + 1 < len) /* a byte after it that would borrow, or be special itself */
                    s[at + 1] = (unsigned char)(c ^ 0x5c);
                for (int ascii = 0; ascii <= 1; ascii++)
                    assert_int_equal(json_plain_prefix(s, len, ascii), plain_naive(s, len, ascii));
            }
        }
        for (int ascii = 0; ascii <= 1; ascii++) /* nothing special: the whole string */
            assert_int_equal(json_plain_prefix((const unsigned char *)"abcdefghijklmnopqrstuvwxyzabcdefghijklmn",
                                               len, ascii), len);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quotes_backslashes_and_control_characters_are_escaped),
        cmocka_unit_test(test_a_nul_byte_survives_as_an_escape),
        cmocka_unit_test(test_escaping_stays_within_six_bytes_a_byte),
        cmocka_unit_test(test_valid_utf8_is_kept),
        cmocka_unit_test(test_invalid_utf8_becomes_question_marks),
        cmocka_unit_test(test_utf8_validation_rejects_overlongs_surrogates_and_beyond_the_last_code_point),
        cmocka_unit_test(test_the_builder_writes_json_jansson_reads_back),
        cmocka_unit_test(test_the_plain_prefix_stops_where_a_byte_needs_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
