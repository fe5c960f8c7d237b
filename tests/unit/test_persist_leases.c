/* test_persist_leases.c - the lease and queue-controls verbs
 * (persistence/leases.h, persistence/queues.h) against a real redis-server.
 *
 * The group starts its own redis-server on a free 127.0.0.1 port (no disk
 * writes) and a store on it; every test starts from an empty database and
 * reads or prepares keys through a plain hiredis connection of its own.
 * Verbs answer on the store's writer thread: a test waits for the callback
 * (5 s at most) and checks the decoded reply it copied. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "clock.h"
#include "persistence/leases.h"
#include "persistence/queues.h"
#include "store.h"

#define PREFIX "lease:"
#define WAIT_MS 5000
#define MAX_ACTIONS 8

static pid_t server_pid;
static int server_port;
static store *st;
static redisContext *redis; /* the test's own connection */

/* ---- what a callback saw ---- */

typedef struct got {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;
    /* lease_reply */
    enum lease_outcome outcome;
    char error[128];
    lease_info info;
    char holder[64], probe_url[128], on_expire[256], when[32];
    /* lease_look_reply */
    uint64_t renewed;
    int64_t next_ms;
    size_t nactions;
    struct {
        enum lease_action_kind kind;
        uint64_t token;
        int64_t ttl_ms;
        char member[64], lid[64], owner[64], url[128], on_expire[256], when[32];
    } act[MAX_ACTIONS];
    /* queues_reply */
    enum queues_status qstatus;
    int found;
    queue_controls controls;
    enum queues_put_result put;
    int64_t version;
    int full;
    size_t n;
    struct {
        char field[64];
        queue_controls controls;
        int present;
    } entry[MAX_ACTIONS];
} got;

/* queues_permits' answer */
static struct {
    int ok;
    size_t n;
    queues_permit p[4];
} pg;

static got g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void got_reset(void)
{
    pthread_mutex_lock(&g.mu);
    memset((char *)&g + offsetof(got, calls), 0, sizeof g - offsetof(got, calls));
    pthread_mutex_unlock(&g.mu);
}

static void copy(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src ? src : "(null)");
}

static void signal_call(void)
{
    g.calls++;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
}

static void lease_cb(void *arg, const lease_reply *r)
{
    (void)arg;
    pthread_mutex_lock(&g.mu);
    g.outcome = r->outcome;
    copy(g.error, sizeof g.error, r->error ? r->error : "");
    g.info = r->info;
    copy(g.holder, sizeof g.holder, r->info.holder);
    copy(g.probe_url, sizeof g.probe_url, r->info.probe_url);
    copy(g.on_expire, sizeof g.on_expire, r->info.on_expire);
    copy(g.when, sizeof g.when, r->info.when);
    g.info.holder = g.info.probe_url = g.info.on_expire = g.info.when = NULL;
    signal_call();
}

static void look_cb(void *arg, const lease_look_reply *r)
{
    (void)arg;
    pthread_mutex_lock(&g.mu);
    g.outcome = r->outcome;
    g.renewed = r->renewed;
    g.next_ms = r->next_ms;
    g.nactions = r->nactions;
    for (size_t i = 0; i < r->nactions && i < MAX_ACTIONS; i++) {
        const lease_action *a = &r->actions[i];
        g.act[i].kind = a->kind;
        g.act[i].token = a->token;
        g.act[i].ttl_ms = a->ttl_ms;
        copy(g.act[i].member, sizeof g.act[i].member, a->member);
        copy(g.act[i].lid, sizeof g.act[i].lid, a->lid);
        copy(g.act[i].owner, sizeof g.act[i].owner, a->owner);
        copy(g.act[i].url, sizeof g.act[i].url, a->url);
        copy(g.act[i].on_expire, sizeof g.act[i].on_expire, a->on_expire);
        copy(g.act[i].when, sizeof g.act[i].when, a->when);
    }
    signal_call();
}

static void queues_cb(void *arg, const queues_reply *r)
{
    (void)arg;
    pthread_mutex_lock(&g.mu);
    g.qstatus = r->status;
    g.found = r->found;
    g.controls = r->controls;
    g.put = r->put;
    g.version = r->version;
    g.full = r->full;
    g.n = r->n;
    for (size_t i = 0; i < r->n && i < MAX_ACTIONS; i++) {
        copy(g.entry[i].field, sizeof g.entry[i].field, r->entries[i].field);
        g.entry[i].controls = r->entries[i].controls;
        g.entry[i].present = r->entries[i].present;
    }
    signal_call();
}

static void permits_cb(void *arg, int ok, const queues_permit *p, size_t n)
{
    (void)arg;
    pthread_mutex_lock(&g.mu);
    pg.ok = ok;
    pg.n = n;
    for (size_t i = 0; i < n && i < 4; i++)
        pg.p[i] = p[i];
    signal_call();
}

/* Waits until the callbacks were called `calls` times in all (since the
 * last reset), at most WAIT_MS. */
static void wait_calls(int calls)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&g.mu);
    int rc = 0;
    while (g.calls < calls && rc == 0)
        rc = pthread_cond_timedwait(&g.cv, &g.mu, &until);
    int n = g.calls;
    pthread_mutex_unlock(&g.mu);
    assert_int_equal(n, calls);
}

/* ---- the server ---- */

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        abort();
    close(fd);
    return ntohs(a.sin_port);
}

static redisContext *connect_port(int port)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && !c->err)
        return c;
    redisFree(c);
    return NULL;
}

static int start_server(void **state)
{
    (void)state;
    char port[16];
    server_port = free_port();
    snprintf(port, sizeof port, "%d", server_port);
    server_pid = fork();
    if (server_pid < 0)
        return -1;
    if (server_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", "/tmp", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < WAIT_MS / 20 && !redis; i++) {
        redis = connect_port(server_port);
        if (!redis)
            usleep(20000);
    }
    if (!redis)
        return -1;
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", server_port);
    st = store_create(url, 2000, 1024);
    return st && store_start(st) == 0 ? 0 : -1;
}

static int stop_server(void **state)
{
    (void)state;
    store_free(st);
    redisFree(redis);
    if (server_pid > 0) {
        kill(server_pid, SIGTERM);
        waitpid(server_pid, NULL, 0);
    }
    return 0;
}

/* Runs one command on the test's connection; returns its reply (freed by the caller). */
static redisReply *cmd(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(redis, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    return r;
}

static void cmd_ok(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(redis, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
}

/* GET key as a string ("(nil)" when absent) into buf. */
static const char *get(const char *key, char *buf, size_t size)
{
    redisReply *r = cmd("GET %s", key);
    snprintf(buf, size, "%s", r->type == REDIS_REPLY_STRING ? r->str : "(nil)");
    freeReplyObject(r);
    return buf;
}

static long long integer(const char *fmt, const char *key)
{
    redisReply *r = cmd(fmt, key);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static int flush(void **state)
{
    (void)state;
    cmd_ok("FLUSHALL");
    got_reset();
    return 0;
}

/* ---- calls that wait for their answer ---- */

static void acquire_full(const char *lid, const char *owner, uint64_t ttl, uint64_t now, const char *probe,
                         const char *on_expire, const char *when)
{
    got_reset();
    lease_acquire_req q = {PREFIX, lid, owner, ttl, now, probe, on_expire, strlen(on_expire), when};
    assert_int_equal(leases_acquire(st, &q, lease_cb, NULL), 0);
    wait_calls(1);
}

static void acquire(const char *lid, const char *owner, uint64_t ttl, uint64_t now)
{
    acquire_full(lid, owner, ttl, now, "", "", "");
}

static void heartbeat(const char *lid, const char *owner, uint64_t token, uint64_t now, enum lease_sign sign)
{
    got_reset();
    assert_int_equal(leases_heartbeat(st, PREFIX, lid, owner, token, now, sign, lease_cb, NULL), 0);
    wait_calls(1);
}

static void release(const char *lid, const char *owner, uint64_t token)
{
    got_reset();
    assert_int_equal(leases_release(st, PREFIX, lid, owner, token, lease_cb, NULL), 0);
    wait_calls(1);
}

static void lease_get(const char *lid)
{
    got_reset();
    assert_int_equal(leases_get(st, PREFIX, lid, lease_cb, NULL), 0);
    wait_calls(1);
}

static void look(uint64_t now, uint64_t retry_ms)
{
    got_reset();
    lease_look_req q = {.now_ms = now, .limit = 100, .prefix = PREFIX, .retry_ms = retry_ms};
    assert_int_equal(leases_look(st, &q, look_cb, NULL), 0);
    wait_calls(1);
    assert_int_equal(g.outcome, LEASE_LOOKED);
}

static void extend(const char *key, const char *value, uint64_t ttl, int recreate)
{
    got_reset();
    assert_int_equal(leases_extend(st, key, value, ttl, recreate, lease_cb, NULL), 0);
    wait_calls(1);
}

static void unlock(const char *key, const char *value)
{
    got_reset();
    assert_int_equal(leases_unlock(st, key, value, lease_cb, NULL), 0);
    wait_calls(1);
}

/* ---- watchdog leases ---- */

static void test_acquire_answers_acquired_then_reacquired_then_refuses_other_settings_and_owners(void **state)
{
    (void)state;
    char buf[64];
    uint64_t t = clock_now_ms();
    acquire("orders", "alice", 30000, t);
    assert_int_equal(g.outcome, LEASE_ACQUIRED);
    assert_int_equal(g.info.token, 1);
    assert_string_equal(g.holder, "alice");
    assert_int_equal(g.info.ttl_ms, 30000);
    assert_int_equal(g.info.acquired_ms, (int64_t)t);
    assert_int_equal(g.info.alive_ms, (int64_t)t);
    assert_in_range(g.info.pttl_ms, 1, 30000);
    assert_string_equal(get(PREFIX "orders", buf, sizeof buf), "alice");

    acquire("orders", "alice", 30000, t + 5);
    assert_int_equal(g.outcome, LEASE_REACQUIRED);
    assert_int_equal(g.info.token, 1);
    assert_int_equal(g.info.heartbeat_ms, (int64_t)t + 5);

    acquire("orders", "alice", 20000, t + 6);
    assert_int_equal(g.outcome, LEASE_OTHER_SETTINGS);
    assert_int_equal(g.info.token, 1);

    acquire("orders", "bob", 30000, t + 7);
    assert_int_equal(g.outcome, LEASE_HELD_BY_OTHER);
    assert_string_equal(g.holder, "alice");
    assert_int_equal(g.info.token, 1);
    assert_string_equal(get(PREFIX "orders", buf, sizeof buf), "alice");
}

static void test_get_shows_probe_and_on_expire_as_stored_and_a_foreign_key_without_token(void **state)
{
    (void)state;
    acquire_full("jobs", "alice", 9000, clock_now_ms(), "http://127.0.0.1:9/alive", "{\"url\":\"http://x/\"}",
                 "delay_ms=250");
    assert_int_equal(g.outcome, LEASE_ACQUIRED);
    lease_get("jobs");
    assert_int_equal(g.outcome, LEASE_FOUND);
    assert_string_equal(g.holder, "alice");
    assert_string_equal(g.probe_url, "http://127.0.0.1:9/alive");
    assert_string_equal(g.on_expire, "{\"url\":\"http://x/\"}");
    assert_int_equal(g.info.on_expire_len, strlen("{\"url\":\"http://x/\"}"));
    assert_string_equal(g.when, "delay_ms=250");

    lease_get("nothing");
    assert_int_equal(g.outcome, LEASE_NOT_HELD);

    cmd_ok("SET %s %s", PREFIX "foreign", "someone");
    lease_get("foreign");
    assert_int_equal(g.outcome, LEASE_FOUND);
    assert_string_equal(g.holder, "someone");
    assert_int_equal(g.info.token, 0);
    assert_int_equal(g.info.pttl_ms, -1);
}

static void test_heartbeat_notes_the_holder_and_refuses_unknown_keys_other_owners_and_stale_tokens(void **state)
{
    (void)state;
    uint64_t t = clock_now_ms();
    heartbeat("ghost", "alice", 0, t, LEASE_SIGN_HEARTBEAT);
    assert_int_equal(g.outcome, LEASE_NOT_HELD);

    acquire("orders", "alice", 30000, t);
    heartbeat("orders", "alice", 0, t + 10, LEASE_SIGN_HEARTBEAT);
    assert_int_equal(g.outcome, LEASE_NOTED);
    assert_int_equal(g.info.heartbeat_ms, (int64_t)t + 10);
    assert_int_equal(g.info.alive_ms, (int64_t)t + 10);

    heartbeat("orders", "alice", 1, t + 20, LEASE_SIGN_PROBE_OK);
    assert_int_equal(g.outcome, LEASE_NOTED);
    assert_int_equal(g.info.probe_ok_ms, (int64_t)t + 20);
    assert_int_equal(g.info.heartbeat_ms, (int64_t)t + 10);

    heartbeat("orders", "alice", 2, t + 30, LEASE_SIGN_HEARTBEAT);
    assert_int_equal(g.outcome, LEASE_HELD_BY_OTHER);
    assert_int_equal(g.info.token, 1);

    heartbeat("orders", "bob", 0, t + 40, LEASE_SIGN_HEARTBEAT);
    assert_int_equal(g.outcome, LEASE_HELD_BY_OTHER);
    assert_string_equal(g.holder, "alice");
}

static void test_release_deletes_only_for_the_owner_and_tokens_keep_growing(void **state)
{
    (void)state;
    char buf[64];
    uint64_t t = clock_now_ms();
    acquire("orders", "alice", 30000, t);

    release("orders", "bob", 0);
    assert_int_equal(g.outcome, LEASE_HELD_BY_OTHER);
    assert_string_equal(g.holder, "alice");
    release("orders", "alice", 7);
    assert_int_equal(g.outcome, LEASE_HELD_BY_OTHER);
    assert_int_equal(g.info.token, 1);
    assert_string_equal(get(PREFIX "orders", buf, sizeof buf), "alice");

    release("orders", "alice", 1);
    assert_int_equal(g.outcome, LEASE_RELEASED);
    assert_int_equal(g.info.token, 1);
    assert_string_equal(get(PREFIX "orders", buf, sizeof buf), "(nil)");
    assert_int_equal(integer("EXISTS %s", "hw:lease:meta:orders"), 0);
    assert_int_equal(integer("ZCARD %s", "hw:lease:schedule"), 0);

    release("orders", "alice", 0);
    assert_int_equal(g.outcome, LEASE_NOT_HELD);

    acquire("orders", "bob", 30000, t);
    assert_int_equal(g.outcome, LEASE_ACQUIRED);
    assert_int_equal(g.info.token, 2);
}

/* ---- the worker's look ---- */

static void test_look_renews_a_live_lease_once_a_period_and_reports_one_that_expired(void **state)
{
    (void)state;
    uint64_t t = clock_now_ms();
    look(t, 5000);
    assert_int_equal(g.renewed, 0);
    assert_int_equal(g.next_ms, -1);
    assert_int_equal(g.nactions, 0);

    acquire("orders", "alice", 3000, t);
    look(t + 999, 5000);
    assert_int_equal(g.renewed, 0);
    assert_int_equal(g.next_ms, (int64_t)t + 1000);
    look(t + 1000, 5000);
    assert_int_equal(g.renewed, 1);
    assert_int_equal(g.next_ms, (int64_t)t + 2000);
    assert_int_equal(g.nactions, 0);

    cmd_ok("DEL %s", PREFIX "orders"); /* the key expired */
    look(t + 2000, 5000);
    assert_int_equal(g.renewed, 0);
    assert_int_equal(g.nactions, 1);
    assert_int_equal(g.act[0].kind, LEASE_ACTION_GONE);
    assert_string_equal(g.act[0].lid, "orders");
    assert_int_equal(g.act[0].token, 1);
    assert_int_equal(g.next_ms, -1);
}

static void test_look_offers_an_expiry_until_it_is_confirmed(void **state)
{
    (void)state;
    uint64_t t = clock_now_ms();
    acquire_full("jobs", "alice", 3000, t, "", "{\"url\":\"http://x/\"}", "delay_ms=0");
    cmd_ok("DEL %s", PREFIX "jobs");
    look(t + 1000, 5000);
    assert_int_equal(g.nactions, 1);
    assert_int_equal(g.act[0].kind, LEASE_ACTION_EXPIRE);
    assert_string_equal(g.act[0].member, "jobs#1");
    assert_string_equal(g.act[0].lid, "jobs");
    assert_int_equal(g.act[0].token, 1);
    assert_string_equal(g.act[0].on_expire, "{\"url\":\"http://x/\"}");
    assert_string_equal(g.act[0].when, "delay_ms=0");
    assert_int_equal(g.next_ms, (int64_t)t + 6000);

    look(t + 6000, 5000); /* not confirmed: offered again */
    assert_int_equal(g.nactions, 1);
    assert_string_equal(g.act[0].member, "jobs#1");

    got_reset();
    assert_int_equal(leases_confirm_expiry(st, PREFIX, "jobs#1", lease_cb, NULL), 0);
    wait_calls(1);
    assert_int_equal(g.outcome, LEASE_CONFIRMED);
    assert_int_equal(integer("EXISTS %s", "hw:lease:meta:jobs#1"), 0);
    look(t + 20000, 5000);
    assert_int_equal(g.nactions, 0);
    assert_int_equal(g.next_ms, -1);
}

static void test_look_asks_for_a_probe_when_the_holder_fell_silent(void **state)
{
    (void)state;
    uint64_t t = clock_now_ms();
    acquire_full("orders", "alice", 3000, t, "http://127.0.0.1:9/alive", "", "");
    look(t + 3001, 5000);
    assert_int_equal(g.renewed, 0);
    assert_int_equal(g.nactions, 1);
    assert_int_equal(g.act[0].kind, LEASE_ACTION_PROBE);
    assert_string_equal(g.act[0].lid, "orders");
    assert_int_equal(g.act[0].token, 1);
    assert_string_equal(g.act[0].owner, "alice");
    assert_int_equal(g.act[0].ttl_ms, 3000);
    assert_string_equal(g.act[0].url, "http://127.0.0.1:9/alive");
}

/* The wall clock stepped back an hour just as the lease fell due: the look
 * that says so moves the schedule and the holder's last sign of life back
 * by the step, so the lease is due now (not in an hour) and its holder is
 * as old as it was. */
static void test_a_look_after_a_step_back_of_the_clock_moves_the_schedule_and_signs_of_life_back(void **state)
{
    (void)state;
    const uint64_t hour = 3600000;
    uint64_t t = clock_now_ms();
    acquire("orders", "alice", 3000, t);
    acquire("jobs", "bob", 3000, t + 500);
    uint64_t now = t + 1000 - hour;
    lease_look_req q = {.now_ms = now, .limit = 100, .prefix = PREFIX, .retry_ms = 5000};
    look(now, 5000); /* without back_ms: nothing is due for an hour */
    assert_int_equal(g.renewed, 0);
    assert_int_equal(g.next_ms, (int64_t)t + 1000);

    q.back_ms = hour;
    got_reset();
    assert_int_equal(leases_look(st, &q, look_cb, NULL), 0);
    wait_calls(1);
    assert_int_equal(g.outcome, LEASE_LOOKED);
    assert_int_equal(g.renewed, 1);
    assert_int_equal(g.next_ms, (int64_t)(now + 500)); /* jobs, half a second later, as before the step */
    lease_get("orders");
    assert_int_equal(g.info.alive_ms, (int64_t)(t - hour));
    assert_int_equal(g.info.renewed_ms, (int64_t)now);

    got_reset(); /* sent again (its answer was lost): what is at or before now stays */
    assert_int_equal(leases_look(st, &q, look_cb, NULL), 0);
    wait_calls(1);
    lease_get("orders");
    assert_int_equal(g.info.alive_ms, (int64_t)(t - hour));
}

/* ---- plain lease keys (the watchdog) ---- */

static void test_extend_renews_its_own_key_recreates_only_when_asked_and_reports_a_lost_one(void **state)
{
    (void)state;
    char buf[64];
    extend("hw:instance:a", "a", 60000, 0);
    assert_int_equal(g.outcome, LEASE_LOST);
    assert_string_equal(get("hw:instance:a", buf, sizeof buf), "(nil)");

    extend("hw:instance:a", "a", 60000, 1);
    assert_int_equal(g.outcome, LEASE_RECREATED);
    assert_string_equal(get("hw:instance:a", buf, sizeof buf), "a");
    extend("hw:instance:a", "a", 60000, 1);
    assert_int_equal(g.outcome, LEASE_RENEWED);

    cmd_ok("SET %s %s PX %s", "hw:instance:a", "a", "1000");
    extend("hw:instance:a", "a", 60000, 0);
    assert_int_equal(g.outcome, LEASE_RENEWED);
    assert_in_range(integer("PTTL %s", "hw:instance:a"), 50000, 60000);

    cmd_ok("SET %s %s", "hw:instance:a", "someone-else");
    extend("hw:instance:a", "a", 60000, 1);
    assert_int_equal(g.outcome, LEASE_LOST);
    assert_string_equal(get("hw:instance:a", buf, sizeof buf), "someone-else");
}

static void test_unlock_deletes_only_its_own_value(void **state)
{
    (void)state;
    char buf[64];
    cmd_ok("SET %s %s", "hw:instance:a", "someone-else");
    unlock("hw:instance:a", "a");
    assert_int_equal(g.outcome, LEASE_NOT_HELD);
    assert_string_equal(get("hw:instance:a", buf, sizeof buf), "someone-else");

    cmd_ok("SET %s %s", "hw:instance:a", "a");
    unlock("hw:instance:a", "a");
    assert_int_equal(g.outcome, LEASE_RELEASED);
    assert_string_equal(get("hw:instance:a", buf, sizeof buf), "(nil)");
}

static void test_lease_names_keep_user_keys_out_of_hookwheels_own(void **state)
{
    (void)state;
    assert_false(leases_name_reserved("lease:", "hw:instance:a"));
    assert_true(leases_name_reserved("", "hw:instance:a"));
    assert_true(leases_name_reserved("h", "w:x"));
}

/* ---- queue controls ---- */

static void queues_call(int rc)
{
    assert_int_equal(rc, 0);
    wait_calls(1);
    assert_int_equal(g.qstatus, QUEUES_OK);
}

static void test_queue_controls_round_trip_and_malformed_values_are_left_out(void **state)
{
    (void)state;
    got_reset();
    queues_call(queues_get(st, "ns/mail", queues_cb, NULL));
    assert_false(g.found);

    queue_controls c = {.parallelism = 3, .paused = 1, .rate = 2.5};
    got_reset();
    queues_call(queues_put(st, "ns/mail", &c, 10, queues_cb, NULL));
    assert_int_equal(g.put, QUEUES_PUT_CREATED);
    got_reset();
    queues_call(queues_get(st, "ns/mail", queues_cb, NULL));
    assert_true(g.found);
    assert_int_equal(g.controls.parallelism, 3);
    assert_int_equal(g.controls.paused, 1);
    assert_true(g.controls.rate == 2.5);

    cmd_ok("HSET %s %s %s", "hw:{queues}", "ns/bad", "three 0 0");
    got_reset();
    queues_call(queues_get(st, "ns/bad", queues_cb, NULL));
    assert_false(g.found);
    got_reset();
    queues_call(queues_list(st, queues_cb, NULL));
    assert_int_equal(g.n, 1);
    assert_string_equal(g.entry[0].field, "ns/mail");
    assert_int_equal(g.entry[0].controls.parallelism, 3);
}

/* One instance's call for one queue: its grant (-1: not shared), and its rate share into *rate. */
static long permit(const char *instance, const char *field, uint32_t want, uint32_t inflight, uint32_t ttl_ms,
                   double *rate)
{
    queues_demand d = {field, want, inflight};
    got_reset();
    assert_int_equal(queues_permits(st, instance, ttl_ms, &d, 1, permits_cb, NULL), 0);
    wait_calls(1);
    assert_true(pg.ok);
    assert_int_equal(pg.n, 1);
    if (rate)
        *rate = pg.p[0].rate;
    return pg.p[0].shared ? (long)pg.p[0].grant : -1;
}

static void test_permits_share_a_queue_s_parallelism_and_rate_between_instances(void **state)
{
    (void)state;
    cmd_ok("HSET %s %s %s", "hw:{queues}", "q", "4 0 10");
    cmd_ok("HSET %s %s %s", "hw:{queues}", "mine", "4 0 10 i");
    double rate;
    assert_int_equal(permit("a", "unset", 5, 0, 3000, NULL), -1); /* no controls: not shared */
    assert_int_equal(permit("a", "mine", 5, 0, 3000, NULL), -1);  /* per instance */
    /* a alone: all of it, capped at the parallelism */
    assert_int_equal(permit("a", "q", 9, 0, 3000, &rate), 4);
    assert_true(rate == 10);
    /* b wants too: nothing is free until a gives some back */
    assert_int_equal(permit("b", "q", 9, 0, 3000, &rate), 0);
    assert_true(rate == 0);
    /* a, with 4 in flight, keeps them but may start none beyond its half */
    assert_int_equal(permit("a", "q", 9, 4, 3000, &rate), 2);
    assert_true(rate == 5);
    assert_int_equal(permit("b", "q", 9, 0, 3000, NULL), 0); /* a still holds 4 */
    assert_int_equal(permit("a", "q", 9, 2, 3000, NULL), 2); /* two ended: a holds 2 */
    assert_int_equal(permit("b", "q", 9, 0, 3000, &rate), 2);
    assert_true(rate == 5);
    /* demand moves: a wants 1, b gets the rest once a holds 1 */
    assert_int_equal(permit("a", "q", 1, 1, 3000, NULL), 1);
    assert_int_equal(permit("b", "q", 9, 2, 3000, NULL), 3);
    /* a gives back: b may have all four, but a's rate share (5/s) stays
     * counted for one interval at it, 200 ms, so a start of b's cannot
     * follow a's last one sooner than the rate allows */
    assert_int_equal(permit("a", "q", 0, 0, 3000, NULL), 0);
    assert_int_equal(permit("b", "q", 9, 3, 3000, &rate), 4);
    assert_true(rate == 5);
    usleep(300 * 1000);
    assert_int_equal(permit("b", "q", 9, 3, 3000, &rate), 4);
    assert_true(rate == 10);
    redisReply *r = cmd("HKEYS %s", "hw:{queues}:pm:q");
    assert_int_equal(r->elements, 1);
    assert_string_equal(r->element[0]->str, "b");
    freeReplyObject(r);
    /* b crashes holding 4: its permits come back after its ttl */
    assert_int_equal(permit("b", "q", 9, 4, 200, NULL), 4);
    assert_int_equal(permit("c", "q", 9, 0, 3000, NULL), 0);
    usleep(300 * 1000);
    assert_int_equal(permit("c", "q", 9, 0, 3000, &rate), 4);
    assert_true(rate == 10);
    /* what nobody wants is headroom: c, wanting 1 alone, may have all 4; d
     * gets its share once c renews */
    assert_int_equal(permit("c", "q", 1, 0, 3000, NULL), 4);
    assert_int_equal(permit("d", "q", 9, 0, 3000, NULL), 0);
    assert_int_equal(permit("c", "q", 1, 1, 3000, NULL), 1);
    assert_int_equal(permit("d", "q", 9, 0, 3000, NULL), 3);
    assert_int_equal(permit("d", "q", 0, 0, 3000, NULL), 0);
    usleep(300 * 1000); /* d's rate share is given back one interval later */
    assert_int_equal(permit("c", "q", 1, 1, 3000, NULL), 4); /* c alone again: all of it */
    r = cmd("HKEYS %s", "hw:{queues}:pm:q");
    assert_int_equal(r->elements, 1);
    assert_string_equal(r->element[0]->str, "c");
    freeReplyObject(r);
}

static void test_queue_put_beyond_the_cap_stores_nothing_and_delete_answers_whether_it_deleted(void **state)
{
    (void)state;
    queue_controls c = {.parallelism = 2};
    got_reset();
    queues_call(queues_put(st, "a", &c, 2, queues_cb, NULL));
    assert_int_equal(g.put, QUEUES_PUT_CREATED);
    got_reset();
    queues_call(queues_put(st, "b", &c, 2, queues_cb, NULL));
    assert_int_equal(g.put, QUEUES_PUT_CREATED);
    got_reset();
    queues_call(queues_put(st, "c", &c, 2, queues_cb, NULL));
    assert_int_equal(g.put, QUEUES_PUT_FULL);
    got_reset();
    queues_call(queues_get(st, "c", queues_cb, NULL));
    assert_false(g.found);
    c.parallelism = 5; /* replacing an existing field is not refused at the cap */
    got_reset();
    queues_call(queues_put(st, "a", &c, 2, queues_cb, NULL));
    assert_int_equal(g.put, QUEUES_PUT_REPLACED);

    got_reset();
    queues_call(queues_delete(st, "b", queues_cb, NULL));
    assert_true(g.found);
    got_reset();
    queues_call(queues_delete(st, "b", queues_cb, NULL));
    assert_false(g.found);
    got_reset();
    queues_call(queues_put(st, "c", &c, 2, queues_cb, NULL));
    assert_int_equal(g.put, QUEUES_PUT_CREATED);
}

static void test_queue_feed_answers_nothing_the_changed_fields_or_the_whole_hash(void **state)
{
    (void)state;
    queue_controls c = {.parallelism = 2};
    got_reset();
    queues_call(queues_feed(st, -1, queues_cb, NULL)); /* nothing read yet: the whole (empty) hash */
    assert_true(g.full);
    assert_int_equal(g.n, 0);
    int64_t v0 = g.version;

    got_reset();
    queues_call(queues_put(st, "a", &c, 10, queues_cb, NULL));
    got_reset();
    queues_call(queues_put(st, "b", &c, 10, queues_cb, NULL));
    got_reset();
    queues_call(queues_feed(st, v0, queues_cb, NULL));
    assert_false(g.full);
    assert_int_equal(g.n, 2);
    assert_true(g.entry[0].present && g.entry[1].present);
    int64_t v1 = g.version;
    assert_int_equal(v1, v0 + 2);

    got_reset();
    queues_call(queues_feed(st, v1, queues_cb, NULL)); /* nothing changed */
    assert_int_equal(g.version, v1);
    assert_int_equal(g.n, 0);

    got_reset();
    queues_call(queues_delete(st, "a", queues_cb, NULL));
    got_reset();
    queues_call(queues_feed(st, v1, queues_cb, NULL));
    assert_false(g.full);
    assert_int_equal(g.n, 1);
    assert_string_equal(g.entry[0].field, "a");
    assert_false(g.entry[0].present);

    /* A reader from before the log's floor (or from a flushed Redis) gets the whole hash. */
    cmd_ok("SET %s %s", "hw:{queues}:floor", "999");
    got_reset();
    queues_call(queues_feed(st, v1, queues_cb, NULL));
    assert_true(g.full);
    assert_int_equal(g.n, 1);
    assert_string_equal(g.entry[0].field, "b");
    got_reset();
    queues_call(queues_feed(st, v1 + 1000, queues_cb, NULL));
    assert_true(g.full);
}

/* ---- failures ---- */

static void test_every_verb_on_an_unreachable_redis_calls_back_once_with_unreachable(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", free_port()); /* nobody listens there */
    store *down = store_create(url, 500, 64);
    assert_non_null(down);
    assert_int_equal(store_start(down), 0);
    lease_acquire_req q = {PREFIX, "orders", "alice", 3000, clock_now_ms(), "", "", 0, ""};
    lease_look_req lq = {.now_ms = clock_now_ms(), .limit = 10, .prefix = PREFIX, .retry_ms = 1000};
    queue_controls c = {.parallelism = 1};

    got_reset();
    assert_int_equal(leases_acquire(down, &q, lease_cb, NULL), 0);
    wait_calls(1);
    assert_int_equal(g.outcome, LEASE_UNREACHABLE);
    g.outcome = LEASE_RENEWED;
    assert_int_equal(leases_extend(down, "hw:instance:a", "a", 3000, 1, lease_cb, NULL), 0);
    wait_calls(2);
    assert_int_equal(g.outcome, LEASE_UNREACHABLE);
    g.outcome = LEASE_LOOKED;
    assert_int_equal(leases_look(down, &lq, look_cb, NULL), 0);
    wait_calls(3);
    assert_int_equal(g.outcome, LEASE_UNREACHABLE);
    assert_int_equal(g.nactions, 0);
    g.qstatus = QUEUES_OK;
    assert_int_equal(queues_put(down, "q", &c, 10, queues_cb, NULL), 0);
    wait_calls(4);
    assert_int_equal(g.qstatus, QUEUES_UNREACHABLE);

    store_free(down); /* every callback has run by now: none came twice */
    assert_int_equal(g.calls, 4);
}

static void test_a_verb_the_store_refuses_never_calls_back(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", server_port);
    store *full = store_create(url, 500, 0); /* no room for any command */
    assert_non_null(full);
    got_reset();
    assert_int_equal(leases_get(full, PREFIX, "orders", lease_cb, NULL), -EAGAIN);
    assert_int_equal(leases_unlock(full, "k", "v", lease_cb, NULL), -EAGAIN);
    assert_int_equal(queues_list(full, queues_cb, NULL), -EAGAIN);
    store_free(full);
    assert_int_equal(g.calls, 0);
}

#define T(f) cmocka_unit_test_setup(f, flush)

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as service/main.c: a peer gone mid-write is an error, not a death */
    const struct CMUnitTest tests[] = {
        T(test_acquire_answers_acquired_then_reacquired_then_refuses_other_settings_and_owners),
        T(test_get_shows_probe_and_on_expire_as_stored_and_a_foreign_key_without_token),
        T(test_heartbeat_notes_the_holder_and_refuses_unknown_keys_other_owners_and_stale_tokens),
        T(test_release_deletes_only_for_the_owner_and_tokens_keep_growing),
        T(test_look_renews_a_live_lease_once_a_period_and_reports_one_that_expired),
        T(test_look_offers_an_expiry_until_it_is_confirmed),
        T(test_look_asks_for_a_probe_when_the_holder_fell_silent),
        T(test_a_look_after_a_step_back_of_the_clock_moves_the_schedule_and_signs_of_life_back),
        T(test_extend_renews_its_own_key_recreates_only_when_asked_and_reports_a_lost_one),
        T(test_unlock_deletes_only_its_own_value),
        T(test_lease_names_keep_user_keys_out_of_hookwheels_own),
        T(test_queue_controls_round_trip_and_malformed_values_are_left_out),
        T(test_queue_put_beyond_the_cap_stores_nothing_and_delete_answers_whether_it_deleted),
        T(test_queue_feed_answers_nothing_the_changed_fields_or_the_whole_hash),
        T(test_permits_share_a_queue_s_parallelism_and_rate_between_instances),
        T(test_every_verb_on_an_unreachable_redis_calls_back_once_with_unreachable),
        T(test_a_verb_the_store_refuses_never_calls_back),
    };
    return cmocka_run_group_tests(tests, start_server, stop_server);
}
