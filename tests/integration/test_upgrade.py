"""Timers written by the build before the lean record layout are read,
delivered and controlled by this one (README "Upgrading").

The earlier layout is laid out here byte for byte as that build wrote it
(its persistence/lua/_record.lua): one string per timer of nine lines
(state, fire_ms, attempts, "created_ms request_id", owner, when, the
attempt history, the run line, the stored spec), waiting timers in the
index hw:{P}:ix:<ns>:<state> with the namespace in hw:{P}:nss, a held
timer in hw:{P}:claimed:<instance> and that instance in hw:instances.
Then this build starts on that Redis: every timer must behave as it would
have under the old one. Real redis-server, real binary, real receiver."""
import json
import time

import pytest

from conftest import (CLUSTER_MODE, Reply, let_bgsave_succeed, make_bgsave_fail, now_ms, partition, scaled,
                      spawn_while_redis_is_down, wait_until)

pytestmark = pytest.mark.skipif(CLUSTER_MODE, reason="layouts of builds before the Cluster support: one Redis only")

def old_record(state, fire_ms, spec, attempts=0, owner="", history="", run="", created=None, rid="",
               when=None):
    created = created or int(now_ms()) - 60_000
    return "\n".join([state, str(fire_ms), str(attempts), f"{created} {rid}" if rid else str(created), owner,
                      when or f"fire_at_ms={fire_ms}", history, run, json.dumps(spec, separators=(",", ":"))])


def lay_out(redis, tid, record, index_state=None, score=None, ns="", claimed_by=None, px=None):
    p = partition(tid)
    key = f"hw:{{{p}}}:t:{tid}"
    if px:
        redis.cmd("SET", key, record, "PX", str(px))
    else:
        redis.cmd("SET", key, record)
    if claimed_by:
        redis.cmd("ZADD", f"hw:{{{p}}}:claimed:{claimed_by}", str(score), tid)
        redis.cmd("SADD", f"hw:{{{p}}}:holders", claimed_by)
    elif index_state:
        redis.cmd("ZADD", f"hw:{{{p}}}:ix:{ns}:{index_state}", str(score), tid)
        if index_state in ("scheduled", "retrying"):
            redis.cmd("SADD", f"hw:{{{p}}}:nss", ns)
    return key


def test_timers_of_the_earlier_layout_are_delivered_listed_and_controlled(redis, receiver, hookwheel_factory):
    receiver.default("/old", Reply(204))
    due = int(now_ms()) + 2500
    # waiting one-shots, one with a queue and a request id
    for i in range(10):
        spec = {"body": f"old body {i}", "url": receiver.url("/old")}
        if i == 0:
            spec["queue"] = "q1"
        lay_out(redis, f"old-{i}", old_record("scheduled", due + i * 10, spec, rid="feedc0de00000001"),
                "scheduled", due + i * 10)
    # a timer an instance of the older build held when it died (no lease)
    lay_out(redis, "old-held", old_record("scheduled", due, {"url": receiver.url("/old")}, owner="old-box-1"),
            score=due, claimed_by="old-box-1")
    redis.cmd("SADD", "hw:instances", "old-box-1")
    # a dead letter with two attempts in its history, expiring
    a1 = {"at": "2026-11-20T10:00:00.000Z", "duration_ms": 3, "status": 500, "error": None,
          "response_snippet": "boom", "instance": "old-box-1"}
    a0 = dict(a1, at="2026-11-20T09:59:00.000Z", status=502)
    hist = json.dumps(a1, separators=(",", ":")) + "\t" + json.dumps(a0, separators=(",", ":"))
    lay_out(redis, "old-failed", old_record("failed", due - 100_000, {"url": receiver.url("/old")}, attempts=2,
                                            history=hist, run="0 1"),
            "failed", due - 100_000, px=3_600_000)
    redis.cmd("ZADD", f"hw:{{{partition('old-failed')}}}:failed", str(due - 100_000), "old-failed")
    # a recurring timer, every 400 ms, run once already (version 2, one run)
    lay_out(redis, "old-every", old_record("scheduled", due, {"repeat": {"every_ms": 400, "mode": "fixed_delay"},
                                                              "url": receiver.url("/every")},
                                           run="2 1"),
            "scheduled", due)
    # far in the future, in a queue: listed, and cancellable
    lay_out(redis, "old-far", old_record("scheduled", due + 3_600_000, {"queue": "q2", "url": receiver.url("/old")}),
            "scheduled", due + 3_600_000)

    hw = hookwheel_factory(redis, args=("--lease-ttl-ms", "1500"))

    # a batch item with the id of a timer of the earlier layout that nothing has read yet (laid
    # out once the start-up scan of the counts is over, so create_batch's MGET meets it first):
    # another spec is a conflict, naming the holder's state, and the record is converted
    def scanned():
        status, _, body = hw.api.request("GET", "/queues/default")
        return status == 200 and body["counts_exact"]
    assert wait_until(scanned, scaled(10))
    late = lay_out(redis, "old-late", old_record("scheduled", due + 3_600_000, {"url": receiver.url("/old")}),
                   "scheduled", due + 3_600_000)
    status, _, body = hw.api.request("POST", "/timers/batch", json_body={"timers": [
        {"id": "old-late", "url": receiver.url("/other"), "fire_at_ms": due + 3_600_000},
        {"id": "new-beside-old", "url": receiver.url("/other"), "fire_at_ms": due + 3_600_000}]})
    assert status == 200, body
    assert [(it["status"], it.get("state")) for it in body["items"]] == [(409, "scheduled"), (201, None)], body
    assert hw.cancel("new-beside-old")[0] == 200
    assert redis.cmd("GETRANGE", late, "0", "0") != "s"
    assert hw.cancel("old-late")[0] == 200

    # the dead letter reads as it did, history and all
    status, _, t = hw.get("old-failed")
    assert status == 200, t
    assert t["state"] == "failed" and t["attempts"] == 2 and t["runs"] == 1, t
    assert t["last_attempt"] == a1 and t["attempt_history"] == [a1, a0], t
    ttl = int(redis.cmd("PTTL", f"hw:{{{partition('old-failed')}}}:t:old-failed"))
    assert 0 < ttl <= 3_600_000, ttl  # its retention countdown kept

    # listed under its queue (the queue is read from the old spec)
    status, _, body = hw.api.request("GET", "/timers?state=scheduled&queue=q2")
    assert status == 200 and [x["id"] for x in body["items"]] == ["old-far"], body

    got = receiver.wait_for(11, path="/old", timeout=max(0.0, (due - now_ms()) / 1000) + scaled(10))
    ids = sorted(r.timer_id for r in got)
    assert ids == sorted([f"old-{i}" for i in range(10)] + ["old-held"]), ids
    for r in got:
        if r.timer_id.startswith("old-") and r.timer_id[4:].isdigit():
            assert r.body == f"old body {r.timer_id[4:]}".encode(), r
            assert r.wall_ms >= due + int(r.timer_id[4:]) * 10 - 1, "delivered early"
    for tid in [f"old-{i}" for i in range(10)] + ["old-held"]:
        done = hw.wait_state(tid, ("delivered", "failed"), timeout=scaled(5))
        assert done["state"] == "delivered", done
    assert hw.get("old-0")[2]["queue"] == "q1"

    # the recurring timer keeps its version and counts runs on from 1
    assert receiver.wait_for(3, path="/every", timeout=scaled(10))
    t = hw.get("old-every")[2]
    assert t["runs"] >= 3 and t["version"] == 2, t
    status, _, t = hw.api.request("POST", "/timers/old-every/pause")
    assert status == 200 and t["state"] in ("paused", "firing"), t

    # the dead letter replays, and the far one cancels
    status, _, t = hw.api.request("POST", "/timers/old-failed/retry")
    assert status == 200, t
    assert hw.wait_state("old-failed", ("delivered",), timeout=scaled(5))["state"] == "delivered"
    assert hw.cancel("old-far")[0] == 200

    # nothing of the earlier layout is left behind by what was read
    assert redis.keys("hw:*:claimed:*") == set()
    for k in redis.keys("hw:*:t:*"):
        assert redis.cmd("GETRANGE", k, "0", "0") != "s", k  # no nine-line record starting with "scheduled"


def test_queue_settings_written_before_their_hash_tag_are_kept(redis, receiver, hookwheel_factory):
    """The build before Redis Cluster support kept queue settings in
    hw:queues and its change feed in hw:queues:{version,changes,floor};
    they are now hw:{queues}... (one slot). The new build renames them."""
    redis.cmd("HSET", "hw:queues", "billing", "3 1 2.5")
    redis.cmd("SET", "hw:queues:version", "7")
    redis.cmd("ZADD", "hw:queues:changes", "7", "billing")
    redis.cmd("SET", "hw:queues:floor", "0")
    hw = hookwheel_factory(redis)
    status, _, body = hw.request("GET", "/queues/billing")
    assert status == 200, body
    assert (body["parallelism"], body["paused"], body["max_dispatches_per_second"]) == (3, True, 2.5), body
    assert redis.keys("hw:queues*") == set()
    assert redis.cmd("HGETALL", "hw:{queues}") == ["billing", "3 1 2.5"]
    assert redis.cmd("GET", "hw:{queues}:version") == "7"
    # the paused queue holds its timer, as it did under the old build
    status, _, _ = hw.create({"id": "held", "url": receiver.url("/held"), "delay_ms": 0, "queue": "billing"})
    assert status == 201
    status, _, _ = hw.request("PUT", "/queues/billing", json_body={"parallelism": 3, "paused": False,
                                                              "max_dispatches_per_second": 2.5})
    assert status == 200
    assert receiver.wait_for(1, scaled(10), path="/held")
    # a second start renames nothing and keeps the settings
    hw.stop()
    hw2 = hookwheel_factory(redis)
    status, _, body = hw2.request("GET", "/queues/billing")
    assert status == 200 and body["parallelism"] == 3 and body["paused"] is False, body


def test_timers_of_the_earlier_layout_are_read_while_redis_refuses_writes(redis, receiver, hookwheel_factory):
    """With a full disk (MISCONF) a read cannot upgrade what it reads: a
    timer of the earlier layout is still answered, upgraded in the answer
    only, and converted once Redis takes writes again."""
    hw = hookwheel_factory(redis)

    def scanned():  # the start-up scan of the counts reads (and converts) every record
        status, _, body = hw.api.request("GET", "/queues/default")
        return status == 200 and body["counts_exact"]
    assert wait_until(scanned, scaled(10))
    due = int(now_ms())
    a1 = {"at": "2026-11-20T10:00:00.000Z", "duration_ms": 3, "status": 500, "error": None,
          "response_snippet": "boom", "instance": "old-box-1"}
    failed = lay_out(redis, "ro-failed", old_record("failed", due - 100_000, {"url": receiver.url("/old")}, attempts=1,
                                                    history=json.dumps(a1, separators=(",", ":")), run="0 1"),
                     "failed", due - 100_000, px=3_600_000)
    far = lay_out(redis, "ro-far", old_record("scheduled", due + 3_600_000, {"queue": "q2", "url": receiver.url("/old")}),
                  "scheduled", due + 3_600_000)
    make_bgsave_fail(redis)
    try:
        status, _, t = hw.get("ro-failed")
        assert status == 200, t
        assert t["state"] == "failed" and t["attempts"] == 1 and t["attempt_history"] == [a1], t
        status, _, body = hw.api.request("GET", "/timers?state=scheduled&queue=q2")
        assert status == 200 and [x["id"] for x in body["items"]] == ["ro-far"], body
        status, _, body = hw.api.request("GET", "/timers?state=failed")
        assert status == 200 and [(x["id"], x["attempt_history"]) for x in body["items"]] == [("ro-failed", [a1])], body
        assert redis.cmd("GETRANGE", failed, "0", "0") == "f" and redis.cmd("GETRANGE", far, "0", "0") == "s"
    finally:
        let_bgsave_succeed(redis)
    assert wait_until(lambda: hw.api.request("GET", "/readyz")[0] == 200, scaled(10))
    assert hw.get("ro-far")[2]["queue"] == "q2"
    assert redis.cmd("GETRANGE", far, "0", "0") != "s"  # converted by the first read that may write


def test_the_layout_move_runs_again_once_redis_takes_writes(request, tmp_path, redis, receiver, hookwheel_factory):
    """The builds before 3c9e9b9 kept every waiting timer in hw:{P}:due as
    well as in its index, and earlier ones every dead letter in
    hw:{P}:failed; each instance's start moves what they left (migrate.lua).
    Started while Redis refused writes, the move failed once and was not
    tried again: the keys stayed until the instance's next start."""
    first = hookwheel_factory(redis)  # loads the function library; an instance started below finds it
    assert first.stop() == 0
    due = int(now_ms()) + 2000
    lay_out(redis, "was-due", old_record("scheduled", due, {"url": receiver.url("/moved")}), "scheduled", due)
    p = partition("was-due")
    redis.cmd("ZADD", f"hw:{{{p}}}:due", str(due), "was-due")
    redis.cmd("ZADD", f"hw:{{{p}}}:failed", str(due - 100_000), "long-gone")
    make_bgsave_fail(redis)
    try:
        hw = spawn_while_redis_is_down(request, tmp_path, redis.url, name="started-refused")
        assert wait_until(lambda: "Redis refuses writes" in hw.api.request("GET", "/readyz")[2].get("detail", ""),
                          scaled(10)), hw.log_tail(20)
        time.sleep(1.5)  # the move was sent and refused
        assert redis.cmd("EXISTS", f"hw:{{{p}}}:due", f"hw:{{{p}}}:failed") == 2
    finally:
        let_bgsave_succeed(redis)
    assert wait_until(lambda: redis.cmd("EXISTS", f"hw:{{{p}}}:due", f"hw:{{{p}}}:failed") == 0, scaled(10)), \
        hw.log_tail(20)
    got = receiver.wait_for(1, timeout=max(0.0, (due - now_ms()) / 1000) + scaled(10), path="/moved")
    assert [r.timer_id for r in got] == ["was-due"]
