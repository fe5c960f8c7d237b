/* test_sign.c - Standard Webhooks signatures (sign.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "sign.h"

/* The example of the Standard Webhooks specification (and svix's docs). */
#define SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define MSG_ID "msg_p5jXN8AQM9LWM0D4loKWxJek"
#define TS 1614265330u
#define BODY "{\"test\": 2432232314}"
#define SIG "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

static void test_the_specifications_example_signs_as_published(void **state)
{
    (void)state;
    char err[128], out[SIGN_HEADER_MAX];
    signer *s = signer_create(SECRET, err, sizeof err);

    assert_non_null(s);
    assert_int_equal(signer_sign(s, MSG_ID, TS, BODY, strlen(BODY), out), strlen(SIG));
    assert_string_equal(out, SIG);
    signer_free(s);
}

/* A message id longer than any the service makes today is signed whole:
 * the HMAC of "<id>.<timestamp>.<body>" (the expected value computed with
 * Python's hmac module). */
static void test_a_long_message_id_is_signed_whole(void **state)
{
    (void)state;
    char err[128], out[SIGN_HEADER_MAX], id[301];
    signer *s = signer_create(SECRET, err, sizeof err);

    assert_non_null(s);
    memcpy(id, "msg_", 4);
    memset(id + 4, 'x', 296);
    id[300] = '\0';
    signer_sign(s, id, TS, BODY, strlen(BODY), out);
    assert_string_equal(out, "v1,LT3HMyhTIcTpD/g9cVErrNcVoYSof6EqD5WUBzrVVjw=");
    signer_free(s);
}

static void test_two_secrets_give_two_signatures_old_and_new(void **state)
{
    (void)state;
    char err[128], out[SIGN_HEADER_MAX];
    signer *s = signer_create(SECRET ", whsec_c2Vjb25kLXNlY3JldC1rZXktMTIzNDU2", err, sizeof err);

    assert_non_null(s);
    signer_sign(s, MSG_ID, TS, BODY, strlen(BODY), out);
    assert_memory_equal(out, SIG " v1,", strlen(SIG) + 4);
    assert_int_equal(strlen(out), 2 * strlen(SIG) + 1);
    signer_free(s);
}

static void test_a_changed_body_changes_the_signature(void **state)
{
    (void)state;
    char err[128], out[SIGN_HEADER_MAX];
    signer *s = signer_create(SECRET, err, sizeof err);

    signer_sign(s, MSG_ID, TS, "{\"test\": 2432232315}", strlen(BODY), out);
    assert_string_not_equal(out, SIG);
    signer_free(s);
}

static void test_a_namespace_secret_signs_that_namespace_only(void **state)
{
    (void)state;
    char err[256], out[SIGN_HEADER_MAX], path[] = "/tmp/hw-test-ns-secrets-XXXXXX";
    int fd = mkstemp(path);
    const char *text = "# ns secrets\nteam-a " SECRET "\n";
    assert_true(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    signer *s = signer_create_empty();
    assert_int_equal(signer_load_namespaces(s, path, err, sizeof err), 0);
    assert_int_equal(signer_sign(signer_for(s, "team-a/x"), MSG_ID, TS, BODY, strlen(BODY), out), strlen(SIG));
    assert_string_equal(out, SIG);
    assert_int_equal(signer_sign(signer_for(s, "team-b/x"), MSG_ID, TS, BODY, strlen(BODY), out), 0);
    assert_int_equal(signer_sign(signer_for(s, "x"), MSG_ID, TS, BODY, strlen(BODY), out), 0);
    assert_ptr_equal(signer_for(s, "team-ab/x"), s);
    signer_free(s);
    fd = open(path, O_WRONLY | O_TRUNC);
    text = "team-a whsec_bad\n";
    assert_true(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    s = signer_create_empty();
    assert_int_equal(signer_load_namespaces(s, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "line 1"));
    assert_null(strstr(err, "whsec_bad"));
    signer_free(s);
    /* a rotation's second secret after a space is not dropped unseen */
    fd = open(path, O_WRONLY | O_TRUNC);
    text = "team-a " SECRET ", " SECRET "\n";
    assert_true(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    s = signer_create_empty();
    assert_int_equal(signer_load_namespaces(s, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "line 1: expected"));
    assert_null(strstr(err, SECRET + 6));
    signer_free(s);
    fd = open(path, O_WRONLY | O_TRUNC);
    text = "team/a " SECRET "\n";
    assert_true(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    s = signer_create_empty();
    assert_int_equal(signer_load_namespaces(s, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "line 1: namespace must match"));
    signer_free(s);
    fd = open(path, O_WRONLY | O_TRUNC);
    text = "team-a " SECRET "  # since March\n";
    assert_true(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    s = signer_create_empty();
    assert_int_equal(signer_load_namespaces(s, path, err, sizeof err), 0);
    assert_string_equal(signer_namespace(s, 0), "team-a");
    assert_null(signer_namespace(s, 1));
    signer_free(s);
    unlink(path);
}

static void test_malformed_secrets_are_refused_without_quoting_them(void **state)
{
    (void)state;
    char err[128];
    const char *bad[] = {"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_abc", "whsec_!!!!!!!!",
                         "whsec_c2hvcnQ=", SECRET "," SECRET "," SECRET "," SECRET "," SECRET};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        assert_null(signer_create(bad[i], err, sizeof err));
        assert_true(err[0] != '\0');
        assert_null(strstr(err, "MfKQ9r8"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_specifications_example_signs_as_published),
        cmocka_unit_test(test_a_long_message_id_is_signed_whole),
        cmocka_unit_test(test_two_secrets_give_two_signatures_old_and_new),
        cmocka_unit_test(test_a_changed_body_changes_the_signature),
        cmocka_unit_test(test_malformed_secrets_are_refused_without_quoting_them),
        cmocka_unit_test(test_a_namespace_secret_signs_that_namespace_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
