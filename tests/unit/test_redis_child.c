/* test_redis_child.c - the embedded redis-server, against the real binary.
 *
 * Each test owns a fresh mkdtemp directory (removed afterwards) and leaves no
 * child process behind: tests that expect a failure also check that nothing
 * is left to reap. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "log.h"
#include "redis_child.h"

#define SERVER     "redis-server"
#define START_MS   10000

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *join(const char *a, const char *b)
{
    char *p = NULL;
    assert_true(asprintf(&p, "%s/%s", a, b) > 0);
    return p;
}

static int remove_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int setup_tmpdir(void **state)
{
    char tmpl[] = "/tmp/hw_redis_child_XXXXXX";
    char *dir = mkdtemp(tmpl);
    if (!dir)
        return -1;
    *state = realpath(dir, NULL);
    return *state ? 0 : -1;
}

static int teardown_tmpdir(void **state)
{
    nftw(*state, remove_cb, 16, FTW_DEPTH | FTW_PHYS);
    free(*state);
    return 0;
}

/* No child running and none left unreaped. */
static void assert_no_children(void)
{
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
}

static redisContext *connect_sock(const char *sock)
{
    struct timeval tv = {2, 0};
    redisContext *ctx = redisConnectUnixWithTimeout(sock, tv);
    assert_non_null(ctx);
    assert_int_equal(ctx->err, 0);
    return ctx;
}

/* Runs one command and returns its reply as a string ("(nil)" for nil). */
static void command_expect(const char *sock, const char *expect, const char *fmt, ...)
{
    redisContext *ctx = connect_sock(sock);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    assert_string_equal(r->type == REDIS_REPLY_NIL ? "(nil)" : r->str, expect);
    freeReplyObject(r);
    redisFree(ctx);
}

static void test_start_makes_the_data_dir_and_answers_ping(void **state)
{
    char *dir = join(*state, "a/b");
    redis_child *c = redis_child_start(dir, SERVER, START_MS);
    assert_non_null(c);
    assert_true(redis_child_pid(c) > 0);

    char *sock = join(dir, "redis.sock");
    assert_string_equal(redis_child_socket(c), sock);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    command_expect(redis_child_socket(c), "PONG", "PING");

    redis_child_stop(c);
    assert_int_equal(access(sock, F_OK), -1); /* redis removes it on SIGTERM */
    assert_no_children();
    free(sock);
    free(dir);
}

static void test_a_relative_data_dir_is_made_absolute(void **state)
{
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(*state), 0);
    redis_child *c = redis_child_start("./data/", SERVER, START_MS);
    assert_int_equal(chdir(cwd), 0);
    assert_non_null(c);
    char *sock = join(*state, "data/redis.sock");
    assert_string_equal(redis_child_socket(c), sock);
    command_expect(sock, "PONG", "PING");
    redis_child_stop(c);
    free(sock);
}

static void test_writes_survive_a_restart(void **state)
{
    redis_child *c = redis_child_start(*state, SERVER, START_MS);
    assert_non_null(c);
    command_expect(redis_child_socket(c), "OK", "SET %s %s", "hw:test", "kept");
    redis_child_stop(c);

    c = redis_child_start(*state, SERVER, START_MS);
    assert_non_null(c);
    command_expect(redis_child_socket(c), "kept", "GET %s", "hw:test");
    redis_child_stop(c);

    char *aof = join(*state, "appendonlydir");
    struct stat st;
    assert_int_equal(stat(aof, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    free(aof);
    assert_no_children();
}

static void test_a_data_dir_in_use_is_refused(void **state)
{
    redis_child *first = redis_child_start(*state, SERVER, START_MS);
    assert_non_null(first);
    redis_child *second = redis_child_start(*state, SERVER, START_MS);
    assert_null(second);
    /* The refusal must not have disturbed the running server. */
    command_expect(redis_child_socket(first), "PONG", "PING");
    redis_child_stop(first);
    assert_no_children();
}

/* Binds a unix socket at path; listens on it if `listening`. */
static int bind_unix(const char *path, int listening)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    if (listening)
        assert_int_equal(listen(fd, 8), 0);
    return fd;
}

static void test_a_stale_socket_is_removed(void **state)
{
    /* A bound but closed socket file: what a kill -9'd redis leaves. */
    char *sock = join(*state, "redis.sock");
    close(bind_unix(sock, 0));

    redis_child *c = redis_child_start(*state, SERVER, START_MS);
    assert_non_null(c);
    command_expect(sock, "PONG", "PING");
    redis_child_stop(c);
    free(sock);
}

/* A server that accepts but does not answer in time (a busy redis) is alive:
 * its socket must stay, and the data dir is refused. */
static void test_a_socket_that_accepts_but_stays_silent_is_not_taken(void **state)
{
    char *sock = join(*state, "redis.sock");
    int fd = bind_unix(sock, 1);
    assert_null(redis_child_start(*state, SERVER, START_MS));
    struct stat st;
    assert_int_equal(stat(sock, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_no_children();
    close(fd);
    free(sock);
}

static void test_a_file_in_place_of_the_socket_is_refused(void **state)
{
    char *sock = join(*state, "redis.sock");
    touch(sock);
    assert_null(redis_child_start(*state, SERVER, START_MS));
    assert_int_equal(access(sock, F_OK), 0); /* not ours to delete */
    assert_no_children();
    free(sock);
}

static void test_a_missing_binary_fails_cleanly(void **state)
{
    int64_t t0 = mono_ms();
    assert_null(redis_child_start(*state, "/nonexistent/redis-server", START_MS));
    assert_null(redis_child_start(*state, "hookwheel-no-such-redis-server", START_MS));
    assert_true(mono_ms() - t0 < 2000); /* reported by exec, not by a timeout */
    assert_no_children();
}

static void test_a_too_long_socket_path_fails(void **state)
{
    char name[121];
    memset(name, 'x', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    char *dir = join(*state, name);
    assert_null(redis_child_start(dir, SERVER, START_MS));
    assert_no_children();
    free(dir);
}

static void test_a_data_dir_under_a_file_fails(void **state)
{
    char *file = join(*state, "file");
    touch(file);
    char *dir = join(file, "data");
    assert_null(redis_child_start(dir, SERVER, START_MS));
    assert_no_children();
    free(dir);
    free(file);
}

static void test_a_server_that_exits_at_once_fails(void **state)
{
    int64_t t0 = mono_ms();
    assert_null(redis_child_start(*state, "false", START_MS));
    assert_true(mono_ms() - t0 < 2000);
    assert_no_children();
}

/* The error line quotes redis's own reason, taken from redis.log. */
static void test_a_redis_that_cannot_start_reports_its_log(void **state)
{
    char *blocker = join(*state, "appendonlydir"); /* a file where the AOF dir goes */
    touch(blocker);
    char *errlog = join(*state, "stderr.txt");
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(errlog, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    redis_child *c = redis_child_start(*state, SERVER, START_MS);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    assert_null(c);

    char text[8192] = "";
    FILE *f = fopen(errlog, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    fputs(text, stderr);
    assert_non_null(strstr(text, "\"msg\":\"embedded redis exited during start-up\""));
    assert_non_null(strstr(text, "append-only dir appendonlydir: Not a directory"));
    assert_non_null(strchr(text, '\n'));
    assert_ptr_equal(strchr(text, '\n'), text + n - 1); /* exactly one line */
    assert_no_children();
    free(errlog);
    free(blocker);
}

static void test_a_server_that_never_answers_times_out(void **state)
{
    char *script = join(*state, "silent-server");
    FILE *f = fopen(script, "w");
    assert_non_null(f);
    fputs("#!/bin/sh\nexec sleep 30\n", f);
    fclose(f);
    assert_int_equal(chmod(script, 0755), 0);
    char *dir = join(*state, "data");

    int64_t t0 = mono_ms();
    assert_null(redis_child_start(dir, script, 300));
    int64_t took = mono_ms() - t0;
    assert_true(took >= 300);
    assert_true(took < 5000); /* SIGTERM was enough; no 10 s wait for SIGKILL */
    assert_no_children();
    free(dir);
    free(script);
}

/* hookwheel blocks SIGTERM for sigwait; redis must still get it on stop. */
static void test_stop_works_while_the_parent_blocks_signals(void **state)
{
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    assert_int_equal(sigprocmask(SIG_BLOCK, &block, &old), 0);
    redis_child *c = redis_child_start(*state, SERVER, START_MS);
    assert_non_null(c);
    int64_t t0 = mono_ms();
    redis_child_stop(c);
    assert_true(mono_ms() - t0 < 5000);
    assert_int_equal(sigprocmask(SIG_SETMASK, &old, NULL), 0);
    assert_no_children();
}

/* kill -9 of hookwheel takes its redis with it (PR_SET_PDEATHSIG). The test
 * makes itself a subreaper so it can reap the orphaned redis itself. */
static void test_the_child_dies_with_its_parent(void **state)
{
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t helper = fork();
    assert_true(helper >= 0);
    if (helper == 0) {
        redis_child *c = redis_child_start(*state, SERVER, START_MS);
        pid_t pid = c ? redis_child_pid(c) : 0;
        if (write(fds[1], &pid, sizeof pid) != (ssize_t)sizeof pid)
            _exit(1);
        for (;;)
            pause();
    }
    close(fds[1]);
    pid_t redis = 0;
    assert_int_equal(read(fds[0], &redis, sizeof redis), (ssize_t)sizeof redis);
    close(fds[0]);
    assert_true(redis > 0);

    assert_int_equal(kill(helper, SIGKILL), 0);
    assert_int_equal(waitpid(helper, NULL, 0), helper);
    int status = 0;
    pid_t r = 0;
    for (int64_t end = mono_ms() + 10000; r == 0 && mono_ms() < end; usleep(20000))
        r = waitpid(redis, &status, WNOHANG);
    assert_int_equal(r, redis);
    assert_true(WIFEXITED(status)); /* a clean SIGTERM shutdown, not a kill */
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
    assert_no_children();
}

/* A start made right after a kill -9 of the hookwheel whose child still
 * shuts down (a supervisor restarting it) waits for that child to go. */
static void test_a_start_right_after_its_owner_was_killed_waits_for_the_old_child(void **state)
{
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t helper = fork();
    assert_true(helper >= 0);
    if (helper == 0) {
        redis_child *c = redis_child_start(*state, SERVER, START_MS);
        pid_t pid = c ? redis_child_pid(c) : 0;
        if (write(fds[1], &pid, sizeof pid) != (ssize_t)sizeof pid)
            _exit(1);
        for (;;)
            pause();
    }
    close(fds[1]);
    pid_t old = 0;
    assert_int_equal(read(fds[0], &old, sizeof old), (ssize_t)sizeof old);
    close(fds[0]);
    assert_true(old > 0);
    char *sock = join(*state, "redis.sock");
    command_expect(sock, "OK", "SET %s %s", "hw:test", "kept");
    free(sock);

    assert_int_equal(kill(helper, SIGKILL), 0);
    assert_int_equal(waitpid(helper, NULL, 0), helper);
    redis_child *c = redis_child_start(*state, SERVER, START_MS); /* at once */
    assert_non_null(c);
    assert_true(redis_child_pid(c) != old);
    command_expect(redis_child_socket(c), "kept", "GET %s", "hw:test");
    assert_int_equal(waitpid(old, NULL, 0), old); /* reparented to us, gone */
    redis_child_stop(c);
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
    assert_no_children();
}

static void test_a_child_that_died_is_started_again_with_its_data(void **state)
{
    redis_child *c = redis_child_start(*state, SERVER, START_MS);
    assert_non_null(c);
    assert_int_equal(redis_child_watch(c), 0); /* alive: nothing to do */
    command_expect(redis_child_socket(c), "OK", "SET %s %s", "hw:test", "kept");
    pid_t was = redis_child_pid(c);
    assert_int_equal(kill(was, SIGKILL), 0);
    int64_t deadline = mono_ms() + START_MS;
    int rc;
    while ((rc = redis_child_watch(c)) == 0 && mono_ms() < deadline)
        usleep(20000);
    assert_int_equal(rc, 1);
    assert_true(redis_child_pid(c) > 0 && redis_child_pid(c) != was);
    command_expect(redis_child_socket(c), "kept", "GET %s", "hw:test");
    assert_int_equal(redis_child_watch(c), 0);
    redis_child_stop(c);
    assert_no_children();
    assert_int_equal(redis_child_watch(NULL), 0);
}

/* Kills the child and calls watch until it restarts it; returns the ms from
 * the kill to the restart. */
static int64_t kill_and_watch(redis_child *c)
{
    pid_t was = redis_child_pid(c);
    int64_t t0 = mono_ms();
    assert_int_equal(kill(was, SIGKILL), 0);
    int rc;
    while ((rc = redis_child_watch(c)) == 0 && mono_ms() < t0 + 3 * START_MS)
        usleep(20000);
    assert_int_equal(rc, 1);
    assert_true(redis_child_pid(c) != was);
    return mono_ms() - t0;
}

static void test_a_child_that_keeps_dying_is_restarted_ever_later(void **state)
{
    redis_child *c = redis_child_start(*state, SERVER, START_MS);
    assert_non_null(c);
    int64_t first = kill_and_watch(c), second = kill_and_watch(c), third = kill_and_watch(c);
    /* 1 s, 2 s, 4 s: no tight loop of restarts */
    assert_true(first >= 900 && first < 8000);
    assert_true(second >= 1900 && second < 10000);
    assert_true(third >= 3900 && third < 14000);
    command_expect(redis_child_socket(c), "PONG", "PING");
    redis_child_stop(c);
    assert_no_children();
}

static void test_stop_of_null_is_a_no_op(void **state)
{
    (void)state;
    redis_child_stop(NULL);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup_tmpdir, teardown_tmpdir)

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as service/main.c: a peer gone mid-write is an error, not a death */
    log_min_level = LOG_ERROR; /* expected failures still show their one line */
    const struct CMUnitTest tests[] = {
        T(test_start_makes_the_data_dir_and_answers_ping),
        T(test_a_relative_data_dir_is_made_absolute),
        T(test_writes_survive_a_restart),
        T(test_a_data_dir_in_use_is_refused),
        T(test_a_stale_socket_is_removed),
        T(test_a_socket_that_accepts_but_stays_silent_is_not_taken),
        T(test_a_file_in_place_of_the_socket_is_refused),
        T(test_a_missing_binary_fails_cleanly),
        T(test_a_too_long_socket_path_fails),
        T(test_a_data_dir_under_a_file_fails),
        T(test_a_server_that_exits_at_once_fails),
        T(test_a_redis_that_cannot_start_reports_its_log),
        T(test_a_server_that_never_answers_times_out),
        T(test_stop_works_while_the_parent_blocks_signals),
        T(test_the_child_dies_with_its_parent),
        T(test_a_start_right_after_its_owner_was_killed_waits_for_the_old_child),
        T(test_a_child_that_died_is_started_again_with_its_data),
        T(test_a_child_that_keeps_dying_is_restarted_ever_later),
        T(test_stop_of_null_is_a_no_op),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
