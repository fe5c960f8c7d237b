"""Integration tests of begins sent ahead of the due time (--begin-lead-ms):
a begun timer (`firing`) waits in the engine until its due time, and every
path that ends, hands back or takes over such a timer keeps the promises of
the README's guarantees table: never early, at-least-once, exact cancel, no
overlapping runs, the queue caps. A large lead (1 s) makes the window in
which a timer is begun but not yet due wide enough to act in."""

import time
from collections import Counter

import pytest

from conftest import CLUSTER_MODE, Reply, assert_created, most_in_a_window, now_ms, scaled

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


def assert_each_delivered_once_not_early(hw, receiver, path, fire_at):
    """Every timer of fire_at ends delivered, arrived once at path, none before its due time."""
    for tid in fire_at:
        done = hw.wait_state(tid, ("delivered", "failed"), timeout=scaled(15))
        assert done.get("state") == "delivered", done
    time.sleep(0.3)
    got = receiver.requests(path)
    counts = Counter(r.timer_id for r in got)
    assert set(counts) == set(fire_at) and max(counts.values()) == 1, counts
    assert_not_early(got, fire_at)


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
    assert most_in_a_window(times, 1000) <= 5, f"starts {[round(t - due) for t in times]} ms after due"


def test_a_queue_with_parallelism_1_runs_one_attempt_at_a_time_none_before_its_due_time(
        redis, hookwheel_factory, receiver):
    # Many timers fall due within the lead; only the first may begin ahead
    # (the place is held from the begin), and no attempt starts early.
    hw = hookwheel_factory(redis, args=LEAD)
    put_queue(hw, "one", {"parallelism": 1, "scope": "instance"})
    time.sleep(1.2)
    receiver.default("/one", Reply(204, delay_s=0.1))
    base = int(now_ms()) + 2500
    fire_at = {}
    for i in range(12):
        t = assert_created(*hw.create({"id": f"one-{i}", "url": receiver.url("/one"), "queue": "one",
                                       "fire_at_ms": base + (0 if i < 6 else 60 * i)}))
        fire_at[t["id"]] = t["fire_at_ms"]
    got = receiver.wait_for(12, path="/one", timeout=scaled(15))
    assert sorted(r.timer_id for r in got) == sorted(fire_at), got
    assert_not_early(got, fire_at)
    assert receiver.max_concurrent("/one") == 1
    time.sleep(0.3)
    assert len(receiver.requests("/one")) == 12


def test_recurring_runs_shorter_than_the_lead_never_overlap_and_never_start_early(
        redis, hookwheel_factory, receiver):
    # every_ms 50 with a lead of 200 ms: each next run falls due within the
    # lead as soon as it is scheduled, so it is begun at once and held.
    hw = hookwheel_factory(redis, args=["--begin-lead-ms", "200"])
    receiver.default("/fd", Reply(204, delay_s=0.03))
    receiver.default("/fr", Reply(204, delay_s=0.03))
    spec = {"delay_ms": 300, "retry": {"max_attempts": 2, "min_backoff_ms": 50, "max_backoff_ms": 100}}
    fd = assert_created(*hw.create({**spec, "url": receiver.url("/fd"),
                                    "repeat": {"every_ms": 50, "mode": "fixed_delay", "times": 15}}))
    fr = assert_created(*hw.create({**spec, "url": receiver.url("/fr"),
                                    "repeat": {"every_ms": 50, "mode": "fixed_rate", "times": 15}}))
    for t in (fd, fr):
        done = hw.wait_state(t["id"], ("delivered", "failed", "cancelled"), timeout=scaled(15))
        assert done.get("state") == "delivered", done
    for path, t in (("/fd", fd), ("/fr", fr)):
        got = receiver.requests(path)
        assert len(got) == 15, (path, got)
        assert receiver.max_concurrent(path) == 1, f"{path}: runs overlapped"
        assert [int(r.headers.get("Hookwheel-Run")) for r in got] == list(range(1, 16)), got
        assert_not_early(got[:1], {t["id"]: t["fire_at_ms"]})
        offset = t["fire_at_ms"] / 1000.0 - got[0].wall + got[0].mono  # the first due time, monotonic s
        # The receiver notes a run's end as its answer starts to go out, before
        # hookwheel can see it; hookwheel counts in whole ms: 1 ms of slack.
        slack_ms = 1.0
        for prev, cur in zip(got, got[1:]):
            assert cur.mono > prev.done_mono - slack_ms / 1000, f"{path}: runs overlapped"
            run = cur.headers.get("Hookwheel-Run")
            if path == "/fd":  # due every_ms after the end of the run before it
                gap_ms = (cur.mono - prev.done_mono) * 1000
                assert gap_ms >= 50 - slack_ms, f"{path}: run {run} {50 - gap_ms:.1f} ms early"
            else:  # due at the first slot (first due + k x every_ms) after the end of the run before it
                slot = (cur.mono - offset) * 1000 // 50 * 50 / 1000 + offset
                assert slot >= prev.done_mono - slack_ms / 1000, (
                    f"{path}: run {run} started {1000 * (prev.done_mono - slot):.1f} ms before its slot")


# --------------------------------------------------------------------------
# graceful stop and Redis outages while attempts are held


def test_sigterm_while_attempts_are_held_delivers_them_once_at_their_due_time_and_exits_cleanly(
        redis, hookwheel_factory, receiver):
    a = hookwheel_factory(redis, args=LEAD)
    base = int(now_ms()) + 2500
    fire_at = {}
    for i in range(20):  # due over 2 s: some begun and held at the stop, the others not yet begun
        t = assert_created(*a.create({"id": f"term-{i}", "url": receiver.url("/term"),
                                      "fire_at_ms": base + 100 * i}))
        fire_at[t["id"]] = t["fire_at_ms"]
    sleep_until_ms(base - 500)
    held = [tid for tid in fire_at if a.get(tid)[2].get("state") == "firing"]
    assert held, "nothing was begun ahead of its due time"
    assert a.stop() == 0
    assert a.exit_code == 0
    log = a.log.read_text(errors="replace")
    assert "ERROR: AddressSanitizer" not in log and "runtime error" not in log
    got = receiver.requests("/term")
    assert {r.timer_id for r in got} >= set(held), "a held attempt was dropped at the stop"
    assert_not_early(got, fire_at)
    # the rest was handed back: the next instance fires it, at its due time
    b = hookwheel_factory(redis, args=LEAD)
    got = receiver.wait_for(20, path="/term", timeout=scaled(15))
    time.sleep(0.3)
    got = receiver.requests("/term")
    counts = Counter(r.timer_id for r in got)
    assert set(counts) == set(fire_at) and max(counts.values()) == 1, counts
    assert_not_early(got, fire_at)
    for tid in fire_at:
        done = b.wait_state(tid, "delivered", timeout=scaled(5))
        assert done.get("state") == "delivered" and done.get("attempts") == 1, done


@pytest.mark.skipif(CLUSTER_MODE, reason="restarts its one Redis")
def test_redis_restarted_while_attempts_are_held_delivers_each_once_not_early(redis, hookwheel_factory, receiver):
    # The held attempts start at their due time while Redis is down; their
    # outcomes are written once it is back. Timers not yet begun wait for it.
    hw = hookwheel_factory(redis, args=LEAD)
    base = int(now_ms()) + 2500
    fire_at = {}
    for i in range(10):
        t = assert_created(*hw.create({"id": f"rr-{i}", "url": receiver.url("/rr"), "fire_at_ms": base + 150 * i}))
        fire_at[t["id"]] = t["fire_at_ms"]
    sleep_until_ms(base - 600)
    held = [tid for tid in fire_at if hw.get(tid)[2].get("state") == "firing"]
    assert held, "nothing was begun ahead of its due time"
    redis.stop()
    sleep_until_ms(base + 1000)
    got = receiver.requests("/rr")
    assert {r.timer_id for r in got} >= set(held), "a held attempt did not start while Redis was down"
    redis.restart()
    assert_each_delivered_once_not_early(hw, receiver, "/rr", fire_at)


@pytest.mark.skipif(CLUSTER_MODE, reason="restarts its one Redis")
def test_redis_unreachable_while_begins_are_in_flight_delays_the_attempts_never_loses_or_repeats_them(
        redis, hookwheel_factory, receiver):
    # Redis stops just before the timers' begins go out (and while some are
    # in flight); each is begun again once Redis is back, and delivered once.
    hw = hookwheel_factory(redis, args=LEAD)
    base = int(now_ms()) + 2500
    fire_at = {}
    for i in range(30):
        t = assert_created(*hw.create({"id": f"rb-{i}", "url": receiver.url("/rb"), "fire_at_ms": base + 10 * i}))
        fire_at[t["id"]] = t["fire_at_ms"]
    sleep_until_ms(base - 1000 + 100)  # within the begins of the first few
    redis.stop()
    time.sleep(1.5)
    redis.restart()
    assert_each_delivered_once_not_early(hw, receiver, "/rb", fire_at)


# --------------------------------------------------------------------------
# instructions while an attempt is held


def post(hw, timer_id, op, body=None):
    return hw.request("POST", f"/timers/{timer_id}/{op}", json_body=body)


def test_cancels_racing_the_begin_at_many_offsets_are_exact(redis, hookwheel_factory, receiver):
    # Each timer is cancelled at its own offset from its due time, from
    # before its begin (1 s ahead) to after its attempt: every 200 means it
    # is never delivered, every 409 that it is delivered exactly once.
    hw = hookwheel_factory(redis, args=LEAD)
    n = 60
    base = int(now_ms()) + 2500
    fire_at = {}
    for i in range(n):
        t = assert_created(*hw.create({"id": f"race-{i}", "url": receiver.url("/race"), "fire_at_ms": base + 40 * i}))
        fire_at[t["id"]] = t["fire_at_ms"]
    answers = {}
    with hw.api.session() as s:
        for i in range(n):
            tid = f"race-{i}"
            sleep_until_ms(fire_at[tid] - 1300 + 25 * i)  # 1.3 s ahead to 175 ms after
            status, _, body = s.cancel(tid)
            answers[tid] = (status, body.get("state") if isinstance(body, dict) else body)
    statuses = Counter(st for st, _ in answers.values())
    assert set(statuses) <= {200, 409}, answers
    assert statuses[200] >= 3 and statuses[409] >= 3, statuses  # the offsets cover both sides
    sleep_until_ms(max(fire_at.values()) + 1000)
    for tid, (status, _) in answers.items():
        want = "cancelled" if status == 200 else "delivered"
        done = hw.wait_state(tid, want, timeout=scaled(5))
        assert done.get("state") == want, (tid, answers[tid], done)
    counts = Counter(r.timer_id for r in receiver.requests("/race"))
    wrong = {tid: (answers[tid], counts.get(tid, 0)) for tid in fire_at
             if counts.get(tid, 0) != (0 if answers[tid][0] == 200 else 1)}
    assert not wrong, f"(cancel answer, deliveries): {wrong}"
    assert_not_early(receiver.requests("/race"), fire_at)


def test_fire_reschedule_and_pause_of_a_held_one_shot_timer_answer_409_and_it_arrives_once_at_its_due_time(
        redis, hookwheel_factory, receiver):
    hw = hookwheel_factory(redis, args=LEAD)
    t = assert_created(*hw.create({"id": "held-ops", "url": receiver.url("/held-ops"), "delay_ms": 2500}))
    sleep_until_ms(t["fire_at_ms"] - 800)
    wait_firing(hw, t["id"], timeout=0.3)
    for op, body in (("fire", None), ("reschedule", {"delay_ms": 5000}), ("pause", None)):
        status, _, answer = post(hw, t["id"], op, body)
        assert status == 409 and answer.get("state") == "firing", (op, status, answer)
    assert now_ms() < t["fire_at_ms"], "the instructions came too late to mean anything"
    got = receiver.wait_for(1, path="/held-ops", timeout=scaled(5))
    assert len(got) == 1, got
    assert_not_early(got, {t["id"]: t["fire_at_ms"]})
    time.sleep(0.5)
    assert len(receiver.requests("/held-ops")) == 1
    done = hw.wait_state(t["id"], "delivered", timeout=scaled(5))
    assert done.get("attempts") == 1, done


def test_resume_of_a_held_one_shot_timer_changes_nothing_and_answers_200(redis, hookwheel_factory, receiver):
    # Resume answers 409 only for a finished timer; resuming a timer that is
    # not paused changes nothing (openapi.yaml, resumeTimer).
    hw = hookwheel_factory(redis, args=LEAD)
    t = assert_created(*hw.create({"id": "held-resume", "url": receiver.url("/held-resume"), "delay_ms": 2500}))
    sleep_until_ms(t["fire_at_ms"] - 800)
    wait_firing(hw, t["id"], timeout=0.3)
    status, _, body = post(hw, t["id"], "resume")
    assert status == 200 and body["state"] == "firing" and body["version"] == 0, (status, body)
    got = receiver.wait_for(1, path="/held-resume", timeout=scaled(5))
    assert len(got) == 1, got
    assert_not_early(got, {t["id"]: t["fire_at_ms"]})
    done = hw.wait_state(t["id"], "delivered", timeout=scaled(5))
    assert done.get("attempts") == 1, done


def test_fire_reschedule_and_pause_of_a_held_recurring_run_apply_after_that_run(redis, hookwheel_factory, receiver):
    # A held run of a recurring timer is a run in progress: it starts at its
    # due time, never alongside another; the instruction applies after it.
    hw = hookwheel_factory(redis, args=LEAD)
    spec = {"delay_ms": 2500, "repeat": {"every_ms": 60000}}
    fired = assert_created(*hw.create({**spec, "id": "hr-fire", "url": receiver.url("/hr-fire")}))
    moved = assert_created(*hw.create({**spec, "id": "hr-move", "url": receiver.url("/hr-move")}))
    paused = assert_created(*hw.create({**spec, "id": "hr-pause", "url": receiver.url("/hr-pause")}))
    sleep_until_ms(fired["fire_at_ms"] - 800)
    for t in (fired, moved, paused):
        wait_firing(hw, t["id"], timeout=0.3)
    status, _, body = post(hw, "hr-fire", "fire")
    assert status == 200 and body["state"] == "firing", body
    asked_at = now_ms()  # (the delay runs from when hookwheel took the call: after this, before its answer)
    status, _, body = post(hw, "hr-move", "reschedule", {"delay_ms": 1500})
    assert status == 200 and body["state"] == "firing", body
    status, _, body = post(hw, "hr-pause", "pause")
    assert status == 200 and body["state"] == "firing", body
    assert now_ms() < fired["fire_at_ms"], "the instructions came too late to mean anything"
    # fire: the reserved run follows right after the held one, not alongside it
    got = receiver.wait_for(2, path="/hr-fire", timeout=scaled(5))
    assert len(got) == 2, got
    assert_not_early(got[:1], {"hr-fire": fired["fire_at_ms"]})
    assert got[1].mono >= got[0].done_mono - 0.005 and receiver.max_concurrent("/hr-fire") == 1
    # reschedule: the held run at its due time, the next 1.5 s after the call
    got = receiver.wait_for(2, path="/hr-move", timeout=scaled(5))
    assert len(got) == 2, got
    assert_not_early(got[:1], {"hr-move": moved["fire_at_ms"]})
    assert got[1].wall_ms >= asked_at + 1500 - ROUNDING_MS, got[1].wall_ms - asked_at
    # pause: the held run, then nothing
    done = hw.wait_state("hr-pause", "paused", timeout=scaled(5))
    assert done.get("state") == "paused", done
    got = receiver.requests("/hr-pause")
    assert len(got) == 1, got
    assert_not_early(got, {"hr-pause": paused["fire_at_ms"]})
    time.sleep(0.5)
    assert len(receiver.requests("/hr-fire")) == 2 and len(receiver.requests("/hr-pause")) == 1
    for tid in ("hr-fire", "hr-move", "hr-pause"):
        assert hw.cancel(tid)[0] in (200, 202), tid


def test_a_timer_rescheduled_just_before_its_begin_runs_at_the_new_time_only(redis, hookwheel_factory, receiver):
    # Moved later or earlier a moment before it would be begun (the job in
    # the wheel is revoked): it runs once, at the new due time, held ahead
    # of it when that is within the lead.
    hw = hookwheel_factory(redis, args=LEAD)
    later = assert_created(*hw.create({"id": "mv-later", "url": receiver.url("/mv"), "delay_ms": 2500}))
    earlier = assert_created(*hw.create({"id": "mv-earlier", "url": receiver.url("/mv"), "delay_ms": 2500}))
    sleep_until_ms(later["fire_at_ms"] - 1150)
    status, _, body = post(hw, "mv-later", "reschedule", {"delay_ms": 1800})
    assert status == 200 and body["state"] == "scheduled", body
    new_later = body["fire_at_ms"]
    status, _, body = post(hw, "mv-earlier", "reschedule", {"delay_ms": 600})
    assert status == 200 and body["state"] == "scheduled", body
    new_earlier = body["fire_at_ms"]
    assert new_later > later["fire_at_ms"] and new_earlier < earlier["fire_at_ms"], (new_later, new_earlier)
    assert now_ms() < later["fire_at_ms"] - 1000, "the reschedules came too late to mean anything"
    time.sleep(0.2)
    status, _, body = hw.get("mv-earlier")
    assert body["state"] == "firing", body  # due within the lead: begun, held
    got = receiver.wait_for(2, path="/mv", timeout=scaled(6))
    time.sleep(0.5)
    got = receiver.requests("/mv")
    assert Counter(r.timer_id for r in got) == {"mv-later": 1, "mv-earlier": 1}, got
    assert_not_early(got, {"mv-later": new_later, "mv-earlier": new_earlier})


def test_a_held_timer_whose_record_disappears_ends_without_harm(redis, hookwheel_factory, receiver):
    # The record of a begun timer goes away while its attempt is held (as
    # its retention would remove a finished one): the attempt still starts
    # (it was begun), its outcome finds nothing to write, and the instance
    # goes on, delivering the others.
    hw = hookwheel_factory(redis, args=LEAD)
    gone = assert_created(*hw.create({"id": "rec-gone", "url": receiver.url("/gone"), "delay_ms": 2500}))
    other = assert_created(*hw.create({"id": "rec-other", "url": receiver.url("/gone"), "delay_ms": 2600}))
    sleep_until_ms(gone["fire_at_ms"] - 800)
    wait_firing(hw, "rec-gone", timeout=0.3)
    deleted = [k for k in redis.keys("hw:*rec-gone*")]
    assert deleted, redis.keys("hw:*")
    redis.cmd("DEL", *deleted)
    got = receiver.wait_for(2, path="/gone", timeout=scaled(5))
    assert sorted(r.timer_id for r in got) == ["rec-gone", "rec-other"], got
    assert_not_early(got, {"rec-gone": gone["fire_at_ms"], "rec-other": other["fire_at_ms"]})
    done = hw.wait_state("rec-other", "delivered", timeout=scaled(5))
    assert done.get("state") == "delivered", done
    assert hw.get("rec-gone")[0] == 404
    later = assert_created(*hw.create({"id": "rec-after", "url": receiver.url("/gone"), "delay_ms": 100}))
    assert len(receiver.wait_for(3, path="/gone", timeout=scaled(5))) == 3, later


def test_with_no_lead_nothing_is_held_and_nothing_is_early(redis, hookwheel_factory, receiver):
    hw = hookwheel_factory(redis, args=["--begin-lead-ms", "0"])
    base = int(now_ms()) + 600
    fire_at = {}
    for i in range(20):
        t = assert_created(*hw.create({"id": f"nolead-{i}", "url": receiver.url("/nolead"),
                                       "fire_at_ms": base + 7 * i if i < 15 else base - 5000}))
        fire_at[t["id"]] = t["fire_at_ms"]
    got = receiver.wait_for(20, path="/nolead", timeout=scaled(5))
    assert sorted(r.timer_id for r in got) == sorted(fire_at), got
    assert_not_early(got, fire_at)


def test_a_lead_longer_than_the_claim_window_begins_at_the_claim_and_is_never_early(
        redis, hookwheel_factory, receiver):
    hw = hookwheel_factory(redis, args=LEAD + ["--window-ms", "400"])
    base = int(now_ms()) + 1500
    fire_at = {}
    for i in range(10):
        t = assert_created(*hw.create({"id": f"short-{i}", "url": receiver.url("/short"),
                                       "fire_at_ms": base + 97 * i}))
        fire_at[t["id"]] = t["fire_at_ms"]
    got = receiver.wait_for(10, path="/short", timeout=scaled(8))
    time.sleep(0.3)
    got = receiver.requests("/short")
    assert Counter(r.timer_id for r in got) == {tid: 1 for tid in fire_at}, got
    assert_not_early(got, fire_at)
