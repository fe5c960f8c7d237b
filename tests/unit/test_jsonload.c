/* test_jsonload.c - json_load_fast gives what json_loadb gives (jsonload.h).
 *
 * Every input is loaded both ways and compared: both fail with the same
 * error (text, line, column, position), or both succeed with the same tree
 * (json_equal, which tells integers from reals) whose keys come in the same
 * order (the compact dumps are equal). Inputs the API meets must also take
 * the fast path (json_load_fast_only), or the comparison would only test
 * jansson against itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "jsonload.h"

static const size_t flag_sets[] = {0, JSON_REJECT_DUPLICATES, JSON_DECODE_ANY,
                                   JSON_DECODE_ANY | JSON_REJECT_DUPLICATES};

/* Loads buf both ways with flags; returns 1 when the fast path built the tree. */
static int same_as_jansson(const char *buf, size_t len, size_t flags)
{
    json_error_t e1, e2;
    memset(&e1, 0, sizeof e1);
    memset(&e2, 0, sizeof e2);
    json_t *a = json_load_fast(buf, len, flags, &e1), *b = json_loadb(buf, len, flags, &e2);
    json_t *only = json_load_fast_only(buf, len, flags);
    if (!a || !b) {
        if (a || b)
            fail_msg("one side failed on %.*s (flags %zu): fast %s, jansson %s", (int)len, buf, flags,
                     a ? "ok" : e1.text, b ? "ok" : e2.text);
        assert_string_equal(e1.text, e2.text);
        assert_int_equal(e1.line, e2.line);
        assert_int_equal(e1.column, e2.column);
        assert_int_equal(e1.position, e2.position);
        if (only)
            fail_msg("the fast path accepted what jansson refuses: %.*s (%s)", (int)len, buf, e2.text);
        return 0;
    }
    if (!json_equal(a, b))
        fail_msg("different trees for %.*s (flags %zu)", (int)len, buf, flags);
    char *da = json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY), *db = json_dumps(b, JSON_COMPACT | JSON_ENCODE_ANY);
    assert_non_null(da);
    assert_non_null(db);
    assert_string_equal(da, db);
    if (only) {
        char *dn = json_dumps(only, JSON_COMPACT | JSON_ENCODE_ANY);
        assert_string_equal(dn, db);
        free(dn);
    }
    free(da);
    free(db);
    json_decref(a);
    json_decref(b);
    int fast = only != NULL;
    json_decref(only);
    return fast;
}

static int same_all_flags(const char *s, size_t len)
{
    int fast = 0;
    for (size_t i = 0; i < sizeof flag_sets / sizeof *flag_sets; i++)
        fast |= same_as_jansson(s, len, flag_sets[i]);
    return fast;
}

/* s must load as jansson loads it, through the fast path. */
static void assert_fast(const char *s)
{
    if (!same_as_jansson(s, strlen(s), JSON_DECODE_ANY | JSON_REJECT_DUPLICATES))
        fail_msg("not on the fast path: %s", s);
    same_all_flags(s, strlen(s));
}

static void test_the_documents_the_api_meets_take_the_fast_path(void **state)
{
    (void)state;
    assert_fast("{\"id\": \"0123456789abcdef0123456789abcdef\", \"url\": \"http://127.0.0.1:9/hook\", "
                "\"fire_at_ms\": 1795707870406, \"body\": \"xxxxxxxx\"}");
    assert_fast("{\"timers\":[{\"url\":\"http://a/\",\"delay_ms\":0},{\"url\":\"http://b/\",\"delay_ms\":-5}],"
                "\"atomic\":true}");
    assert_fast("{\"body\":\"{\\\"order\\\":42,\\\"note\\\":\\\"a\\\\nb\\\"}\",\"headers\":{\"X-A\":\"1\"},"
                "\"retry\":{\"max_attempts\":3},\"labels\":{\"customer\":\"42\"},\"json\":null}");
    assert_fast("{\"s\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\",\"e\":\"\\u00e9\\u20ac\\ud83d\\ude00\\/\\b\\f\\r\\t\"}");
    assert_fast(" \t\r\n[ 1 , -0 , 0 , -12 , 999999999999999999 , true , false , null , \"\" , { } , [ ] ] \n");
    assert_fast("\"a string\"");
    assert_fast("42");
    assert_fast("{\"\":1,\"a\":{\"\":[[[]]]}}");
}

/* What the fast path leaves to jansson: the answer is jansson's whatever it is. */
static void test_what_it_leaves_to_jansson_is_jansson_s_answer(void **state)
{
    (void)state;
    static const char *const inputs[] = {
        "", " ", "{", "}", "[", "]", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "[1,]", "[1 2]", "{\"a\" 1}",
        "{1:2}", "{\"a\":1}x", "{\"a\":1} {}", "1.5", "[1e3]", "[1E-3]", "[0.0]", "[-]", "[01]", "[-01]",
        "[1234567890123456789]", "[-9223372036854775808]", "[9223372036854775808]", "[99999999999999999999]",
        "[tru]", "[truex]", "[nul]", "[False]", "[\"\\u0000\"]", "[\"\\ud83d\"]", "[\"\\ude00\"]",
        "[\"\\ud83d\\u0041\"]", "[\"\\ud83dx\"]", "[\"\\u12\"]", "[\"\\uZZZZ\"]", "[\"\\x\"]", "[\"\\\"]",
        "[\"a\x01\"]", "[\"a\x1f\"]", "[\"\x7f\"]", "[\"\xc3\"]", "[\"\xc0\x80\"]", "[\"\xed\xa0\x80\"]",
        "[\"\xf4\x90\x80\x80\"]", "[\"\xff\"]", "[\"\xe2\x82\"]", "{\"a\":1,\"a\":2}", "{\"a\":1,\"b\":{\"a\":2,\"a\":3}}",
        "[\"unterminated", "\"a\"", "7", "null", "true", "[1]\n\n  x", "\xef\xbb\xbf{}", "{\"k\xff\":1}",
        "[\"\\/\"]", "\v{}", "{}\v", "[\"\\u00\"]",
        "[9223372036854775807]", "[-9223372036854775809]", "[1000000000000000000]", "[-999999999999999999]",
        "[1e400]", "[-1e-400]", "[-0.0]", "[1E+2]", "[0e0]", "[1.]", "[.5]", "[+1]", "[1e]", "[-00]", "[0x10]",
        "[\"\\uDBFF\\uDFFF\"]", "[\"\\ud83d\\ud83d\"]", "[\"\\ude00\\ud83d\"]", "{\"a\\u0000\":1}",
        "{\"a\":1,\"\\u0061\":2}", "[\"\\U0041\"]", "[\"\\u12G4\"]", "[\"\xf0\x8f\xbf\xbf\"]", "[\"\xe0\x9f\xbf\"]",
        "[\"\xf5\x80\x80\x80\"]", "[\"\xed\x9f\xbf\"]", "\f[]", "[\xc2\xa0]", "[\"\\\xc3\xa9\"]",
    };
    for (size_t i = 0; i < sizeof inputs / sizeof *inputs; i++)
        same_all_flags(inputs[i], strlen(inputs[i]));
    same_all_flags("[\"a\0b\"]", 7); /* a NUL byte inside, and after the end */
    same_all_flags("{}\0", 3);
    char deep[300];
    for (int d = 60; d <= 70; d++) { /* around the fast path's depth limit */
        memset(deep, '[', (size_t)d);
        memset(deep + d, ']', (size_t)d);
        same_all_flags(deep, 2 * (size_t)d);
    }
}

/* Every prefix of documents the fast path takes (strings that end around
 * an eight-byte step, escapes, pairs, numbers at its digit limit): each cut
 * is jansson's answer, an error or (JSON_DECODE_ANY) a shorter value. */
static void test_every_truncation_loads_as_jansson_loads_it(void **state)
{
    (void)state;
    static const char *const docs[] = {
        "{\"id\":\"0123456\",\"u\":\"01234567\",\"v\":\"012345678\",\"w\":\"0123456\\\"89abcdef\\n\"}",
        "[\"\\ud83d\\ude00\\u00e9\",\"caf\xc3\xa9\xf0\x9f\x98\x80\",-0,999999999999999999,-12,true,false,null]",
        " {\"a\" : [ { } , [ ] , \"\" ] ,\"b\":{\"c\":1}}\r\n",
        "-123456789012345678",
    };
    for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
        size_t len = strlen(docs[i]);
        if (!same_all_flags(docs[i], len))
            fail_msg("not on the fast path: %s", docs[i]);
        for (size_t cut = 0; cut < len; cut++) {
            char *p = malloc(cut ? cut : 1); /* exactly cut bytes, so a read past them shows */
            assert_non_null(p);
            memcpy(p, docs[i], cut);
            same_all_flags(p, cut);
            free(p);
        }
    }
}

/* ---- generated documents: valid ones, then each mutated ---- */

static uint64_t rng = 0x9E3779B97F4A7C15u;
static unsigned rnd(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

typedef struct { char *p; size_t n, cap; } buf;
static void put(buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}
static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }
static void ws(buf *b)
{
    static const char *const w[] = {"", "", "", " ", "\n", "\t ", "\r\n  "};
    puts_(b, w[rnd(sizeof w / sizeof *w)]);
}

static void gen_string(buf *b)
{
    static const char *const parts[] = {
        "a", "Z", "0", " ", "hook", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\u0041",
        "\\u00e9", "\\u20AC", "\\uffff", "\\ud83d\\ude00", "\\uD800\\uDC00", "\xc3\xa9", "\xe2\x82\xac",
        "\xf0\x9f\x98\x80", "\x7f", "key", "customer:42", "http://127.0.0.1:9/hook",
    };
    put(b, "\"", 1);
    unsigned n = rnd(6);
    for (unsigned i = 0; i < n; i++)
        puts_(b, parts[rnd(sizeof parts / sizeof *parts)]);
    put(b, "\"", 1);
}

static void gen_value(buf *b, int depth)
{
    static const char *const scalars[] = {"0", "-0", "1", "-1", "42", "1795707870406", "-9000000000",
                                          "999999999999999999", "-999999999999999999", "true", "false",
                                          "null", "1.5", "2e3"};
    unsigned k = rnd(depth > 4 ? 2 : 4);
    if (k == 0) {
        puts_(b, scalars[rnd(sizeof scalars / sizeof *scalars)]);
    } else if (k == 1) {
        gen_string(b);
    } else { /* an array, or an object (sometimes with a repeated key) */
        int obj = k == 3;
        put(b, obj ? "{" : "[", 1);
        unsigned n = rnd(obj ? 5 : 4);
        for (unsigned i = 0; i < n; i++) {
            if (i)
                put(b, ",", 1);
            ws(b);
            if (obj) {
                gen_string(b);
                ws(b);
                put(b, ":", 1);
                ws(b);
            }
            gen_value(b, depth + 1);
            ws(b);
        }
        put(b, obj ? "}" : "]", 1);
    }
}

static void test_generated_documents_and_their_mutations_load_as_jansson_loads_them(void **state)
{
    (void)state;
    static const char junk[] = "\"\\{}[],:0-9.eEtrufalsn \x01\x80\xc3\xff";
    size_t fast = 0, docs = 0;
    for (int i = 0; i < 20000; i++) {
        buf b = {0};
        ws(&b);
        gen_value(&b, 0);
        ws(&b);
        fast += (size_t)same_all_flags(b.p, b.n);
        docs++;
        for (int m = 0; m < 3 && b.n > 0; m++) { /* a byte changed, dropped or added */
            size_t at = rnd((unsigned)b.n);
            switch (rnd(3)) {
            case 0:
                b.p[at] = junk[rnd(sizeof junk - 1)];
                break;
            case 1:
                memmove(b.p + at, b.p + at + 1, b.n - at);
                b.n--;
                break;
            default:
                put(&b, " ", 1);
                memmove(b.p + at + 1, b.p + at, b.n - at - 1);
                b.p[at] = junk[rnd(sizeof junk - 1)];
                break;
            }
            same_all_flags(b.p, b.n);
        }
        free(b.p);
    }
    /* Most generated documents are valid and have no real, no repeated key:
     * the fast path must have built a good share of them. */
    if (fast < docs / 4)
        fail_msg("only %zu of %zu generated documents took the fast path", fast, docs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_documents_the_api_meets_take_the_fast_path),
        cmocka_unit_test(test_what_it_leaves_to_jansson_is_jansson_s_answer),
        cmocka_unit_test(test_every_truncation_loads_as_jansson_loads_it),
        cmocka_unit_test(test_generated_documents_and_their_mutations_load_as_jansson_loads_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
