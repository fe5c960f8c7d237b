"""Watchdog leases (/leases, DESIGN.md §5): real redis-server, real hookwheel
processes, real HTTP receiver. The Redis key is watched from a separate Redis
connection (PTTL), never through hookwheel.

Semantics under test (README "Watchdog leases"): a holder is alive while its
last sign of life (acquire, heartbeat, or a 2xx from probe_url) is at most
ttl_ms old; while it is alive hookwheel extends the key to ttl_ms every
ttl_ms/3 (heartbeats themselves do not touch the key, so these tests see
hookwheel's renewal, not the client's). Once the holder is silent, renewal
stops and the key expires within ttl_ms (plus a worker tick)."""

import threading
import time
from collections import Counter
from datetime import datetime
from urllib.parse import urlencode

import pytest

import subprocess

from conftest import CLUSTER_MODE, HOOKWHEEL_BIN, HW_LEASE, LEASE_PREFIX, RespClient, scaled, wait_until

TICK_S = 0.05  # --lease-tick-ms default


def wall(rfc3339):
    """'2026-11-21T12:00:00.123Z' -> Unix seconds."""
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


class Leases:
    """The /leases calls of one hookwheel instance (with a bearer token, if given)."""

    def __init__(self, hw, token=None):
        self.api = hw.api
        self.headers = {"Authorization": f"Bearer {token}"} if token else None

    def acquire(self, key, owner, ttl_ms, **extra):
        body = {"key": key, "owner": owner, "ttl_ms": ttl_ms, **extra}
        return self.api.request("POST", "/leases", json_body=body, headers=self.headers)

    def heartbeat(self, key, owner, token=None):
        body = {"owner": owner} if token is None else {"owner": owner, "token": token}
        return self.api.request("POST", f"/leases/{key}/heartbeat", json_body=body, headers=self.headers)

    def get(self, key):
        return self.api.request("GET", f"/leases/{key}", headers=self.headers)

    def release(self, key, owner, token=None):
        q = urlencode({"owner": owner} if token is None else {"owner": owner, "token": token})
        return self.api.request("DELETE", f"/leases/{key}?{q}", headers=self.headers)


class PttlWatch:
    """Samples PTTL of one key from its own Redis connection, every ~5 ms,
    in a thread: [(wall time s, pttl ms)]."""

    def __init__(self, redis, key):
        self.key = key
        self.client = RespClient(redis.port_for(key))
        self.samples = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            v = self.client.call("PTTL", self.key)
            with self._lock:
                self.samples.append((time.time(), v))
            time.sleep(0.005)

    def since(self, t0):
        with self._lock:
            return [(t, v) for t, v in self.samples if t >= t0]

    def first_gone(self, t0):
        """Wall time of the first sample at or after t0 that saw the key gone."""
        return next((t for t, v in self.since(t0) if v == -2), None)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self.client.close()


@pytest.fixture
def watch(redis):
    watches = []

    def start(key):
        w = PttlWatch(redis, key)
        watches.append(w)
        return w

    yield start
    for w in watches:
        w.stop()


class Heartbeats:
    """Heartbeats every interval_s from a thread, through whichever instance
    `via` names at the moment (tests switch it). Records the send time of the
    last heartbeat that was answered 200."""

    def __init__(self, via, key, owner, interval_s):
        self.via, self.key, self.owner, self.interval = via, key, owner, interval_s
        self.last_ok_sent = None
        self.statuses = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            sent = time.time()
            try:
                status, _, _ = self.via.heartbeat(self.key, self.owner)
            except OSError:
                status = "error"
            self.statuses[status] += 1
            if status == 200:
                self.last_ok_sent = sent
            self._stop.wait(self.interval)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=10)


# --------------------------------------------------------------------------


def test_a_second_owner_gets_409_and_the_holder_acquiring_again_gets_200_with_its_token(
        redis, hookwheel):
    ls = Leases(hookwheel)
    status, headers, body = ls.acquire("orders-42", "worker-7", 5000)
    assert status == 201, body
    assert headers["Location"] == "/leases/orders-42"
    assert body["owner"] == "worker-7" and body["ttl_ms"] == 5000 and body["token"] >= 1
    assert 0 < body["expires_in_ms"] <= 5000
    token = body["token"]
    assert redis.cmd("GET", LEASE_PREFIX + "orders-42") == "worker-7"

    status, _, problem = ls.acquire("orders-42", "worker-8", 5000)
    assert status == 409, problem
    assert problem["status"] == 409 and problem["owner"] == "worker-7"

    status, _, again = ls.acquire("orders-42", "worker-7", 5000)
    assert status == 200, again
    assert again["token"] == token
    status, _, problem = ls.acquire("orders-42", "worker-7", 6000)
    assert status == 409 and problem["token"] == token, problem

    # Racing owners: exactly one wins.
    results = Counter()
    lock = threading.Lock()

    def race(i):
        s, _, _ = ls.acquire("race", f"owner-{i}", 5000)
        with lock:
            results[s] += 1
    threads = [threading.Thread(target=race, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == Counter({201: 1, 409: 11}), results


def test_fencing_tokens_strictly_increase_across_acquire_release_and_expiry_cycles(
        redis, hookwheel, watch):
    ls = Leases(hookwheel)
    tokens = []
    for i in range(6):
        owner = f"writer-{i % 2}"
        status, _, body = ls.acquire("ledger", owner, 2000)
        assert status == 201, body
        tokens.append(body["token"])
        status, _, _ = ls.release("ledger", owner, body["token"])
        assert status == 204
    # An expiry (nobody heartbeats) ends a lease too; the next token is higher still.
    status, _, body = ls.acquire("ledger", "writer-x", 300)
    assert status == 201
    tokens.append(body["token"])
    assert wait_until(lambda: redis.cmd("EXISTS", LEASE_PREFIX + "ledger") == 0, scaled(3))
    status, _, body = ls.acquire("ledger", "writer-y", 2000)
    assert status == 201
    tokens.append(body["token"])
    assert all(b > a for a, b in zip(tokens, tokens[1:])), tokens
    assert redis.cmd("GET", HW_LEASE + "token:ledger") == str(tokens[-1])


def test_delete_by_a_non_owner_changes_nothing_and_by_the_owner_frees_the_key(redis, hookwheel):
    ls = Leases(hookwheel)
    status, _, body = ls.acquire("deploy", "ci-1", 30000)
    assert status == 201
    token = body["token"]

    status, _, problem = ls.release("deploy", "ci-2")
    assert status == 409 and problem["owner"] == "ci-1", problem
    status, _, problem = ls.release("deploy", "ci-1", token + 1)  # a stale or wrong token
    assert status == 409, problem
    assert redis.cmd("GET", LEASE_PREFIX + "deploy") == "ci-1"
    assert redis.cmd("PTTL", LEASE_PREFIX + "deploy") > 25000
    status, _, now = ls.get("deploy")
    assert status == 200 and now["owner"] == "ci-1" and now["token"] == token

    status, _, problem = ls.release("deploy", "")
    assert status == 400 and problem["field"] == "owner"
    status, _, _ = ls.release("deploy", "ci-1", token)
    assert status == 204
    assert redis.cmd("EXISTS", LEASE_PREFIX + "deploy") == 0
    assert ls.get("deploy")[0] == 404
    assert ls.release("deploy", "ci-1")[0] == 404
    assert ls.heartbeat("deploy", "ci-1")[0] == 404
    assert not redis.keys(HW_LEASE + "meta:*")
    assert redis.cmd("ZCARD", HW_LEASE + "schedule") == 0


def test_with_heartbeats_the_key_never_expires_over_ten_ttls(redis, hookwheel, watch):
    ttl = 800
    ls = Leases(hookwheel)
    status, _, body = ls.acquire("steady", "holder", ttl)
    assert status == 201
    w = watch(LEASE_PREFIX + "steady")
    t0 = time.time()
    beats = Heartbeats(ls, "steady", "holder", ttl / 4000)
    time.sleep(10 * ttl / 1000)
    beats.stop()
    samples = w.since(t0)
    values = [v for _, v in samples]
    assert len(samples) > 200, len(samples)
    assert -2 not in values, "the key expired while the holder heartbeat"
    assert min(values) > 0, min(values)
    assert set(beats.statuses) == {200}, beats.statuses
    assert redis.cmd("GET", LEASE_PREFIX + "steady") == "holder"
    _, _, lease = ls.get("steady")
    assert lease["renewing"] is True and lease["last_renewed_at"] is not None
    print(f"{len(samples)} PTTL samples over {10 * ttl} ms, lowest {min(values)} ms")


def test_after_heartbeats_stop_the_key_expires_within_ttl_plus_a_tick_and_on_expire_arrives_once(
        redis, receiver, hookwheel, watch):
    ttl = 600
    ls = Leases(hookwheel)
    on_expire = {"url": receiver.url("/expired"), "json": {"lock": "jobs"}, "headers": {"X-Why": "lease"}}
    status, _, body = ls.acquire("jobs", "runner-1", ttl, on_expire=on_expire)
    assert status == 201, body
    token = body["token"]
    assert body["on_expire"]["url"] == on_expire["url"] and body["on_expire"]["delay_ms"] == 0
    w = watch(LEASE_PREFIX + "jobs")
    beats = Heartbeats(ls, "jobs", "runner-1", ttl / 4000)
    time.sleep(3 * ttl / 1000)
    beats.stop()
    assert beats.last_ok_sent is not None
    # The last heartbeat as hookwheel recorded it (the client's send time may
    # be earlier by a slow request).
    status, _, lease = ls.get("jobs")
    assert status == 200 and lease["last_heartbeat_at"], lease
    last = wall(lease["last_heartbeat_at"])
    gone = wait_until(lambda: w.first_gone(last), scaled(5))
    assert gone, "the key never expired"
    # Held while the holder counted as alive (ttl after its last heartbeat) ...
    assert gone >= last + ttl / 1000, (gone - last)
    assert -2 not in [v for t, v in w.since(0) if t < last + ttl / 1000]
    # ... and gone within ttl + a tick once it went silent (ttl after the last heartbeat).
    silent = last + ttl / 1000
    assert gone - silent <= ttl / 1000 + TICK_S + scaled(0.25), (gone - silent)

    got = receiver.wait_for(1, timeout=scaled(5), path="/expired")
    assert len(got) == 1, got
    time.sleep(scaled(2))  # a duplicate would come now
    got = receiver.requests("/expired")
    assert len(got) == 1, got
    req = got[0]
    assert req.timer_id == f"lease:jobs:{token}"
    assert req.headers["X-Why"] == "lease" and req.body == b'{"lock":"jobs"}'
    assert req.wall >= gone - 0.05
    assert ls.get("jobs")[0] == 404
    status, _, timer = hookwheel.get(f"lease:jobs:{token}")
    assert status == 200 and timer["state"] == "delivered", timer
    assert wait_until(lambda: not redis.keys(HW_LEASE + "meta:*"), scaled(3))
    assert redis.cmd("ZCARD", HW_LEASE + "schedule") == 0
    print(f"key gone {1000 * (gone - silent):.0f} ms after the holder went silent; "
          f"on_expire {1000 * (req.wall - gone):.0f} ms after")


def test_a_probe_url_answering_2xx_keeps_a_silent_holder_alive_until_it_fails(
        redis, receiver, hookwheel, watch):
    ttl = 600
    ls = Leases(hookwheel)
    status, _, body = ls.acquire("probed", "svc-a", ttl, probe_url=receiver.url("/alive"))
    assert status == 201, body
    w = watch(LEASE_PREFIX + "probed")
    t0 = time.time()
    time.sleep(8 * ttl / 1000)  # no heartbeat at all: only the probe speaks for the holder
    assert -2 not in [v for _, v in w.since(t0)]
    probes = receiver.requests("/alive")
    assert len(probes) >= 3, probes
    assert probes[0].method == "GET"
    assert probes[0].headers["Hookwheel-Lease-Key"] == "probed"
    assert probes[0].headers["Hookwheel-Lease-Owner"] == "svc-a"
    assert probes[0].headers["Hookwheel-Lease-Token"] == str(body["token"])
    _, _, lease = ls.get("probed")
    assert lease["last_probe_ok_at"] is not None and lease["last_heartbeat_at"] is None

    receiver.default("/alive", 503)
    failing = time.time()
    gone = wait_until(lambda: w.first_gone(failing), scaled(5))
    # The last 2xx came at most one period before `failing`; then ttl of silence, then at most ttl.
    assert gone and gone - failing <= 2 * ttl / 1000 + TICK_S + scaled(0.3), gone and gone - failing


def test_kill_9_of_the_renewing_instance_leaves_the_lease_renewed_by_the_survivor(
        redis, hookwheel_factory, watch):
    ttl = 900
    a = hookwheel_factory(redis)
    la = Leases(a)
    status, _, body = la.acquire("singleton", "leader-1", ttl)
    assert status == 201, body
    w = watch(LEASE_PREFIX + "singleton")
    t0 = time.time()
    beats = Heartbeats(la, "singleton", "leader-1", ttl / 4000)
    # A alone renews it for a while ...
    time.sleep(2 * ttl / 1000)
    assert "leases renewed" in a.log.read_text(errors="replace")
    # ... then B joins, the holder heartbeats through B, and A dies.
    b = hookwheel_factory(redis)
    lb = Leases(b)
    beats.via = lb
    time.sleep(0.2)
    killed = time.time()
    assert a.kill9() == -9
    time.sleep(8 * ttl / 1000)
    beats.stop()
    values = [v for _, v in w.since(t0)]
    assert -2 not in values, "the lease lapsed"
    after = [v for t, v in w.since(killed)]
    assert len(after) > 100 and min(after) > 0, min(after)
    assert redis.cmd("GET", LEASE_PREFIX + "singleton") == "leader-1"
    status, _, lease = lb.get("singleton")
    assert status == 200 and lease["token"] == body["token"], lease
    renewed_at = wall(lease["last_renewed_at"])
    assert renewed_at > killed + 6 * ttl / 1000, (lease["last_renewed_at"], killed)
    assert "leases renewed" in b.log.read_text(errors="replace")
    print(f"lowest PTTL after the kill: {min(after)} ms over {len(after)} samples")


def test_with_a_slow_lease_tick_a_ttl_below_three_ticks_is_refused_and_one_of_three_is_kept(
        redis, hookwheel_factory, watch, tmp_path):
    """A worker looks at least every --lease-tick-ms, so a lease's first
    renewal may wait a tick: with a tick of 1000 ms a 300 ms lease lapsed
    under a holder heartbeating every 80 ms (in 3 of 5 tries). The smallest
    ttl_ms is three ticks then; a lease of that ttl is kept."""
    hw = hookwheel_factory(redis, args=["--lease-tick-ms", "1000"])
    ls = Leases(hw)
    status, _, problem = ls.acquire("short", "o", 2999)
    assert status == 400 and problem["field"] == "ttl_ms", problem
    assert "from 3000" in problem["detail"], problem
    assert redis.cmd("EXISTS", LEASE_PREFIX + "short") == 0

    status, _, body = ls.acquire("kept", "o", 3000)
    assert status == 201, body
    w = watch(LEASE_PREFIX + "kept")
    t0 = time.time()
    beats = Heartbeats(ls, "kept", "o", 0.75)
    time.sleep(7.0)
    beats.stop()
    values = [v for _, v in w.since(t0)]
    assert len(values) > 100 and min(values) > 0, min(values)
    assert beats.statuses[404] == 0, beats.statuses

    r = subprocess.run([HOOKWHEEL_BIN, "--lease-tick-ms", "1000", "--lease-max-ttl-ms", "2999"],
                       capture_output=True, text=True, cwd=str(tmp_path), timeout=10)
    assert r.returncode == 2 and "invalid HOOKWHEEL_LEASE_MAX_TTL_MS" in r.stderr, (r.returncode, r.stderr)


def test_heartbeats_of_another_owner_or_a_stale_token_get_409_and_after_release_404(hookwheel):
    ls = Leases(hookwheel)
    status, _, body = ls.acquire("cron", "box-1", 10000)
    token = body["token"]
    status, _, lease = ls.heartbeat("cron", "box-1", token)
    assert status == 200 and lease["last_heartbeat_at"] is not None and lease["renewing"] is True
    status, _, problem = ls.heartbeat("cron", "box-2")
    assert status == 409 and problem["owner"] == "box-1"
    status, _, problem = ls.heartbeat("cron", "box-1", token + 5)
    assert status == 409 and problem["field"] == "token" and problem["token"] == token
    assert ls.release("cron", "box-1")[0] == 204
    assert ls.heartbeat("cron", "box-1")[0] == 404
    assert ls.get("no-such-lease")[0] == 404


def test_a_token_higher_than_the_current_one_is_not_said_to_be_from_an_earlier_lease(hookwheel):
    # A heartbeat or release with a token the key never gave (higher than
    # the current lease's) got 409 "the lease was acquired again since",
    # which is false: no acquire gave that token. A lower token is the
    # earlier lease's, and is said so. The status, field and current token
    # are the documented ones either way.
    ls = Leases(hookwheel)
    assert ls.acquire("fenced", "box-1", 10000)[0] == 201
    assert ls.release("fenced", "box-1")[0] == 204
    status, _, body = ls.acquire("fenced", "box-1", 10000)
    assert status == 201 and body["token"] == 2, body
    higher = [ls.heartbeat("fenced", "box-1", 3), ls.release("fenced", "box-1", 7)]
    for status, _, problem in higher:
        assert status == 409 and problem["field"] == "token" and problem["token"] == 2, problem
        assert problem["owner"] == "box-1", problem
        assert "acquired again" not in problem["detail"], problem
        assert "higher" in problem["detail"] and "not the current one" in problem["detail"], problem
    for status, _, problem in (ls.heartbeat("fenced", "box-1", 1), ls.release("fenced", "box-1", 1)):
        assert status == 409 and problem["field"] == "token" and problem["token"] == 2, problem
        assert "acquired again since" in problem["detail"], problem
    status, _, lease = ls.get("fenced")
    assert status == 200 and lease["token"] == 2 and lease["last_heartbeat_at"] is None, lease


def test_with_api_tokens_each_namespace_has_its_own_leases_and_on_expire_timers(
        tmp_path, redis, receiver, hookwheel_factory):
    team_a, team_b = "team-a-token-7c1e9b7d2f", "team-b-token-1a4f0d6e1c"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"team-a {team_a}\nteam-b {team_b}\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    a, b = Leases(hw, team_a), Leases(hw, team_b)
    assert Leases(hw).acquire("jobs", "x", 1000)[0] == 401
    status, _, la = a.acquire("jobs", "a-1", 400, on_expire={"url": receiver.url("/ns-expired")})
    assert status == 201, la
    status, _, lb = b.acquire("jobs", "b-1", 30000)
    assert status == 201, lb  # the same key in another namespace is another lease
    assert redis.cmd("GET", LEASE_PREFIX + "team-a/jobs") == "a-1"
    assert redis.cmd("GET", LEASE_PREFIX + "team-b/jobs") == "b-1"
    assert b.release("jobs", "a-1")[0] == 409  # B's lease: a-1 is not its owner
    assert b.get("jobs")[2]["owner"] == "b-1"
    got = receiver.wait_for(1, timeout=scaled(5), path="/ns-expired")
    assert len(got) == 1, got
    timer_id = f"lease:jobs:{la['token']}"
    assert got[0].timer_id == timer_id
    status, _, timer = hw.request("GET", f"/timers/{timer_id}", headers=a.headers)
    assert status == 200 and timer["id"] == timer_id, timer
    assert hw.request("GET", f"/timers/{timer_id}", headers=b.headers)[0] == 404
    assert a.get("jobs")[0] == 404 and b.get("jobs")[0] == 200


@pytest.mark.skipif(CLUSTER_MODE, reason="an untagged prefix: leases on a cluster are test_cluster.py's")
def test_the_prefix_names_the_redis_key_and_hookwheels_own_keys_stay_out_of_reach(redis, hookwheel_factory):
    hw = hookwheel_factory(redis, args=["--lease-prefix", ""])
    ls = Leases(hw)
    assert ls.acquire("jobs", "a", 5000)[0] == 201
    assert redis.cmd("GET", "jobs") == "a"
    instance_key = f"hw:instance:{hw.instance_id}"
    status, _, problem = ls.acquire(instance_key, hw.instance_id, 5000)
    assert status == 400 and problem["field"] == "key", problem
    assert ls.release(instance_key, hw.instance_id)[0] == 404
    assert ls.get(instance_key)[0] == 404
    assert redis.cmd("GET", instance_key) == hw.instance_id
    r = subprocess.run([HOOKWHEEL_BIN, "--lease-prefix", "hw:locks:"], capture_output=True, text=True)
    assert r.returncode == 2 and "HOOKWHEEL_LEASE_PREFIX" in r.stderr, r.stderr


@pytest.mark.parametrize("body, field", [
    ({"key": "k", "owner": "o", "ttl_ms": 1000, "colour": "red"}, "colour"),
    ({"owner": "o", "ttl_ms": 1000}, "key"),
    ({"key": "a/b", "owner": "o", "ttl_ms": 1000}, "key"),
    ({"key": "k" * 101, "owner": "o", "ttl_ms": 1000}, "key"),
    ({"key": "k", "owner": "has space", "ttl_ms": 1000}, "owner"),
    ({"key": "k", "owner": "o" * 201, "ttl_ms": 1000}, "owner"),
    ({"key": "k", "owner": "o", "ttl_ms": 299}, "ttl_ms"),
    ({"key": "k", "owner": "o", "ttl_ms": 3600001}, "ttl_ms"),
    ({"key": "k", "owner": "o", "ttl_ms": "1000"}, "ttl_ms"),
    ({"key": "k", "owner": "o", "ttl_ms": 1000, "probe_url": "ftp://x.example/"}, "probe_url"),
    ({"key": "k", "owner": "o", "ttl_ms": 1000, "probe_url": "http://10.0.0.1/alive"}, "probe_url"),
    ({"key": "k", "owner": "o", "ttl_ms": 1000, "probe_url": "http://u:p@x.example/"}, "probe_url"),
    ({"key": "k", "owner": "o", "ttl_ms": 1000, "on_expire": "http://x.example/"}, "on_expire"),
    ({"key": "k", "owner": "o", "ttl_ms": 1000, "on_expire": {}}, "on_expire.url"),
    ({"key": "k", "owner": "o", "ttl_ms": 1000, "on_expire": {"url": "http://x.example/", "id": "x"}},
     "on_expire.id"),
    ({"key": "k", "owner": "o", "ttl_ms": 1000, "on_expire": {"url": "http://x.example/", "fire_at_ms": 1}},
     "on_expire.fire_at_ms"),
    ({"key": "k", "owner": "o", "ttl_ms": 1000,
      "on_expire": {"url": "http://x.example/", "retry": {"max_attempts": 0}}}, "on_expire.retry.max_attempts"),
    ({"key": "k", "owner": "o", "ttl_ms": 1000, "on_expire": {"url": "http://169.254.169.254/"}},
     "on_expire.url"),
])
def test_invalid_lease_requests_get_a_problem_naming_the_field(hookwheel, body, field):
    status, headers, problem = hookwheel.api.request("POST", "/leases", json_body=body)
    assert status == 400, problem
    assert headers["Content-Type"].startswith("application/problem+json")
    assert problem["field"] == field, problem
