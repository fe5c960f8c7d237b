"""Queue controls: pause and resume, parallelism and a dispatch rate, stored
in Redis and applied by every instance within a second."""
import time

from conftest import Reply, create_many, scaled

APPLY_S = 1.2  # settings are read every 0.5 s; a second is the promise


def put(hookwheel, name, settings):
    status, _, body = hookwheel.request("PUT", f"/queues/{name}", json_body=settings)
    assert status == 200, body
    return body


def test_a_paused_queue_holds_its_due_timers_and_resume_delivers_them_in_due_order(hookwheel, receiver):
    put(hookwheel, "held", {"paused": True, "parallelism": 1})
    time.sleep(APPLY_S)
    # due a second from now, 10 ms apart, so that every timer is in the wheel
    # before it falls due and they come due (and wait) in due order
    base = int(time.time() * 1000) + 1000
    specs = [{"id": f"held-{i:02d}", "url": receiver.url("/held"), "fire_at_ms": base + 10 * ((i * 17) % 50),
              "queue": "held"} for i in range(50)]
    fire_at, errors = create_many(hookwheel.api, specs)
    assert not errors, errors[:3]
    assert time.time() * 1000 < base, "creating 50 timers took more than a second"
    time.sleep(max(0.0, (base + 500 - time.time() * 1000) / 1000) + 1.0)
    assert receiver.requests("/held") == [], "a paused queue delivered"
    status, _, got = hookwheel.get("held-00")
    assert got["state"] == "scheduled", got
    put(hookwheel, "held", {"paused": False, "parallelism": 1})
    got = receiver.wait_for(50, path="/held", timeout=scaled(10))
    assert len(got) == 50
    order = [r.timer_id for r in got]
    assert order == sorted(fire_at, key=lambda t: (fire_at[t], t)), "not in due order"
    for r in got[:5]:
        assert r.wall_ms - fire_at[r.timer_id] >= 1000  # lateness is counted from due


def test_a_queue_with_parallelism_3_never_has_more_than_3_in_flight(hookwheel, receiver):
    put(hookwheel, "three", {"parallelism": 3})
    time.sleep(APPLY_S)
    receiver.default("/three", Reply(204, delay_s=0.3))
    specs = [{"id": f"three-{i}", "url": receiver.url("/three"), "delay_ms": 0, "queue": "three"}
             for i in range(12)]
    _, errors = create_many(hookwheel.api, specs)
    assert not errors
    got = receiver.wait_for(12, path="/three", timeout=scaled(10))
    assert len(got) == 12
    time.sleep(0.4)
    assert receiver.max_concurrent("/three") == 3
    span = got[-1].mono - got[0].mono
    assert span >= 0.85, f"12 requests of 0.3 s, 3 at a time, took only {span:.2f} s"


def test_a_rate_of_20_per_second_takes_about_5_s_for_100_timers(hookwheel, receiver):
    put(hookwheel, "paced", {"max_dispatches_per_second": 20})
    time.sleep(APPLY_S)
    specs = [{"id": f"paced-{i:03d}", "url": receiver.url("/paced"), "delay_ms": 0, "queue": "paced"}
             for i in range(100)]
    _, errors = create_many(hookwheel.api, specs)
    assert not errors
    got = receiver.wait_for(100, path="/paced", timeout=scaled(15))
    assert len(got) == 100
    span = got[-1].mono - got[0].mono
    assert 4.7 <= span <= 7.0, f"100 dispatches at 20/s took {span:.2f} s; expected about 4.95 s"
    gaps = [b.mono - a.mono for a, b in zip(got, got[1:])]
    assert max(gaps) < 0.5 and sorted(gaps)[len(gaps) // 2] > 0.03, "not paced evenly"


def test_queue_settings_are_listed_read_and_validated(hookwheel):
    status, _, body = hookwheel.request("GET", "/queues/untouched")
    assert status == 200 and body["configured"] is False and body["paused"] is False, body
    assert body["max_dispatches_per_second"] == 0 and body["parallelism"] >= 1, body
    set_ = put(hookwheel, "billing", {"parallelism": 4, "max_dispatches_per_second": 2.5})
    assert set_ == {"name": "billing", "parallelism": 4, "paused": False, "max_dispatches_per_second": 2.5,
                    "scope": "deployment", "configured": True}, set_
    no_timers = {"timers": {"scheduled": 0, "retrying": 0, "paused": 0}, "due": 0,
                 "oldest_due_age_ms": 0, "counts_exact": True}  # GETs add the counts (test_counts.py)
    status, _, body = hookwheel.request("GET", "/queues")
    assert status == 200 and body["queues"] == [{**set_, **no_timers}], body
    status, _, body = hookwheel.request("GET", "/queues/billing")
    assert body == {**set_, **no_timers}, body
    for bad, field in [({"parallelism": 0}, "parallelism"), ({"paused": "yes"}, "paused"),
                       ({"max_dispatches_per_second": -1}, "max_dispatches_per_second"),
                       ({"speed": 1}, "speed")]:
        status, _, body = hookwheel.request("PUT", "/queues/billing", json_body=bad)
        assert status == 400 and body["field"] == field, (bad, body)
    status, _, body = hookwheel.request("PUT", "/queues/bad%20name", json_body={})
    assert status == 404, body
