"""Recurring timers and their controls (fire, reschedule, pause, resume):
the Circulation Trigger rules of DESIGN §5, with a real redis-server, the
real hookwheel binary and a real receiver."""
import threading
import time

from conftest import Reply, assert_created, scaled


def recurring(receiver, path, every_ms, mode="fixed_delay", times=None, delay_ms=0, **extra):
    repeat = {"every_ms": every_ms, "mode": mode}
    if times is not None:
        repeat["times"] = times
    spec = {"url": receiver.url(path), "delay_ms": delay_ms, "repeat": repeat,
            "retry": {"max_attempts": 2, "min_backoff_ms": 50, "max_backoff_ms": 100}}
    spec.update(extra)
    return spec


def post(hookwheel, timer_id, op, body=None):
    return hookwheel.request("POST", f"/timers/{timer_id}/{op}", json_body=body)


def starts(receiver, path):
    return [r.mono for r in receiver.requests(path)]


def stop_timer(hookwheel, timer_id):
    """Cancels a recurring timer at the end of the test, whatever it is doing."""
    status, _, body = hookwheel.cancel(timer_id)
    assert status in (200, 202, 409), body


# -- check 1: runs never overlap; the count follows the documented rule

def test_a_slow_receiver_never_sees_two_runs_of_a_recurring_timer_at_once(hookwheel, receiver):
    receiver.default("/slow-rate", Reply(204, delay_s=0.7))
    receiver.default("/slow-delay", Reply(204, delay_s=0.7))
    rate = assert_created(*hookwheel.create(recurring(receiver, "/slow-rate", 200, "fixed_rate")))
    delay = assert_created(*hookwheel.create(recurring(receiver, "/slow-delay", 200, "fixed_delay")))
    time.sleep(5.0)
    stop_timer(hookwheel, rate["id"])
    stop_timer(hookwheel, delay["id"])
    for path in ("/slow-rate", "/slow-delay"):
        assert receiver.max_concurrent(path) == 1, f"{path}: runs overlapped"
    # fixed_rate: slots every 200 ms from the first start; a run that
    # overran skips to the first slot after its end: 0, 0.8, 1.6, ... s.
    got = starts(receiver, "/slow-rate")
    t0 = got[0]
    in_window = [t for t in got if t - t0 < 5.0 - 0.05]
    assert 6 <= len(in_window) <= 7, f"fixed_rate started {len(in_window)} runs in 5 s: {in_window}"
    for a, b in zip(got, got[1:]):
        gap = b - a
        slots = round(gap / 0.2)
        assert gap >= 0.7 and abs(gap - 0.2 * slots) <= 0.03, (
            f"fixed_rate gap {gap:.3f} s is not a whole number of 200 ms slots after a 0.7 s run")
    gaps = sorted(b - a for a, b in zip(got, got[1:]))
    assert abs(gaps[len(gaps) // 2] - 0.8) <= 0.03, f"median gap {gaps[len(gaps) // 2]:.3f} s, not 0.8 s"
    # fixed_delay: the next run 200 ms after the end of the last: ~0.9 s apart
    got = starts(receiver, "/slow-delay")
    t0 = got[0]
    in_window = [t for t in got if t - t0 < 5.0 - 0.05]
    assert 5 <= len(in_window) <= 6, f"fixed_delay started {len(in_window)} runs in 5 s"
    for a, b in zip(got, got[1:]):
        gap = b - a
        assert 0.88 <= gap <= 1.4, f"fixed_delay gap {gap:.3f} s; the rule gives 0.9 s"


# -- check 2: latest instruction wins

def test_fifty_concurrent_reschedules_leave_exactly_one_run_at_the_last_ordered_delay(hookwheel, receiver):
    timer = assert_created(*hookwheel.create({"url": receiver.url("/resched"), "delay_ms": 60000}))
    answers = [None] * 50
    barrier = threading.Barrier(50)

    def reschedule(i):
        barrier.wait()
        answers[i] = post(hookwheel, timer["id"], "reschedule", {"delay_ms": 1000 + 20 * i})

    threads = [threading.Thread(target=reschedule, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(a[0] == 200 for a in answers), [a[:1] + a[2:] for a in answers if a[0] != 200]
    versions = sorted(a[2]["version"] for a in answers)
    assert versions == list(range(1, 51)), versions  # the server ordered them one by one
    last = max(answers, key=lambda a: a[2]["version"])[2]
    got = receiver.wait_for(1, path="/resched", timeout=scaled(6))
    assert len(got) == 1, got
    time.sleep(2.2)  # the latest of the other delays has passed
    got = receiver.requests("/resched")
    assert len(got) == 1, f"{len(got)} runs after 50 reschedules"
    late = got[0].wall_ms - last["fire_at_ms"]
    assert -5 <= late <= 300, f"the run came {late:.0f} ms from the last ordered due time"
    status, _, body = hookwheel.get(timer["id"])
    assert status == 200 and body["state"] == "delivered" and body["version"] == 50, body


# -- check 3: fixed_rate has no drift; fixed_delay counts from the end

def test_fixed_rate_runs_stay_on_their_slots_without_drift(hookwheel, receiver):
    timer = assert_created(*hookwheel.create(
        recurring(receiver, "/rate", 100, "fixed_rate", times=100, delay_ms=200)))
    got = receiver.wait_for(100, path="/rate", timeout=scaled(20))
    assert len(got) == 100, len(got)
    first = timer["fire_at_ms"]
    offsets = [r.wall_ms - (first + 100 * k) for k, r in enumerate(got)]
    worst = max(offsets, key=abs)
    # one 1 ms tick plus the dispatch and the receiver's own wake-up
    assert all(-5 <= o <= 60 for o in offsets), f"worst offset {worst:.1f} ms: {offsets}"
    assert abs(offsets[-1]) <= 60, f"run 100 started {offsets[-1]:.1f} ms off its slot"
    done = hookwheel.wait_state(timer["id"], "delivered", timeout=scaled(5))
    assert done["state"] == "delivered" and done["runs"] == 100, done
    time.sleep(0.3)
    assert len(receiver.requests("/rate")) == 100


def test_fixed_delay_counts_the_period_from_the_end_of_the_run(hookwheel, receiver):
    receiver.default("/delay", Reply(204, delay_s=0.3))
    timer = assert_created(*hookwheel.create(recurring(receiver, "/delay", 200, "fixed_delay", times=4)))
    got = receiver.wait_for(4, path="/delay", timeout=scaled(8))
    assert len(got) == 4, got
    hookwheel.wait_state(timer["id"], "delivered", timeout=scaled(5))
    for a, b in zip(got, got[1:]):
        since_end = b.mono - a.done_mono
        assert 0.19 <= since_end <= 0.45, f"next run {since_end:.3f} s after the end of the last"
    status, _, body = hookwheel.get(timer["id"])
    assert body["state"] == "delivered" and body["runs"] == 4, body
    assert body["last_attempt"]["status"] == 204, body


# -- check 4: the callback steers; controls work during a run

def test_a_410_answer_stops_a_recurring_timer(hookwheel, receiver):
    receiver.plan("/gone", [204, 410])
    timer = assert_created(*hookwheel.create(recurring(receiver, "/gone", 100)))
    done = hookwheel.wait_state(timer["id"], "cancelled", timeout=scaled(5))
    assert done["state"] == "cancelled" and done["last_attempt"]["status"] == 410, done
    time.sleep(0.5)
    assert len(receiver.requests("/gone")) == 2


def test_the_next_delay_header_moves_the_next_run(hookwheel, receiver):
    receiver.plan("/steer", [Reply(204, {"Hookwheel-Next-Delay-Ms": "300"})])
    timer = assert_created(*hookwheel.create(recurring(receiver, "/steer", 5000)))
    got = receiver.wait_for(2, path="/steer", timeout=scaled(4))
    stop_timer(hookwheel, timer["id"])
    assert len(got) == 2, "the header did not bring the next run forward from 5 s"
    gap = got[1].mono - got[0].mono
    assert 0.29 <= gap <= 0.8, f"next run {gap:.3f} s later; the header asked for 0.3 s"


def test_a_fire_during_a_run_is_reserved_and_runs_once_right_after(hookwheel, receiver):
    receiver.default("/reserve", Reply(204, delay_s=0.5))
    timer = assert_created(*hookwheel.create(recurring(receiver, "/reserve", 60000)))
    assert receiver.wait_for(1, path="/reserve", timeout=scaled(3))
    status, _, body = post(hookwheel, timer["id"], "fire")
    assert status == 200 and body["state"] == "firing", body
    status, _, body = post(hookwheel, timer["id"], "fire")  # a second fire is the same reservation
    assert status == 200, body
    got = receiver.wait_for(2, path="/reserve", timeout=scaled(4))
    assert len(got) == 2, got
    assert 0.45 <= got[1].mono - got[0].mono <= 1.2, got[1].mono - got[0].mono
    time.sleep(1.2)
    assert len(receiver.requests("/reserve")) == 2, "the reserved fire ran more than once"
    assert receiver.max_concurrent("/reserve") == 1
    status, _, body = hookwheel.get(timer["id"])
    assert body["state"] == "scheduled" and body["runs"] == 2, body
    assert body["fire_at_ms"] > time.time() * 1000 + 50000, body  # back on its 60 s period
    stop_timer(hookwheel, timer["id"])


def test_a_reschedule_to_the_epoch_during_a_run_runs_the_next_right_after(hookwheel, receiver):
    """fire_at_ms 0 is a past instant like any other: the successor runs as
    soon as the run ends (it was taken for "no reschedule" and the period
    decided instead)."""
    for form in ({"fire_at_ms": 0}, {"fire_at": "1970-01-01T00:00:00Z"}):
        path = "/epoch-" + next(iter(form))
        receiver.default(path, Reply(204, delay_s=0.5))
        timer = assert_created(*hookwheel.create(recurring(receiver, path, 60000)))
        assert receiver.wait_for(1, path=path, timeout=scaled(3))
        status, _, body = post(hookwheel, timer["id"], "reschedule", form)
        assert status == 200 and body["state"] == "firing", body
        got = receiver.wait_for(2, path=path, timeout=scaled(4))
        assert len(got) == 2, f"{form}: no run after the reschedule (the 60 s period decided)"
        assert 0.45 <= got[1].mono - got[0].mono <= 1.2, got[1].mono - got[0].mono
        assert receiver.max_concurrent(path) == 1
        status, _, body = hookwheel.get(timer["id"])
        assert body["runs"] == 2, body
        stop_timer(hookwheel, timer["id"])


def test_pause_during_a_run_stops_its_successor_and_resume_brings_it_back(hookwheel, receiver):
    receiver.default("/pause", Reply(204, delay_s=0.5))
    timer = assert_created(*hookwheel.create(recurring(receiver, "/pause", 200)))
    assert receiver.wait_for(1, path="/pause", timeout=scaled(3))
    status, _, body = post(hookwheel, timer["id"], "pause")
    assert status == 200 and body["state"] == "firing", body
    done = hookwheel.wait_state(timer["id"], "paused", timeout=scaled(3))
    assert done["state"] == "paused", done
    time.sleep(1.0)
    assert len(receiver.requests("/pause")) == 1, "a paused timer ran again"
    status, _, body = post(hookwheel, timer["id"], "resume")
    assert status == 200 and body["state"] == "scheduled", body
    got = receiver.wait_for(2, path="/pause", timeout=scaled(3))
    assert len(got) == 2, "resume did not bring the timer back"
    # pause, then resume, both during one run: the run is followed as usual
    status, _, _ = post(hookwheel, timer["id"], "pause")
    status2, _, body = post(hookwheel, timer["id"], "resume")
    assert status == 200 and status2 == 200, body
    got = receiver.wait_for(3, path="/pause", timeout=scaled(3))
    assert len(got) == 3, "a pause undone by resume during the run still stopped the timer"
    stop_timer(hookwheel, timer["id"])
    assert receiver.max_concurrent("/pause") == 1


def test_a_paused_timer_waits_and_fire_runs_it_now(hookwheel, receiver):
    timer = assert_created(*hookwheel.create(recurring(receiver, "/pf", 60000, delay_ms=60000)))
    status, _, body = post(hookwheel, timer["id"], "pause")
    assert status == 200 and body["state"] == "paused", body
    status, _, body = post(hookwheel, timer["id"], "fire")
    assert status == 200 and body["state"] == "scheduled", body
    got = receiver.wait_for(1, path="/pf", timeout=scaled(3))
    assert len(got) == 1
    stop_timer(hookwheel, timer["id"])


def test_cancelling_a_recurring_timer_during_a_run_lets_the_run_end_and_no_other_follow(hookwheel, receiver):
    receiver.default("/cancel", Reply(204, delay_s=0.4))
    timer = assert_created(*hookwheel.create(recurring(receiver, "/cancel", 100)))
    assert receiver.wait_for(1, path="/cancel", timeout=scaled(3))
    status, _, body = hookwheel.cancel(timer["id"])
    assert status == 202 and body["state"] == "firing", body
    done = hookwheel.wait_state(timer["id"], "cancelled", timeout=scaled(3))
    assert done["state"] == "cancelled" and done["last_attempt"]["status"] == 204, done
    time.sleep(0.5)
    assert len(receiver.requests("/cancel")) == 1


def test_a_failed_run_that_exhausts_its_retries_stops_the_timer_as_failed(hookwheel, receiver):
    receiver.default("/fails", 500)
    timer = assert_created(*hookwheel.create(recurring(receiver, "/fails", 100)))
    done = hookwheel.wait_state(timer["id"], "failed", timeout=scaled(5))
    assert done["state"] == "failed" and done["attempts"] == 2 and done["runs"] == 1, done
    time.sleep(0.5)
    assert len(receiver.requests("/fails")) == 2


def test_controls_refuse_what_the_state_does_not_allow(hookwheel, receiver):
    receiver.default("/once", Reply(204, delay_s=0.5))
    one = assert_created(*hookwheel.create({"url": receiver.url("/once"), "delay_ms": 0}))
    assert receiver.wait_for(1, path="/once", timeout=scaled(3))
    for op in ("fire", "pause"):
        status, headers, body = post(hookwheel, one["id"], op)
        assert status == 409 and body["state"] == "firing", (op, body)
    status, _, body = post(hookwheel, one["id"], "reschedule", {"delay_ms": 10})
    assert status == 409, body
    hookwheel.wait_state(one["id"], "delivered", timeout=scaled(3))
    for op in ("fire", "pause", "resume"):
        status, _, body = post(hookwheel, one["id"], op)
        assert status == 409 and body["state"] == "delivered", (op, body)
    status, _, body = post(hookwheel, "no-such-timer", "fire")
    assert status == 404, body
    status, _, body = post(hookwheel, one["id"], "reschedule", {"delay_ms": 10, "fire_at_ms": 5})
    assert status == 400 and body["field"] == "fire_at_ms", body
    status, _, body = post(hookwheel, one["id"], "reschedule", {"delay": 10})
    assert status == 400 and body["field"] == "delay", body
    status, _, body = post(hookwheel, one["id"], "fire", {"now": True})
    assert status == 400 and body["field"] == "now", body


def test_a_one_shot_timer_can_be_rescheduled_paused_resumed_and_fired(hookwheel, receiver):
    timer = assert_created(*hookwheel.create({"url": receiver.url("/one"), "delay_ms": 60000}))
    status, _, body = post(hookwheel, timer["id"], "reschedule", {"delay_ms": 400})
    assert status == 200 and body["version"] == 1, body
    status, _, body = post(hookwheel, timer["id"], "pause")
    assert status == 200 and body["state"] == "paused", body
    time.sleep(0.8)
    assert receiver.requests("/one") == []
    status, _, body = post(hookwheel, timer["id"], "resume")
    assert status == 200 and body["state"] == "scheduled", body  # its due time passed: now
    got = receiver.wait_for(1, path="/one", timeout=scaled(3))
    assert len(got) == 1
    done = hookwheel.wait_state(timer["id"], "delivered", timeout=scaled(3))
    assert done["runs"] == 1 and done["version"] == 3, done


def test_repeat_is_validated(hookwheel, receiver):
    bad = [
        ({"every_ms": 5}, "repeat.every_ms"),
        ({"mode": "fixed_rate"}, "repeat.every_ms"),
        ({"every_ms": 100, "mode": "cron"}, "repeat.mode"),
        ({"every_ms": 100, "times": 0}, "repeat.times"),
        ({"every_ms": 100, "jitter": 1}, "repeat.jitter"),
    ]
    for repeat, field in bad:
        status, _, body = hookwheel.create({"url": receiver.url("/v"), "delay_ms": 0, "repeat": repeat})
        assert status == 400 and body["field"] == field, (repeat, body)
    status, _, body = hookwheel.create({"url": receiver.url("/v"), "delay_ms": 0, "repeat": 100})
    assert status == 400 and body["field"] == "repeat", body


def test_a_recurring_timer_cancelled_during_a_run_that_fails_ends_cancelled_without_on_failure(hookwheel, receiver):
    receiver.default("/cancel-fails", Reply(400, delay_s=0.5))
    timer = assert_created(*hookwheel.create(recurring(receiver, "/cancel-fails", 100,
                                                       on_failure=receiver.url("/cancel-fails-cb"))))
    assert receiver.wait_for(1, path="/cancel-fails", timeout=scaled(3))
    status, _, body = hookwheel.cancel(timer["id"])
    assert status == 202 and body["state"] == "firing", body
    done = hookwheel.wait_state(timer["id"], ("cancelled", "failed"), timeout=scaled(3))
    assert done["state"] == "cancelled" and done["last_attempt"]["status"] == 400, done
    time.sleep(scaled(4))  # a callback would be claimed by a sweep within 2.5 s
    assert receiver.requests("/cancel-fails-cb") == []
    assert len(receiver.requests("/cancel-fails")) == 1
