/* test_config.c - unit tests of the settings table's validation and of the
 * start-up check of the open-file limit. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "config.h"

static void test_config_new_connection_settings_have_their_defaults(void **state)
{
    (void)state;
    config cfg;
    char *argv[] = {"hookwheel"};
    assert_int_equal(config_load(&cfg, 1, argv), 0);
    assert_int_equal(cfg.max_connections_per_ip, 0);
    assert_int_equal(cfg.request_head_timeout_ms, 10000);
    assert_int_equal(cfg.request_body_timeout_ms, 30000);
    config_free(&cfg);
}

/* The namespace caps (attempts in flight, timers held in memory): half of
 * the instance's, rounded up, with tokens; none without; as set when set. */
static void test_config_namespace_caps_are_half_with_tokens_and_none_without(void **state)
{
    (void)state;
    config cfg;
    char *open_api[] = {"hookwheel", "--max-inflight", "9", "--max-resident", "7"};
    char *tokens[] = {"hookwheel", "--max-inflight", "9", "--max-resident", "7", "--api-tokens-file",
                      "/etc/hookwheel/tokens"};
    char *set[] = {"hookwheel", "--api-tokens-file", "/etc/hookwheel/tokens", "--max-inflight-per-namespace", "3",
                   "--max-resident-per-namespace", "2"};
    assert_int_equal(config_load(&cfg, 5, open_api), 0);
    assert_int_equal(cfg.max_inflight_per_namespace, 9); /* one namespace: no cap */
    assert_int_equal(cfg.max_resident_per_namespace, 7);
    config_free(&cfg);
    assert_int_equal(config_load(&cfg, 7, tokens), 0);
    assert_int_equal(cfg.max_inflight_per_namespace, 5); /* half, rounded up */
    assert_int_equal(cfg.max_resident_per_namespace, 4);
    config_free(&cfg);
    assert_int_equal(config_load(&cfg, 7, set), 0);
    assert_int_equal(cfg.max_inflight_per_namespace, 3);
    assert_int_equal(cfg.max_resident_per_namespace, 2);
    config_free(&cfg);
}

static void test_config_deadlines_outside_their_range_are_refused(void **state)
{
    (void)state;
    config cfg;
    char *low[] = {"hookwheel", "--request-head-timeout-ms", "99"};
    char *high[] = {"hookwheel", "--request-body-timeout-ms", "3600001"};
    char *ip[] = {"hookwheel", "--max-connections-per-ip", "100001"};
    char *ok[] = {"hookwheel", "--request-head-timeout-ms", "100", "--max-connections-per-ip", "64"};
    assert_int_equal(config_load(&cfg, 3, low), -EINVAL);
    config_free(&cfg);
    assert_int_equal(config_load(&cfg, 3, high), -EINVAL);
    config_free(&cfg);
    assert_int_equal(config_load(&cfg, 3, ip), -EINVAL);
    config_free(&cfg);
    char *blank[] = {"hookwheel", "--max-inflight", " 5"};
    char *plus[] = {"hookwheel", "--max-inflight", "+5"};
    assert_int_equal(config_load(&cfg, 3, blank), -EINVAL); /* as "5 " is */
    config_free(&cfg);
    assert_int_equal(config_load(&cfg, 3, plus), -EINVAL);
    config_free(&cfg);
    assert_int_equal(config_load(&cfg, 5, ok), 0);
    assert_int_equal(cfg.request_head_timeout_ms, 100);
    assert_int_equal(cfg.max_connections_per_ip, 64);
    config_free(&cfg);
}

/* Flags win over the environment: a variable a flag overrides is not
 * read, so its value, valid or not, neither counts nor stops start-up; and
 * --help prints the settings whatever the environment holds. */
static void test_config_a_flag_wins_over_an_invalid_environment_variable(void **state)
{
    (void)state;
    config cfg;
    char *flag[] = {"hookwheel", "--tick-ms", "5"};
    char *help[] = {"hookwheel", "--help"};
    char *none[] = {"hookwheel"};
    setenv("HOOKWHEEL_TICK_MS", "abc", 1);
    assert_int_equal(config_load(&cfg, 3, flag), 0);
    assert_int_equal(cfg.tick_ms, 5);
    config_free(&cfg);
    FILE *out = freopen("/dev/null", "w", stdout); /* the help text */
    assert_non_null(out);
    assert_int_equal(config_load(&cfg, 2, help), 1);
    config_free(&cfg);
    assert_int_equal(config_load(&cfg, 1, none), -EINVAL); /* without the flag it counts */
    config_free(&cfg);
    setenv("HOOKWHEEL_TICK_MS", "7", 1);
    assert_int_equal(config_load(&cfg, 3, flag), 0);
    assert_int_equal(cfg.tick_ms, 5);
    config_free(&cfg);
    unsetenv("HOOKWHEEL_TICK_MS");
}

static void test_config_connections_and_reserve_must_fit_under_the_file_limit(void **state)
{
    (void)state;
    config cfg = {0};
    cfg.max_connections = 700;
    cfg.max_inflight = 16;
    assert_int_equal(config_check_fd_limit(&cfg, 324, 1024), 0);  /* exactly fits */
    assert_int_equal(config_check_fd_limit(&cfg, 325, 1024), -EINVAL);
    assert_int_equal(config_check_fd_limit(&cfg, 2000, 1024), -EINVAL); /* the reserve alone is over */
    cfg.max_connections = 100000;
    assert_int_equal(config_check_fd_limit(&cfg, 843, 1048576), 0);
}

int main(void)
{
    unsetenv("HOOKWHEEL_REQUEST_HEAD_TIMEOUT_MS");
    unsetenv("HOOKWHEEL_REQUEST_BODY_TIMEOUT_MS");
    unsetenv("HOOKWHEEL_MAX_CONNECTIONS_PER_IP");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_new_connection_settings_have_their_defaults),
        cmocka_unit_test(test_config_namespace_caps_are_half_with_tokens_and_none_without),
        cmocka_unit_test(test_config_deadlines_outside_their_range_are_refused),
        cmocka_unit_test(test_config_a_flag_wins_over_an_invalid_environment_variable),
        cmocka_unit_test(test_config_connections_and_reserve_must_fit_under_the_file_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
