"""One message identity per run, and retries that outlast an outage: with a
real redis-server, the real hookwheel binary and a real receiver.

A recurring timer's webhook-id is "<id>:<run>" (a one-shot timer's is its
id), the same for every retry of one run; Hookwheel-Run carries the run
number; a manual retry of a dead letter replays the run it failed in. The
default retry policy keeps retrying for at least 12 h; retry.max_duration_ms
bounds a run's retries by time as well."""
import time

import pytest

from conftest import SLOW, assert_created, scaled


def post(hw, timer_id, op, body=None):
    return hw.request("POST", f"/timers/{timer_id}/{op}", json_body=body)


def identities(receiver, path):
    return [(r.headers["webhook-id"], r.headers["Hookwheel-Run"], r.headers["Hookwheel-Attempt"])
            for r in receiver.requests(path)]


def test_every_run_of_a_recurring_timer_has_its_own_webhook_id_and_its_retries_share_it(hookwheel, receiver):
    receiver.plan("/runs", [500, 204, 503, 204, 500, 204])
    assert_created(*hookwheel.create({
        "id": "rec", "url": receiver.url("/runs"), "delay_ms": 0,
        "repeat": {"every_ms": 200, "times": 3},
        "retry": {"max_attempts": 3, "min_backoff_ms": 50, "max_backoff_ms": 100}}))
    got = receiver.wait_for(6, path="/runs", timeout=scaled(10))
    assert len(got) == 6, identities(receiver, "/runs")
    assert identities(receiver, "/runs") == [
        ("rec:1", "1", "1"), ("rec:1", "1", "2"),
        ("rec:2", "2", "1"), ("rec:2", "2", "2"),
        ("rec:3", "3", "1"), ("rec:3", "3", "2")]
    body = hookwheel.wait_state("rec", "delivered", scaled(5))
    assert body["state"] == "delivered", body


def test_a_one_shot_timer_keeps_its_id_as_webhook_id_and_is_run_1(hookwheel, receiver):
    receiver.plan("/once", [500, 204])
    assert_created(*hookwheel.create({
        "id": "once", "url": receiver.url("/once"), "delay_ms": 0,
        "retry": {"max_attempts": 2, "min_backoff_ms": 50, "max_backoff_ms": 100}}))
    receiver.wait_for(2, path="/once", timeout=scaled(5))
    assert identities(receiver, "/once") == [("once", "1", "1"), ("once", "1", "2")]


def test_a_retried_dead_letter_replays_the_run_it_failed_in(hookwheel, receiver):
    receiver.plan("/replay", [204, 500])
    assert_created(*hookwheel.create({
        "id": "rp", "url": receiver.url("/replay"), "delay_ms": 0,
        "repeat": {"every_ms": 300, "times": 3}, "retry": {"max_attempts": 1}}))
    body = hookwheel.wait_state("rp", "failed", scaled(5))
    assert body["state"] == "failed", body
    assert identities(receiver, "/replay") == [("rp:1", "1", "1"), ("rp:2", "2", "1")]

    status, _, body = post(hookwheel, "rp", "retry")
    assert status == 200, body
    receiver.wait_for(4, path="/replay", timeout=scaled(5))
    assert identities(receiver, "/replay")[2:4] == [("rp:2", "2", "1"), ("rp:3", "3", "1")]
    body = hookwheel.wait_state("rp", "delivered", scaled(5))
    assert body["state"] == "delivered" and body["runs"] == 3, body


def test_max_duration_ends_a_runs_retries_after_that_long(hookwheel, receiver):
    receiver.default("/down5", 503)
    t0 = time.time()
    assert_created(*hookwheel.create({
        "id": "dur", "url": receiver.url("/down5"), "delay_ms": 0,
        "retry": {"max_duration_ms": 5000, "min_backoff_ms": 500, "max_backoff_ms": 2000}}))
    body = hookwheel.wait_state("dur", "failed", scaled(15))
    assert body["state"] == "failed", body
    starts = [r.wall for r in receiver.requests("/down5")]
    assert len(starts) >= 3, starts
    # the last retry is moved up to the deadline (5 s after the run was due)
    # and fails the timer; none comes after it
    assert 4.0 <= starts[-1] - t0 <= 5.0 + scaled(1.5), [s - t0 for s in starts]
    time.sleep(1.0)
    assert len(receiver.requests("/down5")) == len(starts)


@pytest.mark.skipif(SLOW, reason="a minute of waiting; the sanitizer pass runs the same code in "
                                 "test_max_duration_ends_a_runs_retries_after_that_long")
def test_timers_due_while_the_receiver_is_down_for_30_s_are_delivered_under_the_default_policy(
        hookwheel, receiver):
    receiver.default("/outage", 503)
    for i in range(3):
        assert_created(*hookwheel.create({"id": f"out-{i}", "url": receiver.url("/outage"),
                                          "delay_ms": 1000 * i}))
    time.sleep(30)
    for i in range(3):
        status, _, body = hookwheel.get(f"out-{i}")
        assert status == 200 and body["state"] == "retrying", body  # the old default had given up
    receiver.default("/outage", 204)
    # the default ladder's next attempts come within 16-32 s (then 32-64 s)
    for i in range(3):
        body = hookwheel.wait_state(f"out-{i}", "delivered", 70)
        assert body["state"] == "delivered", body
