"""GET /stats?minutes=N: a namespace's delivery figures per minute (delivered
runs, failed timers, attempts, failed attempts, first-attempt lateness p50 and
p99), kept in Redis so every instance sharing it is counted. Real
redis-server, the real binary, a real receiver.

Each instance adds its counts to Redis about once a second, so the tests
poll until the figures are in; a test's events may straddle a minute, so
counts are summed over the minutes answered."""
import http.client
import re
import time

import pytest
from datetime import datetime, timezone

from conftest import CLUSTER_MODE, Reply, scaled, wait_until
from contract import assert_matches_contract

TOKEN_A = "stats-team-a-token-5d2c9e1b"
TOKEN_B = "stats-team-b-token-0f7a3b6e"
FIELDS = ("delivered", "failed", "attempts", "failed_attempts")


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def stats(hw, minutes=5, token=None):
    status, headers, body = hw.request("GET", f"/stats?minutes={minutes}",
                                       headers=bearer(token) if token else None)
    assert_matches_contract("GET", "/stats", status, headers, body)
    assert status == 200, body
    return body


def totals(body):
    return {f: sum(m[f] for m in body["minutes"]) for f in FIELDS}


def wait_totals(hw, want, token=None, timeout=10):
    """Polls GET /stats until its totals equal want; returns the last answer."""
    last = {}

    def done():
        last["body"] = stats(hw, token=token)
        return totals(last["body"]) == want

    assert wait_until(done, scaled(timeout), interval=0.2), (want, totals(last["body"]), last["body"])
    return last["body"]


def with_tokens(tmp_path, redis, hookwheel_factory, n=1):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"team-a {TOKEN_A}\nteam-b {TOKEN_B}\n")
    return [hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)}) for _ in range(n)]


def test_the_answer_has_n_minutes_oldest_first_ending_with_the_current_one_and_zeros_when_idle(hookwheel):
    before = int(time.time()) // 60
    body = stats(hookwheel, minutes=7)
    after = int(time.time()) // 60
    assert body["minute_ms"] == 60000
    starts = [datetime.strptime(m["start"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
              for m in body["minutes"]]
    assert len(starts) == 7
    assert all(b - a == 60 for a, b in zip(starts, starts[1:])), body
    assert before <= starts[-1] // 60 <= after, (before, after, body)
    for m in body["minutes"]:
        assert all(m[f] == 0 for f in FIELDS), m
        assert m["lateness_ms"] == {"p50": None, "p99": None}, m
    assert len(stats(hookwheel, minutes=1)["minutes"]) == 1
    status, _, body = hookwheel.request("GET", "/stats")
    assert status == 200 and len(body["minutes"]) == 60, body
    status, headers, body = hookwheel.request("HEAD", "/stats")
    assert status == 200 and not body and headers["Content-Type"].startswith("application/json")


def test_bad_minutes_get_a_400_problem_naming_minutes(hookwheel):
    for bad in ("0", "61", "-1", "abc", "", "1.5", "%2B5", "%205", "5%20", "100", "007"):
        status, headers, body = hookwheel.request("GET", f"/stats?minutes={bad}")
        assert_matches_contract("GET", "/stats", status, headers, body)
        assert status == 400 and body["field"] == "minutes", (bad, status, body)


def test_deliveries_failures_and_attempts_are_counted_with_the_lateness_of_first_attempts(hookwheel, receiver):
    receiver.default("/broken", Reply(500))
    receiver.default("/gone", Reply(404))
    for i in range(3):
        status, _, t = hookwheel.create({"id": f"ok-{i}", "url": receiver.url("/ok"), "delay_ms": 100})
        assert status == 201, t
    for i in range(2):  # 500 three times: three failed attempts, then failed
        status, _, t = hookwheel.create({"id": f"bad-{i}", "url": receiver.url("/broken"), "delay_ms": 100,
                                         "retry": {"max_attempts": 3, "min_backoff_ms": 50,
                                                   "max_backoff_ms": 100}})
        assert status == 201, t
    # 404 is not retried: one failed attempt, then failed
    status, _, t = hookwheel.create({"id": "gone", "url": receiver.url("/gone"), "delay_ms": 100})
    assert status == 201, t
    # a recurring timer: each successful run is a delivery
    status, _, t = hookwheel.create({"id": "rec", "url": receiver.url("/rec"), "delay_ms": 100,
                                     "repeat": {"every_ms": 1000, "times": 2}})
    assert status == 201, t
    for tid in ("ok-0", "ok-1", "ok-2", "rec"):
        hookwheel.wait_state(tid, {"delivered"}, timeout=scaled(15))
    for tid in ("bad-0", "bad-1", "gone"):
        hookwheel.wait_state(tid, {"failed"}, timeout=scaled(15))
    body = wait_totals(hookwheel, {"delivered": 5, "failed": 3, "attempts": 12, "failed_attempts": 7})
    assert len(receiver.requests()) == 12
    # every minute with an attempt has lateness figures, p50 <= p99; the
    # others have null
    with_attempts = [m for m in body["minutes"] if m["attempts"]]
    assert with_attempts
    for m in body["minutes"]:
        p50, p99 = m["lateness_ms"]["p50"], m["lateness_ms"]["p99"]
        if m["attempts"]:
            assert 0 <= p50 <= p99 < scaled(1000), m
        else:
            assert p50 is None and p99 is None, m
    # written as rounded (at most 3 decimals), not as a double's 17 digits (0.48799999999999999)
    conn = http.client.HTTPConnection("127.0.0.1", hookwheel.api.port, timeout=10)
    conn.request("GET", "/stats")
    text = conn.getresponse().read().decode()
    conn.close()
    figures = re.findall(r'"p(?:50|99)":([-0-9.eE+]+)', text)
    assert figures and all(re.fullmatch(r"[0-9]+(\.[0-9]{1,3})?", f) for f in figures), figures


def test_two_namespaces_never_see_each_others_figures(tmp_path, redis, receiver, hookwheel_factory):
    (hw,) = with_tokens(tmp_path, redis, hookwheel_factory)
    receiver.default("/b", Reply(500))
    for i in range(2):
        status, _, t = hw.create({"id": f"a-{i}", "url": receiver.url("/a"), "delay_ms": 100},
                                 headers=bearer(TOKEN_A))
        assert status == 201, t
    status, _, t = hw.create({"id": "b-0", "url": receiver.url("/b"), "delay_ms": 100,
                              "retry": {"max_attempts": 1}}, headers=bearer(TOKEN_B))
    assert status == 201, t
    wait_totals(hw, {"delivered": 2, "failed": 0, "attempts": 2, "failed_attempts": 0}, token=TOKEN_A)
    wait_totals(hw, {"delivered": 0, "failed": 1, "attempts": 1, "failed_attempts": 1}, token=TOKEN_B)
    status, _, body = hw.request("GET", "/stats")
    assert status == 401, body
    # the figures are kept per namespace in Redis: one hash per namespace and minute
    keys = sorted(redis.keys("hw:stats:*"))
    assert keys and all(k.startswith(("hw:stats:{ns:team-a}:", "hw:stats:{ns:team-b}:")) for k in keys), keys
    assert 0 < redis.cmd("TTL", keys[0]) <= 65 * 60


def test_two_instances_sharing_a_redis_are_both_counted(redis, receiver, hookwheel_factory):
    hws = [hookwheel_factory(redis), hookwheel_factory(redis)]
    n = 4
    for k, hw in enumerate(hws):  # a timer due within the window is claimed by the instance that took it
        for i in range(n):
            status, _, t = hw.create({"id": f"i{k}-{i}", "url": receiver.url("/x"), "delay_ms": 200})
            assert status == 201, t
    ids = [f"i{k}-{i}" for k in range(len(hws)) for i in range(n)]
    for tid in ids:
        hws[0].wait_state(tid, {"delivered"}, timeout=scaled(15))
    by = {hws[0].get(tid)[2]["last_attempt"]["instance"] for tid in ids}
    assert by == {hw.instance_id for hw in hws}, by
    want = {"delivered": 2 * n, "failed": 0, "attempts": 2 * n, "failed_attempts": 0}
    for hw in hws:  # either instance answers for the deployment
        wait_totals(hw, want)


def test_the_figures_of_a_stopping_instance_are_written_at_its_graceful_stop(redis, receiver, hookwheel_factory):
    reader = hookwheel_factory(redis)
    hw = hookwheel_factory(redis)
    status, _, t = hw.create({"id": "last", "url": receiver.url("/last"), "delay_ms": 100})
    assert status == 201, t
    receiver.wait_for(1, timeout=scaled(10), path="/last")
    hw.wait_state("last", {"delivered"}, timeout=scaled(10))
    assert hw.stop() == 0  # at once: within the second between two writes
    wait_totals(reader, {"delivered": 1, "failed": 0, "attempts": 1, "failed_attempts": 0}, timeout=3)


def test_counts_are_kept_while_redis_is_away_and_written_when_it_is_back(redis, receiver, hookwheel):
    if CLUSTER_MODE:
        redis.stop()  # skips: about one Redis
    receiver.default("/slow", Reply(204, delay_s=1.5))
    status, _, t = hookwheel.create({"id": "away", "url": receiver.url("/slow"), "delay_ms": 100})
    assert status == 201, t
    receiver.wait_for(1, timeout=scaled(10), path="/slow")
    # the attempt is counted in memory; Redis goes (almost always) before
    # the next write, which fails and is kept
    redis.stop()
    time.sleep(2.5)  # writes fail meanwhile (and the outcome waits too)
    redis.start(port=redis.port)  # the same port and AOF
    hookwheel.wait_state("away", {"delivered"}, timeout=scaled(20))
    wait_totals(hookwheel, {"delivered": 1, "failed": 0, "attempts": 1, "failed_attempts": 0}, timeout=15)


def stats_of(hw, queue):
    status, headers, body = hw.request("GET", f"/stats?minutes=5&queue={queue}")
    assert_matches_contract("GET", "/stats", status, headers, body)
    assert status == 200, body
    return body


def test_figures_are_kept_per_queue_and_the_all_queues_answer_is_their_sum(hookwheel, receiver, redis):
    receiver.default("/broken", Reply(500))
    plan = {"mail": (3, 1), "sms": (1, 2)}  # queue: (delivered, failed)
    for queue, (ok, bad) in plan.items():
        for i in range(ok):
            status, _, t = hookwheel.create({"id": f"{queue}-ok-{i}", "url": receiver.url("/ok"), "delay_ms": 100,
                                             "queue": queue})
            assert status == 201, t
        for i in range(bad):
            status, _, t = hookwheel.create({"id": f"{queue}-bad-{i}", "url": receiver.url("/broken"),
                                             "delay_ms": 100, "queue": queue, "retry": {"max_attempts": 1}})
            assert status == 201, t
    body = wait_totals(hookwheel, {"delivered": 4, "failed": 3, "attempts": 7, "failed_attempts": 3})
    assert body["queues"] == ["mail", "sms"], body["queues"]
    per = {}
    for queue, (ok, bad) in plan.items():
        want = {"delivered": ok, "failed": bad, "attempts": ok + bad, "failed_attempts": bad}
        per[queue] = stats_of(hookwheel, queue)
        assert totals(per[queue]) == want, (queue, per[queue])
        assert per[queue]["queues"] == ["mail", "sms"]  # whatever the queue asked
        assert body["queue_totals"][queue] == want, body["queue_totals"]
        assert per[queue]["queue_totals"] == body["queue_totals"]
    # minute by minute, the all-queues figures are the queues' sum; lateness
    # is there wherever a queue's minute has attempts
    by_start = {q: {m["start"]: m for m in per[q]["minutes"]} for q in plan}
    for m in body["minutes"]:
        parts = [by_start[q].get(m["start"]) for q in plan]
        if None in parts:  # a minute's edge passed between the reads
            continue
        assert {f: m[f] for f in FIELDS} == {f: sum(p[f] for p in parts) for f in FIELDS}, (m, parts)
        assert (m["lateness_ms"]["p50"] is None) == all(p["lateness_ms"]["p50"] is None for p in parts)
    # an idle or unknown queue: zeros
    idle = stats_of(hookwheel, "never-used")
    assert all(m[f] == 0 for m in idle["minutes"] for f in FIELDS)
    assert all(m["lateness_ms"] == {"p50": None, "p99": None} for m in idle["minutes"])
    # Redis: the queues' fields in the namespace's minute hash
    fields = {f for k in redis.keys("hw:stats:*") for f in redis.cmd("HKEYS", k)}
    assert {"mail/d", "mail/f", "mail/a", "sms/d", "sms/f", "sms/fa"} <= fields, fields
    assert all("/" in f for f in fields), fields


def test_a_bad_queue_gets_a_400_problem_naming_queue(hookwheel):
    for bad in ("", "a%2Fb", "q" * 65, "with%20space", "%C3%A9"):
        status, headers, body = hookwheel.request("GET", f"/stats?minutes=5&queue={bad}")
        assert_matches_contract("GET", "/stats", status, headers, body)
        assert status == 400 and body["field"] == "queue", (bad, status, body)


def test_fields_of_the_layout_without_queues_count_in_the_all_queues_figures_only(hookwheel, redis):
    if CLUSTER_MODE:
        pytest.skip("writes one Redis's key directly")
    key = f"hw:stats:{{ns:}}:{int(time.time()) // 60}"
    redis.cmd("HSET", key, "d", 5, "a", 5, "l0", 5, "mail/d", 1, "mail/a", 1)
    body = stats(hookwheel, minutes=1)
    assert (body["minutes"][0]["delivered"], body["minutes"][0]["attempts"]) == (6, 6), body
    assert body["queues"] == ["mail"] and body["queue_totals"]["mail"]["delivered"] == 1, body
    assert stats_of(hookwheel, "mail")["minutes"][-1]["delivered"] == 1
