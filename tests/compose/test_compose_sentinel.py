"""docker/docker-compose.sentinel.yml brought up for real (see
test_compose.py): a Redis master, its replica and three Sentinels, two
hookwheel replicas and nginx. The master is killed: the Sentinels promote the
replica, hookwheel follows without a restart, and no acknowledged timer is
lost."""
import json

from stacks import delivered_each_once, delivered_once, docker, wait_until


def test_the_stack_delivers_through_nginx(sentinel_stack):
    s = sentinel_stack
    assert len(s.addresses("hookwheel")) == 2
    status, body = s.create("sn-1", 300, "first")
    assert status == 201, body
    assert delivered_once(s, "sn-1", 30)["body"] == "first"


def test_a_master_killed_is_followed_and_its_timers_are_delivered(sentinel_stack):
    s = sentinel_stack
    before = ["sn-before-%d" % i for i in range(10)]
    fire_at = {}
    for t in before:
        status, body = s.create(t, 12000, "before")
        assert status == 201, body
        fire_at[t] = json.loads(body)["fire_at_ms"]
    master, replica = s.container("redis-master"), s.container("redis-replica")
    docker("kill", master)
    # Within 60 s as a rule; but when the Sentinels' first election splits
    # its votes, the next one comes two failover-timeouts (2 x 60 s) later.
    wait_until(lambda: docker("exec", replica, "redis-cli", "role").split()[:1] == ["master"], 150,
               "the Sentinels promote the replica")
    # The old master comes back once the Sentinels name the new one. Back
    # before that (after the promotion, before the switch), it is a master
    # again with its old data for a moment, and what is written there is
    # dropped when it is made a replica (README, "After a Redis failover").
    sentinel = s.container("sentinel-1")
    wait_until(lambda: docker("exec", sentinel, "redis-cli", "-p", "26379", "sentinel",
                              "get-master-addr-by-name", "hookwheel").split()[:1] == ["redis-replica"], 60,
               "the Sentinels name the new master")
    # With no replica left, creates answer 503 (HOOKWHEEL_REDIS_MIN_REPLICAS_ACK=1)
    # until the old master comes back as the new one's replica.
    docker("start", master)
    wait_until(lambda: s.create("sn-after", 500, "after")[0] in (200, 201), 90,
               "a create acknowledged after the failover")
    assert delivered_once(s, "sn-after", 30)["body"] == "after"
    got = delivered_each_once(s, before, 60)
    early = {t: (got[t]["t"] * 1000, fire_at[t]) for t in before if got[t]["t"] * 1000 < fire_at[t] - 5}
    assert not early, f"delivered before fire_at: {early}"
    status, body = s.http("GET", "/readyz")
    assert status == 200, body
