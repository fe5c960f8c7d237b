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


def test_a_calendar_schedule_with_times_runs_exactly_that_often(hookwheel, receiver):
    assert_created(*hookwheel.create({
        "id": "cal-times", "url": receiver.url("/cal-times"), "repeat": {"cron": "* * * * * *", "times": 3}}))
    done = hookwheel.wait_state("cal-times", "delivered", timeout=scaled(6))
    assert done["runs"] == 3, done
    time.sleep(1.5)
    assert [i[:2] for i in identities(receiver, "/cal-times")] == [
        ("cal-times:1", "1"), ("cal-times:2", "2"), ("cal-times:3", "3")]


def test_a_failed_calendar_run_retried_from_the_dead_letters_goes_on_at_its_next_slots(hookwheel, receiver):
    receiver.plan("/cal-dl", [204, 500])
    assert_created(*hookwheel.create({
        "id": "cal-dl", "url": receiver.url("/cal-dl"), "repeat": {"cron": "* * * * * *", "times": 4},
        "retry": {"max_attempts": 1}}))
    failed = hookwheel.wait_state("cal-dl", "failed", timeout=scaled(5))
    assert failed["runs"] == 2, failed
    time.sleep(1.2)
    assert len(receiver.requests("/cal-dl")) == 2  # a failed schedule stops
    assert post(hookwheel, "cal-dl", "retry")[0] == 200
    done = hookwheel.wait_state("cal-dl", "delivered", timeout=scaled(6))
    assert done["runs"] == 4, done
    assert [i[:2] for i in identities(receiver, "/cal-dl")] == [
        ("cal-dl:1", "1"), ("cal-dl:2", "2"), ("cal-dl:2", "2"), ("cal-dl:3", "3"), ("cal-dl:4", "4")]


def test_max_duration_counts_from_when_each_run_was_due(hookwheel, receiver):
    receiver.plan("/dur-run", [204, 503, 503, 503, 503, 503, 503, 503, 503])
    t0 = time.time()
    assert_created(*hookwheel.create({
        "id": "dur-run", "url": receiver.url("/dur-run"), "delay_ms": 0, "repeat": {"every_ms": 1500},
        "retry": {"max_attempts": 50, "max_duration_ms": 1200, "min_backoff_ms": 400, "max_backoff_ms": 400}}))
    failed = hookwheel.wait_state("dur-run", "failed", timeout=scaled(8))
    assert failed["runs"] == 2, failed
    got = receiver.requests("/dur-run")
    run2 = [r.wall - t0 for r in got if r.headers["Hookwheel-Run"] == "2"]
    # run 2 is due 1.5 s after run 1 ended; its attempts end by 1.2 s after that
    assert len(run2) >= 3 and run2[-1] - run2[0] <= 1.2 + scaled(0.15), run2


def test_a_queues_dead_letters_behind_a_thousand_of_another_queue_are_purged(hookwheel_factory, redis, receiver):
    hw = hookwheel_factory(redis, args=["--partitions", "1"])
    receiver.default("/dl-many", 404)
    assert_created(*hw.create({"id": "old-b", "url": receiver.url("/dl-many"), "delay_ms": 0, "queue": "qb"}))
    assert hw.wait_state("old-b", "failed", timeout=scaled(5))["state"] == "failed"
    status, _, body = hw.request("POST", "/timers/batch", json_body={"timers": [
        {"id": f"a-{i:04d}", "url": receiver.url("/dl-many"), "delay_ms": 0, "queue": "qa"} for i in range(1000)]})
    assert status in (200, 201, 207), body
    assert_created(*hw.create({"id": "a-last", "url": receiver.url("/dl-many"), "delay_ms": 0, "queue": "qa"}))
    assert hw.wait_state("a-last", "failed", timeout=scaled(10))["state"] == "failed"
    assert receiver.wait_for(1002, path="/dl-many", timeout=scaled(20))
    time.sleep(0.5)
    purged, calls, more = 0, 0, True
    while more and calls < 10:
        status, _, body = hw.request("POST", "/dead-letters/purge", json_body={"queue": "qb"})
        assert status == 200, body
        purged, more, calls = purged + body["purged"], body["more"], calls + 1
    assert (purged, more) == (1, False), (purged, more, calls)
    assert hw.get("old-b")[0] == 404
    assert hw.get("a-0000")[2]["state"] == "failed"
