"""Integration tests of begins sent ahead of the due time (--begin-lead-ms):
a begun timer (`firing`) waits in the engine until its due time, and every
path that ends, hands back or takes over such a timer keeps the promises of
the README's guarantees table: never early, at-least-once, exact cancel, no
overlapping runs, the queue caps. A large lead (1 s) makes the window in
which a timer is begun but not yet due wide enough to act in."""

import json
import threading
import time
from collections import Counter

from conftest import Reply, assert_created, now_ms, scaled, wait_until

LEAD = ["--begin-lead-ms", "1000"]
ROUNDING_MS = 1.0  # fire_at_ms is an integer, arrival times are floats


def sleep_until_ms(t_ms):
    left = (t_ms - now_ms()) / 1000.0
    if left > 0:
        time.sleep(left)


def assert_not_early(reqs, fire_at):
    """fire_at: {timer id: fire_at_ms}."""
    early = [(r.timer_id, round(fire_at[r.timer_id] - r.wall_ms, 1)) for r in reqs
             if r.wall_ms < fire_at[r.timer_id] - ROUNDING_MS]
    assert not early, f"arrived before the due time (id, ms early): {early[:10]}"


def wait_firing(hw, timer_id, timeout):
    body = hw.wait_state(timer_id, "firing", timeout=timeout)
    assert body.get("state") == "firing", body
    return body


# --------------------------------------------------------------------------
# a begun timer handed back or taken over before its due time


def test_a_timer_begun_ahead_and_taken_over_after_a_kill_9_is_not_delivered_before_its_due_time(
        redis, hookwheel_factory, receiver):
    # The instance begins the timer (firing) a second ahead and is killed
    # while it waits for its due time; another instance takes its claims
    # over (a short lease) well before that due time, and sweeps often (a
    # short window). The interrupted attempt is retried, but not before the
    # timer is due.
    args = LEAD + ["--lease-ttl-ms", "300"]
    a = hookwheel_factory(redis, args=args)
    t = assert_created(*a.create({"id": "lead-kill", "url": receiver.url("/lead-kill"), "delay_ms": 3000}))
    sleep_until_ms(t["fire_at_ms"] - 900)
    wait_firing(a, t["id"], timeout=0.5)
    assert a.kill9() == -9
    b = hookwheel_factory(redis, args=args + ["--window-ms", "200"])
    got = receiver.wait_for(1, path="/lead-kill", timeout=scaled(10))
    assert len(got) == 1, got
    assert "took over the claims of a lapsed instance" in b.log.read_text(errors="replace")
    assert_not_early(got, {t["id"]: t["fire_at_ms"]})
    done = b.wait_state(t["id"], "delivered", timeout=scaled(5))
    assert done.get("state") == "delivered", done


def test_a_timer_begun_ahead_and_handed_back_at_sigterm_is_not_delivered_before_its_due_time(
        redis, hookwheel_factory, receiver):
    # With no grace at stop the instance hands the begun timer back instead
    # of waiting for its due time; the next instance fires it, at its due time.
    a = hookwheel_factory(redis, args=LEAD + ["--shutdown-grace-ms", "0"])
    t = assert_created(*a.create({"id": "lead-term", "url": receiver.url("/lead-term"), "delay_ms": 3000}))
    sleep_until_ms(t["fire_at_ms"] - 900)
    wait_firing(a, t["id"], timeout=0.5)
    assert a.stop() == 0
    assert receiver.requests("/lead-term") == []
    b = hookwheel_factory(redis, args=LEAD + ["--window-ms", "200"])
    got = receiver.wait_for(1, path="/lead-term", timeout=scaled(10))
    assert len(got) == 1, got
    assert_not_early(got, {t["id"]: t["fire_at_ms"]})
    done = b.wait_state(t["id"], "delivered", timeout=scaled(5))
    assert done.get("state") == "delivered", done


# --------------------------------------------------------------------------
# queue limits with begins ahead


def put_queue(hw, name, settings):
    status, _, body = hw.request("PUT", f"/queues/{name}", json_body=settings)
    assert status == 200, body
    return body


def most_in_a_window(times_ms, width_ms):
    times = sorted(times_ms)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] >= width_ms:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def test_a_paced_queue_s_attempt_starts_stay_paced_when_begins_go_out_ahead(redis, hookwheel_factory, receiver):
    # 4 starts a second, evenly (no burst): the bucket holds one token. The
    # begins go out a second ahead, paced; the starts must be paced as well.
    hw = hookwheel_factory(redis, args=LEAD)
    put_queue(hw, "paced", {"max_dispatches_per_second": 4, "scope": "instance"})
    time.sleep(1.2)  # settings are read every 0.5 s
    due = int(now_ms()) + 2500
    for i in range(10):
        assert_created(*hw.create({"id": f"pace-{i}", "url": receiver.url("/paced"), "fire_at_ms": due,
                                   "queue": "paced"}))
    got = receiver.wait_for(10, path="/paced", timeout=scaled(15))
    assert len(got) == 10, got
    assert_not_early(got, {r.timer_id: due for r in got})
    times = sorted(r.wall_ms for r in got)
    gaps = [round(b - a) for a, b in zip(times, times[1:])]
    assert most_in_a_window(times, 1000) <= 5, f"starts {[round(t - due) for t in times]} ms after due"
