/* test_cluster.c - unit tests of the Redis Cluster helpers: key slots (the
 * expected slots are what CLUSTER KEYSLOT of redis-server 7.0 answers),
 * slot maps from CLUSTER SLOTS replies and redirection errors. Replies are
 * built from RESP text with hiredis's own reader. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster.h"
#include "store.h"
#include "persistence/leases.h"

static redisReply *parse_resp(const char *text)
{
    redisReader *rd = redisReaderCreate();
    void *reply = NULL;
    assert_int_equal(redisReaderFeed(rd, text, strlen(text)), REDIS_OK);
    assert_int_equal(redisReaderGetReply(rd, &reply), REDIS_OK);
    assert_non_null(reply);
    redisReaderFree(rd);
    return reply;
}

static uint16_t slot(const char *key) { return cluster_slot(key, strlen(key)); }

static void test_slots_are_those_redis_computes_with_hash_tags(void **state)
{
    (void)state;
    assert_int_equal(slot("foo"), 12182);
    assert_int_equal(slot("bar"), 5061);
    assert_int_equal(slot("hello"), 866);
    assert_int_equal(slot("123456789"), 12739);
    assert_int_equal(slot("{user1000}.following"), 3443);
    assert_int_equal(slot("foo{}{bar}"), 8363);    /* an empty tag: the whole key */
    assert_int_equal(slot("foo{{bar}}zap"), 4015); /* the tag is "{bar" */
    assert_int_equal(slot("foo{bar}{zap}"), 5061); /* the first tag only: "bar" */
    assert_int_equal(slot("{"), 4092);             /* no closing brace: the whole key */
    /* every key of a partition, and its migration guard, share one slot */
    assert_int_equal(slot("hw:{7}:t:abc"), 1716);
    assert_int_equal(slot("hw:{7}:~"), 1716);
    assert_int_equal(slot("{7}"), 1716);
    assert_int_equal(slot("hw:{queues}:version"), 4777);
    assert_int_equal(slot("hw:{queues}"), 4777);
}

/* Three masters; the second reports an empty host (it does not know its
 * own address) and is reached at the node that answered. */
static const char SLOTS3[] =
    "*3\r\n"
    "*4\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7001\r\n$3\r\nid1\r\n*3\r\n$9\r\n127.0.0.1\r\n:7004\r\n$3\r\nid4\r\n"
    "*3\r\n:5461\r\n:10922\r\n*3\r\n$0\r\n\r\n:7002\r\n$3\r\nid2\r\n"
    "*3\r\n:10923\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:7003\r\n$3\r\nid3\r\n";

static void test_a_slot_map_names_each_ranges_master(void **state)
{
    (void)state;
    cluster_map *m = malloc(sizeof *m);
    redisReply *r = parse_resp(SLOTS3);
    assert_int_equal(cluster_map_parse(m, r, "10.0.0.9"), CLUSTER_SLOTS);
    assert_int_equal(m->nnodes, 3);
    assert_string_equal(m->nodes[m->slot_node[0]].host, "127.0.0.1");
    assert_int_equal(m->nodes[m->slot_node[0]].port, 7001);
    assert_int_equal(m->nodes[m->slot_node[5460]].port, 7001);
    assert_int_equal(m->nodes[m->slot_node[5461]].port, 7002);
    assert_string_equal(m->nodes[m->slot_node[5461]].host, "10.0.0.9");
    assert_int_equal(m->nodes[m->slot_node[16383]].port, 7003);
    /* a master found again is the same node; a new one is added */
    assert_int_equal(cluster_map_node(m, "127.0.0.1", 7003), m->slot_node[16383]);
    assert_int_equal(cluster_map_node(m, "127.0.0.1", 7009), 3);
    assert_int_equal(m->nnodes, 4);
    freeReplyObject(r);

    /* a map with a hole covers fewer slots; the hole has no master */
    r = parse_resp("*1\r\n*3\r\n:0\r\n:99\r\n*2\r\n$1\r\nh\r\n:1\r\n");
    assert_int_equal(cluster_map_parse(m, r, "x"), 100);
    assert_int_equal(m->slot_node[100], -1);
    freeReplyObject(r);

    /* what is not a slot table is refused */
    const char *bad[] = {"$2\r\nno\r\n", "*1\r\n:5\r\n", "*1\r\n*3\r\n:9\r\n:3\r\n*2\r\n$1\r\nh\r\n:1\r\n",
                         "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",
                         "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:0\r\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = parse_resp(bad[i]);
        assert_int_equal(cluster_map_parse(m, r, "x"), -EPROTO);
        freeReplyObject(r);
    }
    free(m);
}

static void test_redirections_name_their_slot_and_target(void **state)
{
    (void)state;
    uint16_t s = 0;
    char host[CLUSTER_HOST_MAX];
    int port = 0;
    assert_int_equal(cluster_redirect_parse("MOVED 3999 127.0.0.1:6381", &s, host, &port, "f"), CLUSTER_MOVED);
    assert_int_equal(s, 3999);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 6381);
    assert_int_equal(cluster_redirect_parse("ASK 16383 ::1:7000", &s, host, &port, "f"), CLUSTER_ASK);
    assert_int_equal(s, 16383);
    assert_string_equal(host, "::1"); /* the port is after the last colon */
    assert_int_equal(port, 7000);
    assert_int_equal(cluster_redirect_parse("MOVED 7 :6379", &s, host, &port, "10.1.2.3"), CLUSTER_MOVED);
    assert_string_equal(host, "10.1.2.3");
    assert_int_equal(cluster_redirect_parse("TRYAGAIN Multiple keys request during rehashing of slot", &s, host,
                                            &port, "f"),
                     CLUSTER_TRYAGAIN);
    assert_int_equal(cluster_redirect_parse("CLUSTERDOWN Hash slot not served", &s, host, &port, "f"), CLUSTER_DOWN);
    const char *not_redirects[] = {"ERR unknown command", "MOVED", "MOVED x 1:2", "MOVED 16384 h:1",
                                   "ASK 5 nohostport", "ASK 5 h:0", "ASK 5 h:70000", "MOVED 5 h:12x"};
    for (size_t i = 0; i < sizeof not_redirects / sizeof not_redirects[0]; i++)
        assert_int_equal(cluster_redirect_parse(not_redirects[i], &s, host, &port, "f"), CLUSTER_NOT_REDIRECT);
}

static void test_cluster_urls_are_checked_before_anything_connects(void **state)
{
    (void)state;
    const char *good[] = {"redis+cluster://127.0.0.1:7001", "redis+cluster://u:p%40ss@h1:7001,h2:7002/",
                          "redis+cluster://:secret@[::1]:7001,127.0.0.1:7002", "redis+cluster://h1,h2"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        store *st = store_create(good[i], 100, 10);
        assert_non_null(st);
        assert_int_equal(store_is_cluster(st), 1);
        store_free(st); /* never started: nothing connected */
    }
    const char *bad[] = {"redis+cluster://", "redis+cluster://h1:7001,,h2:7002", "redis+cluster://h1:7001,",
                         "redis+cluster://h1:7001/3", "redis+cluster://h1:0", "redis+cluster://u@", "redis+cluster:/h1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_null(store_create(bad[i], 100, 10));
    store *one = store_create("redis://127.0.0.1:6379", 100, 10);
    assert_int_equal(store_is_cluster(one), 0);
    store_free(one);
    /* Sentinel: sentinels, then the master's name, then optionally a db */
    const char *sgood[] = {"redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster",
                           "redis+sentinel://:pw@h:26379/hw-master.1/2"};
    for (size_t i = 0; i < sizeof sgood / sizeof sgood[0]; i++) {
        store *st = store_create(sgood[i], 100, 10);
        assert_non_null(st);
        assert_int_equal(store_is_cluster(st), 0);
        store_free(st);
    }
    const char *sbad[] = {"redis+sentinel://h:26379", "redis+sentinel://h:26379/", "redis+sentinel://h:26379/a b",
                          "redis+sentinel://h:26379/m/x", "redis+sentinel:///m", "redis+sentinel://h:1,,h:2/m"};
    for (size_t i = 0; i < sizeof sbad / sizeof sbad[0]; i++)
        assert_null(store_create(sbad[i], 100, 10));
    /* store_url_valid says the same without making a store (main.c's exit 2) */
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        assert_true(store_url_valid(good[i]));
    for (size_t i = 0; i < sizeof sgood / sizeof sgood[0]; i++)
        assert_true(store_url_valid(sgood[i]));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(store_url_valid(bad[i]));
    for (size_t i = 0; i < sizeof sbad / sizeof sbad[0]; i++)
        assert_false(store_url_valid(sbad[i]));
    const char *other[] = {"redis://127.0.0.1:6379/2", "unix:///tmp/r.sock", "rediss://u:p@h:6380",
                           "rediss+cluster://h1:7001,h2:7002"};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        assert_true(store_url_valid(other[i]));
    const char *junk[] = {"http://x", "redis://:pw@host:notaport", "redis:/h", "", "rediss+nope://h:1"};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++)
        assert_false(store_url_valid(junk[i]));
}

static void never_cb(void *arg, const lease_reply *r)
{
    (void)arg;
    (void)r;
    fail_msg("a verb that refused must not call back");
}

static void test_leases_on_a_cluster_need_a_hash_tag_in_the_prefix(void **state)
{
    (void)state;
    store *cl = store_create("redis+cluster://127.0.0.1:7001", 100, 10);
    store *one = store_create("redis://127.0.0.1:6379", 100, 10);
    assert_int_equal(leases_available(one, "lease:"), 1);
    assert_int_equal(leases_available(cl, "lease:"), 0);
    assert_int_equal(leases_available(cl, "lease:{}:"), 0);
    assert_int_equal(leases_available(cl, "lease:{l"), 0);
    assert_int_equal(leases_available(cl, "lease:{l}:"), 1);
    assert_int_equal(leases_available(cl, "{team-a}"), 1);
    /* refused before anything is queued: the callback is never called */
    assert_int_equal(leases_get(cl, "lease:", "orders", never_cb, NULL), -EXDEV);
    assert_int_equal(leases_release(cl, "lease:", "orders", "w1", 0, never_cb, NULL), -EXDEV);
    assert_int_equal(leases_confirm_expiry(cl, "lease:", "orders#1", never_cb, NULL), -EXDEV);
    /* a lease key and hookwheel's keys of it share the prefix's slot */
    char lk[LEASES_KEY_MAX];
    leases_key(lk, "lease:{l}:", "orders");
    assert_int_equal(slot(lk), slot("hw:{l}:lease:meta:orders"));
    assert_int_equal(slot(lk), slot("hw:{l}:lease:schedule"));
    store_free(cl);
    store_free(one);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as service/main.c: a peer gone mid-write is an error, not a death */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots_are_those_redis_computes_with_hash_tags),
        cmocka_unit_test(test_a_slot_map_names_each_ranges_master),
        cmocka_unit_test(test_redirections_name_their_slot_and_target),
        cmocka_unit_test(test_cluster_urls_are_checked_before_anything_connects),
        cmocka_unit_test(test_leases_on_a_cluster_need_a_hash_tag_in_the_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
