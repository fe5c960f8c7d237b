"""A run's identity and the retry policy's limits, with a real redis-server,
the real hookwheel binary and a real receiver: controls of a timer whose run
is between retries, `times`, max_duration, dead-letter replays and purges."""
import time

from conftest import assert_created, scaled


def post(hw, timer_id, op, body=None):
    return hw.request("POST", f"/timers/{timer_id}/{op}", json_body=body)


def identities(receiver, path):
    return [(r.headers["webhook-id"], r.headers["Hookwheel-Run"], r.headers["Hookwheel-Attempt"])
            for r in receiver.requests(path)]


def test_a_one_shot_timer_fired_between_retries_is_still_run_1(hookwheel, receiver):
    receiver.plan("/os-fire", [503])
    assert_created(*hookwheel.create({
        "id": "os-fire", "url": receiver.url("/os-fire"), "delay_ms": 0,
        "retry": {"max_attempts": 5, "min_backoff_ms": 60000, "max_backoff_ms": 60000}}))
    receiver.wait_for(1, path="/os-fire", timeout=scaled(3))
    hookwheel.wait_state("os-fire", "retrying", timeout=scaled(3))
    status, _, body = post(hookwheel, "os-fire", "fire")
    assert status == 200, body
    done = hookwheel.wait_state("os-fire", "delivered", timeout=scaled(3))
    assert [i[:2] for i in identities(receiver, "/os-fire")] == [("os-fire", "1"), ("os-fire", "1")]
    assert done["runs"] == 1, done


def test_a_one_shot_timer_paused_and_resumed_between_retries_is_still_run_1(hookwheel, receiver):
    receiver.plan("/os-pause", [503])
    assert_created(*hookwheel.create({
        "id": "os-pause", "url": receiver.url("/os-pause"), "delay_ms": 0,
        "retry": {"max_attempts": 5, "min_backoff_ms": 1000, "max_backoff_ms": 1000}}))
    receiver.wait_for(1, path="/os-pause", timeout=scaled(3))
    hookwheel.wait_state("os-pause", "retrying", timeout=scaled(3))
    assert post(hookwheel, "os-pause", "pause")[0] == 200
    assert post(hookwheel, "os-pause", "resume")[0] == 200  # keeps its due time, 1 s after the failure
    done = hookwheel.wait_state("os-pause", "delivered", timeout=scaled(4))
    assert [i[:2] for i in identities(receiver, "/os-pause")] == [("os-pause", "1"), ("os-pause", "1")]
    assert done["runs"] == 1, done
