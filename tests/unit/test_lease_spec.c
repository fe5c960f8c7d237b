/* test_lease_spec.c - validation of watchdog lease requests (lease_spec.h)
 * and the lease key names (leases.h).
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

#include "lease_spec.h"
#include "leases.h"
#include "netpolicy.h"

#define NOW 1767323045678ULL

static netpolicy *policy;

static spec_limits timer_lim = {
    .max_url_len = 64,
    .max_headers = 4,
    .max_header_bytes = 256,
    .max_delay_ms = 86400000,
    .max_timeout_ms = 300000,
    .max_attempts = 100,
    .max_backoff_cap_ms = 86400000,
    .default_timeout_ms = 10000,
    .default_max_attempts = SPEC_DEFAULT_MAX_ATTEMPTS,
    .default_min_backoff_ms = 1000,
    .default_max_backoff_ms = SPEC_DEFAULT_MAX_BACKOFF_MS,
};
static lease_limits lim = {.max_ttl_ms = 3600000, .timer = &timer_lim};

static int setup(void **state)
{
    char err[160];
    (void)state;
    policy = netpolicy_create(NULL, err, sizeof err);
    timer_lim.policy = policy;
    return policy ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    netpolicy_free(policy);
    return 0;
}

static char *req(const char *s)
{
    char *j = strdup(s);
    for (char *p = j; *p; p++)
        if (*p == '\'')
            *p = '"';
    return j;
}

static lease_request *parse_ok(const char *text)
{
    char *j = req(text);
    lease_request *r = NULL;
    spec_error err;
    if (lease_request_parse(j, strlen(j), &lim, NOW, &r, &err) != 0)
        fail_msg("rejected %s: field '%s': %s", j, err.field, err.detail);
    free(j);
    return r;
}

static void assert_rejected(const char *text, const char *field)
{
    char *j = req(text);
    lease_request *sentinel = (lease_request *)&lim, *r = sentinel;
    spec_error err;
    assert_int_equal(lease_request_parse(j, strlen(j), &lim, NOW, &r, &err), -EINVAL);
    assert_ptr_equal(r, sentinel); /* *out untouched */
    assert_int_equal(err.status, 400);
    assert_true(strlen(err.detail) > 0);
    if (strcmp(err.field, field) != 0)
        fail_msg("%s: expected field '%s', got '%s' (%s)", j, field, err.field, err.detail);
    free(j);
}

/* ---- accepted ---- */

static void test_a_minimal_lease_has_no_probe_and_no_on_expire(void **state)
{
    (void)state;
    lease_request *r = parse_ok("{'key':'orders-42','owner':'worker-7','ttl_ms':30000}");
    assert_string_equal(r->key, "orders-42");
    assert_string_equal(r->owner, "worker-7");
    assert_int_equal(r->ttl_ms, 30000);
    assert_string_equal(r->probe_url, "");
    assert_null(r->on_expire);
    lease_request_free(r);
}

static void test_on_expire_is_a_timer_spec_due_delay_ms_after_the_expiry(void **state)
{
    (void)state;
    lease_request *r = parse_ok("{'key':'k','owner':'o','ttl_ms':300,'probe_url':'https://svc.example/alive',"
                                "'on_expire':{'url':'https://hooks.example/x','json':{'a':1}}}");
    assert_string_equal(r->probe_url, "https://svc.example/alive");
    assert_non_null(r->on_expire);
    assert_string_equal(r->on_expire->when, "delay_ms=0");
    assert_string_equal(r->on_expire->stored, "{\"json\":{\"a\":1},\"url\":\"https://hooks.example/x\"}");
    lease_request_free(r);
    r = parse_ok("{'key':'k','owner':'o','ttl_ms':300,'on_expire':{'url':'https://h.example/','delay_ms':2500}}");
    assert_string_equal(r->on_expire->when, "delay_ms=2500");
    assert_int_equal(lease_when_delay(r->on_expire->when), 2500);
    lease_request_free(r);
}

static void test_the_ttl_bounds_are_inclusive(void **state)
{
    (void)state;
    lease_request_free(parse_ok("{'key':'k','owner':'o','ttl_ms':300}"));
    lease_request_free(parse_ok("{'key':'k','owner':'o','ttl_ms':3600000}"));
    assert_rejected("{'key':'k','owner':'o','ttl_ms':299}", "ttl_ms");
    assert_rejected("{'key':'k','owner':'o','ttl_ms':3600001}", "ttl_ms");
    assert_rejected("{'key':'k','owner':'o','ttl_ms':1000.5}", "ttl_ms");
    assert_rejected("{'key':'k','owner':'o'}", "ttl_ms");
}

/* A worker looks at least every tick: the smallest ttl is three of them
 * when that is more than 300 ms (the default tick of 50 ms leaves it 300). */
static void test_the_smallest_ttl_is_three_lease_worker_ticks_when_that_is_more(void **state)
{
    (void)state;
    assert_int_equal(lease_min_ttl_ms(50), 300);
    assert_int_equal(lease_min_ttl_ms(100), 300);
    assert_int_equal(lease_min_ttl_ms(1000), 3000);
    lease_limits slow = lim;
    slow.min_ttl_ms = lease_min_ttl_ms(1000);
    char *j = req("{'key':'k','owner':'o','ttl_ms':2999}");
    lease_request *r = NULL;
    spec_error err;
    assert_int_equal(lease_request_parse(j, strlen(j), &slow, NOW, &r, &err), -EINVAL);
    assert_string_equal(err.field, "ttl_ms");
    assert_string_equal(err.detail, "ttl_ms must be an integer from 3000 to 3600000");
    free(j);
    j = req("{'key':'k','owner':'o','ttl_ms':3000}");
    assert_int_equal(lease_request_parse(j, strlen(j), &slow, NOW, &r, &err), 0);
    assert_int_equal(r->ttl_ms, 3000);
    lease_request_free(r);
    free(j);
}

/* ---- rejected ---- */

static void test_unknown_fields_are_rejected_before_anything_else(void **state)
{
    (void)state;
    assert_rejected("{'key':'bad key','ttl':5}", "ttl");
    assert_rejected("[1]", "");
    assert_rejected("{'key':", "");
    assert_rejected("{'key':'k','key':'k','owner':'o','ttl_ms':300}", "");
}

static void test_keys_follow_the_timer_id_alphabet_up_to_100_characters(void **state)
{
    (void)state;
    char key[128], text[256];
    assert_true(lease_key_valid("a.b_c:d-E9"));
    assert_false(lease_key_valid(""));
    assert_false(lease_key_valid("a/b"));
    assert_false(lease_key_valid("a b"));
    assert_false(lease_key_valid("{tag}x"));
    assert_false(lease_key_valid(NULL));
    memset(key, 'k', 100);
    key[100] = '\0';
    assert_true(lease_key_valid(key));
    key[100] = 'k';
    key[101] = '\0';
    assert_false(lease_key_valid(key));
    snprintf(text, sizeof text, "{'key':'%s','owner':'o','ttl_ms':300}", key);
    assert_rejected(text, "key");
    assert_rejected("{'key':7,'owner':'o','ttl_ms':300}", "key");
    assert_rejected("{'owner':'o','ttl_ms':300}", "key");
}

static void test_owners_are_visible_ascii_up_to_200_characters(void **state)
{
    (void)state;
    char owner[256];
    assert_true(lease_owner_valid("host-1:4242/\"x\""));
    assert_false(lease_owner_valid("has space"));
    assert_false(lease_owner_valid("tab\there"));
    assert_false(lease_owner_valid("caf\xc3\xa9"));
    assert_false(lease_owner_valid(""));
    memset(owner, 'o', 200);
    owner[200] = '\0';
    assert_true(lease_owner_valid(owner));
    owner[200] = 'o';
    owner[201] = '\0';
    assert_false(lease_owner_valid(owner));
    assert_rejected("{'key':'k','owner':'','ttl_ms':300}", "owner");
    assert_rejected("{'key':'k','ttl_ms':300}", "owner");
}

static void test_probe_urls_obey_the_timer_url_rules_and_the_destination_policy(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "'ftp://x.example/'", "'http:///x'", "'not a url'", "'http://u:p@x.example/'", "'http://127.0.0.1/'",
        "'http://[::1]:8080/'", "'http://localhost/'", "'http://169.254.169.254/latest'", "5",
        "'http://a-very-long-host-name.example/with/a/path/that/goes/on/and/on'", /* > 64 bytes */
    };
    char text[256];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(text, sizeof text, "{'key':'k','owner':'o','ttl_ms':300,'probe_url':%s}", bad[i]);
        assert_rejected(text, "probe_url");
    }
}

static void test_on_expire_errors_name_the_field_inside_on_expire(void **state)
{
    (void)state;
    assert_rejected("{'key':'k','owner':'o','ttl_ms':300,'on_expire':'x'}", "on_expire");
    assert_rejected("{'key':'k','owner':'o','ttl_ms':300,'on_expire':{}}", "on_expire.url");
    assert_rejected("{'key':'k','owner':'o','ttl_ms':300,'on_expire':{'url':'http://h.example/','id':'x'}}",
                    "on_expire.id");
    assert_rejected("{'key':'k','owner':'o','ttl_ms':300,'on_expire':{'url':'http://h.example/','fire_at':'x'}}",
                    "on_expire.fire_at");
    assert_rejected("{'key':'k','owner':'o','ttl_ms':300,'on_expire':{'url':'http://h.example/','repeat':{}}}",
                    "on_expire.repeat");
    assert_rejected("{'key':'k','owner':'o','ttl_ms':300,'on_expire':{'url':'http://h.example/','delay_ms':-1}}",
                    "on_expire.delay_ms");
    assert_rejected("{'key':'k','owner':'o','ttl_ms':300,"
                    "'on_expire':{'url':'http://h.example/','retry':{'max_attempts':0}}}",
                    "on_expire.retry.max_attempts");
    assert_rejected("{'key':'k','owner':'o','ttl_ms':300,'on_expire':{'url':'http://10.1.2.3/'}}", "on_expire.url");
    assert_rejected("{'key':'k','owner':'o','ttl_ms':300,'on_expire':{'url':'http://h.example/','colour':1}}",
                    "on_expire.colour");
}

static void test_fields_are_checked_in_a_fixed_order(void **state)
{
    (void)state;
    assert_rejected("{'on_expire':5,'ttl_ms':1,'owner':'','key':'a b'}", "key");
    assert_rejected("{'on_expire':5,'ttl_ms':1,'owner':'','key':'k'}", "owner");
    assert_rejected("{'on_expire':5,'ttl_ms':1,'owner':'o','key':'k'}", "ttl_ms");
}

static void test_heartbeat_bodies_take_an_owner_and_an_optional_token(void **state)
{
    (void)state;
    char owner[LEASE_OWNER_MAX + 1];
    uint64_t token = 99;
    spec_error err;
    assert_int_equal(lease_heartbeat_parse("{\"owner\":\"w\"}", 13, owner, &token, &err), 0);
    assert_string_equal(owner, "w");
    assert_int_equal(token, 0);
    const char *with = "{\"owner\":\"w\",\"token\":17}";
    assert_int_equal(lease_heartbeat_parse(with, strlen(with), owner, &token, &err), 0);
    assert_int_equal(token, 17);
    const char *bad[][2] = {{"{\"token\":1}", "owner"},
                            {"{\"owner\":\"w\",\"token\":0}", "token"},
                            {"{\"owner\":\"w\",\"token\":\"1\"}", "token"},
                            {"{\"owner\":\"w\",\"ttl_ms\":1}", "ttl_ms"},
                            {"{\"owner\":\"a b\"}", "owner"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(lease_heartbeat_parse(bad[i][0], strlen(bad[i][0]), owner, &token, &err), -EINVAL);
        assert_string_equal(err.field, bad[i][1]);
    }
}

static void test_tokens_in_query_parameters_are_positive_decimal_integers(void **state)
{
    (void)state;
    uint64_t t = 0;
    assert_int_equal(lease_token_parse("42", &t), 0);
    assert_int_equal(t, 42);
    assert_int_equal(lease_token_parse("9223372036854775807", &t), 0);
    assert_int_equal(lease_token_parse("9223372036854775808", &t), -EINVAL);
    assert_int_equal(lease_token_parse("0", &t), -EINVAL);
    assert_int_equal(lease_token_parse("-1", &t), -EINVAL);
    assert_int_equal(lease_token_parse("1x", &t), -EINVAL);
    assert_int_equal(lease_token_parse("", &t), -EINVAL);
    assert_int_equal(lease_token_parse(NULL, &t), -EINVAL);
}

static void test_the_on_expire_timer_id_is_a_valid_timer_id_for_the_longest_key_and_token(void **state)
{
    (void)state;
    char key[LEASE_KEY_MAX + 1], id[LEASE_TIMER_ID_MAX];
    memset(key, 'k', LEASE_KEY_MAX);
    key[LEASE_KEY_MAX] = '\0';
    lease_timer_id(id, key, "9223372036854775807");
    assert_int_equal(strlen(id), 6 + LEASE_KEY_MAX + 1 + 19);
    assert_true(spec_id_valid(id));
    lease_timer_id(id, "jobs", "3");
    assert_string_equal(id, "lease:jobs:3");
}

static void test_a_lease_id_puts_the_key_in_its_namespace_and_the_timer_id_follows(void **state)
{
    (void)state;
    char lid[LEASE_ID_MAX], id[LEASE_TIMER_ID_MAX], ns[LEASE_NS_MAX + 1], key[LEASE_KEY_MAX + 1];
    lease_id(lid, "", "jobs");
    assert_string_equal(lid, "jobs");
    assert_string_equal(lease_id_key(lid), "jobs");
    lease_id(lid, "team-a", "jobs");
    assert_string_equal(lid, "team-a/jobs");
    assert_string_equal(lease_id_key(lid), "jobs");
    lease_timer_id(id, lid, "12");
    assert_string_equal(id, "team-a/lease:jobs:12");
    memset(ns, 'n', LEASE_NS_MAX);
    ns[LEASE_NS_MAX] = '\0';
    memset(key, 'k', LEASE_KEY_MAX);
    key[LEASE_KEY_MAX] = '\0';
    lease_id(lid, ns, key);
    assert_int_equal(strlen(lid), LEASE_NS_MAX + 1 + LEASE_KEY_MAX);
    lease_timer_id(id, lid, "9223372036854775807");
    assert_int_equal(strlen(id), LEASE_NS_MAX + 1 + 6 + LEASE_KEY_MAX + 1 + 19);
    assert_true(spec_id_valid(lease_id_key(id)));
}

static void test_key_names_put_the_user_key_under_the_prefix_and_ours_under_hw(void **state)
{
    (void)state;
    char buf[LEASES_KEY_MAX];
    leases_key(buf, "lease:", "orders-42");
    assert_string_equal(buf, "lease:orders-42");
    leases_key(buf, "", "orders-42");
    assert_string_equal(buf, "orders-42");
    leases_meta_key(buf, "orders-42#7");
    assert_string_equal(buf, "hw:lease:meta:orders-42#7");
    leases_token_key(buf, "orders-42");
    assert_string_equal(buf, "hw:lease:token:orders-42");
}

static void test_lease_request_free_accepts_null(void **state)
{
    (void)state;
    lease_request_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_minimal_lease_has_no_probe_and_no_on_expire),
        cmocka_unit_test(test_on_expire_is_a_timer_spec_due_delay_ms_after_the_expiry),
        cmocka_unit_test(test_the_ttl_bounds_are_inclusive),
        cmocka_unit_test(test_the_smallest_ttl_is_three_lease_worker_ticks_when_that_is_more),
        cmocka_unit_test(test_unknown_fields_are_rejected_before_anything_else),
        cmocka_unit_test(test_keys_follow_the_timer_id_alphabet_up_to_100_characters),
        cmocka_unit_test(test_owners_are_visible_ascii_up_to_200_characters),
        cmocka_unit_test(test_probe_urls_obey_the_timer_url_rules_and_the_destination_policy),
        cmocka_unit_test(test_on_expire_errors_name_the_field_inside_on_expire),
        cmocka_unit_test(test_fields_are_checked_in_a_fixed_order),
        cmocka_unit_test(test_heartbeat_bodies_take_an_owner_and_an_optional_token),
        cmocka_unit_test(test_tokens_in_query_parameters_are_positive_decimal_integers),
        cmocka_unit_test(test_the_on_expire_timer_id_is_a_valid_timer_id_for_the_longest_key_and_token),
        cmocka_unit_test(test_a_lease_id_puts_the_key_in_its_namespace_and_the_timer_id_follows),
        cmocka_unit_test(test_key_names_put_the_user_key_under_the_prefix_and_ours_under_hw),
        cmocka_unit_test(test_lease_request_free_accepts_null),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
