"""Calendar schedules (repeat.cron + repeat.tz): the runs a timer makes are
its preview, each run has its own webhook-id, a missed slot follows the
misfire policy, and DST rules are visible in GET /schedules/preview. With a
real redis-server, the real hookwheel binary and a real receiver."""
import math
import signal
import time
import urllib.parse

import pytest

from conftest import Reply, assert_created, scaled


def preview(hw, **query):
    status, _, body = hw.request("GET", "/schedules/preview?" + urllib.parse.urlencode(query))
    return status, body


def slots(hw, cron, from_ms, count, **extra):
    status, body = preview(hw, cron=cron, **{"from": str(int(from_ms)), "count": str(count)}, **extra)
    assert status == 200, body
    return [i["at_ms"] for i in body["instants"] if i.get("dst") != "skipped"]


def assert_on_slots(deliveries, expected, late_s=0.8):
    """Each delivery came at its slot, not before, and not much after."""
    assert len(deliveries) == len(expected), ([r.wall_ms for r in deliveries], expected)
    for r, slot in zip(deliveries, expected):
        assert slot <= r.wall_ms + 5 <= slot + late_s * 1000 + 5, (r.wall_ms, slot, expected)


def test_an_every_second_schedule_runs_at_its_previewed_slots_each_run_with_its_own_webhook_id(hookwheel,
                                                                                               receiver):
    receiver.plan("/sec", [500])  # the first run's first attempt fails; its retry shares its webhook-id
    created_ms = time.time() * 1000
    timer = assert_created(*hookwheel.create({
        "id": "sec", "url": receiver.url("/sec"),
        "repeat": {"cron": "*/1 * * * * *", "times": 4},
        "retry": {"max_attempts": 3, "min_backoff_ms": 50, "max_backoff_ms": 100}}))
    assert timer["repeat"]["cron"] == "*/1 * * * * *" and timer["repeat"]["tz"] == "UTC", timer
    assert timer["repeat"]["misfire"] == "skip" and timer["repeat"]["dst_gap"] == "shift", timer
    receiver.wait_for(5, path="/sec", timeout=scaled(10))
    got = receiver.requests("/sec")
    assert [(r.headers["webhook-id"], r.headers["Hookwheel-Attempt"]) for r in got] == [
        ("sec:1", "1"), ("sec:1", "2"), ("sec:2", "1"), ("sec:3", "1"), ("sec:4", "1")]
    expected = slots(hookwheel, "*/1 * * * * *", created_ms, 4)
    assert timer["fire_at_ms"] == expected[0], (timer["fire_at_ms"], expected)
    assert_on_slots([got[0], got[2], got[3], got[4]], expected)
    body = hookwheel.wait_state("sec", "delivered", scaled(5))
    assert body["runs"] == 4 and body["skipped_slots"] == 0, body


def _stop_and_restart(hw_factory, redis, hw, seconds):
    assert hw.stop(signal.SIGTERM, timeout=scaled(15)) == 0
    time.sleep(seconds)
    restarted_ms = time.time() * 1000
    return hw_factory(redis, instance_id="sched-b"), restarted_ms


def test_misfire_fire_once_makes_one_catch_up_run_after_a_5_s_stop(hookwheel_factory, redis, receiver):
    a = hookwheel_factory(redis, instance_id="sched-a")
    assert_created(*a.create({"id": "fo", "url": receiver.url("/fo"),
                              "repeat": {"cron": "*/2 * * * * *", "misfire": "fire_once"}}))
    receiver.wait_for(2, path="/fo", timeout=scaled(8))
    b, restarted_ms = _stop_and_restart(hookwheel_factory, redis, a, 5)
    before = len([r for r in receiver.requests("/fo") if r.wall_ms < restarted_ms])
    receiver.wait_for(before + 3, path="/fo", timeout=scaled(10))
    after = [r for r in receiver.requests("/fo") if r.wall_ms >= restarted_ms]
    catch_up, rest = after[0], after[1:3]
    # one catch-up run at once, then the schedule's own slots, none skipped
    assert catch_up.wall_ms - restarted_ms < scaled(3000), catch_up.wall_ms - restarted_ms
    assert_on_slots(rest, slots(b, "*/2 * * * * *", catch_up.wall_ms, 2))
    runs = [int(r.headers["Hookwheel-Run"]) for r in receiver.requests("/fo")]
    assert runs == list(range(1, len(runs) + 1)), runs
    b.cancel("fo")


def test_misfire_skip_runs_nothing_for_missed_slots_and_counts_them(hookwheel_factory, redis, receiver):
    a = hookwheel_factory(redis, instance_id="sched-a")
    assert_created(*a.create({"id": "sk", "url": receiver.url("/sk"),
                              "repeat": {"cron": "*/2 * * * * *"}}))
    receiver.wait_for(1, path="/sk", timeout=scaled(6))
    b, restarted_ms = _stop_and_restart(hookwheel_factory, redis, a, 5)
    before = len([r for r in receiver.requests("/sk") if r.wall_ms < restarted_ms])
    receiver.wait_for(before + 2, path="/sk", timeout=scaled(10))
    after = [r for r in receiver.requests("/sk") if r.wall_ms >= restarted_ms][:2]
    # no catch-up: the first run after the restart is at a slot of its own
    assert_on_slots(after, slots(b, "*/2 * * * * *", restarted_ms, 2), late_s=scaled(1.5))
    status, _, body = b.get("sk")
    assert status == 200 and body["skipped_slots"] >= 2, body
    b.cancel("sk")


def test_the_preview_shows_the_dst_rules_at_the_edges(hookwheel):
    spring, autumn = "2027-03-27T12:00:00Z", "2027-10-30T12:00:00Z"
    status, body = preview(hookwheel, cron="30 2 * * *", tz="Europe/Berlin", **{"from": spring, "count": "2"})
    assert status == 200, body
    first = body["instants"][0]
    assert (first["at"], first["local"], first["dst"]) == ("2027-03-28T01:00:00.000Z", "2027-03-28T03:00:00+02:00",
                                                           "shifted"), body
    assert body["instants"][1]["at"] == "2027-03-29T00:30:00.000Z", body
    status, body = preview(hookwheel, cron="30 2 * * *", tz="Europe/Berlin", dst_gap="skip",
                           **{"from": spring, "count": "1"})
    assert status == 200, body
    assert [(i["at"], i.get("dst")) for i in body["instants"]] == [
        ("2027-03-28T01:00:00.000Z", "skipped"), ("2027-03-29T00:30:00.000Z", None)], body
    status, body = preview(hookwheel, cron="30 2 * * *", tz="Europe/Berlin", **{"from": autumn, "count": "2"})
    assert [i["at"] for i in body["instants"]] == ["2027-10-31T00:30:00.000Z", "2027-11-01T01:30:00.000Z"], body
    status, body = preview(hookwheel, cron="30 2 * * *", tz="Europe/Berlin", dst_overlap="both",
                           **{"from": autumn, "count": "3"})
    assert [(i["at"], i["abbrev"], i.get("dst")) for i in body["instants"]] == [
        ("2027-10-31T00:30:00.000Z", "CEST", None), ("2027-10-31T01:30:00.000Z", "CET", "second_occurrence"),
        ("2027-11-01T01:30:00.000Z", "CET", None)], body
    status, body = preview(hookwheel, every_ms="1500", **{"from": "0", "count": "3"})
    assert status == 200 and [i["at_ms"] for i in body["instants"]] == [0, 1500, 3000], body


def test_bad_schedules_answer_400_naming_the_field(hookwheel, receiver):
    url = receiver.url("/never")
    cases = [
        ({"repeat": {"cron": "61 * * * *"}}, "repeat.cron", "minute"),
        ({"repeat": {"cron": "* * * *"}}, "repeat.cron", None),
        ({"repeat": {"cron": "0 9 * * MON-FRI", "tz": "Mars/Olympus"}}, "repeat.tz", None),
        ({"repeat": {"cron": "0 9 * * *", "tz": "../etc/passwd"}}, "repeat.tz", None),
        ({"repeat": {"cron": "0 9 * * *"}, "delay_ms": 5}, "delay_ms", None),
        ({"repeat": {"cron": "0 9 * * *", "every_ms": 1000}}, "repeat.every_ms", None),
        ({"repeat": {"every_ms": 1000, "tz": "UTC"}, "delay_ms": 0}, "repeat.cron", None),
        ({"repeat": {"cron": "0 9 * * *", "dst_gap": "later"}}, "repeat.dst_gap", None),
        ({"repeat": {"cron": "0 9 * * *", "misfire": "all"}}, "repeat.misfire", None),
        ({"repeat": {"cron": "0 0 30 2 *"}}, "repeat.cron", None),
        ({"repeat": {"cron": "0 9 * * *", "start_at": "2030-01-02T00:00:00Z",
                     "end_at": "2030-01-01T00:00:00Z"}}, "repeat.end_at", None),
    ]
    for extra, field, word in cases:
        status, _, body = hookwheel.create({"url": url, **extra})
        assert status == 400 and body["field"] == field, (extra, status, body)
        if word:
            assert word in body["detail"] and "position" in body["detail"], body
    status, body = preview(hookwheel, cron="0 25 * * *")
    assert status == 400 and body["field"] == "repeat.cron", body
    status, body = preview(hookwheel, cron="0 9 * * *", count="101")
    assert status == 400 and body["field"] == "count", body
    assert receiver.requests("/never") == []


def test_the_preview_refuses_what_a_timer_refuses_and_never_lists_an_instant_past_year_9999(hookwheel, receiver):
    # every_ms above HOOKWHEEL_MAX_DELAY_MS: POST /timers refuses it, and so does the preview
    huge = 4611686018427387903
    status, _, body = hookwheel.create({"url": receiver.url("/never"), "delay_ms": 0,
                                        "repeat": {"every_ms": huge, "mode": "fixed_rate"}})
    assert status == 400 and body["field"] == "repeat.every_ms", body
    for every in (huge, 9223372036854775807, 365 * 86400000 + 1):
        status, body = preview(hookwheel, every_ms=str(every), count="3")
        assert status == 400 and body["field"] == "repeat.every_ms", (every, status, body)
    # cron and every_ms together: the preview names what a create names (not a delay_ms it was not given)
    status, body = preview(hookwheel, cron="* * * * *", every_ms="100")
    assert status == 400 and body["field"] == "repeat.every_ms" and "delay_ms" not in body["detail"], body
    # a `from` beyond what RFC 3339 can write (9999-12-31T23:59:59.999Z) is refused
    for frm in ("9223372036854775807", "253402300800000"):
        for q in ({"every_ms": "1000"}, {"cron": "0 * * * *", "tz": "UTC"}):
            status, body = preview(hookwheel, **q, **{"from": frm, "count": "2"})
            assert status == 400 and body["field"] == "from", (frm, q, status, body)
    # instants stop at the last one RFC 3339 can write: each `at` is its `at_ms`, in order
    last = 253402300799999
    for q in ({"every_ms": str(365 * 86400000)}, {"cron": "0 * * * *", "tz": "UTC"}):
        status, body = preview(hookwheel, **q, **{"from": str(last - 3600000), "count": "5"})
        assert status == 200, (q, body)
        ats = [i["at_ms"] for i in body["instants"]]
        assert ats and ats == sorted(ats) and all(last - 3600000 <= a <= last for a in ats), (q, body)
        for i in body["instants"]:
            assert i["at"].startswith("9999-12-31T2"), i


def test_a_preview_parameter_that_is_not_utf8_is_refused_naming_it_not_ignored(hookwheel):
    cron = "0 9 * * *"
    status, body = preview(hookwheel, cron=cron, tz="Europe/Paris", count="1")
    assert status == 200 and body["tz"] == "Europe/Paris", body
    # a byte that is not UTF-8 (%FF) in any parameter: 400 naming it, never
    # a preview without it (in UTC, say) nor an error about another field
    for name, good in (("tz", "Europe/Paris"), ("start_at", "2030-01-01T00:00:00Z"),
                       ("end_at", "2030-01-01T00:00:00Z"), ("dst_gap", "skip"), ("dst_overlap", "both"),
                       ("cron", cron)):
        q = {"cron": cron, "count": "1", name: good.encode() + b"\xff"}
        status, body = preview(hookwheel, **q)
        assert status == 400 and body["field"] == f"repeat.{name}", (name, status, body)
        assert "UTF-8" in body["detail"], body
    status, body = preview(hookwheel, every_ms=b"10\xff", count="1")
    assert status == 400 and body["field"] == "repeat.every_ms", (status, body)


def test_a_schedule_bounded_by_start_at_and_end_at_runs_only_between_them(hookwheel, receiver):
    start = math.ceil(time.time() + 2)
    assert_created(*hookwheel.create({
        "id": "bounded", "url": receiver.url("/bounded"),
        "repeat": {"cron": "*/1 * * * * *", "start_at_ms": start * 1000, "end_at_ms": (start + 2) * 1000}}))
    body = hookwheel.wait_state("bounded", "delivered", scaled(10))
    assert body["state"] == "delivered" and body["runs"] == 3, body
    assert_on_slots(receiver.requests("/bounded"), [start * 1000, (start + 1) * 1000, (start + 2) * 1000])


def test_a_schedule_paused_during_a_run_and_resumed_before_its_next_slot_waits_for_that_slot(hookwheel, receiver):
    receiver.default("/pr", Reply(204, delay_s=1.0))
    timer = assert_created(*hookwheel.create({"id": "pr", "url": receiver.url("/pr"),
                                              "repeat": {"cron": "*/10 * * * * *"}}))
    first = receiver.wait_for(1, path="/pr", timeout=scaled(13))
    assert len(first) == 1
    status, _, body = hookwheel.request("POST", "/timers/pr/pause")
    assert status == 200 and body["state"] == "firing", body
    paused = hookwheel.wait_state("pr", "paused", timeout=scaled(3))
    assert paused["state"] == "paused", paused
    status, _, body = hookwheel.request("POST", "/timers/pr/resume")
    assert status == 200 and body["state"] == "scheduled", body
    # the slot that just ran is not taken up again: the next run is the next slot
    expected = slots(hookwheel, "*/10 * * * * *", first[0].wall_ms + 1, 1)
    assert body["fire_at_ms"] == expected[0], (body["fire_at_ms"], expected, first[0].wall_ms)
    got = receiver.wait_for(2, path="/pr", timeout=scaled(13))
    assert len(got) == 2, got
    assert_on_slots(got[1:], expected)
    hookwheel.cancel("pr")


@pytest.mark.parametrize("when", ["between_attempts", "during_a_retry"])
def test_a_schedule_paused_while_retrying_takes_up_its_slot_and_its_misfire_policy_on_resume(hookwheel, receiver,
                                                                                             when):
    """Paused between the attempts of a run, or during its retry, a schedule
    resumes at that run's slot, not at its retry's instant: resumed after
    later slots passed, the slot is missed and misfire skip runs nothing
    until the next slot."""
    cron, tid, path = "*/2 * * * * *", f"prt-{when}", f"/prt-{when}"
    if when == "between_attempts":
        receiver.plan(path, [Reply(500)])
        retry = {"min_backoff_ms": 3000, "max_backoff_ms": 3000}
    else:
        receiver.plan(path, [Reply(500), Reply(500, delay_s=1.5)])
        retry = {"min_backoff_ms": 500, "max_backoff_ms": 500}
    receiver.default(path, Reply(204))
    assert_created(*hookwheel.create({"id": tid, "url": receiver.url(path), "repeat": {"cron": cron},
                                      "retry": retry}))
    first = receiver.wait_for(1, path=path, timeout=scaled(4))
    assert len(first) == 1
    slot = int(first[0].wall_ms) // 2000 * 2000
    if when == "between_attempts":
        hookwheel.wait_state(tid, "retrying", timeout=scaled(2))
        status, _, body = hookwheel.request("POST", f"/timers/{tid}/pause")
        assert status == 200 and body["state"] == "paused", body
    else:
        assert len(receiver.wait_for(2, path=path, timeout=scaled(3))) == 2
        status, _, body = hookwheel.request("POST", f"/timers/{tid}/pause")
        assert status == 200 and body["state"] == "firing", body
        hookwheel.wait_state(tid, "paused", timeout=scaled(3))
    status, _, body = hookwheel.get(tid)
    assert body["fire_at_ms"] == slot, (body["fire_at_ms"], slot)  # the run's slot, not its retry's instant
    time.sleep(max(0.0, (slot + 4500) / 1000 - time.time()))  # the slots after it pass
    resumed_ms = time.time() * 1000
    status, _, body = hookwheel.request("POST", f"/timers/{tid}/resume")
    assert status == 200, body
    runs = 3 if when == "during_a_retry" else 2
    got = receiver.wait_for(runs, path=path, timeout=scaled(6))
    assert len(got) == runs, got
    expected = slots(hookwheel, cron, resumed_ms, 1)
    assert got[-1].wall_ms + 5 >= expected[0], ("a run at once, off its slots", got[-1].wall_ms, resumed_ms, expected)
    status, _, body = hookwheel.get(tid)
    assert status == 200 and body["skipped_slots"] >= 1, body
    hookwheel.cancel(tid)


def test_misfire_skip_applies_to_slots_missed_while_the_queue_was_paused(hookwheel, receiver):
    status, _, body = hookwheel.request("PUT", "/queues/calq", json_body={"paused": True})
    assert status == 200, body
    time.sleep(1.2)  # queue settings are applied within a second
    assert_created(*hookwheel.create({"id": "qsk", "url": receiver.url("/qsk"), "queue": "calq",
                                      "repeat": {"cron": "*/2 * * * * *"}}))
    time.sleep(5.5)  # two slots or more pass while the queue starts nothing
    assert receiver.requests("/qsk") == []
    resumed_ms = time.time() * 1000
    status, _, body = hookwheel.request("PUT", "/queues/calq", json_body={"paused": False})
    assert status == 200, body
    got = receiver.wait_for(2, path="/qsk", timeout=scaled(8))
    assert len(got) == 2, got
    # no catch-up run for the missed slots: the first run is at a slot after the resume
    expected = slots(hookwheel, "*/2 * * * * *", resumed_ms, 3)
    assert got[0].wall_ms + 5 >= expected[0], (got[0].wall_ms, resumed_ms, expected)
    status, _, body = hookwheel.get("qsk")
    assert status == 200 and body["skipped_slots"] >= 2, body
    hookwheel.cancel("qsk")


def test_misfire_skip_applies_to_slots_missed_while_redis_was_unreachable(redis, hookwheel, receiver):
    assert_created(*hookwheel.create({"id": "rsk", "url": receiver.url("/rsk"),
                                      "repeat": {"cron": "*/2 * * * * *"}}))
    receiver.wait_for(1, path="/rsk", timeout=scaled(6))
    before = len(receiver.requests("/rsk"))
    redis.stop()
    time.sleep(5.5)  # the slots due meanwhile cannot begin: two or more are missed
    redis.restart()
    back_ms = time.time() * 1000
    got = receiver.wait_for(before + 2, path="/rsk", timeout=scaled(10))
    after = [r for r in got if r.wall_ms >= back_ms - 50][:2]
    assert len(after) == 2, got
    # no late run of a missed slot: each run after the outage is at a slot of its own
    late_ms = min(scaled(800), 1500)
    for r in after:
        assert r.wall_ms % 2000 + 5 <= late_ms, (r.wall_ms, back_ms, [x.wall_ms for x in got])
    status, _, body = hookwheel.get("rsk")
    assert status == 200 and body["skipped_slots"] >= 2, body
    hookwheel.cancel("rsk")


def test_with_dst_gap_skip_a_real_slot_at_the_end_of_the_gap_is_previewed_as_a_run(hookwheel, receiver):
    # "0 2,3": on 2027-03-28 in Berlin 02:00 falls in the gap, 03:00 is a slot of its own
    status, body = preview(hookwheel, cron="0 2,3 * * *", tz="Europe/Berlin", dst_gap="skip",
                           **{"from": "2027-03-27T12:00:00Z", "count": "2"})
    assert status == 200, body
    assert [(i["at"], i.get("dst")) for i in body["instants"]] == [
        ("2027-03-28T01:00:00.000Z", None), ("2027-03-29T00:00:00.000Z", None)], body
    # and that is the run the engine makes
    timer = assert_created(*hookwheel.create({
        "url": receiver.url("/gap"), "repeat": {"cron": "0 2,3 * * *", "tz": "Europe/Berlin", "dst_gap": "skip",
                                                "start_at": "2027-03-27T12:00:00Z"}}))
    assert timer["fire_at"] == "2027-03-28T01:00:00.000Z", timer
    # a slot the gap swallows alone is still listed as skipped
    status, body = preview(hookwheel, cron="0 2 * * *", tz="Europe/Berlin", dst_gap="skip",
                           **{"from": "2027-03-27T12:00:00Z", "count": "1"})
    assert [(i["at"], i.get("dst")) for i in body["instants"]] == [
        ("2027-03-28T01:00:00.000Z", "skipped"), ("2027-03-29T00:00:00.000Z", None)], body


def test_a_schedule_rescheduled_to_a_past_time_runs_at_once_and_skips_nothing(hookwheel, receiver):
    assert_created(*hookwheel.create({"id": "rpast", "url": receiver.url("/rpast"),
                                      "repeat": {"cron": "0 * * * * *"}}))
    sent_ms = time.time() * 1000
    status, _, body = hookwheel.request("POST", "/timers/rpast/reschedule",
                                        json_body={"fire_at_ms": int(sent_ms) - 180000})
    assert status == 200 and body["state"] == "scheduled", body
    got = receiver.wait_for(1, path="/rpast", timeout=scaled(3))
    assert len(got) >= 1 and got[0].wall_ms - sent_ms < scaled(1500), (got, sent_ms)
    status, _, body = hookwheel.get("rpast")
    assert status == 200 and body["skipped_slots"] == 0 and body["runs"] >= 1, body
    hookwheel.cancel("rpast")


def test_a_schedule_cancelled_in_a_run_its_instance_died_in_leaves_no_skipped_count(redis, receiver,
                                                                                     hookwheel_factory):
    lease = ["--lease-ttl-ms", "1500"]
    a = hookwheel_factory(redis, args=lease)
    assert a.request("PUT", "/queues/calx", json_body={"paused": True})[0] == 200
    time.sleep(1.2)  # queue settings are applied within a second
    receiver.default("/calx", Reply(204, delay_s=scaled(6)))
    assert_created(*a.create({"id": "calx", "url": receiver.url("/calx"), "queue": "calx",
                              "repeat": {"cron": "*/2 * * * * *"}}))
    time.sleep(5.5)  # two slots or more pass while the queue starts nothing: skipped at the resume
    assert a.request("PUT", "/queues/calx", json_body={"paused": False})[0] == 200
    receiver.wait_for(1, path="/calx", timeout=scaled(5))
    assert a.get("calx")[2]["skipped_slots"] >= 1
    status, _, body = a.cancel("calx")  # in its run: cancelled when the run ends
    assert status == 202, body
    # the run never ends: its instance dies in it, and another takes its claims over
    assert a.kill9() == -9
    b = hookwheel_factory(redis, args=lease)
    assert b.wait_state("calx", "cancelled", scaled(10))["state"] == "cancelled"
    # its count of skipped slots went with it, as with any schedule that ends
    assert not [k for k in redis.keys("hw:{*}:sk") if int(redis.cmd("HEXISTS", k, "calx"))]
