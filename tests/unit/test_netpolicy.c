/* test_netpolicy.c - the destination policy (netpolicy.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmocka.h>

#include "netpolicy.h"

static netpolicy *make(const char *allowlist)
{
    char err[160];
    netpolicy *p = netpolicy_create(allowlist, err, sizeof err);
    assert_non_null(p);
    return p;
}

/* 1 when the address text (standard notation) may be connected to. */
static int addr_ok(const netpolicy *p, const char *text)
{
    struct sockaddr_in in4 = {.sin_family = AF_INET};
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
    if (inet_pton(AF_INET, text, &in4.sin_addr) == 1)
        return netpolicy_addr_allowed(p, (struct sockaddr *)&in4);
    assert_int_equal(inet_pton(AF_INET6, text, &in6.sin6_addr), 1);
    return netpolicy_addr_allowed(p, (struct sockaddr *)&in6);
}

static void test_internal_literals_in_every_spelling_are_forbidden(void **state)
{
    (void)state;
    static const char *const hosts[] = {
        "127.0.0.1", "0.0.0.0", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
        "100.64.0.1", "[::1]", "[fd00::1]", "[::ffff:127.0.0.1]", "2130706433", "0x7f.1",
        "0177.0.0.1", "127.1", "localhost", "LocalHost.", "api.localhost", "[::]",
        "[fe80::1%25eth0]", "[ff02::1]", "224.0.0.1", "255.255.255.255", "240.0.0.1",
        "198.18.0.1", "192.0.0.8", "[64:ff9b::a9fe:a9fe]", "[2002:7f00:1::]", "127.0.0.1.",
        "[::127.0.0.1]", "[::ffff:0:127.0.0.1]", "[::ffff:0:a9fe:a9fe]", "[64:ff9b:1::7f00:1]",
        "[2001:0:4136:e378:8000:63bf:80ff:fffe]", /* Teredo, client 127.0.0.1 (inverted) */
        "[2001:0:4136:e378:8000:63bf:5601:5601]", /* Teredo, client 169.254.169.254 */
    };
    netpolicy *p = make(NULL);
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
        if (!netpolicy_literal_forbidden(p, hosts[i]))
            fail_msg("%s should be forbidden", hosts[i]);
    }
    netpolicy_free(p);
}

static void test_public_addresses_and_names_pass(void **state)
{
    (void)state;
    static const char *const hosts[] = {
        "8.8.8.8", "1.1.1.1", "[2001:db8::1]", "[2606:4700::1111]", "example.com",
        "localhost.example.com", "172.32.0.1", "100.128.0.1", "[::ffff:8.8.8.8]",
        "[2001:0:4136:e378:8000:63bf:f7f7:f7f7]", /* Teredo, client 8.8.8.8 */
    };
    netpolicy *p = make("");
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
        if (netpolicy_literal_forbidden(p, hosts[i]))
            fail_msg("%s should be allowed", hosts[i]);
    }
    netpolicy_free(p);
}

static void test_the_refusal_names_the_range(void **state)
{
    (void)state;
    netpolicy *p = make(NULL);
    assert_string_equal(netpolicy_host_refusal(p, "127.0.0.1"), "loopback");
    assert_string_equal(netpolicy_host_refusal(p, "169.254.169.254"), "link-local");
    assert_string_equal(netpolicy_host_refusal(p, "[::ffff:10.0.0.1]"), "private");
    assert_string_equal(netpolicy_host_refusal(p, "localhost"), "loopback");
    assert_null(netpolicy_host_refusal(p, "8.8.8.8"));
    netpolicy_free(p);
}

static void test_connect_time_addresses_follow_the_same_ranges(void **state)
{
    (void)state;
    netpolicy *p = make(NULL);
    assert_false(addr_ok(p, "127.0.0.1"));
    assert_false(addr_ok(p, "169.254.169.254"));
    assert_false(addr_ok(p, "::1"));
    assert_false(addr_ok(p, "::ffff:127.0.0.1"));
    assert_false(addr_ok(p, "64:ff9b::7f00:1"));
    assert_false(addr_ok(p, "fd12::1"));
    assert_true(addr_ok(p, "8.8.8.8"));
    assert_true(addr_ok(p, "2001:4860:4860::8888"));
    netpolicy_free(p);
}

/* A name with several addresses: curl asks for a socket per address, and
 * each is judged on its own, so the forbidden ones are never connected to
 * while a public one still is; a URL whose host is an allowlisted name may
 * reach any of them. */
static void test_each_address_of_a_name_is_judged_at_connect(void **state)
{
    (void)state;
    static const char *const answer[] = {"127.0.0.1", "::1", "8.8.8.8", "::ffff:169.254.169.254",
                                         "2001:4860:4860::8888"};
    static const int allowed[] = {0, 0, 1, 0, 1};
    netpolicy *p = make("billing.internal");
    for (size_t i = 0; i < sizeof answer / sizeof answer[0]; i++) {
        struct sockaddr_storage ss = {0};
        struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        if (inet_pton(AF_INET, answer[i], &in4->sin_addr) == 1)
            in4->sin_family = AF_INET;
        else {
            assert_int_equal(inet_pton(AF_INET6, answer[i], &in6->sin6_addr), 1);
            in6->sin6_family = AF_INET6;
        }
        char refused[64] = "";
        int ok = netpolicy_connect_allowed(p, "http://rebind.example.com/x", (struct sockaddr *)&ss, refused,
                                           sizeof refused);
        if (ok != allowed[i])
            fail_msg("%s: allowed %d, expected %d", answer[i], ok, allowed[i]);
        if (!ok)
            assert_string_equal(refused, answer[i]);
        assert_true(netpolicy_connect_allowed(p, "http://Billing.Internal./x", (struct sockaddr *)&ss, refused,
                                              sizeof refused));
    }
    netpolicy_free(p);
}

static void test_an_allowlisted_cidr_opens_exactly_its_range(void **state)
{
    (void)state;
    netpolicy *p = make(" 10.1.0.0/16 , ::1/128,192.168.7.7");
    assert_true(addr_ok(p, "10.1.0.0"));
    assert_true(addr_ok(p, "10.1.255.255"));
    assert_false(addr_ok(p, "10.2.0.1"));
    assert_false(addr_ok(p, "10.0.255.255"));
    assert_true(addr_ok(p, "::1"));
    assert_true(addr_ok(p, "::ffff:10.1.2.3")); /* mapped: judged as the IPv4 */
    assert_true(addr_ok(p, "192.168.7.7"));
    assert_false(addr_ok(p, "192.168.7.8"));
    assert_false(addr_ok(p, "127.0.0.1"));
    assert_false(netpolicy_literal_forbidden(p, "10.1.2.3"));
    assert_false(netpolicy_literal_forbidden(p, "[::1]"));
    assert_true(netpolicy_literal_forbidden(p, "10.2.0.1"));
    assert_true(netpolicy_literal_forbidden(p, "localhost")); /* only a name opens a name */
    netpolicy_free(p);
}

static void test_a_host_name_allowlist_matches_case_insensitively(void **state)
{
    (void)state;
    netpolicy *p = make("localhost,Internal.Example.");
    assert_true(netpolicy_host_allowlisted(p, "LOCALHOST"));
    assert_true(netpolicy_host_allowlisted(p, "internal.example.com") == 0);
    assert_true(netpolicy_host_allowlisted(p, "internal.example"));
    assert_false(netpolicy_literal_forbidden(p, "localhost"));
    assert_true(netpolicy_literal_forbidden(p, "a.localhost"));
    assert_true(netpolicy_literal_forbidden(p, "127.0.0.1"));
    netpolicy_free(p);
}

static void test_a_bad_allowlist_entry_is_named(void **state)
{
    (void)state;
    static const char *const bad[] = {"10.0.0.0/33", "10.0.0.0/", "::1/129", "10.0.0.300",
                                      "exa mple.com", "*.example.com", "1.2.3.4/x"};
    char err[160];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (netpolicy_create(bad[i], err, sizeof err))
            fail_msg("%s should be rejected", bad[i]);
        assert_non_null(strstr(err, "is not a CIDR"));
    }
    netpolicy_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_internal_literals_in_every_spelling_are_forbidden),
        cmocka_unit_test(test_public_addresses_and_names_pass),
        cmocka_unit_test(test_the_refusal_names_the_range),
        cmocka_unit_test(test_connect_time_addresses_follow_the_same_ranges),
        cmocka_unit_test(test_each_address_of_a_name_is_judged_at_connect),
        cmocka_unit_test(test_an_allowlisted_cidr_opens_exactly_its_range),
        cmocka_unit_test(test_a_host_name_allowlist_matches_case_insensitively),
        cmocka_unit_test(test_a_bad_allowlist_entry_is_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
