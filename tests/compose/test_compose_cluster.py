"""docker/docker-compose.cluster.yml brought up for real (see
test_compose.py): six Redis nodes joined by cluster-init into three masters
with a replica each, two hookwheel replicas and nginx. Timers spread over the
three masters; one master is killed and its replica takes over."""
import json

from stacks import delivered_each_once, docker, wait_until


def masters(s):
    nodes = docker("exec", s.container("redis-2"), "redis-cli", "cluster", "nodes")
    return sorted(line.split()[1].split("@")[0] for line in nodes.splitlines()
                  if "master" in line.split()[2] and "fail" not in line.split()[2])


def test_timers_spread_over_the_three_masters_are_delivered(cluster_stack):
    s = cluster_stack
    assert len(s.addresses("hookwheel")) == 2
    assert len(masters(s)) == 3, masters(s)
    ids = ["cl-%d" % i for i in range(30)]
    for t in ids:
        status, body = s.create(t, 300, t)
        assert status == 201, body
    got = delivered_each_once(s, ids, 40)
    assert all(got[t]["body"] == t for t in ids)
    # the records are on every master (HOOKWHEEL_PARTITIONS=64)
    for node in ("redis-1", "redis-2", "redis-3"):
        keys = int(docker("exec", s.container(node), "redis-cli", "dbsize").strip())
        assert keys > 0, node
    # watchdog leases work too (the file sets a lease prefix with a hash tag)
    status, body = s.http("POST", "/leases", {"key": "cl-lock", "owner": "w-1", "ttl_ms": 30000})
    assert status == 201, body
    status, body = s.http("GET", "/leases/cl-lock")
    assert status == 200 and json.loads(body)["owner"] == "w-1", body


def test_a_master_killed_is_replaced_and_timers_go_on(cluster_stack):
    s = cluster_stack
    before = ["cl-before-%d" % i for i in range(20)]
    fire_at = {}
    for t in before:
        status, body = s.create(t, 10000, "before")
        assert status == 201, body
        fire_at[t] = json.loads(body)["fire_at_ms"]
    node1 = s.container("redis-1")
    docker("kill", node1)
    wait_until(lambda: "172.28.0.11:6379" not in masters(s) and len(masters(s)) == 3, 60,
               "a replica takes redis-1's slots")
    docker("start", node1)
    after = ["cl-after-%d" % i for i in range(20)]
    for t in after:
        wait_until(lambda: s.create(t, 500, "after")[0] in (200, 201), 90, f"{t} acknowledged")
    got = delivered_each_once(s, before + after, 60)
    early = {t: (got[t]["t"] * 1000, fire_at[t]) for t in before if got[t]["t"] * 1000 < fire_at[t] - 5}
    assert not early, f"delivered before fire_at: {early}"
    wait_until(lambda: s.http("GET", "/readyz")[0] == 200, 60, "/readyz 200 with every master up")
