/* test_auth.c - API bearer tokens (auth.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "auth.h"

static char path[64];

static auth *load(const char *text, char *err, size_t errlen)
{
    snprintf(path, sizeof path, "/tmp/hw-test-auth-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    auth *a = auth_load(path, err, errlen);
    unlink(path);
    return a;
}

static void test_plain_and_hashed_tokens_map_to_their_namespaces(void **state)
{
    (void)state;
    char err[200];
    auth *a = load("# tokens\n\nteam-a  team-a-token-0123456789\n"
                   "team-b sha256:9f5fcbc2f2bf1b8a3d8b7d0f6b1b5fd7f2f8c7a0e0b3c9d6c7a1b4e2d9f0a1b2 # ops\n",
                   err, sizeof err);
    assert_non_null(a);
    assert_int_equal(auth_count(a), 2);
    assert_string_equal(auth_check(a, "Bearer team-a-token-0123456789"), "team-a");
    assert_string_equal(auth_check(a, "bearer   team-a-token-0123456789 "), "team-a");
    assert_null(auth_check(a, "Bearer team-a-token-012345678"));
    assert_null(auth_check(a, "Basic team-a-token-0123456789"));
    assert_null(auth_check(a, "Bearer "));
    assert_null(auth_check(a, NULL));
    auth_free(a);
}

static void test_a_sha256_line_matches_the_token_it_was_made_from(void **state)
{
    (void)state;
    char err[200];
    /* the digest as an operator makes it: printf %s <token> | sha256sum */
    FILE *p = popen("printf %s 'secret-token-for-ops-42' | sha256sum", "r");
    char hex[80] = "";
    assert_non_null(p);
    assert_non_null(fgets(hex, sizeof hex, p));
    pclose(p);
    hex[64] = '\0';
    char text[200];
    snprintf(text, sizeof text, "ops sha256:%s\n", hex);
    auth *a = load(text, err, sizeof err);
    assert_non_null(a);
    assert_string_equal(auth_check(a, "Bearer secret-token-for-ops-42"), "ops");
    assert_null(auth_check(a, "Bearer sha256:x"));
    auth_free(a);
}

static void test_bad_lines_are_refused_with_their_line_number(void **state)
{
    (void)state;
    char err[200];
    assert_null(load("a short\n", err, sizeof err));
    assert_non_null(strstr(err, "line 1: token shorter than 16"));
    assert_null(load("ok token-long-enough-123\nbad/ns token-long-enough-456\n", err, sizeof err));
    assert_non_null(strstr(err, "line 2: namespace"));
    assert_null(load("ns sha256:abc\n", err, sizeof err));
    assert_non_null(strstr(err, "64 hex"));
    assert_null(load("ns\n", err, sizeof err));
    assert_non_null(strstr(err, "line 1: expected"));
    assert_null(load("ns a-token-long-enough extra\n", err, sizeof err));
    assert_null(load("team-a token-long-enough-123\nteam-b token-long-enough-123\n", err, sizeof err));
    assert_non_null(strstr(err, "line 2: the token is already given to another namespace"));
    assert_null(strstr(err, "token-long-enough-123"));
    /* the same token as its digest (sha256 of "token-long-enough-123") */
    FILE *p = popen("printf %s token-long-enough-123 | sha256sum", "r");
    char hex[80] = "", text[200];
    assert_non_null(p);
    assert_non_null(fgets(hex, sizeof hex, p));
    pclose(p);
    hex[64] = '\0';
    snprintf(text, sizeof text, "team-a token-long-enough-123\nteam-b sha256:%s\n", hex);
    assert_null(load(text, err, sizeof err));
    assert_non_null(strstr(err, "line 2: the token is already given"));
    snprintf(text, sizeof text, "team-a token-long-enough-123\nteam-a sha256:%s\n", hex);
    auth *same = load(text, err, sizeof err); /* twice in one namespace: harmless */
    assert_non_null(same);
    assert_string_equal(auth_check(same, "Bearer token-long-enough-123"), "team-a");
    auth_free(same);
    assert_null(load("# only a comment\n", err, sizeof err));
    assert_non_null(strstr(err, "no tokens"));
    assert_null(auth_load("/nonexistent/tokens", err, sizeof err));
    assert_non_null(strstr(err, "No such file"));
}

static void test_namespace_names_follow_the_pattern(void **state)
{
    (void)state;
    assert_true(auth_namespace_valid("team-a.prod_1"));
    assert_false(auth_namespace_valid(""));
    assert_false(auth_namespace_valid("a/b"));
    assert_false(auth_namespace_valid("a b"));
    char long_ns[70];
    memset(long_ns, 'x', 65);
    long_ns[65] = '\0';
    assert_false(auth_namespace_valid(long_ns));
    long_ns[64] = '\0';
    assert_true(auth_namespace_valid(long_ns));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_and_hashed_tokens_map_to_their_namespaces),
        cmocka_unit_test(test_a_sha256_line_matches_the_token_it_was_made_from),
        cmocka_unit_test(test_bad_lines_are_refused_with_their_line_number),
        cmocka_unit_test(test_namespace_names_follow_the_pattern),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
