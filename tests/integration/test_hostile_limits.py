"""One hostile client must not take hookwheel down for everyone (README
"Queues", "Limits", "Logs"; DESIGN.md §4-§6).

1. Queue rates: out-of-range max_dispatches_per_second values are refused
   with a 400 naming the field; with the slowest accepted rate (or a tiny
   one stored in Redis before the API refused them) and a timer waiting for
   its token, the process stays idle (< 5 % of a core).
2. A json body nested deeper than the documented limit (64) is refused
   with a 400 naming `json`; one at the limit is stored, and listings with a
   queue filter (which decode the stored spec in Redis's Lua) still answer.
3. A target cannot make a recurring timer run back to back with
   Hookwheel-Next-Delay-Ms: 0; a status outside 500-599 (999) is not
   retried; a host written with fullwidth digits is refused at create;
   refused creates do not flood the log at the default level.

Real redis-server, real hookwheel binary, real receiver; nothing is mocked."""

import contextlib
import http.client
import json
import socket
import time

import pytest

from conftest import (CLUSTER_MODE, Reply, cpu_seconds, let_bgsave_succeed, make_bgsave_fail, scaled,
                      spawn_while_redis_is_down, wait_until)
from contract import assert_matches_contract

RATE_FIELD = "max_dispatches_per_second"
SLOWEST_RATE = 0.001       # README "Queues": the smallest accepted rate
JSON_DEPTH_LIMIT = 64      # README "Limits": how deep a json body may nest
MIN_PERIOD_MS = 10         # README: the minimum period of a recurring timer


def problem_field(resp):
    status, headers, body = resp
    assert status == 400, (status, body)
    assert headers["Content-Type"].startswith("application/problem+json"), headers
    return body.get("field")


def put_queue(hw, name, body):
    return hw.request("PUT", f"/queues/{name}", json_body=body)


# --------------------------------------------------------------------------
# 1. queue rates


@pytest.mark.parametrize("bad", [1e-14, 0.0009, -1, 100000.5, 1e300, "fast", True, None, [1]])
def test_an_out_of_range_queue_rate_is_refused_naming_the_field(hookwheel, bad):
    assert problem_field(put_queue(hookwheel, "q", {RATE_FIELD: bad})) == RATE_FIELD
    status, _, body = hookwheel.request("GET", "/queues/q")
    assert status == 200 and body["configured"] is False, body  # nothing was stored


def test_the_ends_of_the_rate_range_are_accepted_and_parallelism_is_bounded(hookwheel):
    for ok in (0, SLOWEST_RATE, 100000):
        status, _, body = put_queue(hookwheel, "q", {RATE_FIELD: ok})
        assert status == 200 and body[RATE_FIELD] == ok, body
    for bad in (0, -3, 1000001, 10**9, 1.5, "2"):
        assert problem_field(put_queue(hookwheel, "q", {"parallelism": bad})) == "parallelism"
    # a deployment's figure may exceed the answering instance's slots (256)
    for ok in (257, 1000000):
        status, _, body = put_queue(hookwheel, "q", {"parallelism": ok})
        assert status == 200 and body["parallelism"] == ok, body


@pytest.mark.parametrize("how", ["api", "stored"])
def test_a_timer_waiting_for_a_token_of_the_slowest_rate_leaves_the_process_idle(
        redis, receiver, hookwheel_factory, how):
    if how == "stored":  # a value written before the API refused it: 1e-14/s, there at start
        redis.cmd("HSET", "hw:{queues}", "slow", "10 0 1e-14")
    hw = hookwheel_factory(redis)
    if how == "api":
        status, _, body = put_queue(hw, "slow", {RATE_FIELD: SLOWEST_RATE})
        assert status == 200, body
    time.sleep(1.2)  # every engine reads the settings within QUEUES_POLL_MS (500 ms)
    for i in range(2):
        status, _, body = hw.create({"id": f"slow-{i}", "url": receiver.url("/slow"), "delay_ms": 0,
                                     "queue": "slow"})
        assert status == 201, body
    assert len(receiver.wait_for(1, timeout=scaled(5), path="/slow")) == 1
    time.sleep(0.5)  # the second waits for its token, 1000 s (or ages) away
    assert len(receiver.requests("/slow")) == 1
    pid = hw.proc.pid
    before, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(3.0)
    used, wall = cpu_seconds(pid) - before, time.monotonic() - t0
    assert used / wall < 0.05, f"{used:.2f} s of CPU in {wall:.2f} s while a timer waits for its token"
    assert len(receiver.requests("/slow")) == 1


# --------------------------------------------------------------------------
# 2. json nesting


def nested(depth):
    return "[" * depth + "1" + "]" * depth


def create_raw(hw, text):
    return hw.request("POST", "/timers", raw_body=text, headers={"Content-Type": "application/json"})


# 2000: jansson takes it (up to 2048 levels in all), cjson would not
@pytest.mark.parametrize("depth", [JSON_DEPTH_LIMIT + 1, 1001, 2000])
def test_a_json_body_nested_past_the_limit_is_refused_naming_json(hookwheel, receiver, depth):
    text = f'{{"url": "{receiver.url("/deep")}", "delay_ms": 600000, "json": {nested(depth)}}}'
    assert problem_field(create_raw(hookwheel, text)) == "json"


def test_a_json_body_nested_past_janssons_own_limit_is_refused_as_malformed(hookwheel, receiver):
    # README "Limits": past 2,048 levels jansson refuses the body before any
    # field is looked at
    text = f'{{"url": "{receiver.url("/deep")}", "delay_ms": 600000, "json": {nested(3000)}}}'
    status, _, body = create_raw(hookwheel, text)
    assert status == 400 and "field" not in body, body
    assert body["detail"].startswith("malformed JSON: maximum parsing depth reached"), body


def test_a_json_body_at_the_limit_is_stored_and_queue_listings_still_answer(hookwheel, receiver):
    text = (f'{{"id": "at-limit", "url": "{receiver.url("/deep")}", "delay_ms": 600000, '
            f'"json": {nested(JSON_DEPTH_LIMIT)}}}')
    status, _, body = create_raw(hookwheel, text)
    assert status == 201, body
    for queue in ("default", "other"):
        status, _, body = hookwheel.request("GET", f"/timers?state=scheduled&queue={queue}")
        assert status == 200, body
        ids = [t["id"] for t in body["items"]]
        assert ids == (["at-limit"] if queue == "default" else []), body
    status, _, body = hookwheel.get("at-limit")
    assert status == 200 and json.dumps(body["json"]).count("[") == JSON_DEPTH_LIMIT


# --------------------------------------------------------------------------
# 3. lower findings


def test_next_delay_zero_from_the_target_is_raised_to_the_minimum_period(hookwheel, receiver):
    receiver.default("/steer", Reply(200, headers={"Hookwheel-Next-Delay-Ms": "0"}))
    status, _, body = hookwheel.create({"id": "steered", "url": receiver.url("/steer"), "delay_ms": 0,
                                        "repeat": {"every_ms": 60000}})
    assert status == 201, body
    assert len(receiver.wait_for(3, timeout=scaled(5), path="/steer")) >= 3  # it does steer
    start = time.monotonic()
    n0 = len(receiver.requests("/steer"))
    time.sleep(1.0)
    runs = len(receiver.requests("/steer")) - n0
    elapsed = time.monotonic() - start
    hookwheel.request("POST", "/timers/steered/pause")
    # at most one run per MIN_PERIOD_MS (100 a second), with slack for rounding
    assert runs <= elapsed * 1000 / MIN_PERIOD_MS + 5, f"{runs} runs in {elapsed:.2f} s"
    times = [r.mono for r in receiver.requests("/steer")]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert min(gaps) >= (MIN_PERIOD_MS - 2) / 1000, min(gaps)


@pytest.mark.parametrize("status,attempts,state", [(999, 1, "failed"), (600, 1, "failed"), (599, 3, "failed")])
def test_only_5xx_among_the_high_statuses_is_retried(hookwheel, receiver, status, attempts, state):
    path = f"/status-{status}"
    receiver.default(path, status)
    tid = f"s{status}"
    spec = {"id": tid, "url": receiver.url(path), "delay_ms": 0,
            "retry": {"max_attempts": 3, "min_backoff_ms": 50, "max_backoff_ms": 100}}
    assert hookwheel.create(spec)[0] == 201
    body = hookwheel.wait_state(tid, ("failed", "delivered"), timeout=scaled(10))
    assert body["state"] == state and body["attempts"] == attempts, body
    time.sleep(0.3)
    assert len(receiver.requests(path)) == attempts


@pytest.mark.parametrize("host", ["\uff11\uff12\uff17.0.0.1", "\uff11\uff10.0.0.1", "b\u00fccher.example"])
def test_a_url_host_that_is_not_ascii_is_refused_at_create(hookwheel, receiver, host):
    url = f"http://{host}:{receiver.port}/idn"
    resp = hookwheel.create({"url": url, "delay_ms": 0})
    assert problem_field(resp) == "url"
    # the xn-- form of a name is accepted (its delivery is DNS's business)
    status, _, body = hookwheel.create({"url": "http://xn--bcher-kva.example/", "delay_ms": 600000})
    assert status == 201, body


def info_lines(hw):
    """The log's JSON lines at info or above."""
    out = []
    for line in hw.log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            if rec.get("level") != "debug":
                out.append(rec)
    return out


def test_a_thousand_refused_creates_log_a_bounded_number_of_lines(redis, receiver, hookwheel_factory):
    hw = hookwheel_factory(redis, args=["--log-level", "info"])
    before = len(info_lines(hw))
    t0 = time.monotonic()
    with hw.api.session() as s:
        for i in range(1000):
            status, _, _ = s.create({"url": "ftp://example.com/", "delay_ms": 0})
            assert status == 400
    elapsed = time.monotonic() - t0
    time.sleep(1.1)
    with hw.api.session() as s:  # the next second's first refusal reports the count
        assert s.create({"url": "ftp://example.com/", "delay_ms": 0})[0] == 400
    def accounted():  # the request's line is written just after its answer
        lines = info_lines(hw)[before:]
        logged = [r for r in lines if r.get("msg") == "http request"]
        counted = sum(r["suppressed"] for r in lines if r.get("msg") == "client error requests not logged")
        return len(logged) + counted == 1001
    wait_until(accounted, timeout=scaled(3))
    lines = info_lines(hw)[before:]
    # 10 a second, plus one count line a second, for the seconds it took
    bound = 11 * (int(elapsed) + 3)
    assert len(lines) <= bound, f"{len(lines)} lines at info for 1001 refused creates in {elapsed:.1f} s"
    logged = [r for r in lines if r.get("msg") == "http request"]
    counted = sum(r["suppressed"] for r in lines if r.get("msg") == "client error requests not logged")
    assert logged and len(logged) + counted == 1001, (len(logged), counted)


def test_a_body_over_the_cap_sent_whole_before_reading_gets_its_413_on_a_kept_connection(redis,
                                                                                         hookwheel_factory):
    hw = hookwheel_factory(redis)
    # http.client sends the whole body before it reads, as most clients do:
    # a 413 given before the body was read, then a close, reset the
    # connection under its send, and the client saw ConnectionResetError
    conn = http.client.HTTPConnection("127.0.0.1", hw.port, timeout=scaled(10))
    try:
        for size in (65537, 1_000_000, 65536 + (1 << 20)):
            conn.request("POST", "/timers", body=b"x" * size, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            body = json.loads(resp.read())
            assert resp.status == 413 and resp.headers["Content-Type"] == "application/problem+json", (size, body)
            assert_matches_contract("POST", "/timers", resp.status, resp.headers, body)
            assert body["detail"] == "the request body is larger than 65536 bytes", body
            # the body was read: the connection goes on
            conn.request("GET", "/healthz")
            resp = conn.getresponse()
            assert resp.status == 200 and json.loads(resp.read()) == {"status": "ok"}
    finally:
        conn.close()
    # a client that waits for 100 Continue gets the 413 at once, before any body
    with socket.create_connection(("127.0.0.1", hw.port), timeout=scaled(5)) as s:
        s.sendall(b"POST /timers HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000000\r\nExpect: 100-continue\r\n\r\n")
        head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 413 ") and b"Connection: close" in head, head
    assert hw.request("GET", "/healthz")[0] == 200


def test_bodies_far_over_the_cap_close_their_connections_with_no_warning_line(redis, hookwheel_factory):
    hw = hookwheel_factory(redis, args=["--log-level", "info"])
    before = len(info_lines(hw))
    # chunked, so no Content-Length tells the cap is passed before the body
    # is read: past 1 MiB over the cap hookwheel stops reading and closes
    body = b"x" * (1100 * 1024)
    request = (b"POST /timers HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
    n = 20
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", hw.port), timeout=scaled(5)) as s:
            try:
                s.sendall(request)
                while s.recv(65536):
                    pass
            except ConnectionResetError:
                pass  # closed while the body was still coming
    def logged():
        return len([r for r in info_lines(hw)[before:]
                    if r.get("msg") == "oversized request body, closing the connection"])
    assert wait_until(lambda: logged() == n, timeout=scaled(5)), logged()
    # hookwheel said why, once each, at info; what the clients did is no
    # warning (libmicrohttpd's "Application reported internal error" was)
    warnings = [r for r in info_lines(hw)[before:] if r.get("level") in ("warn", "error")]
    assert not warnings, warnings[:3]
    assert hw.request("GET", "/healthz")[0] == 200


def test_lease_acquire_and_expiry_are_not_logged_at_info(redis, hookwheel_factory):
    hw = hookwheel_factory(redis, args=["--log-level", "info"])
    before = len(info_lines(hw))
    for i in range(20):
        status, _, body = hw.request("POST", "/leases", json_body={"key": f"k{i}", "owner": "o", "ttl_ms": 300})
        assert status in (200, 201), body
    assert wait_until(lambda: all(hw.request("GET", f"/leases/k{i}")[0] == 404 for i in range(20)),
                      timeout=scaled(5))
    time.sleep(0.3)
    lines = info_lines(hw)[before:]
    assert not [r for r in lines if str(r.get("msg", "")).startswith("lease")], lines


def test_readyz_answers_503_while_redis_refuses_writes_for_maxmemory(redis, hookwheel):
    # Redis at maxmemory with noeviction refuses every write (OOM): the
    # instance cannot accept timers, and /readyz must say so, then recover.
    assert hookwheel.api.request("GET", "/readyz")[0] == 200
    redis.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction")
    redis.cmd("CONFIG", "SET", "maxmemory", "1")
    try:
        status, _, body = hookwheel.create({"url": "http://127.0.0.1:9/x", "delay_ms": 60000})
        assert status == 503, body

        def not_ready():
            st, _, b = hookwheel.api.request("GET", "/readyz")
            return st == 503 and "maxmemory" in b.get("detail", "")
        assert wait_until(not_ready, scaled(5)), hookwheel.api.request("GET", "/readyz")
    finally:
        redis.cmd("CONFIG", "SET", "maxmemory", "0")
    assert wait_until(lambda: hookwheel.api.request("GET", "/readyz")[0] == 200, scaled(10))
    assert hookwheel.create({"url": "http://127.0.0.1:9/x", "delay_ms": 60000})[0] == 201


def test_a_create_redis_refuses_for_maxmemory_is_told_so_and_nothing_is_stored(redis, hookwheel):
    # Redis answered OOM before running the create: the 503 must not say
    # that Redis did not answer and that the timer may have been stored.
    redis.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction")
    redis.cmd("CONFIG", "SET", "maxmemory", "1")
    try:
        status, headers, body = hookwheel.create({"id": "refused-one", "url": "http://127.0.0.1:9/x",
                                                  "delay_ms": 60000})
        assert status == 503 and headers.get("Retry-After"), body
        assert "maxmemory" in body["detail"] and "not stored" in body["detail"], body
        status, _, body = hookwheel.request("POST", "/timers/batch", json_body={"timers": [
            {"id": "refused-two", "url": "http://127.0.0.1:9/x", "delay_ms": 60000},
            {"id": "refused-three", "url": "http://127.0.0.1:9/x", "delay_ms": 1000}]})
        assert status == 200 and body["failed"] == 2, body
        for item in body["items"]:
            assert item["status"] == 503 and item["stored"] is False, item
            assert "maxmemory" in item["detail"] and "not stored" in item["detail"], item
    finally:
        redis.cmd("CONFIG", "SET", "maxmemory", "0")
    for timer_id in ("refused-one", "refused-two", "refused-three"):
        assert hookwheel.get(timer_id)[0] == 404


@pytest.mark.skipif(CLUSTER_MODE, reason="makes its one Redis fail a save")
def test_readyz_and_creates_say_so_while_redis_refuses_writes_after_a_failed_save(redis, hookwheel):
    # A full disk makes Redis refuse every write (MISCONF): /readyz answered
    # 200 "ready" meanwhile, and a create 503 "Redis did not answer ... or
    # was made and its answer lost".
    make_bgsave_fail(redis)
    try:
        status, headers, body = hookwheel.create({"id": "misconf-one", "url": "http://127.0.0.1:9/x",
                                                  "delay_ms": 60000})
        assert status == 503 and headers.get("Retry-After"), body
        assert "disk" in body["detail"] and "not stored" in body["detail"], body
        status, _, body = hookwheel.request("POST", "/timers/batch", json_body={"timers": [
            {"id": "misconf-two", "url": "http://127.0.0.1:9/x", "delay_ms": 60000}]})
        assert status == 200 and body["items"][0]["status"] == 503, body
        assert "disk" in body["items"][0]["detail"] and body["items"][0]["stored"] is False, body

        def not_ready():
            st, _, b = hookwheel.api.request("GET", "/readyz")
            return st == 503 and "disk" in b.get("detail", "")
        assert wait_until(not_ready, scaled(5)), hookwheel.api.request("GET", "/readyz")
    finally:
        let_bgsave_succeed(redis)
    assert wait_until(lambda: hookwheel.api.request("GET", "/readyz")[0] == 200, scaled(10))
    assert hookwheel.get("misconf-one")[0] == 404 and hookwheel.get("misconf-two")[0] == 404
    assert hookwheel.create({"id": "misconf-one", "url": "http://127.0.0.1:9/x", "delay_ms": 60000})[0] == 201


@contextlib.contextmanager
def redis_refusing(redis, refusal):
    """Redis refuses writes while inside: for its maxmemory (OOM), after a
    failed save (MISCONF, "disk"), or for lack of replicas (NOREPLICAS:
    min-replicas-to-write 1 and none connected)."""
    if refusal == "disk":
        make_bgsave_fail(redis)
    elif refusal == "replicas":
        redis.cmd("CONFIG", "SET", "min-replicas-to-write", "1")
    else:
        redis.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction")
        redis.cmd("CONFIG", "SET", "maxmemory", "1")
    try:
        yield
    finally:
        if refusal == "disk":
            let_bgsave_succeed(redis)
        elif refusal == "replicas":
            redis.cmd("CONFIG", "SET", "min-replicas-to-write", "0")
        else:
            redis.cmd("CONFIG", "SET", "maxmemory", "0")


def assert_refused(hookwheel, calls, refusal):
    """Each call answers 503 saying Redis refuses writes and what was not done."""
    for method, path, body, not_done in calls:
        status, headers, answer = hookwheel.request(method, path, json_body=body)
        assert status == 503 and headers.get("Retry-After"), (method, path, answer)
        detail = answer["detail"]
        assert "Redis refuses writes" in detail and refusal in detail and not_done in detail, (method, path, answer)
        assert "did not answer" not in detail and "was made" not in detail and "unreachable" not in detail, (
            method, path, answer)


@pytest.mark.parametrize("refusal", ["maxmemory", "disk", "replicas"])
def test_lease_and_queue_writes_redis_refuses_are_told_so_and_change_nothing(redis, hookwheel, refusal):
    # Redis answered OOM (or MISCONF) before running the call: the 503 said
    # "Redis did not answer: a write of this request was not made, or was
    # made and its answer lost", as if the write might have been made.
    if refusal != "maxmemory" and CLUSTER_MODE:
        pytest.skip("makes its one Redis fail a save, or asks it for replicas")
    st, _, held = hookwheel.request("POST", "/leases", json_body={"key": "held", "owner": "o", "ttl_ms": 600000})
    assert st == 201, held
    assert hookwheel.request("PUT", "/queues/kept", json_body={"parallelism": 3})[0] == 200
    # At maxmemory Redis refuses new work only: a heartbeat and a release
    # go on there (test_at_maxmemory_what_redis_holds_goes_on...).
    held_calls = [("POST", "/leases/held/heartbeat", {"owner": "o", "token": held["token"]},
                   "the heartbeat was not recorded"),
                  ("DELETE", "/leases/held?owner=o", None, "the lease was not released")]
    with redis_refusing(redis, refusal):
        assert_refused(hookwheel, [
            ("POST", "/leases", {"key": "refused", "owner": "o", "ttl_ms": 600000}, "the lease was not acquired"),
            *(held_calls if refusal != "maxmemory" else []),
            ("PUT", "/queues/refused", {"parallelism": 2}, "the queue's controls were not changed"),
            ("PATCH", "/queues/kept", {"paused": True}, "the queue's controls were not changed"),
            ("DELETE", "/queues/kept", None, "the queue's controls were not deleted")], refusal)
    assert hookwheel.request("GET", "/leases/refused")[0] == 404
    st, _, now = hookwheel.request("GET", "/leases/held")
    assert st == 200 and now["token"] == held["token"] and now["last_heartbeat_at"] is None, now
    st, _, q = hookwheel.request("GET", "/queues/refused")
    assert st == 200 and q["configured"] is False, q
    st, _, q = hookwheel.request("GET", "/queues/kept")
    assert st == 200 and q["configured"] is True and q["paused"] is False and q["parallelism"] == 3, q


@pytest.mark.skipif(CLUSTER_MODE, reason="makes its one Redis fail a save, or asks it for replicas")
@pytest.mark.parametrize("refusal", ["disk", "replicas"])
def test_timer_writes_redis_refuses_are_told_so_and_change_nothing(redis, hookwheel, refusal):
    # As the lease and queue writes above: a cancel, an instruction, a
    # selector and a dead-letter replay or purge refused by Redis said it
    # "did not answer" and that the write might have been made. (At
    # maxmemory Redis takes them: the next test.) A create, a batch item and
    # /readyz say so too.
    st, _, t = hookwheel.create({"id": "kept-timer", "url": "http://127.0.0.1:9/x", "delay_ms": 600000,
                                 "labels": {"team": "x"}})
    assert st == 201, t
    with redis_refusing(redis, refusal):
        assert_refused(hookwheel, [
            ("DELETE", "/timers/kept-timer", None, "the timer was not cancelled"),
            ("POST", "/timers/kept-timer/pause", None, "the timer was not changed"),
            ("POST", "/timers/kept-timer/fire", None, "the timer was not changed"),
            ("POST", "/timers/kept-timer/reschedule", {"delay_ms": 1000}, "the timer was not changed"),
            ("POST", "/timers/cancel", {"labels": {"team": "x"}}, "no timer was changed"),
            ("POST", "/dead-letters/replay", None, "no dead letters were replayed"),
            ("POST", "/dead-letters/purge", None, "no dead letters were purged"),
            ("POST", "/timers", {"id": "refused-new", "url": "http://127.0.0.1:9/x", "delay_ms": 1000},
             "the timer was not stored")], refusal)
        st, _, b = hookwheel.request("POST", "/timers/batch", json_body={"timers": [
            {"id": "refused-item", "url": "http://127.0.0.1:9/x", "delay_ms": 1000}]})
        assert st == 200 and b["items"][0]["status"] == 503 and refusal in b["items"][0]["detail"], b
        st, _, b = hookwheel.api.request("GET", "/readyz")
        assert st == 503 and "Redis refuses writes" in b["detail"] and refusal in b["detail"], b
        st, _, b = hookwheel.get("kept-timer")  # reads still answer
        assert st == 200 and b["state"] == "scheduled", b
        st, _, b = hookwheel.request("GET", "/timers?state=scheduled")
        assert st == 200 and [x["id"] for x in b["items"]] == ["kept-timer"], b
    assert wait_until(lambda: hookwheel.api.request("GET", "/readyz")[0] == 200, scaled(10))
    assert hookwheel.get("refused-new")[0] == 404 and hookwheel.get("refused-item")[0] == 404
    st, _, now = hookwheel.get("kept-timer")
    assert st == 200 and now["state"] == "scheduled" and now["version"] == 0, now
    assert now["fire_at_ms"] == t["fire_at_ms"], (now, t)
    # the refusal is logged once, not once a refused call
    log = hookwheel.log.read_text(errors="replace")
    assert log.count('"msg":"Redis refuses writes: every write answers 503') == 1, hookwheel.log_tail(20)
    assert "Redis refused a timer call" not in log, hookwheel.log_tail(20)


def refusing_gauge(hw):
    """hookwheel_redis_refusing_writes from GET /metrics."""
    status, _, body = hw.request("GET", "/metrics")
    assert status == 200, body
    values = [line.split()[-1] for line in body.decode().splitlines()
              if line.startswith("hookwheel_redis_refusing_writes ")]
    assert len(values) == 1, body[:500]
    return float(values[0])


def test_at_maxmemory_what_redis_holds_goes_on_and_only_new_work_is_refused(redis, receiver, hookwheel_factory):
    """Redis at maxmemory (noeviction) refused every call of hookwheel's but
    the readers: no due timer was delivered, the watchdog renewed no lease
    (a lock whose holder lived and heartbeated expired: another could take
    it), the instance's own lease lapsed, and a cancel, a heartbeat or a
    release answered 503. Redis itself lets DEL and EXPIRE through at
    maxmemory; hookwheel now refuses only new work (creates, acquires, queue
    controls) and carries on with what Redis holds."""
    hw = hookwheel_factory(redis, args=["--lease-ttl-ms", "1500"])
    url = receiver.url("/goes-on")
    receiver.default("/dead", Reply(500))
    st, _, lock = hw.request("POST", "/leases", json_body={"key": "lock", "owner": "w", "ttl_ms": 1500})
    assert st == 201, lock
    for tid in ("kept", "paused", "fired", "moved", "cancelled"):
        assert hw.create({"id": tid, "url": url, "delay_ms": 600000, "labels": {"set": tid}})[0] == 201
    assert hw.create({"id": "by-label", "url": url, "delay_ms": 600000, "labels": {"set": "selected"}})[0] == 201
    assert hw.create({"id": "dead", "url": receiver.url("/dead"), "delay_ms": 10,
                      "retry": {"max_attempts": 1}})[0] == 201
    assert hw.api.wait_state("dead", "failed", timeout=scaled(10))["state"] == "failed"
    due = [f"due-{i}" for i in range(20)]
    for i, tid in enumerate(due):  # fall due while Redis is full
        assert hw.create({"id": tid, "url": url, "delay_ms": 1500 + 50 * i})[0] == 201
    with redis_refusing(redis, "maxmemory"):
        deadline = time.monotonic() + 4.5  # three lease TTLs
        while time.monotonic() < deadline:
            st, _, b = hw.request("POST", "/leases/lock/heartbeat", json_body={"owner": "w", "token": lock["token"]})
            assert st == 200 and b["token"] == lock["token"], b
            time.sleep(0.3)
        st, _, b = hw.request("GET", "/leases/lock")
        assert st == 200 and b["token"] == lock["token"] and b["last_renewed_at"], b
        st, _, b = hw.request("DELETE", "/leases/lock?owner=w")
        assert st in (200, 204), b
        assert hw.request("GET", "/leases/lock")[0] == 404
        got = receiver.wait_for(len(due), timeout=scaled(10), path="/goes-on")
        assert sorted(r.timer_id for r in got) == sorted(due)
        assert hw.request("DELETE", "/timers/cancelled")[0] in (200, 204)
        assert hw.request("POST", "/timers/paused/pause")[0] == 200
        assert hw.request("POST", "/timers/moved/reschedule", json_body={"delay_ms": 300000})[0] == 200
        st, _, b = hw.request("POST", "/timers/cancel", json_body={"labels": {"set": "selected"}})
        assert st == 200 and b["cancelled"] == ["by-label"], b
        st, _, b = hw.request("POST", "/dead-letters/replay")
        assert st == 200 and b["replayed"] == 1, b
        assert hw.request("POST", "/timers/fired/fire")[0] == 200
        assert wait_until(lambda: receiver.requests("/goes-on", timer_id="fired"), scaled(10))
        # new work is refused, and /readyz says so without a refused create
        # in the last seconds (it asks Redis every second)
        st, _, b = hw.create({"id": "new", "url": url, "delay_ms": 1000})
        assert st == 503 and "maxmemory" in b["detail"] and "not stored" in b["detail"], b
        st, _, b = hw.request("POST", "/leases", json_body={"key": "other", "owner": "w", "ttl_ms": 1500})
        assert st == 503 and "maxmemory" in b["detail"], b
        time.sleep(2.5)  # a refusal marks Redis as refusing for 2 s (STORE_OOM_HOLD_MS)
        st, _, b = hw.api.request("GET", "/readyz")
        assert st == 503 and "maxmemory" in b.get("detail", ""), b
        assert refusing_gauge(hw) == 1
    assert wait_until(lambda: hw.api.request("GET", "/readyz")[0] == 200, scaled(10))
    assert refusing_gauge(hw) == 0
    assert hw.create({"id": "new", "url": url, "delay_ms": 600000})[0] == 201
    states = {t: hw.get(t)[2]["state"] for t in ("kept", "paused", "moved", "cancelled", "by-label", "fired")}
    assert states == {"kept": "scheduled", "paused": "paused", "moved": "scheduled", "cancelled": "cancelled",
                      "by-label": "cancelled", "fired": "delivered"}, states
    log = hw.log.read_text(errors="replace")
    assert "lease had lapsed" not in log, hw.log_tail(20)
    msgs = [json.loads(line)["msg"] for line in log.splitlines() if line.startswith("{")]
    # the refusal is said once (at warn), and its end; not once a refused call
    assert sum(m.startswith("Redis refuses new work (maxmemory reached)") for m in msgs) == 1, hw.log_tail(20)
    assert msgs.count("Redis takes writes again") == 1, hw.log_tail(20)
    assert "Redis refused a timer call" not in msgs and "lease acquire failed" not in msgs, hw.log_tail(20)


def test_an_instance_started_while_redis_is_at_maxmemory_delivers_what_is_due(
        request, tmp_path, redis, receiver, hookwheel_factory):
    """FUNCTION LOAD is a write: an instance that started (or reconnected)
    while Redis was at maxmemory could not load its functions, even though
    Redis held them from before, and stayed unready, delivering nothing."""
    first = hookwheel_factory(redis)
    due = [f"at-full-{i}" for i in range(5)]
    for tid in due:
        assert first.create({"id": tid, "url": receiver.url("/full"), "delay_ms": 3000})[0] == 201
    assert first.stop() == 0
    with redis_refusing(redis, "maxmemory"):
        second = spawn_while_redis_is_down(request, tmp_path, redis.url, name="second")  # it cannot be ready
        got = receiver.wait_for(len(due), timeout=scaled(15), path="/full")
        assert sorted(r.timer_id for r in got) == due, second.log_tail(20)
        st, _, b = second.api.request("GET", "/readyz")
        assert st == 503 and "maxmemory" in b["detail"], b
        assert second.create({"url": receiver.url("/full"), "delay_ms": 1000})[0] == 503
    assert wait_until(lambda: second.api.request("GET", "/readyz")[0] == 200, scaled(10))


def test_a_timer_id_in_the_lease_expiry_form_is_refused(hookwheel):
    status, _, body = hookwheel.create({"id": "lease:orders-export:17", "url": "http://127.0.0.1:9/x",
                                        "delay_ms": 60000})
    assert status == 400 and body.get("field") == "id", body
    assert hookwheel.get("lease:orders-export:17")[0] == 404


@pytest.mark.parametrize("refusal", ["disk", "maxmemory"])
def test_what_redis_holds_stays_readable_while_it_refuses_writes(redis, hookwheel, refusal):
    # With a full disk Redis refuses, before it runs, every function that
    # may write (MISCONF); at maxmemory every one not registered allow-oom.
    # The readers may write (an older layout's upgrade, a stale index
    # entry's removal): GET /timers/{id} and GET /timers answered 503 with a
    # full disk, GET /queues, /queues/{name}, /leases and /leases/{key} in
    # both cases, while what they read was there.
    if refusal == "disk" and CLUSTER_MODE:
        pytest.skip("makes its one Redis fail a save")
    assert hookwheel.create({"id": "kept", "url": "http://127.0.0.1:9/x", "delay_ms": 600000, "queue": "qa"})[0] == 201
    st, _, b = hookwheel.request("POST", "/leases", json_body={"key": "lk", "owner": "o", "ttl_ms": 600000})
    assert st == 201, b
    with redis_refusing(redis, refusal):
        assert hookwheel.create({"url": "http://127.0.0.1:9/x", "delay_ms": 60000})[0] == 503
        for _ in range(3):
            status, _, body = hookwheel.get("kept")
            assert status == 200 and body["state"] == "scheduled", body
            assert hookwheel.get("unknown")[0] == 404
            status, _, body = hookwheel.request("GET", "/timers?state=scheduled&limit=100")
            assert status == 200 and [t["id"] for t in body["items"]] == ["kept"], body
            status, _, body = hookwheel.request("GET", "/queues")
            assert status == 200 and [q["name"] for q in body["queues"]] == ["qa"], body
            assert body["queues"][0]["timers"]["scheduled"] == 1, body
            status, _, body = hookwheel.request("GET", "/queues/qa")
            assert status == 200 and body["timers"]["scheduled"] == 1, body
            status, _, body = hookwheel.request("GET", "/leases/lk")
            assert status == 200 and body["owner"] == "o" and body["token"] == 1, body
            assert hookwheel.request("GET", "/leases/unknown")[0] == 404
            status, _, body = hookwheel.request("GET", "/leases")
            assert status == 200 and [x["key"] for x in body["leases"]] == ["lk"], body
            st, _, b = hookwheel.api.request("GET", "/readyz")  # reads do not make Redis look writable
            assert st == 503 and refusal in b.get("detail", ""), b
            time.sleep(0.5)
    assert wait_until(lambda: hookwheel.api.request("GET", "/readyz")[0] == 200, scaled(10))