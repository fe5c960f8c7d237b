/* test_spec.c - validation of POST /timers bodies and the canonical form.
 *
 * Request texts are written with single quotes for readability; req()
 * turns them into JSON. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "netpolicy.h"
#include "spec.h"

/* 2026-01-02T03:04:05.678Z */
#define NOW 1767323045678ULL
#define DAY_MS 86400000ULL

static const spec_limits lim = {
    .max_url_len = 2048,
    .max_headers = 32,
    .max_header_bytes = 8192,
    .max_delay_ms = 365 * DAY_MS,
    .max_timeout_ms = 300000,
    .max_attempts = 100,
    .max_backoff_cap_ms = 86400000,
    .default_timeout_ms = 10000,
    .default_max_attempts = SPEC_DEFAULT_MAX_ATTEMPTS,
    .default_min_backoff_ms = 1000,
    .default_max_backoff_ms = SPEC_DEFAULT_MAX_BACKOFF_MS,
};

/* Returns a malloc'd copy of s with ' turned into ". */
static char *req(const char *s)
{
    char *j = strdup(s);
    for (char *p = j; *p; p++)
        if (*p == '\'')
            *p = '"';
    return j;
}

static timer_spec *parse_with(const char *text, const spec_limits *l)
{
    char *j = req(text);
    timer_spec *s = NULL;
    spec_error err = {0};
    int rc = spec_parse(j, strlen(j), l, NOW, &s, &err);

    if (rc != 0)
        fail_msg("rejected %s: field '%s': %s", j, err.field, err.detail);
    free(j);
    assert_non_null(s);
    return s;
}

static timer_spec *parse_ok(const char *text) { return parse_with(text, &lim); }

/* Parses raw bytes expecting an error; checks the error's shape. */
static spec_error parse_bad_raw(const char *json, size_t len)
{
    timer_spec *sentinel = (timer_spec *)&lim, *s = sentinel;
    spec_error err;

    memset(&err, 'x', sizeof err);
    assert_int_equal(spec_parse(json, len, &lim, NOW, &s, &err), -EINVAL);
    assert_ptr_equal(s, sentinel); /* *out untouched */
    assert_int_equal(err.status, 400);
    assert_non_null(memchr(err.field, '\0', sizeof err.field));
    assert_non_null(memchr(err.detail, '\0', sizeof err.detail));
    assert_true(strlen(err.detail) > 0);
    return err;
}

static spec_error parse_bad(const char *text)
{
    char *j = req(text);
    spec_error err = parse_bad_raw(j, strlen(j));
    free(j);
    return err;
}

static void assert_rejected(const char *text, const char *field)
{
    spec_error err = parse_bad(text);
    if (strcmp(err.field, field) != 0)
        fail_msg("%s: expected field '%s', got '%s' (%s)", text, field, err.field, err.detail);
}

/* Parses s's canonical text without limits and checks it is unchanged. */
static void assert_canonical_round_trips(const timer_spec *s)
{
    timer_spec *again = NULL;
    spec_error err;

    assert_int_equal(spec_parse(s->canonical, strlen(s->canonical), NULL, NOW, &again, &err), 0);
    assert_string_equal(again->canonical, s->canonical);
    assert_string_equal(again->url, s->url);
    assert_string_equal(again->method, s->method);
    assert_string_equal(again->queue, s->queue);
    assert_int_equal(again->fire_at_ms, NOW); /* no time in the canonical form */
    assert_string_equal(again->when, "");
    assert_int_equal(again->nheaders, s->nheaders);
    assert_int_equal(again->body_len, s->body_len);
    assert_int_equal(again->body_is_json, s->body_is_json);
    if (s->body)
        assert_memory_equal(again->body, s->body, s->body_len);
    spec_free(again);
}

/* ---- valid specs ------------------------------------------------------- */

static void test_ids_beginning_with_lease_are_reserved(void **state)
{
    (void)state;
    assert_rejected("{\"id\":\"lease:orders:17\",\"url\":\"https://example.com/\",\"delay_ms\":1}", "id");
    assert_rejected("{\"id\":\"lease:\",\"url\":\"https://example.com/\",\"delay_ms\":1}", "id");
    timer_spec *s = parse_ok("{\"id\":\"my-lease:1\",\"url\":\"https://example.com/\",\"delay_ms\":1}");
    assert_string_equal(s->id, "my-lease:1");
    spec_free(s);
}

static void test_labels_and_callbacks_are_sorted_members_of_the_canonical_and_stored_forms(void **state)
{
    (void)state;
    timer_spec *s = parse_ok("{'url':'http://example.com/h','delay_ms':1,'labels':{'zeta':'1','alpha':'a:b'},"
                             "'on_success':'https://example.com/ok','on_failure':'https://example.com/ko'}");
    assert_int_equal(s->nlabels, 2);
    assert_string_equal(s->labels[0], "alpha:a:b");
    assert_string_equal(s->labels[1], "zeta:1");
    assert_int_equal(s->has_callbacks, 1);
    assert_string_equal(s->stored, "{\"labels\":{\"alpha\":\"a:b\",\"zeta\":\"1\"},"
                                   "\"on_failure\":\"https://example.com/ko\","
                                   "\"on_success\":\"https://example.com/ok\",\"url\":\"http://example.com/h\"}");
    timer_spec *back = NULL;
    spec_error err;
    assert_int_equal(spec_parse(s->stored, s->stored_len, NULL, 0, &back, &err), 0);
    assert_string_equal(back->canonical, s->canonical);
    assert_int_equal(back->nlabels, 2);
    spec_free(back);
    spec_free(s);
    assert_rejected("{'url':'http://example.com/','delay_ms':1,'labels':{'a':''}}", "labels.a");
    assert_rejected("{'url':'http://example.com/','delay_ms':1,'labels':{'a':'x y'}}", "labels.a");
    assert_rejected("{'url':'http://example.com/','delay_ms':1,'labels':{'a/b':'1'}}", "labels.a/b");
    assert_rejected("{'url':'http://example.com/','delay_ms':1,'labels':['a']}", "labels");
    assert_rejected("{'url':'http://example.com/','delay_ms':1,'on_failure':'ftp://x/'}", "on_failure");
    assert_int_equal(spec_lookup_id_valid("abc#on_failure.12"), 1);
    assert_int_equal(spec_lookup_id_valid("abc#on_success.0"), 1);
    assert_int_equal(spec_lookup_id_valid("abc#on_other.0"), 0);
    assert_int_equal(spec_lookup_id_valid("abc#on_failure."), 0);
    assert_int_equal(spec_lookup_id_valid("abc#on_failure.1x"), 0);
    assert_int_equal(spec_lookup_id_valid("#on_failure.1"), 0);
    assert_int_equal(spec_id_valid("abc#on_failure.1"), 0);
}

static void test_a_minimal_spec_gets_every_default(void **state)
{
    (void)state;
    timer_spec *s = parse_ok("{'url':'http://example.com/hook','delay_ms':1500}");

    assert_string_equal(s->url, "http://example.com/hook");
    assert_string_equal(s->method, "POST");
    assert_string_equal(s->queue, "default");
    assert_null(s->id);
    assert_null(s->body);
    assert_int_equal(s->body_is_json, 0);
    assert_int_equal(s->nheaders, 0);
    assert_int_equal(s->has_content_type, 0);
    assert_int_equal(s->fire_at_ms, NOW + 1500);
    assert_int_equal(s->timeout_ms, 10000);
    assert_int_equal(s->max_attempts, 36);
    assert_int_equal(s->min_backoff_ms, 1000);
    assert_int_equal(s->max_backoff_ms, 3600000);
    assert_int_equal(s->max_duration_ms, 0);
    assert_string_equal(s->canonical,
                        "{\"headers\":{},\"method\":\"POST\",\"queue\":\"default\","
                        "\"retry\":{\"max_attempts\":36,\"max_backoff_ms\":3600000,"
                        "\"min_backoff_ms\":1000},\"timeout_ms\":10000,"
                        "\"url\":\"http://example.com/hook\"}");
    assert_string_equal(s->when, "delay_ms=1500");
    spec_free(s);
}

static const char full_spec[] =
    "{'url':'https://example.com:8443/h?a=1','method':'PUT','id':'order-42:retry.1',"
    "'headers':{'X-Trace':'abc','content-type':'text/plain','Authorization':'Bearer t'},"
    "'body':'hello\\nworld','fire_at_ms':1767323100000,'timeout_ms':2500,"
    "'retry':{'max_attempts':9,'min_backoff_ms':10,'max_backoff_ms':20},'queue':'billing.eu-1'}";

static void test_a_full_spec_keeps_every_given_value(void **state)
{
    (void)state;
    timer_spec *s = parse_ok(full_spec);

    assert_string_equal(s->url, "https://example.com:8443/h?a=1");
    assert_string_equal(s->method, "PUT");
    assert_string_equal(s->id, "order-42:retry.1");
    assert_int_equal(s->nheaders, 3);
    assert_string_equal(s->headers[0], "X-Trace: abc");
    assert_string_equal(s->headers[1], "content-type: text/plain");
    assert_string_equal(s->headers[2], "Authorization: Bearer t");
    assert_int_equal(s->has_content_type, 1);
    assert_int_equal(s->body_len, 11);
    assert_memory_equal(s->body, "hello\nworld", 11);
    assert_int_equal(s->body_is_json, 0);
    assert_int_equal(s->fire_at_ms, 1767323100000LL);
    assert_int_equal(s->timeout_ms, 2500);
    assert_int_equal(s->max_attempts, 9);
    assert_int_equal(s->min_backoff_ms, 10);
    assert_int_equal(s->max_backoff_ms, 20);
    assert_string_equal(s->queue, "billing.eu-1");
    spec_free(s);
}

static void test_canonical_is_compact_sorted_and_leaves_out_the_id(void **state)
{
    (void)state;
    timer_spec *s = parse_ok(full_spec);

    assert_string_equal(
        s->canonical,
        "{\"body\":\"hello\\nworld\",\"headers\":{\"Authorization\":"
        "\"Bearer t\",\"X-Trace\":\"abc\",\"content-type\":\"text/plain\"},\"method\":\"PUT\","
        "\"queue\":\"billing.eu-1\",\"retry\":{\"max_attempts\":9,\"max_backoff_ms\":20,"
        "\"min_backoff_ms\":10},\"timeout_ms\":2500,\"url\":\"https://example.com:8443/h?a=1\"}");
    assert_null(strstr(s->canonical, "order-42"));
    assert_string_equal(s->when, "fire_at_ms=1767323100000");
    spec_free(s);
}

static void test_canonical_form_parses_back_to_itself_without_limits(void **state)
{
    static const char *const specs[] = {
        full_spec,
        "{'url':'http://h/','delay_ms':0}",
        "{'url':'http://h/','fire_at':'2026-03-01T00:00:00.5+01:00','headers':{'A':'b'}}",
        "{'url':'http://h/','fire_at_ms':5,'json':{'z':[1,2.5,null,true],'a':{'k':'v'}}}",
        "{'url':'http://h/','delay_ms':10,'json':null,'method':'DELETE'}",
        "{'url':'http://h/','delay_ms':10,'body':'','retry':{'min_backoff_ms':500000}}",
    };
    (void)state;
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        timer_spec *s = parse_ok(specs[i]);
        assert_canonical_round_trips(s);
        spec_free(s);
    }
}

static void test_the_stored_form_leaves_out_the_defaults_and_parses_back_to_the_canonical_one(void **state)
{
    (void)state;
    timer_spec *s = parse_ok("{'url':'http://h/x','delay_ms':5,'body':'b'}");
    timer_spec *t = parse_ok("{'url':'http://h/x','delay_ms':5,'method':'PUT','queue':'q',"
                             "'headers':{'X-A':'1'},'timeout_ms':5,'retry':{'max_attempts':2}}");
    timer_spec *again = NULL;
    spec_error err;

    assert_string_equal(s->stored, "{\"body\":\"b\",\"url\":\"http://h/x\"}");
    assert_int_equal(s->stored_len, strlen(s->stored));
    assert_int_equal(spec_parse(s->stored, s->stored_len, NULL, NOW, &again, &err), 0);
    assert_string_equal(again->canonical, s->canonical);
    spec_free(again);
    assert_non_null(strstr(t->stored, "\"method\":\"PUT\""));
    assert_non_null(strstr(t->stored, "\"queue\":\"q\""));
    assert_non_null(strstr(t->stored, "\"timeout_ms\":5"));
    assert_non_null(strstr(t->stored, "\"retry\":{\"max_attempts\":2,\"max_backoff_ms\":3600000,"));
    assert_int_equal(spec_parse(t->stored, t->stored_len, NULL, NOW, &again, &err), 0);
    assert_string_equal(again->canonical, t->canonical);
    spec_free(again);
    spec_free(s);
    spec_free(t);
}

static void test_explicit_defaults_give_the_same_canonical_form_as_omitted_ones(void **state)
{
    (void)state;
    timer_spec *a = parse_ok("{'url':'http://h/x','delay_ms':60000}");
    timer_spec *b = parse_ok("{'queue':'default','timeout_ms':10000,'method':'POST','headers':{},"
                             "'retry':{'max_backoff_ms':3600000,'max_attempts':36},"
                             "'delay_ms':60000,'url':'http://h/x'}");

    assert_string_equal(a->canonical, b->canonical);
    spec_free(a);
    spec_free(b);
}

static void test_json_body_is_dumped_compact_and_marked_as_json(void **state)
{
    (void)state;
    timer_spec *s = parse_ok("{'url':'http://h/','delay_ms':1,'json':{ 'b' : [ 1 , 'x' ] ,"
                             "'a' : { } }}");

    assert_int_equal(s->body_is_json, 1);
    assert_int_equal(s->has_content_type, 0);
    assert_string_equal(s->body, "{\"a\":{},\"b\":[1,\"x\"]}");
    assert_int_equal(s->body_len, strlen(s->body));
    assert_non_null(strstr(s->canonical, "\"json\":{\"a\":{},\"b\":[1,\"x\"]}"));
    spec_free(s);
}

static void test_json_body_may_be_a_scalar(void **state)
{
    (void)state;
    timer_spec *s = parse_ok("{'url':'http://h/','delay_ms':1,'json':'text'}");

    assert_string_equal(s->body, "\"text\"");
    assert_int_equal(s->body_is_json, 1);
    spec_free(s);
}

/* What jansson itself writes for text (sorted keys, compact), for comparing
 * with the hand-written forms. */
static char *jansson_dump(const char *text, size_t len)
{
    json_error_t e;
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY, &e);
    if (!v)
        fail_msg("not JSON (%s): %.*s", e.text, (int)len, text);
    char *d = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    json_decref(v);
    return d;
}

/* The canonical and stored forms and a json body are written by hand
 * (spec.c); byte for byte they must be what jansson writes for the same
 * value, or idempotent repeats of timers stored by jansson's dump would
 * conflict. Every kind of value and every escape is here. */
static void test_the_hand_written_forms_are_exactly_jansson_s(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "'body':'plain'",
        "'body':'quote \\\" backslash \\\\ slash / tab \\t nl \\n cr \\r bs \\b ff \\f'",
        "'body':'ctl \\u0001 \\u001f \\u001F del \\u007f nul-free'",
        "'body':'utf-8 \\u00e9 \\u20ac \\u2028 \\u2029 \\ud83d\\ude00 caf\xc3\xa9'",
        "'json':{'z':1,'a':[1,2,{'y':null,'b':true}],'m':false,'e':{},'f':[],'k':'v'}",
        "'json':{'i':-9223372036854775807,'j':9223372036854775807,'z':0,'n':-1}",
        "'json':{'r':1.5,'s':-0.0,'t':1e300,'u':0.1,'v':123456789.125,'w':-2.5e-10}",
        "'json':{'k16':16,'k15':15,'k14':14,'k13':13,'k12':12,'k11':11,'k10':10,'k09':9,"
        "'k08':8,'k07':7,'k06':6,'k05':5,'k04':4,'k03':3,'k02':2,'k01':1,'k00':0,'K':'upper','':'empty'}",
        "'json':'a string'",
        "'json':[3,'x',null]",
        "'json':2.25",
    };
    static const char *const rest[] = {
        "",
        ",'method':'PUT','queue':'q-1','timeout_ms':2500,'headers':{'X-B':'2','X-A':'1','x-c':'\\\" \\\\'}",
        ",'retry':{'max_attempts':7,'min_backoff_ms':5,'max_backoff_ms':6},'repeat':{'every_ms':1000}",
        ",'method':'POST','queue':'default','timeout_ms':10000,'headers':{},"
        "'retry':{'max_attempts':5,'min_backoff_ms':1000,'max_backoff_ms':300000},"
        "'repeat':{'every_ms':60000,'mode':'fixed_rate','times':3}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        for (size_t k = 0; k < sizeof rest / sizeof *rest; k++) {
            char text[1024];
            snprintf(text, sizeof text, "{'url':'https://example.com/h?q=\\u00e9','delay_ms':5,%s%s}", bodies[i],
                     rest[k]);
            timer_spec *s = parse_ok(text);
            char *want = jansson_dump(s->canonical, strlen(s->canonical));
            assert_string_equal(s->canonical, want);
            free(want);
            want = jansson_dump(s->stored, s->stored_len);
            assert_int_equal(strlen(s->stored), s->stored_len);
            assert_string_equal(s->stored, want);
            free(want);
            if (s->body_is_json) {
                want = jansson_dump(s->body, s->body_len);
                assert_int_equal(strlen(want), s->body_len);
                assert_memory_equal(s->body, want, s->body_len);
                free(want);
            }
            assert_canonical_round_trips(s);
            spec_free(s);
        }
    }
}

/* spec_check_url remembers the last URLs that passed (per thread); what it
 * remembers must not let through what the check would refuse: another
 * policy, or a URL that fails, is checked again. */
static void test_a_remembered_url_passes_only_under_the_policy_it_passed(void **state)
{
    (void)state;
    char e[128];
    netpolicy *open = netpolicy_create("127.0.0.0/8", e, sizeof e), *strict = netpolicy_create(NULL, e, sizeof e);
    assert_non_null(open);
    assert_non_null(strict);
    spec_error err;
    for (int round = 0; round < 3; round++) {
        assert_int_equal(spec_check_url(&err, "url", "http://127.0.0.1:9/x", open), 0);
        assert_int_equal(spec_check_url(&err, "url", "http://127.0.0.1:9/x", strict), -EINVAL);
        assert_string_equal(err.field, "url");
        assert_int_equal(spec_check_url(&err, "url", "http://127.0.0.1:9/x", NULL), 0);
        assert_int_equal(spec_check_url(&err, "url", "ftp://127.0.0.1:9/x", open), -EINVAL);
        assert_int_equal(spec_check_url(&err, "url", "http://127.0.0.1:9/", open), 0);
        assert_int_equal(spec_check_url(&err, "url", "http://127.0.0.1:9", open), 0);
        assert_int_equal(spec_check_url(&err, "url", "http://127.0.0.1:9/x/", open), 0);
        assert_int_equal(spec_check_url(&err, "url", "http://user@127.0.0.1:9/x", open), -EINVAL);
    }
    netpolicy_free(open);
    netpolicy_free(strict);
}

/* Returns a malloc'd request whose json body nests `depth` arrays:
 * [[...[1]...]]. */
static char *nested_json_request(int depth)
{
    const char head[] = "{\"url\":\"http://example.com/\",\"delay_ms\":0,\"json\":";
    size_t n = strlen(head);
    char *t = malloc(n + 2 * (size_t)depth + 3);
    memcpy(t, head, n);
    memset(t + n, '[', (size_t)depth);
    t[n + depth] = '1';
    memset(t + n + depth + 1, ']', (size_t)depth);
    strcpy(t + n + 2 * depth + 1, "}");
    return t;
}

/* Redis's cjson refuses more than 1000 levels and listings decode the
 * stored spec, so a json body may nest SPEC_MAX_JSON_DEPTH deep and no
 * deeper. */
static void test_a_json_body_at_the_depth_limit_is_accepted_and_one_deeper_is_not(void **state)
{
    (void)state;
    char *at = nested_json_request(SPEC_MAX_JSON_DEPTH), *past = nested_json_request(SPEC_MAX_JSON_DEPTH + 1);
    timer_spec *s = NULL;
    spec_error err;
    assert_int_equal(spec_parse(at, strlen(at), &lim, NOW, &s, &err), 0);
    assert_true(s->body_is_json);
    assert_int_equal(s->body_len, 2 * SPEC_MAX_JSON_DEPTH + 1);
    spec_free(s);
    err = parse_bad_raw(past, strlen(past));
    assert_string_equal(err.field, "json");
    free(past);
    past = nested_json_request(2000); /* what jansson takes and cjson does not */
    err = parse_bad_raw(past, strlen(past));
    assert_string_equal(err.field, "json");
    /* objects count like arrays: {"a":{"a":...{"a":1}...}} */
    for (int depth = SPEC_MAX_JSON_DEPTH; depth <= SPEC_MAX_JSON_DEPTH + 1; depth++) {
        char t[64 + 6 * (SPEC_MAX_JSON_DEPTH + 1)];
        size_t n = (size_t)sprintf(t, "{\"url\":\"http://example.com/\",\"delay_ms\":0,\"json\":");
        for (int i = 0; i < depth; i++)
            n += (size_t)sprintf(t + n, "{\"a\":");
        t[n++] = '1';
        memset(t + n, '}', (size_t)depth + 1);
        t[n + (size_t)depth + 1] = '\0';
        if (depth == SPEC_MAX_JSON_DEPTH) {
            assert_int_equal(spec_parse(t, strlen(t), &lim, NOW, &s, &err), 0);
            spec_free(s);
        } else {
            assert_string_equal(parse_bad_raw(t, strlen(t)).field, "json");
        }
    }
    free(at);
    free(past);
}

/* A spec stored before the depth limit existed still parses (lim NULL):
 * the engine must be able to run and list what it once accepted. */
static void test_a_deep_json_body_read_back_from_redis_still_parses(void **state)
{
    (void)state;
    char *deep = nested_json_request(SPEC_MAX_JSON_DEPTH + 10);
    timer_spec *s = NULL;
    spec_error err;
    assert_int_equal(spec_parse(deep, strlen(deep), NULL, NOW, &s, &err), 0);
    spec_free(s);
    free(deep);
}

/* A callback's report embeds last_attempt, whose response_snippet keeps a
 * NUL byte of the target's answer as \u0000: read back from Redis (no
 * limits) it parses, and the body sent keeps it escaped; a client's is
 * still refused. */
static void test_a_stored_spec_with_a_nul_in_its_json_parses_and_a_client_s_does_not(void **state)
{
    (void)state;
    static const char text[] = "{\"url\":\"http://127.0.0.1:9/x\",\"json\":{\"s\":\"a\\u0000b\"}}";
    timer_spec *s = NULL;
    spec_error err;
    assert_int_equal(spec_parse(text, strlen(text), NULL, NOW, &s, &err), 0);
    assert_int_equal(s->body_len, strlen("{\"s\":\"a\\u0000b\"}"));
    assert_memory_equal(s->body, "{\"s\":\"a\\u0000b\"}", s->body_len);
    spec_free(s);
    s = NULL;
    assert_int_not_equal(spec_parse(text, strlen(text), &lim, NOW, &s, &err), 0);
    assert_null(s);
    /* anywhere else it would be cut off where the spec is read as C strings */
    static const char *const elsewhere[] = {
        "{\"url\":\"http://127.0.0.1:9/x\\u0000y\",\"json\":{\"s\":\"a\\u0000b\"}}",
        "{\"url\":\"http://127.0.0.1:9/x\",\"body\":\"a\\u0000b\"}",
        "{\"url\":\"http://127.0.0.1:9/x\",\"headers\":{\"X-A\":\"a\\u0000b\"}}",
        "{\"url\":\"http://127.0.0.1:9/x\",\"id\":\"a\\u0000b\"}",
    };
    for (size_t i = 0; i < sizeof elsewhere / sizeof elsewhere[0]; i++) {
        assert_int_equal(spec_parse(elsewhere[i], strlen(elsewhere[i]), NULL, NOW, &s, &err), -EINVAL);
        assert_null(s);
        assert_non_null(strstr(err.detail, "malformed JSON"));
    }
}

/* curl converts a non-ASCII host through the locale, which is "C" in
 * hookwheel, so such a URL could never be sent; and fullwidth digits would
 * dodge the IP literal check. With a policy (client input), the host must
 * be ASCII; the xn-- form of the same name passes. */
static void test_a_url_with_a_non_ascii_host_is_rejected(void **state)
{
    (void)state;
    char e[128];
    netpolicy *open = netpolicy_create("127.0.0.0/8", e, sizeof e), *strict = netpolicy_create(NULL, e, sizeof e);
    spec_error err;
    static const char *const refused[] = {
        "http://\xef\xbc\x91\xef\xbc\x92\xef\xbc\x97.0.0.1:9/x", /* fullwidth 127 */
        "http://\xef\xbc\x91\xef\xbc\x90.0.0.1/",                /* fullwidth 10 */
        "https://b\xc3\xbc" "cher.example/",                        /* bücher */
        "http://%EF%BC%91%EF%BC%92%EF%BC%97.0.0.1/",                /* the same, percent-encoded */
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        for (int k = 0; k < 2; k++) {
            memset(&err, 0, sizeof err);
            if (spec_check_url(&err, "url", refused[i], k ? strict : open) != -EINVAL)
                fail_msg("accepted %s", refused[i]);
            assert_string_equal(err.field, "url");
        }
    assert_int_equal(spec_check_url(&err, "url", "https://xn--bcher-kva.example/", strict), 0);
    spec_limits with_policy = lim;
    with_policy.policy = open;
    timer_spec *s = NULL;
    const char *create = "{\"url\":\"http://\xef\xbc\x91\xef\xbc\x92\xef\xbc\x97.0.0.1/\",\"delay_ms\":0}";
    assert_int_equal(spec_parse(create, strlen(create), &with_policy, NOW, &s, &err), -EINVAL);
    assert_null(s);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.field, "url");
    netpolicy_free(open);
    netpolicy_free(strict);
}

static void test_fire_at_with_an_offset_converts_to_utc_epoch_ms(void **state)
{
    (void)state;
    /* 05:04:05.678+02:00 is NOW. */
    timer_spec *s = parse_ok("{'url':'http://h/','fire_at':'2026-01-02T05:04:05.678+02:00'}");

    assert_int_equal(s->fire_at_ms, NOW);
    assert_string_equal(s->when, "fire_at_ms=1767323045678");
    assert_null(strstr(s->canonical, "\"fire_at"));
    spec_free(s);
}

static void test_fire_times_in_the_past_are_accepted(void **state)
{
    (void)state;
    timer_spec *a = parse_ok("{'url':'http://h/','fire_at':'2001-01-01T00:00:00Z'}");
    timer_spec *b = parse_ok("{'url':'http://h/','fire_at_ms':0}");

    assert_int_equal(a->fire_at_ms, 978307200000LL);
    assert_int_equal(b->fire_at_ms, 0);
    spec_free(a);
    spec_free(b);
}

static void test_the_maximum_delay_itself_is_accepted(void **state)
{
    (void)state;
    timer_spec *s = parse_ok("{'url':'http://h/','delay_ms':31536000000}");

    assert_int_equal(s->fire_at_ms, NOW + 365 * DAY_MS);
    spec_free(s);
}

static void test_min_backoff_above_the_default_max_raises_the_max(void **state)
{
    (void)state;
    timer_spec *s = parse_ok("{'url':'http://h/','delay_ms':1,'retry':{'min_backoff_ms':4000000}}");

    assert_int_equal(s->min_backoff_ms, 4000000);
    assert_int_equal(s->max_backoff_ms, 4000000);
    spec_free(s);
}

static void test_limits_are_inclusive(void **state)
{
    (void)state;
    char url[2100], headers[4096], *text;
    size_t o = 0;

    memset(url, 'a', sizeof url);
    memcpy(url, "http://h/", 9);
    url[2048] = '\0';
    o += (size_t)snprintf(headers + o, sizeof headers - o, "{");
    for (int i = 0; i < 32; i++)
        o += (size_t)snprintf(headers + o, sizeof headers - o, "%s'X-%d':'v'", i ? "," : "", i);
    snprintf(headers + o, sizeof headers - o, "}");
    text = malloc(8192);
    snprintf(text, 8192,
             "{'url':'%s','headers':%s,'delay_ms':1,'timeout_ms':300000,'id':'%0128d',"
             "'queue':'%064d','retry':{'max_attempts':100,'max_backoff_ms':86400000}}",
             url, headers, 0, 0);
    timer_spec *s = parse_ok(text);
    assert_int_equal(strlen(s->url), 2048);
    assert_int_equal(s->nheaders, 32);
    assert_int_equal(strlen(s->id), 128);
    assert_int_equal(strlen(s->queue), 64);
    spec_free(s);
    free(text);
}

static void test_without_limits_caps_are_lifted_but_rules_still_hold(void **state)
{
    (void)state;
    timer_spec *s = parse_with("{'url':'http://h/','delay_ms':1,'timeout_ms':999999999,"
                               "'retry':{'max_attempts':1000}}",
                               NULL);
    timer_spec *out = NULL;
    spec_error err;
    char *bad = req("{'url':'http://h/','delay_ms':1,'timeout_ms':0}");

    assert_int_equal(s->timeout_ms, 999999999);
    assert_int_equal(s->max_attempts, 1000);
    assert_int_equal(spec_parse(bad, strlen(bad), NULL, NOW, &out, &err), -EINVAL);
    assert_string_equal(err.field, "timeout_ms");
    assert_null(out);
    free(bad);
    spec_free(s);
}

/* ---- url --------------------------------------------------------------- */

static void test_a_missing_url_is_rejected(void **state)
{
    (void)state;
    assert_rejected("{'delay_ms':1}", "url");
}

static void test_an_ftp_url_is_rejected(void **state)
{
    (void)state;
    spec_error err = parse_bad("{'url':'ftp://example.com/f','delay_ms':1}");

    assert_string_equal(err.field, "url");
    assert_string_equal(err.detail, "only http and https URLs are allowed");
    assert_rejected("{'url':'gopher2://example.com/','delay_ms':1}", "url");
    assert_rejected("{'url':'example.com/hook','delay_ms':1}", "url");
}

static void test_a_url_without_an_authority_is_rejected(void **state)
{
    (void)state;
    spec_error err = parse_bad("{'url':'http:///x','delay_ms':1}");

    assert_string_equal(err.field, "url");
    assert_string_equal(err.detail, "url must have a host");
    assert_rejected("{'url':'https://?q=1','delay_ms':1}", "url");
    assert_rejected("{'url':'http:x','delay_ms':1}", "url");
}

static void test_a_url_with_user_info_is_rejected(void **state)
{
    (void)state;
    spec_error err = parse_bad("{'url':'http://user:pass@example.com/','delay_ms':1}");

    assert_string_equal(err.field, "url");
    assert_string_equal(err.detail, "user-info in URLs is not allowed");
    assert_rejected("{'url':'http://user@example.com/','delay_ms':1}", "url");
    assert_rejected("{'url':'http://@example.com/','delay_ms':1}", "url");
}

static void test_a_url_with_port_0_is_rejected(void **state)
{
    (void)state;
    spec_error err = parse_bad("{'url':'http://example.com:0/x','delay_ms':1}");

    assert_string_equal(err.field, "url");
    assert_string_equal(err.detail, "url has port 0, which no target can listen on");
    assert_rejected("{'url':'https://example.com:00000/','delay_ms':1}", "url");
    const char *ok[] = {"{'url':'http://example.com:80/','delay_ms':1}",
                        "{'url':'http://example.com:65535/','delay_ms':1}",
                        "{'url':'http://example.com:/','delay_ms':1}"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        spec_free(parse_ok(ok[i]));
}

static void test_a_url_longer_than_the_limit_is_rejected(void **state)
{
    (void)state;
    char text[2200];
    char url[2050];

    memset(url, 'a', sizeof url);
    memcpy(url, "http://h/", 9);
    url[2049] = '\0';
    snprintf(text, sizeof text, "{'url':'%s','delay_ms':1}", url);
    assert_rejected(text, "url");
}

static void test_a_url_that_is_not_a_string_or_not_a_url_is_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':42,'delay_ms':1}", "url");
    assert_rejected("{'url':'http://','delay_ms':1}", "url");
    assert_rejected("{'url':'http://h/a b','delay_ms':1}", "url");
    assert_rejected("{'url':'http://h:99999/','delay_ms':1}", "url");
}

/* ---- method ------------------------------------------------------------ */

static void test_an_unknown_or_lowercase_method_is_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1,'method':'TRACE'}", "method");
    assert_rejected("{'url':'http://h/','delay_ms':1,'method':'post'}", "method");
    assert_rejected("{'url':'http://h/','delay_ms':1,'method':'POSTX'}", "method");
    assert_rejected("{'url':'http://h/','delay_ms':1,'method':1}", "method");
}

/* ---- headers ----------------------------------------------------------- */

static void test_headers_that_are_not_an_object_are_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':['A: b']}", "headers");
}

static void test_a_header_value_that_is_not_a_string_is_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':{'X-A':1}}", "headers.X-A");
}

static void test_a_header_name_with_a_space_is_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':{'X A':'b'}}", "headers.X A");
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':{'X:A':'b'}}", "headers.X:A");
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':{'':'b'}}", "headers.");
}

static void test_a_header_value_with_cr_or_lf_is_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':{'X-A':'a\\r\\nHost: evil'}}",
                    "headers.X-A");
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':{'X-A':'a\\nb'}}", "headers.X-A");
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':{'X-A':'a\\u0001'}}", "headers.X-A");
}

static void test_a_header_value_with_a_tab_is_accepted(void **state)
{
    (void)state;
    timer_spec *s = parse_ok("{'url':'http://h/','delay_ms':1,'headers':{'X-A':'a\\tb'}}");

    assert_string_equal(s->headers[0], "X-A: a\tb");
    spec_free(s);
}

static void test_reserved_header_names_are_rejected_in_any_case(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':{'Host':'x'}}", "headers.Host");
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':{'webhook-id':'x'}}",
                    "headers.webhook-id");
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':{'Webhook-Signature':'x'}}",
                    "headers.Webhook-Signature");
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':{'HOOKWHEEL-Attempt':'1'}}",
                    "headers.HOOKWHEEL-Attempt");
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':{'content-length':'1'}}",
                    "headers.content-length");
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':{'te':'trailers'}}", "headers.te");
}

static void test_more_headers_than_the_limit_are_rejected(void **state)
{
    (void)state;
    char text[2048];
    size_t o = (size_t)snprintf(text, sizeof text, "{'url':'http://h/','delay_ms':1,'headers':{");

    for (int i = 0; i < 33; i++)
        o += (size_t)snprintf(text + o, sizeof text - o, "%s'X-%d':'v'", i ? "," : "", i);
    snprintf(text + o, sizeof text - o, "}}");
    assert_rejected(text, "headers");
}

static void test_a_header_longer_than_the_limit_is_rejected(void **state)
{
    (void)state;
    size_t n = 8192 - 3 + 1; /* name "X-A" + value: 8193 bytes */
    char *text = malloc(n + 100);
    size_t o = (size_t)sprintf(text, "{'url':'http://h/','delay_ms':1,'headers':{'X-A':'");

    memset(text + o, 'v', n);
    o += n;
    strcpy(text + o, "'}}");
    assert_rejected(text, "headers.X-A");
    free(text);
}

static void test_a_header_given_twice_in_different_case_is_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1,'headers':{'X-A':'1','x-a':'2'}}",
                    "headers.x-a");
}

/* ---- body -------------------------------------------------------------- */

static void test_a_body_that_is_not_a_string_is_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1,'body':{'a':1}}", "body");
}

static void test_body_and_json_together_are_rejected(void **state)
{
    (void)state;
    spec_error err = parse_bad("{'url':'http://h/','delay_ms':1,'body':'x','json':{}}");

    assert_string_equal(err.field, "json");
    assert_string_equal(err.detail, "give either body or json, not both");
}

/* ---- due time ---------------------------------------------------------- */

static void test_a_negative_delay_is_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':-1}", "delay_ms");
}

static void test_a_delay_that_is_not_an_integer_is_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1.5}", "delay_ms");
    assert_rejected("{'url':'http://h/','delay_ms':1000.0}", "delay_ms");
    assert_rejected("{'url':'http://h/','delay_ms':1e3}", "delay_ms");
    assert_rejected("{'url':'http://h/','delay_ms':'1000'}", "delay_ms");
    assert_rejected("{'url':'http://h/','delay_ms':true}", "delay_ms");
    assert_rejected("{'url':'http://h/','delay_ms':null}", "delay_ms");
}

static void test_two_time_fields_are_rejected_naming_the_second(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','fire_at':'2026-01-02T00:00:00Z','delay_ms':1}",
                    "fire_at");
    assert_rejected("{'url':'http://h/','fire_at_ms':1,'fire_at':'2026-01-02T00:00:00Z'}",
                    "fire_at_ms");
    assert_rejected("{'url':'http://h/','delay_ms':1,'fire_at_ms':1}", "fire_at_ms");
}

static void test_a_spec_without_a_time_field_is_rejected(void **state)
{
    (void)state;
    spec_error err = parse_bad("{'url':'http://h/'}");

    assert_string_equal(err.field, "delay_ms");
    assert_string_equal(err.detail, "one of delay_ms, fire_at or fire_at_ms is required");
}

static void test_a_bad_fire_at_is_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','fire_at':'tomorrow'}", "fire_at");
    assert_rejected("{'url':'http://h/','fire_at':'2026-02-30T00:00:00Z'}", "fire_at");
    assert_rejected("{'url':'http://h/','fire_at':1767323045678}", "fire_at");
    assert_rejected("{'url':'http://h/','fire_at':'1969-12-31T23:59:59Z'}", "fire_at");
    assert_rejected("{'url':'http://h/','fire_at_ms':-1}", "fire_at_ms");
}

static void test_a_due_time_beyond_the_maximum_delay_is_rejected(void **state)
{
    (void)state;
    spec_error err = parse_bad("{'url':'http://h/','delay_ms':31536000001}");

    assert_string_equal(err.field, "delay_ms");
    assert_non_null(strstr(err.detail, "beyond the maximum delay of 31536000000 ms"));
    err = parse_bad("{'url':'http://h/','delay_ms':-1}"); /* its range is named, not INT64_MAX - now */
    assert_string_equal(err.field, "delay_ms");
    assert_string_equal(err.detail, "delay_ms must be an integer from 0 to 31536000000 (the maximum delay)");
    assert_rejected("{'url':'http://h/','fire_at':'2030-01-01T00:00:00Z'}", "fire_at");
    assert_rejected("{'url':'http://h/','fire_at_ms':9223372036854775807}", "fire_at_ms");
}

static void test_a_huge_delay_without_limits_does_not_overflow(void **state)
{
    (void)state;
    char *bad = req("{'url':'http://h/','delay_ms':9223372036854775807}");
    timer_spec *out = NULL;
    spec_error err;

    assert_int_equal(spec_parse(bad, strlen(bad), NULL, NOW, &out, &err), -EINVAL);
    assert_string_equal(err.field, "delay_ms");
    free(bad);
}

/* ---- id, timeout, retry, queue ----------------------------------------- */

static void test_an_id_with_bad_characters_is_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1,'id':'a/b'}", "id");
    assert_rejected("{'url':'http://h/','delay_ms':1,'id':'a b'}", "id");
    assert_rejected("{'url':'http://h/','delay_ms':1,'id':''}", "id");
    assert_rejected("{'url':'http://h/','delay_ms':1,'id':7}", "id");
}

static void test_an_id_of_129_characters_is_rejected(void **state)
{
    (void)state;
    char text[256];

    snprintf(text, sizeof text, "{'url':'http://h/','delay_ms':1,'id':'%0129d'}", 0);
    assert_rejected(text, "id");
}

static void test_spec_id_valid_follows_the_contract_pattern(void **state)
{
    (void)state;
    char id[130];

    assert_true(spec_id_valid("Az09._:-"));
    assert_false(spec_id_valid(""));
    assert_false(spec_id_valid(NULL));
    assert_false(spec_id_valid("a/b"));
    assert_false(spec_id_valid("\xc3\xa9"));
    memset(id, 'a', sizeof id);
    id[128] = '\0';
    assert_true(spec_id_valid(id));
    id[128] = 'a';
    id[129] = '\0';
    assert_false(spec_id_valid(id));
}

static void test_a_timeout_of_zero_or_above_the_cap_is_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1,'timeout_ms':0}", "timeout_ms");
    assert_rejected("{'url':'http://h/','delay_ms':1,'timeout_ms':300001}", "timeout_ms");
    assert_rejected("{'url':'http://h/','delay_ms':1,'timeout_ms':'5'}", "timeout_ms");
}

static void test_zero_or_too_many_attempts_are_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1,'retry':{'max_attempts':0}}",
                    "retry.max_attempts");
    assert_rejected("{'url':'http://h/','delay_ms':1,'retry':{'max_attempts':101}}",
                    "retry.max_attempts");
}

static void test_a_retry_duration_bounds_the_retries_and_round_trips(void **state)
{
    (void)state;
    timer_spec *s = parse_ok("{'url':'http://h/','delay_ms':1,'retry':{'max_duration_ms':5000}}"), *again;
    spec_error err;
    assert_int_equal(s->max_duration_ms, 5000);
    assert_non_null(strstr(s->canonical, "\"max_backoff_ms\":3600000,\"max_duration_ms\":5000,\"min_backoff_ms\""));
    assert_int_equal(spec_parse(s->stored, s->stored_len, NULL, NOW, &again, &err), 0);
    assert_int_equal(again->max_duration_ms, 5000);
    assert_string_equal(again->canonical, s->canonical);
    spec_free(again);
    spec_free(s);
    assert_rejected("{'url':'http://h/','delay_ms':1,'retry':{'max_duration_ms':0}}", "retry.max_duration_ms");
    assert_rejected("{'url':'http://h/','delay_ms':1,'retry':{'max_duration_ms':-5}}", "retry.max_duration_ms");
    assert_rejected("{'url':'http://h/','delay_ms':1,'retry':{'max_duration_ms':'5s'}}", "retry.max_duration_ms");
}

static void test_a_calendar_schedule_starts_at_its_first_slot_and_round_trips(void **state)
{
    (void)state; /* NOW is Friday 2026-01-02 03:04:05.678 UTC */
    timer_spec *s = parse_ok("{'url':'http://h/','repeat':{'cron':'0 9 * * MON-FRI','tz':'Europe/Berlin'}}"), *again;
    spec_error err;
    int64_t next;
    assert_true(spec_recurring(s));
    assert_int_equal(s->every_ms, 0);
    assert_int_equal(s->fire_at_ms, 1767340800000LL); /* 09:00 CET = 08:00 UTC, the same day */
    assert_string_equal(s->when, "cron");
    assert_non_null(strstr(s->canonical, "\"repeat\":{\"cron\":\"0 9 * * MON-FRI\",\"dst_gap\":\"shift\","
                                         "\"dst_overlap\":\"first\",\"misfire\":\"skip\",\"tz\":\"Europe/Berlin\"}"));
    assert_int_equal(spec_next_slot(s, s->fire_at_ms, &next, NULL), 0);
    assert_int_equal(next, 1767600000000LL); /* Monday */
    assert_int_equal(spec_parse(s->stored, s->stored_len, NULL, NOW, &again, &err), 0);
    assert_string_equal(again->canonical, s->canonical);
    assert_non_null(again->cron_x);
    assert_int_equal(spec_next_slot(again, s->fire_at_ms, &next, NULL), 0);
    assert_int_equal(next, 1767600000000LL);
    spec_free(again);
    spec_free(s);

    s = parse_ok("{'url':'http://h/','repeat':{'cron':'0 9 * * MON-FRI','tz':'Europe/Berlin',"
                 "'start_at':'2026-02-01T00:00:00Z','misfire':'fire_once','times':3}}");
    assert_int_equal(s->fire_at_ms, 1770019200000LL); /* Monday 2026-02-02 */
    assert_int_equal(s->misfire_fire_once, 1);
    assert_int_equal(s->times, 3);
    assert_non_null(strstr(s->canonical, "\"start_at_ms\":1769904000000,\"times\":3,"));
    spec_free(s);
}

static void test_bad_calendar_schedules_are_rejected_naming_the_field(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','repeat':{'cron':'0 9 * * FUNDAY'}}", "repeat.cron");
    assert_rejected("{'url':'http://h/','repeat':{'cron':5}}", "repeat.cron");
    assert_rejected("{'url':'http://h/','repeat':{'cron':'0 9 * * *','tz':'Nowhere/Land'}}", "repeat.tz");
    assert_rejected("{'url':'http://h/','repeat':{'cron':'0 9 * * *','tz':7}}", "repeat.tz");
    assert_rejected("{'url':'http://h/','delay_ms':1,'repeat':{'cron':'0 9 * * *'}}", "delay_ms");
    assert_rejected("{'url':'http://h/','fire_at_ms':1,'repeat':{'cron':'0 9 * * *'}}", "fire_at_ms");
    assert_rejected("{'url':'http://h/','repeat':{'cron':'0 9 * * *','mode':'fixed_rate'}}", "repeat.mode");
    assert_rejected("{'url':'http://h/','delay_ms':1,'repeat':{'every_ms':100,'misfire':'skip'}}", "repeat.cron");
    assert_rejected("{'url':'http://h/','repeat':{'cron':'0 9 * * *','dst_overlap':'last'}}", "repeat.dst_overlap");
    assert_rejected("{'url':'http://h/','repeat':{'cron':'0 9 * * *','start_at':'soon'}}", "repeat.start_at");
    assert_rejected("{'url':'http://h/','repeat':{'cron':'0 9 * * *','start_at':'1013-03-01T00:00:00Z'}}",
                    "repeat.start_at");
    assert_rejected("{'url':'http://h/','repeat':{'cron':'0 9 * * *','start_at':'2026-02-01T00:00:00Z',"
                    "'start_at_ms':5}}", "repeat.start_at");
    assert_rejected("{'url':'http://h/','repeat':{'cron':'0 9 * * *','end_at':'2026-01-01T00:00:00Z'}}",
                    "repeat.cron"); /* no slot before end_at */
    assert_rejected("{'url':'http://h/','repeat':{'cron':'0 9 * * *','start_at':'2029-01-01T00:00:00Z'}}",
                    "repeat.start_at"); /* beyond the maximum delay of a year */
}

static void test_an_unknown_retry_member_is_rejected(void **state)
{
    (void)state;
    spec_error err = parse_bad("{'url':'http://h/','delay_ms':1,'retry':{'jitter':true}}");

    assert_string_equal(err.field, "retry.jitter");
    assert_string_equal(err.detail, "unknown field");
    assert_rejected("{'url':'http://h/','delay_ms':1,'retry':5}", "retry");
}

static void test_a_max_backoff_below_the_min_backoff_is_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1,"
                    "'retry':{'min_backoff_ms':5000,'max_backoff_ms':4999}}",
                    "retry.max_backoff_ms");
    assert_rejected("{'url':'http://h/','delay_ms':1,'retry':{'max_backoff_ms':999}}",
                    "retry.max_backoff_ms");
}

static void test_backoffs_above_the_cap_or_negative_are_rejected(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1,'retry':{'max_backoff_ms':86400001}}",
                    "retry.max_backoff_ms");
    assert_rejected("{'url':'http://h/','delay_ms':1,'retry':{'min_backoff_ms':86400001}}",
                    "retry.min_backoff_ms");
    assert_rejected("{'url':'http://h/','delay_ms':1,'retry':{'min_backoff_ms':-1}}",
                    "retry.min_backoff_ms");
}

static void test_a_bad_queue_name_is_rejected(void **state)
{
    (void)state;
    char text[256];

    assert_rejected("{'url':'http://h/','delay_ms':1,'queue':'a/b'}", "queue");
    assert_rejected("{'url':'http://h/','delay_ms':1,'queue':'a:b'}", "queue");
    assert_rejected("{'url':'http://h/','delay_ms':1,'queue':''}", "queue");
    assert_rejected("{'url':'http://h/','delay_ms':1,'queue':null}", "queue");
    snprintf(text, sizeof text, "{'url':'http://h/','delay_ms':1,'queue':'%065d'}", 0);
    assert_rejected(text, "queue");
}

/* ---- the body as a whole ----------------------------------------------- */

static void test_an_unknown_top_level_field_is_rejected_by_name(void **state)
{
    (void)state;
    spec_error err = parse_bad("{'url':'http://h/','delay_ms':1,'callback':'x'}");

    assert_string_equal(err.field, "callback");
    assert_string_equal(err.detail, "unknown field");
}

static void test_a_long_unknown_field_is_truncated_on_a_character_boundary(void **state)
{
    (void)state;
    char text[1024];
    size_t o = (size_t)snprintf(text, sizeof text, "{'url':'http://h/','delay_ms':1,'");

    for (int i = 0; i < 100; i++)
        o += (size_t)snprintf(text + o, sizeof text - o, "\xc3\xa9"); /* é */
    snprintf(text + o, sizeof text - o, "':1}");
    spec_error err = parse_bad(text);
    assert_true(strlen(err.field) > 80);
    assert_int_equal(strlen(err.field) % 2, 0);
    assert_int_equal((unsigned char)err.field[strlen(err.field) - 1], 0xa9);
}

static void test_a_top_level_array_is_rejected(void **state)
{
    (void)state;
    spec_error err = parse_bad("[{'url':'http://h/','delay_ms':1}]");

    assert_string_equal(err.field, "");
    assert_string_equal(err.detail, "request body must be a JSON object");
    assert_rejected("'http://h/'", "");
    assert_rejected("null", "");
}

static void test_malformed_json_is_rejected_with_its_position(void **state)
{
    (void)state;
    spec_error err = parse_bad("{'url':'http://h/',\n'delay_ms':}");

    assert_string_equal(err.field, "");
    assert_non_null(strstr(err.detail, "malformed JSON"));
    assert_non_null(strstr(err.detail, "line 2"));
    assert_rejected("", "");
    assert_rejected("{'url':'http://h/','delay_ms':1} {}", "");
    assert_rejected("{'url':'http://h/','delay_ms':1e999999}", "");
    assert_rejected("{'url':'http://h/','delay_ms':99999999999999999999}", "");
}

static void test_duplicate_keys_are_rejected_naming_the_key(void **state)
{
    (void)state;
    spec_error err = parse_bad("{'url':'http://h/','delay_ms':1,'delay_ms':2}");

    assert_string_equal(err.field, "");
    assert_non_null(strstr(err.detail, "duplicate"));
    assert_non_null(strstr(err.detail, "delay_ms"));
}

static void test_nul_bytes_and_invalid_utf8_are_rejected(void **state)
{
    (void)state;
    static const char nul[] = "{\"url\":\"http://h/\",\"delay_ms\":1,\"body\":\"a\0b\"}";
    static const char escaped[] = "{\"url\":\"http://h/\",\"delay_ms\":1,\"body\":\"a\\u0000b\"}";
    static const char latin1[] = "{\"url\":\"http://h/\",\"delay_ms\":1,\"body\":\"\xe9\"}";
    spec_error err;

    err = parse_bad_raw(nul, sizeof nul - 1);
    assert_string_equal(err.field, "");
    err = parse_bad_raw(escaped, sizeof escaped - 1);
    assert_string_equal(err.field, "");
    err = parse_bad_raw(latin1, sizeof latin1 - 1);
    assert_string_equal(err.field, "");
}

static void test_a_repeat_is_kept_in_the_canonical_form_with_its_mode(void **state)
{
    (void)state;
    timer_spec *s = parse_ok("{'url':'http://h/','delay_ms':1,'repeat':{'every_ms':200}}");
    assert_int_equal(s->every_ms, 200);
    assert_int_equal(s->fixed_rate, 0);
    assert_int_equal(s->times, 0);
    assert_non_null(strstr(s->canonical, "\"repeat\":{\"every_ms\":200,\"mode\":\"fixed_delay\"}"));
    timer_spec *back = NULL;
    spec_error err;
    assert_int_equal(spec_parse(s->stored, s->stored_len, NULL, NOW, &back, &err), 0);
    assert_string_equal(back->canonical, s->canonical);
    spec_free(back);
    spec_free(s);
    s = parse_ok("{'url':'http://h/','delay_ms':1,'repeat':{'every_ms':100,'mode':'fixed_rate','times':3}}");
    assert_int_equal(s->fixed_rate, 1);
    assert_int_equal(s->times, 3);
    spec_free(s);
    s = parse_ok("{'url':'http://h/','delay_ms':1}");
    assert_int_equal(s->every_ms, 0); /* a one-shot timer */
    assert_null(strstr(s->canonical, "repeat"));
    spec_free(s);
}

static void test_a_bad_repeat_is_rejected_naming_the_member(void **state)
{
    (void)state;
    assert_rejected("{'url':'http://h/','delay_ms':1,'repeat':5}", "repeat");
    assert_rejected("{'url':'http://h/','delay_ms':1,'repeat':{}}", "repeat.every_ms");
    assert_rejected("{'url':'http://h/','delay_ms':1,'repeat':{'every_ms':9}}", "repeat.every_ms");
    assert_rejected("{'url':'http://h/','delay_ms':1,'repeat':{'every_ms':'100'}}", "repeat.every_ms");
    assert_rejected("{'url':'http://h/','delay_ms':1,'repeat':{'every_ms':100,'mode':'cron'}}", "repeat.mode");
    assert_rejected("{'url':'http://h/','delay_ms':1,'repeat':{'every_ms':100,'times':0}}", "repeat.times");
    assert_rejected("{'url':'http://h/','delay_ms':1,'repeat':{'every_ms':100,'x':1}}", "repeat.x");
}

static void test_a_due_time_alone_parses_for_reschedule(void **state)
{
    (void)state;
    spec_error err;
    int64_t fire = 0;
    assert_int_equal(spec_parse_when("{\"delay_ms\":250}", 16, &lim, NOW, &fire, &err), 0);
    assert_int_equal(fire, (int64_t)NOW + 250);
    assert_int_equal(spec_parse_when("{\"fire_at_ms\":7}", 16, &lim, NOW, &fire, &err), 0);
    assert_int_equal(fire, 7);
    assert_int_equal(spec_parse_when("{}", 2, &lim, NOW, &fire, &err), -EINVAL);
    assert_string_equal(err.field, "delay_ms");
    assert_int_equal(spec_parse_when("{\"url\":1}", 9, &lim, NOW, &fire, &err), -EINVAL);
    assert_string_equal(err.field, "url");
    assert_int_equal(spec_parse_when("[1]", 3, &lim, NOW, &fire, &err), -EINVAL);
}

static void test_spec_free_accepts_null(void **state)
{
    (void)state;
    spec_free(NULL);
}

/* A spec over max_stored_bytes as stored is refused with 413; one at it is kept. */
static void test_a_spec_larger_as_stored_than_the_limit_is_413(void **state)
{
    (void)state;
    spec_limits l = lim;
    timer_spec *s = parse_with("{'url':'https://example.com/x','delay_ms':5,'body':'abcdef'}", &lim);
    l.max_stored_bytes = s->stored_len;
    spec_free(s);
    s = parse_with("{'url':'https://example.com/x','delay_ms':5,'body':'abcdef'}", &l);
    spec_free(s);
    char *j = req("{'url':'https://example.com/x','delay_ms':5,'body':'abcdefg'}");
    spec_error err = {0};
    s = NULL;
    assert_int_equal(spec_parse(j, strlen(j), &l, NOW, &s, &err), -EINVAL);
    assert_null(s);
    assert_int_equal(err.status, 413);
    assert_non_null(strstr(err.detail, "HOOKWHEEL_MAX_BODY_BYTES"));
    free(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_beginning_with_lease_are_reserved),
        cmocka_unit_test(test_a_minimal_spec_gets_every_default),
        cmocka_unit_test(test_labels_and_callbacks_are_sorted_members_of_the_canonical_and_stored_forms),
        cmocka_unit_test(test_a_repeat_is_kept_in_the_canonical_form_with_its_mode),
        cmocka_unit_test(test_a_bad_repeat_is_rejected_naming_the_member),
        cmocka_unit_test(test_a_due_time_alone_parses_for_reschedule),
        cmocka_unit_test(test_a_full_spec_keeps_every_given_value),
        cmocka_unit_test(test_canonical_is_compact_sorted_and_leaves_out_the_id),
        cmocka_unit_test(test_canonical_form_parses_back_to_itself_without_limits),
        cmocka_unit_test(test_the_stored_form_leaves_out_the_defaults_and_parses_back_to_the_canonical_one),
        cmocka_unit_test(test_explicit_defaults_give_the_same_canonical_form_as_omitted_ones),
        cmocka_unit_test(test_json_body_is_dumped_compact_and_marked_as_json),
        cmocka_unit_test(test_json_body_may_be_a_scalar),
        cmocka_unit_test(test_the_hand_written_forms_are_exactly_jansson_s),
        cmocka_unit_test(test_a_remembered_url_passes_only_under_the_policy_it_passed),
        cmocka_unit_test(test_a_json_body_at_the_depth_limit_is_accepted_and_one_deeper_is_not),
        cmocka_unit_test(test_a_deep_json_body_read_back_from_redis_still_parses),
        cmocka_unit_test(test_a_stored_spec_with_a_nul_in_its_json_parses_and_a_client_s_does_not),
        cmocka_unit_test(test_a_url_with_a_non_ascii_host_is_rejected),
        cmocka_unit_test(test_fire_at_with_an_offset_converts_to_utc_epoch_ms),
        cmocka_unit_test(test_fire_times_in_the_past_are_accepted),
        cmocka_unit_test(test_the_maximum_delay_itself_is_accepted),
        cmocka_unit_test(test_min_backoff_above_the_default_max_raises_the_max),
        cmocka_unit_test(test_limits_are_inclusive),
        cmocka_unit_test(test_without_limits_caps_are_lifted_but_rules_still_hold),
        cmocka_unit_test(test_a_missing_url_is_rejected),
        cmocka_unit_test(test_an_ftp_url_is_rejected),
        cmocka_unit_test(test_a_url_without_an_authority_is_rejected),
        cmocka_unit_test(test_a_url_with_user_info_is_rejected),
        cmocka_unit_test(test_a_url_with_port_0_is_rejected),
        cmocka_unit_test(test_a_url_longer_than_the_limit_is_rejected),
        cmocka_unit_test(test_a_url_that_is_not_a_string_or_not_a_url_is_rejected),
        cmocka_unit_test(test_an_unknown_or_lowercase_method_is_rejected),
        cmocka_unit_test(test_headers_that_are_not_an_object_are_rejected),
        cmocka_unit_test(test_a_header_value_that_is_not_a_string_is_rejected),
        cmocka_unit_test(test_a_header_name_with_a_space_is_rejected),
        cmocka_unit_test(test_a_header_value_with_cr_or_lf_is_rejected),
        cmocka_unit_test(test_a_header_value_with_a_tab_is_accepted),
        cmocka_unit_test(test_reserved_header_names_are_rejected_in_any_case),
        cmocka_unit_test(test_more_headers_than_the_limit_are_rejected),
        cmocka_unit_test(test_a_header_longer_than_the_limit_is_rejected),
        cmocka_unit_test(test_a_header_given_twice_in_different_case_is_rejected),
        cmocka_unit_test(test_a_body_that_is_not_a_string_is_rejected),
        cmocka_unit_test(test_body_and_json_together_are_rejected),
        cmocka_unit_test(test_a_negative_delay_is_rejected),
        cmocka_unit_test(test_a_delay_that_is_not_an_integer_is_rejected),
        cmocka_unit_test(test_two_time_fields_are_rejected_naming_the_second),
        cmocka_unit_test(test_a_spec_without_a_time_field_is_rejected),
        cmocka_unit_test(test_a_bad_fire_at_is_rejected),
        cmocka_unit_test(test_a_due_time_beyond_the_maximum_delay_is_rejected),
        cmocka_unit_test(test_a_huge_delay_without_limits_does_not_overflow),
        cmocka_unit_test(test_an_id_with_bad_characters_is_rejected),
        cmocka_unit_test(test_an_id_of_129_characters_is_rejected),
        cmocka_unit_test(test_spec_id_valid_follows_the_contract_pattern),
        cmocka_unit_test(test_a_timeout_of_zero_or_above_the_cap_is_rejected),
        cmocka_unit_test(test_zero_or_too_many_attempts_are_rejected),
        cmocka_unit_test(test_a_retry_duration_bounds_the_retries_and_round_trips),
        cmocka_unit_test(test_a_calendar_schedule_starts_at_its_first_slot_and_round_trips),
        cmocka_unit_test(test_bad_calendar_schedules_are_rejected_naming_the_field),
        cmocka_unit_test(test_an_unknown_retry_member_is_rejected),
        cmocka_unit_test(test_a_max_backoff_below_the_min_backoff_is_rejected),
        cmocka_unit_test(test_backoffs_above_the_cap_or_negative_are_rejected),
        cmocka_unit_test(test_a_bad_queue_name_is_rejected),
        cmocka_unit_test(test_an_unknown_top_level_field_is_rejected_by_name),
        cmocka_unit_test(test_a_long_unknown_field_is_truncated_on_a_character_boundary),
        cmocka_unit_test(test_a_top_level_array_is_rejected),
        cmocka_unit_test(test_malformed_json_is_rejected_with_its_position),
        cmocka_unit_test(test_duplicate_keys_are_rejected_naming_the_key),
        cmocka_unit_test(test_nul_bytes_and_invalid_utf8_are_rejected),
        cmocka_unit_test(test_spec_free_accepts_null),
        cmocka_unit_test(test_a_spec_larger_as_stored_than_the_limit_is_413),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
