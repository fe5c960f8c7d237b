"""Counts per queue and state (GET /queues, GET /queues/{name}): kept by the
Redis functions on every change of state, they equal a full scan of the
timer records in Redis exactly, after creates, cancels, pauses, failures,
deliveries, a dead letter's retry and a takeover; they never leak between
namespaces; and timers stored without counts are counted by the rebuild at
start-up. Real redis-server, real hookwheel processes, a real receiver."""
import struct
import time

from conftest import Reply, RespClient, create_many, now_ms, scaled, spawn_while_redis_is_down, wait_until

LEASE = ["--lease-ttl-ms", "1500"]
HEAD = 51
STATES = {"s": "scheduled", "r": "retrying", "f": "firing", "p": "paused"}


def nodes(redis):
    """The servers holding timers: the masters of a Redis Cluster, or the one Redis."""
    cluster = vars(redis).get("cluster")  # (ClusterRedis; a missing attribute would skip the test)
    return cluster.masters() if cluster else [redis]


def counted_as(state, attempts):
    """A timer in its attempt counts under the state it waited in."""
    if state == "firing":
        return "scheduled" if attempts <= 1 else "retrying"
    return state


def scan_records(redis):
    """{(namespace, queue): {state: n}} of every timer record in Redis in a
    counted state, read from the records themselves (the head's state byte
    and the tail's queue)."""
    out = {}
    for node in nodes(redis):
        with RespClient(node.port) as c:
            cursor = b"0"
            while True:
                cursor, keys = c.call("SCAN", cursor, "MATCH", "hw:{*}:t:*", "COUNT", 1000)
                for k in keys:
                    v = c.call("GETRANGE", k, 0, 1000)
                    if not v or v[0] != 178:
                        continue
                    state = STATES.get(chr(v[1]))
                    if not state:
                        continue
                    state = counted_as(state, v[2] | v[3] << 8)
                    rlen = v[HEAD + 6]
                    p = HEAD + 7 + rlen
                    qlen = v[p + 13]
                    queue = v[p + 14:p + 14 + qlen].decode() if qlen else "default"
                    key_id = k.decode().split(":t:", 1)[1]
                    ns = key_id.split("/", 1)[0] if "/" in key_id else ""
                    per = out.setdefault((ns, queue), {})
                    per[state] = per.get(state, 0) + 1
                if cursor == b"0":
                    break
    return out


def api_counts(api, queue, headers=None):
    status, _, body = api.request("GET", f"/queues/{queue}", headers=headers)
    assert status == 200, body
    return {s: n for s, n in body["timers"].items() if n}, body


def assert_counts_equal_scan(redis, api, queue, ns="", headers=None, timeout=10.0):
    """Compares while the records stand still (the same scan before and
    after the API's read), so a change in between cannot blur the check."""
    deadline = time.time() + scaled(timeout)
    while True:
        before = scan_records(redis)
        got, body = api_counts(api, queue, headers)
        after = scan_records(redis)
        if before == after or time.time() > deadline:
            break
        time.sleep(0.1)
    assert before == after, "the timers never stood still"
    assert got == before.get((ns, queue), {}), (got, before.get((ns, queue)))
    assert body["counts_exact"] is True
    return body


def test_counts_equal_a_full_scan_after_a_mixed_run_with_a_takeover(redis, receiver, hookwheel_factory):
    a = hookwheel_factory(redis, args=LEASE)
    # (a short grace: its slow attempts are still running when the test ends)
    b = hookwheel_factory(redis, args=LEASE + ["--shutdown-grace-ms", "1000"])
    q = "mixed"
    receiver.default("/fail", Reply(500))
    receiver.default("/slow", Reply(204, delay_s=scaled(12)))
    far = [{"id": f"far-{i}", "url": receiver.url("/ok"), "delay_ms": 600000, "queue": q} for i in range(20)]
    now = [{"id": f"now-{i}", "url": receiver.url("/ok"), "delay_ms": 0, "queue": q} for i in range(10)]
    fail = [{"id": f"fail-{i}", "url": receiver.url("/fail"), "delay_ms": 0, "queue": q,
             "retry": {"max_attempts": 2, "min_backoff_ms": 10, "max_backoff_ms": 20}} for i in range(5)]
    retrying = [{"id": f"retry-{i}", "url": receiver.url("/fail"), "delay_ms": 0, "queue": q,
                 "retry": {"max_attempts": 5, "min_backoff_ms": 600000, "max_backoff_ms": 600000}}
                for i in range(4)]
    every = [{"id": f"every-{i}", "url": receiver.url("/ok"), "delay_ms": 300000, "queue": q,
              "repeat": {"every_ms": 300000}} for i in range(3)]
    other = [{"id": f"other-{i}", "url": receiver.url("/ok"), "delay_ms": 600000} for i in range(2)]
    for specs in (far, now, fail, retrying, every, other):
        _, errors = create_many(a.api, specs, threads=4)
        assert not errors, errors[:3]
    # the slow ones through a, due at once: a holds them firing when it dies
    slow = [{"id": f"slow-{i}", "url": receiver.url("/slow"), "delay_ms": 0, "queue": q} for i in range(3)]
    _, errors = create_many(a.api, slow, threads=1)
    assert not errors
    for i in range(5):
        assert a.api.cancel(f"far-{i}")[0] == 200
    for i in range(3):
        assert a.request("POST", f"/timers/every-{i}/pause")[0] == 200
    for t in fail:
        assert a.api.wait_state(t["id"], "failed", scaled(10))["state"] == "failed"
    for t in retrying:
        assert a.api.wait_state(t["id"], "retrying", scaled(10))["state"] == "retrying"
    receiver.wait_for(3, path="/slow", timeout=scaled(5))
    assert_counts_equal_scan(redis, b.api, q)
    got, _ = api_counts(b.api, q)
    assert got == {"scheduled": 18, "retrying": 4, "paused": 3}, got  # the 3 slow ones firing: scheduled
    # a dead letter's retry, and a resume
    assert a.request("POST", "/timers/fail-0/retry")[0] == 200
    assert a.request("POST", "/timers/every-0/resume")[0] == 200
    assert a.api.wait_state("fail-0", "failed", scaled(10))["state"] == "failed"
    # the takeover: a dies holding the slow timers firing; b hands them back
    assert a.kill9() == -9
    assert_counts_equal_scan(redis, b.api, q)
    assert wait_until(lambda: "took over the claims of a lapsed instance" in b.log.read_text(errors="replace"),
                      scaled(15))
    # b begins the interrupted attempts again (firing at the slow receiver once more)
    assert receiver.wait_for(6, path="/slow", timeout=scaled(10))
    body = assert_counts_equal_scan(redis, b.api, q)
    assert body["timers"]["paused"] == 2
    assert_counts_equal_scan(redis, b.api, "default")
    # GET /queues lists the queue with its counts, though it has no controls
    status, _, listing = b.request("GET", "/queues")
    assert status == 200
    mine = [x for x in listing["queues"] if x["name"] == q]
    assert len(mine) == 1 and mine[0]["configured"] is False
    assert mine[0]["timers"] == api_counts(b.api, q)[1]["timers"]


def test_due_timers_of_a_paused_queue_are_counted_with_the_age_of_the_oldest(redis, receiver, hookwheel):
    status, _, _ = hookwheel.request("PUT", "/queues/held", json_body={"paused": True})
    assert status == 200
    time.sleep(1.2)
    t0 = int(now_ms())
    specs = [{"id": f"held-{i}", "url": receiver.url("/held"), "fire_at_ms": t0 + 10 * i, "queue": "held"}
             for i in range(6)]
    specs.append({"id": "held-later", "url": receiver.url("/held"), "delay_ms": 600000, "queue": "held"})
    _, errors = create_many(hookwheel.api, specs, threads=2)
    assert not errors
    time.sleep(1.0)
    got, body = api_counts(hookwheel.api, "held")
    assert got == {"scheduled": 7}
    assert body["due"] == 6
    assert body["oldest_due_age_ms"] >= 1000
    assert body["oldest_due_age_ms"] <= now_ms() - t0 + 50
    assert receiver.requests("/held") == []
    # /metrics shows the read a scrape asked for (one scrape later)

    def scrape():
        status, _, text = hookwheel.request("GET", "/metrics")
        assert status == 200
        text = text.decode() if isinstance(text, bytes) else text
        return text
    scrape()
    assert wait_until(lambda: 'hookwheel_queue_due_backlog{queue="held"} 6' in scrape(), scaled(5))
    text = scrape()
    assert 'hookwheel_queue_timers{queue="held",state="scheduled"} 7' in text
    assert 'state="firing"' not in text
    age = [ln for ln in text.splitlines() if ln.startswith('hookwheel_queue_oldest_due_age_seconds{queue="held"}')]
    assert len(age) == 1 and float(age[0].split()[-1]) >= 1.0, age


def test_counts_never_leak_between_namespaces(tmp_path, redis, receiver, hookwheel_factory):
    tokens = tmp_path / "tokens"
    tokens.write_text("team-a token-aaaaaaaaaaaaaaaaaaaaaaaa\nteam-b token-bbbbbbbbbbbbbbbbbbbbbbbb\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    ha = {"Authorization": "Bearer token-aaaaaaaaaaaaaaaaaaaaaaaa"}
    hb = {"Authorization": "Bearer token-bbbbbbbbbbbbbbbbbbbbbbbb"}
    for i in range(4):
        assert hw.api.create({"id": f"a-{i}", "url": receiver.url("/a"), "delay_ms": 600000, "queue": "shared"},
                             headers=ha)[0] == 201
    for i in range(2):
        assert hw.api.create({"id": f"b-{i}", "url": receiver.url("/b"), "delay_ms": 600000, "queue": "shared"},
                             headers=hb)[0] == 201
    assert hw.api.create({"id": "b-only", "url": receiver.url("/b"), "delay_ms": 600000, "queue": "b-only"},
                         headers=hb)[0] == 201
    assert assert_counts_equal_scan(redis, hw.api, "shared", "team-a", ha)["timers"]["scheduled"] == 4
    assert assert_counts_equal_scan(redis, hw.api, "shared", "team-b", hb)["timers"]["scheduled"] == 2
    assert api_counts(hw.api, "b-only", ha)[0] == {}
    status, _, listing = hw.request("GET", "/queues", headers=ha)
    assert status == 200 and [x["name"] for x in listing["queues"]] == ["shared"]


def test_timers_stored_without_counts_are_counted_by_the_rebuild_at_start(redis, receiver, hookwheel_factory):
    hw = hookwheel_factory(redis)
    specs = [{"id": f"old-{i}", "url": receiver.url("/x"), "delay_ms": 600000, "queue": "old"} for i in range(300)]
    _, errors = create_many(hw.api, specs, threads=4)
    assert not errors
    for i in range(20):
        assert hw.request("POST", f"/timers/old-{i}/pause")[0] == 200
    hw.stop()
    # what an earlier release left: no counts, no mark in the heads
    for node in nodes(redis):
        with RespClient(node.port) as c:
            for k in node.keys("hw:{*}:t:*"):
                rf = c.call("GETRANGE", k, 34, 34)[0]
                c.call("SETRANGE", k, 34, bytes([rf & ~32]))
            for k in node.keys("hw:{*}:cn*"):
                c.call("DEL", k)
    hw2 = hookwheel_factory(redis)
    assert wait_until(lambda: api_counts(hw2.api, "old")[1]["counts_exact"], scaled(10))
    body = assert_counts_equal_scan(redis, hw2.api, "old")
    assert body["timers"]["scheduled"] == 280 and body["timers"]["paused"] == 20
    # a second start finds the rebuild done and counts nothing twice
    hw2.stop()
    hw3 = hookwheel_factory(redis)
    time.sleep(0.5)
    assert assert_counts_equal_scan(redis, hw3.api, "old")["timers"]["scheduled"] == 280


def test_counts_become_exact_when_the_only_instance_started_before_redis(tmp_path, request, redis,
                                                                          hookwheel_factory):
    # The count rebuild of the start fails while Redis is unreachable (a
    # compose deployment whose hookwheel comes up before its Redis); it is
    # run again once Redis answers, or counts_exact would stay false until
    # the instance's next start.
    redis.stop()
    hw = spawn_while_redis_is_down(request, tmp_path, redis.url, name="early")
    time.sleep(0.5)  # its start's rebuild has failed by now
    redis.restart()
    assert hw._wait_ready(scaled(15)) == "ready", hw.log_tail()
    status, _, body = hw.create({"id": "early-1", "url": "http://127.0.0.1:9/x", "delay_ms": 600_000,
                                 "queue": "early"})
    assert status == 201, body

    def exact():
        status, _, q = hw.request("GET", "/queues/early")
        return status == 200 and q["counts_exact"] is True and q["timers"]["scheduled"] == 1

    assert wait_until(exact, scaled(10), interval=0.2), hw.request("GET", "/queues/early")
