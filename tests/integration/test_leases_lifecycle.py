"""Watchdog leases across the lives of the processes around them: a SIGTERMed
instance handing over to another, Redis restarts (AOF on), releases racing
renewals, and requests that must be refused without losing anything. Real
redis-server, real hookwheel processes; the lock key is watched from its own
Redis connection (PTTL)."""

import random
import threading
import time

import pytest

from conftest import CLUSTER_MODE, HW_LEASE, LEASE_PREFIX, SLOW, scaled, wait_until

# The lease functions' life cycle against real Redis: once, on the plain
# build (the lease C paths run under the sanitizers in test_leases).
pytestmark = pytest.mark.skipif(SLOW, reason="runs once, on the plain build")
from test_leases import Heartbeats, Leases, PttlWatch, wall
from test_leases_list import walk


@pytest.fixture
def watch(redis):
    """start(key) -> a PttlWatch of key, stopped at the end of the test."""
    watches = []

    def start(key):
        watches.append(PttlWatch(redis, key))
        return watches[-1]

    yield start
    for w in watches:
        w.stop()


def test_sigterm_of_the_renewing_instance_hands_the_lease_to_the_other_without_a_lapse(
        redis, hookwheel_factory, watch):
    ttl = 900
    a = hookwheel_factory(redis)
    b = hookwheel_factory(redis)
    la, lb = Leases(a), Leases(b)
    status, _, body = la.acquire("handover", "leader-1", ttl)
    assert status == 201, body
    w = watch(LEASE_PREFIX + "handover")
    t0 = time.time()
    beats = Heartbeats(la, "handover", "leader-1", ttl / 4000)
    time.sleep(2 * ttl / 1000)
    beats.via = lb
    time.sleep(0.1)
    stopped = time.time()
    assert a.stop() == 0
    time.sleep(6 * ttl / 1000)
    beats.stop()
    samples = w.since(t0)
    assert len(samples) > 100
    assert -2 not in [v for _, v in samples], "the lease lapsed"
    after = [v for t, v in w.since(stopped)]
    assert min(after) > 0, min(after)
    status, _, lease = lb.get("handover")
    assert status == 200 and lease["token"] == body["token"], lease
    assert wall(lease["last_renewed_at"]) > stopped + 4 * ttl / 1000, lease


def test_after_kill_9_of_the_only_instance_the_key_lapses_within_ttl_and_a_restart_renews_nothing_stale(
        redis, hookwheel_factory, watch):
    """With no instance left nothing renews: the key lapses within ttl of the
    last renewal. An instance started later retires the lease, and the next
    acquire gets a higher token."""
    ttl = 600
    a = hookwheel_factory(redis)
    la = Leases(a)
    status, _, body = la.acquire("orphan", "w-1", ttl)
    assert status == 201
    w = watch(LEASE_PREFIX + "orphan")
    beats = Heartbeats(la, "orphan", "w-1", ttl / 4000)
    time.sleep(2 * ttl / 1000)
    killed = time.time()
    assert a.kill9() == -9
    beats.stop()
    gone = wait_until(lambda: w.first_gone(killed), scaled(5))
    assert gone and gone - killed <= ttl / 1000 + scaled(0.1), gone and gone - killed
    b = hookwheel_factory(redis)
    lb = Leases(b)
    assert wait_until(lambda: redis.cmd("ZCARD", HW_LEASE + "schedule") == 0, scaled(3))
    assert redis.cmd("EXISTS", LEASE_PREFIX + "orphan") == 0
    status, _, again = lb.acquire("orphan", "w-2", ttl)
    assert status == 201 and again["token"] > body["token"], again


@pytest.mark.skipif(CLUSTER_MODE, reason="restarts one Redis")
def test_tokens_grow_across_redis_restarts_and_a_held_lease_is_renewed_again_after_one(
        redis, hookwheel, watch):
    ls = Leases(hookwheel)
    tokens = []
    for i in range(3):
        status, _, body = ls.acquire("fence", f"o-{i}", 2000)
        assert status == 201, body
        tokens.append(body["token"])
        assert ls.release("fence", f"o-{i}", body["token"])[0] == 204
    ttl = 3000
    status, _, held = ls.acquire("fence", "holder", ttl)
    assert status == 201
    tokens.append(held["token"])
    beats = Heartbeats(ls, "fence", "holder", 0.3)
    try:
        redis.restart()
        # the lease held across the restart is renewed again after it
        restarted = time.time()
        assert wait_until(lambda: ls.get("fence")[0] == 200 and ls.get("fence")[2].get("last_renewed_at")
                          and wall(ls.get("fence")[2]["last_renewed_at"]) > restarted, scaled(5))
        w = watch(LEASE_PREFIX + "fence")
        t1 = time.time()
        time.sleep(ttl / 1000)
        values = [v for _, v in w.since(t1)]
        assert values and -2 not in values and min(values) > 0, values and min(values)
    finally:
        beats.stop()
    w.stop()
    assert ls.release("fence", "holder", held["token"])[0] == 204
    redis.restart()
    status, _, body = wait_until_acquired(ls, "fence", "after", 2000)
    tokens.append(body["token"])
    assert all(b > a for a, b in zip(tokens, tokens[1:])), tokens


def wait_until_acquired(ls, key, owner, ttl):
    got = []

    def attempt():
        r = ls.acquire(key, owner, ttl)
        got[:] = [r]
        return r[0] == 201
    assert wait_until(attempt, scaled(5)), got
    return got[0]


def test_a_release_racing_renewals_is_final_the_key_is_never_recreated_or_extended(redis, hookwheel):
    """Many short leases (renewed every 100 ms) released at random moments:
    once the DELETE answered 204 the key stays gone and nothing of the lease
    is left in Redis."""
    rnd = random.Random(20240611)
    ls = Leases(hookwheel)
    n = 40
    keys = [f"race-{i}" for i in range(n)]
    for k in keys:
        assert ls.acquire(k, "holder", 300)[0] == 201
    stop = threading.Event()

    def beat():
        while not stop.is_set():
            for k in keys:
                ls.heartbeat(k, "holder")
            stop.wait(0.05)
    t = threading.Thread(target=beat, daemon=True)
    t.start()
    released = []
    try:
        for k in keys:
            time.sleep(rnd.uniform(0, 0.06))
            status, _, body = ls.release(k, "holder")
            assert status == 204, body
            released.append(k)
            assert redis.cmd("EXISTS", LEASE_PREFIX + k) == 0
    finally:
        stop.set()
        t.join(timeout=10)
    deadline = time.time() + 0.8
    while time.time() < deadline:
        for k in released:
            assert redis.cmd("EXISTS", LEASE_PREFIX + k) == 0, k
        time.sleep(0.05)
    assert redis.cmd("ZCARD", HW_LEASE + "schedule") == 0
    assert redis.cmd("ZCARD", HW_LEASE + "held") == 0
    assert not redis.keys(HW_LEASE + "meta:*")


def test_a_heartbeat_after_the_holder_went_silent_resumes_renewal_while_the_key_exists(
        redis, hookwheel, watch):
    ttl = 900
    ls = Leases(hookwheel)
    status, _, body = ls.acquire("resume", "h", ttl)
    assert status == 201
    w = watch(LEASE_PREFIX + "resume")
    # silent for 1.4 ttl: renewal stopped, the key still exists (at most 2 ttl)
    time.sleep(1.4 * ttl / 1000)
    assert redis.cmd("EXISTS", LEASE_PREFIX + "resume") == 1
    status, _, lease = ls.heartbeat("resume", "h", body["token"])
    assert status == 200, lease
    t1 = time.time()
    beats = Heartbeats(ls, "resume", "h", ttl / 4000)
    time.sleep(4 * ttl / 1000)
    beats.stop()
    assert -2 not in [v for _, v in w.since(t1)], "the lease lapsed after renewal resumed"


@pytest.mark.parametrize("body, field", [
    ({"key": "k", "owner": "o", "ttl_ms": 0}, "ttl_ms"),
    ({"key": "k", "owner": "o", "ttl_ms": -1000}, "ttl_ms"),
    ({"key": "k", "owner": "o", "ttl_ms": 9223372036854775807}, "ttl_ms"),
    ({"key": "k", "owner": "o", "ttl_ms": 1000.5}, "ttl_ms"),
    ({"key": "k", "owner": "o", "ttl_ms": None}, "ttl_ms"),
    ({"key": "k", "owner": "o", "ttl_ms": True}, "ttl_ms"),
    ({"key": "k", "owner": "o", "ttl_ms": 3000, "renew_interval_ms": 5000}, "renew_interval_ms"),
    ({"key": "a b", "owner": "o", "ttl_ms": 1000}, "key"),
    ({"key": "k\u00e9", "owner": "o", "ttl_ms": 1000}, "key"),
    ({"key": "k\nx", "owner": "o", "ttl_ms": 1000}, "key"),
    ({"key": "k\u0001", "owner": "o", "ttl_ms": 1000}, "key"),
    ({"key": "", "owner": "o", "ttl_ms": 1000}, "key"),
    ({"key": 7, "owner": "o", "ttl_ms": 1000}, "key"),
    ({"key": "k*", "owner": "o", "ttl_ms": 1000}, "key"),
    ({"key": "k", "owner": "o\u00e9", "ttl_ms": 1000}, "owner"),
    ({"key": "k", "owner": "", "ttl_ms": 1000}, "owner"),
])
def test_bad_inputs_get_a_400_naming_the_field_and_leave_redis_untouched(redis, hookwheel, body, field):
    status, _, kept = Leases(hookwheel).acquire("keep", "holder", 5000)
    assert status == 201
    before = sorted(redis.keys("*lease*"))
    status, headers, problem = hookwheel.api.request("POST", "/leases", json_body=body)
    assert status == 400, problem
    assert problem["field"] == field, problem
    assert sorted(redis.keys("*lease*")) == before
    assert redis.cmd("GET", LEASE_PREFIX + "keep") == "holder"


@pytest.mark.parametrize("path", ["/leases/a%20b", "/leases/a%2Fb", "/leases/%00", "/leases/" + "k" * 101,
                                  "/leases/%C3%A9"])
def test_odd_keys_in_the_path_answer_404_or_400_and_change_nothing(redis, hookwheel, path):
    ls = Leases(hookwheel)
    assert ls.acquire("keep", "holder", 5000)[0] == 201
    for method, body in (("GET", None), ("DELETE", None), ("POST", {"owner": "holder"})):
        target = path + ("?owner=holder" if method == "DELETE" else "") + ("/heartbeat" if method == "POST" else "")
        status, _, _ = hookwheel.api.request(method, target, json_body=body)
        assert status in (400, 404), (method, target, status)
    assert redis.cmd("GET", LEASE_PREFIX + "keep") == "holder"


def test_many_leases_are_all_held_and_listed_exactly_once(redis, hookwheel):
    rnd = random.Random(7)
    ls = Leases(hookwheel)
    keys = sorted({f"m{rnd.randrange(10**6):06d}" for _ in range(700)})
    # No heartbeats: the 700 acquisitions and the three walks must end within
    # the TTL however slow the machine (a TTL of 1.5 s expired the first
    # leases before the last walk on a slow one).
    for k in keys:
        status, _, body = ls.acquire(k, "bulk", 60_000)
        assert status == 201, body
    # a few released in between, so slices of the index cross holes
    gone = set(rnd.sample(keys, 50))
    for k in gone:
        assert ls.release(k, "bulk")[0] == 204
    for limit in (37, 256, 1000):
        got, _ = walk(ls, limit)
        listed = [x["key"] for x in got]
        assert listed == sorted(set(keys) - gone), limit
    assert redis.cmd("ZCARD", HW_LEASE + "held") == len(keys) - len(gone)


@pytest.mark.skipif(CLUSTER_MODE, reason="stops one Redis")
def test_redis_down_for_longer_than_the_ttl_ends_the_lease_once_with_one_on_expire(
        redis, receiver, hookwheel):
    ttl = 600
    ls = Leases(hookwheel)
    status, _, body = ls.acquire("outage", "h", ttl, on_expire={"url": receiver.url("/lost")})
    assert status == 201
    beats = Heartbeats(ls, "outage", "h", ttl / 4000)
    try:
        time.sleep(ttl / 1000)
        port = redis.port
        redis.stop()
        time.sleep(3 * ttl / 1000)
        redis.start(port=port)
        got = receiver.wait_for(1, timeout=scaled(10), path="/lost")
        assert len(got) == 1 and got[0].timer_id == f"lease:outage:{body['token']}", got
    finally:
        beats.stop()
    assert ls.heartbeat("outage", "h", body["token"])[0] == 404
    status, _, again = wait_until_acquired(ls, "outage", "h2", ttl)
    assert again["token"] > body["token"]
    time.sleep(scaled(1.5))
    assert len(receiver.requests("/lost")) == 1
