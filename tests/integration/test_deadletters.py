"""Dead letters: failed timers replayed one by one or in bulk by queue, or
purged, with the counts in the answers; once their records expire, nothing
of them is left in Redis."""
import time

from conftest import Reply, assert_created, create_many, partition, scaled, wait_until


def fail(hookwheel, receiver, tid, path, queue="default"):
    assert_created(*hookwheel.create({"id": tid, "url": receiver.url(path), "delay_ms": 0, "queue": queue}))


def listed(hookwheel, state, queue=None):
    q = f"/timers?state={state}&limit=1000" + (f"&queue={queue}" if queue else "")
    status, _, body = hookwheel.request("GET", q)
    assert status == 200 and body["next_cursor"] is None, body
    return sorted(it["id"] for it in body["items"])


def test_a_failed_timer_is_replayed_from_the_dead_letters_and_delivered(hookwheel, receiver):
    receiver.plan("/once-broken", [404])  # then the default, 204
    fail(hookwheel, receiver, "dl-one", "/once-broken")
    failed = hookwheel.wait_state("dl-one", "failed", timeout=scaled(5))
    assert failed["state"] == "failed" and failed["last_attempt"]["status"] == 404, failed
    assert listed(hookwheel, "failed") == ["dl-one"]
    status, _, body = hookwheel.request("POST", "/timers/dl-one/retry")
    assert status == 200 and body["state"] in ("scheduled", "firing", "delivered"), body
    done = hookwheel.wait_state("dl-one", "delivered", timeout=scaled(5))
    # a retry replays the run that failed: still run 1 (webhook-id and Hookwheel-Run unchanged)
    assert done["attempts"] == 1 and done["runs"] == 1 and done["version"] == 1, done
    assert [r.headers["Hookwheel-Run"] for r in receiver.requests(timer_id="dl-one")] == ["1", "1"]
    assert done["last_attempt"]["status"] == 204, done
    assert listed(hookwheel, "failed") == []
    assert [r.path for r in receiver.requests(timer_id="dl-one")] == ["/once-broken"] * 2
    status, _, body = hookwheel.request("POST", "/timers/dl-one/retry")
    assert status == 409 and body["state"] == "delivered", body
    status, _, body = hookwheel.request("POST", "/timers/no-such/retry")
    assert status == 404, body


def test_bulk_replay_and_purge_by_queue_answer_with_their_counts(hookwheel, receiver):
    receiver.plan("/bulk", [404] * 50)  # every first attempt fails, replays succeed
    for i in range(30):
        fail(hookwheel, receiver, f"q1-{i:02d}", "/bulk", "q1")
    for i in range(20):
        fail(hookwheel, receiver, f"q2-{i:02d}", "/bulk", "q2")
    for i in range(30):
        hookwheel.wait_state(f"q1-{i:02d}", "failed", timeout=scaled(5))
    for i in range(20):
        hookwheel.wait_state(f"q2-{i:02d}", "failed", timeout=scaled(5))
    assert len(listed(hookwheel, "failed")) == 50
    status, _, body = hookwheel.request("POST", "/dead-letters/replay", json_body={"queue": "q1"})
    assert status == 200 and body == {"replayed": 30, "more": False}, body
    for i in range(30):
        done = hookwheel.wait_state(f"q1-{i:02d}", "delivered", timeout=scaled(10))
        assert done["state"] == "delivered", done
    assert listed(hookwheel, "failed") == [f"q2-{i:02d}" for i in range(20)]
    status, _, body = hookwheel.request("POST", "/dead-letters/purge", json_body={"queue": "q2"})
    assert status == 200 and body == {"purged": 20, "more": False}, body
    assert listed(hookwheel, "failed") == []
    status, _, _ = hookwheel.get("q2-00")
    assert status == 404
    status, _, body = hookwheel.request("POST", "/dead-letters/replay")
    assert status == 200 and body == {"replayed": 0, "more": False}, body
    status, _, body = hookwheel.request("POST", "/dead-letters/purge", json_body={"queue": "a b"})
    assert status == 400 and body["field"] == "queue", body
    status, _, body = hookwheel.request("POST", "/dead-letters/purge", json_body={"everything": True})
    assert status == 400 and body["field"] == "everything", body
    # a body not sent as application/json is refused, as every other JSON body
    # is (it was read as JSON, its queue filter applied); no body needs no type
    for op in ("replay", "purge"):
        for ctype in ("text/plain", None):
            status, _, body = hookwheel.request("POST", f"/dead-letters/{op}", raw_body=b'{"queue": "q1"}',
                                                headers={"Content-Type": ctype} if ctype else {})
            assert status == 415, (op, ctype, body)
    # a body that is not JSON is told so and why, not that it must be an object
    for op in ("replay", "purge"):
        for raw, why in ((b'{"queue": "q1", "queue": "q2"}', "duplicate object key"), (b'{"queue": "q1",}', "expected")):
            status, _, body = hookwheel.request("POST", f"/dead-letters/{op}", raw_body=raw,
                                                headers={"Content-Type": "application/json"})
            assert status == 400 and body["detail"].startswith("malformed JSON: ") and why in body["detail"], (
                op, raw, body)


def test_dead_letters_leave_no_keys_behind_once_their_records_expire(redis, receiver, hookwheel_factory):
    # an earlier build's zset of every dead letter, which nothing trimmed
    old = f"hw:{{{partition('old-dead')}}}:failed"
    redis.cmd("ZADD", old, "1", "old-dead")
    hw = hookwheel_factory(redis, args=["--retention-s", "2"])
    assert wait_until(lambda: not redis.keys("hw:{*}:failed"), scaled(5)), redis.keys("hw:{*}:failed")
    receiver.default("/gone", Reply(404))
    specs = [{"id": f"dead-{i}", "url": receiver.url("/gone"), "delay_ms": 0} for i in range(40)]
    _, errors = create_many(hw.api, specs, threads=2)
    assert not errors, errors[:3]
    for s in specs:
        assert hw.wait_state(s["id"], "failed", timeout=scaled(10))["state"] == "failed"
    assert len(listed(hw, "failed")) == 40
    assert wait_until(lambda: not redis.keys("hw:{*}:t:dead-*"), scaled(10))  # the retention
    time.sleep(0.2)
    # a listing drops the expired records' index entries; nothing else of them stays
    assert listed(hw, "failed") == []
    status, _, body = hw.request("POST", "/dead-letters/purge")
    assert status == 200 and body == {"purged": 0, "more": False}, body
    left = {k: int(redis.cmd("ZCARD", k)) for k in redis.keys("hw:{*}:*") if ":failed" in k}
    assert left == {}, left


def test_bulk_replayed_dead_letters_start_soon_whatever_the_claim_window(redis, receiver, hookwheel_factory):
    # Replayed dead letters are due now and held by no instance: they
    # waited for the next sweep, up to half the claim window (300 s here).
    hw = hookwheel_factory(redis, args=["--window-ms", "600000"])
    receiver.default("/dl", Reply(500))
    for i in range(5):
        assert_created(*hw.api.create({"id": f"dl-soon-{i}", "url": receiver.url("/dl"), "delay_ms": 10,
                                      "retry": {"max_attempts": 1}}))
    for i in range(5):
        assert hw.api.wait_state(f"dl-soon-{i}", "failed", timeout=scaled(10))["state"] == "failed"
    receiver.default("/dl", Reply(204))
    status, _, body = hw.api.request("POST", "/dead-letters/replay")
    assert status == 200 and body["replayed"] == 5, body
    for i in range(5):
        assert hw.api.wait_state(f"dl-soon-{i}", "delivered", timeout=scaled(5))["state"] == "delivered"
