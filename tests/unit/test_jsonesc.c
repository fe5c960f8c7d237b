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
static void test_a_character_cut_at_the_end_is_left_out_of_the_whole_prefix(void **state)
{
    (void)state;
    const unsigned char *s = (const unsigned char *)"a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    assert_int_equal(utf8_whole_prefix(s, 10), 10); /* every character whole */
    assert_int_equal(utf8_whole_prefix(s, 9), 6);   /* 3 bytes of a 4-byte one */
    assert_int_equal(utf8_whole_prefix(s, 7), 6);   /* its lead byte alone */
    assert_int_equal(utf8_whole_prefix(s, 5), 3);   /* 2 bytes of a 3-byte one */
    assert_int_equal(utf8_whole_prefix(s, 2), 1);
    assert_int_equal(utf8_whole_prefix(s, 0), 0);
    /* not UTF-8 to begin with: nothing is taken off */
    assert_int_equal(utf8_whole_prefix((const unsigned char *)"ok\xff", 3), 3);
    assert_int_equal(utf8_whole_prefix((const unsigned char *)"\x80\x80", 2), 2);
}

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

/* Seeded random strings, valid UTF-8 and not, special bytes anywhere in the
 * eight-byte step: json_escape (in exactly 6 * len bytes), jb_text and
 * jb_str read back in jansson as the documented rule says, and jb_str
 * writes what json_dumps writes (spec.c's canonical form relies on it). */
static unsigned long long rng = 0x2545F4914F6CDD1DULL;
static unsigned rnd(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

static void assert_reads_back(const char *text, size_t n, const unsigned char *want, size_t len, int valid)
{
    json_error_t err;
    json_t *v = json_loadb(text, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!v)
        fail_msg("not JSON: %.*s (%s)", (int)n, text, err.text);
    assert_int_equal(json_string_length(v), len);
    const unsigned char *got = (const unsigned char *)json_string_value(v);
    for (size_t i = 0; i < len; i++)
        assert_int_equal(got[i], valid || want[i] < 0x80 ? want[i] : '?');
    json_decref(v);
}

static void test_random_strings_read_back_as_written(void **state)
{
    (void)state;
    static const char *const pieces[] = {"a", "\"", "\\", "\n", "\x01", "\x1f", "\x7f", "/", "\xc3\xa9",
                                         "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf", "\xff",
                                         "\xc3", "\xed\xa0\x80", "\xc0\x80"};
    for (int round = 0; round < 20000; round++) {
        unsigned char s[64];
        size_t len = 0, want = rnd(40);
        while (len < want) {
            const char *p = rnd(4) ? "b" : rnd(16) ? pieces[rnd(sizeof pieces / sizeof *pieces)] : "";
            size_t k = *p ? strlen(p) : 1; /* ("" is a NUL byte) */
            memcpy(s + len, p, k);
            len += k;
        }
        int valid = utf8_valid(s, len);
        char *esc = malloc(len ? 6 * len : 1), text[6 * 64 + 2]; /* (exactly the room jsonesc.h asks for) */
        assert_non_null(esc);
        size_t n = json_escape(esc, (const char *)s, len);
        text[0] = '"';
        memcpy(text + 1, esc, n);
        text[n + 1] = '"';
        assert_reads_back(text, n + 2, s, len, valid);
        free(esc);
        jbuf b = {0};
        jb_text(&b, (const char *)s, len);
        assert_reads_back(b.p, b.n, s, len, valid);
        free(b.p);
        if (valid) {
            jbuf c = {0};
            jb_str(&c, (const char *)s, len);
            json_t *v = json_stringn((const char *)s, len);
            char *d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            assert_non_null(d);
            assert_int_equal(c.n, strlen(d));
            assert_memory_equal(c.p, d, c.n);
            free(d);
            json_decref(v);
            free(c.p);
        }
    }
}

/* Pieces of 1 to 40 bytes, some longer than a fill's room. */
typedef struct pieces {
    jbuf *b;
    int i, n;
} pieces;

static int next_piece(void *arg)
{
    pieces *p = arg;
    if (p->i == p->n)
        return 0;
    int len = 1 + (p->i * 7) % 40;
    for (int k = 0; k < len; k++) {
        char ch = (char)('a' + (p->i + k) % 26);
        jb_put(p->b, &ch, 1);
    }
    p->i++;
    return 1;
}

static void test_a_fill_hands_out_the_pieces_whole_in_order_whatever_its_room(void **state)
{
    (void)state;
    jbuf want = {0};
    pieces all = {&want, 0, 300};
    while (next_piece(&all))
        ;
    for (size_t room = 1; room <= 64; room = room * 2 + 1) {
        jbuf b = {0}, got = {0};
        size_t taken = 0, n;
        pieces p = {&b, 0, 300};
        char buf[64];
        while ((n = jb_fill(&b, &taken, buf, room, next_piece, &p)) > 0) {
            assert_true(n <= room);
            jb_put(&got, buf, n);
        }
        assert_int_equal(got.n, want.n);
        assert_memory_equal(got.p, want.p, want.n);
        assert_int_equal(jb_fill(&b, &taken, buf, room, next_piece, &p), 0); /* and stays ended */
        free(b.p);
        free(got.p);
    }
    free(want.p);
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
        cmocka_unit_test(test_a_character_cut_at_the_end_is_left_out_of_the_whole_prefix),
        cmocka_unit_test(test_the_builder_writes_json_jansson_reads_back),
        cmocka_unit_test(test_the_plain_prefix_stops_where_a_byte_needs_attention),
        cmocka_unit_test(test_random_strings_read_back_as_written),
        cmocka_unit_test(test_a_fill_hands_out_the_pieces_whole_in_order_whatever_its_room),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
