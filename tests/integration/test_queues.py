"""Queue controls: pause and resume, parallelism and a dispatch rate, stored
in Redis and applied by every instance within a second; PUT replaces them,
PATCH changes the members it names."""
import threading
import time

from conftest import Reply, create_many, scaled

QUEUES_KEY = "hw:{queues}"

APPLY_S = 1.2  # settings are read every 0.5 s; a second is the promise


def put(hookwheel, name, settings):
    status, _, body = hookwheel.request("PUT", f"/queues/{name}", json_body=settings)
    assert status == 200, body
    return body


def patch(hookwheel, name, members, want=200):
    status, _, body = hookwheel.request("PATCH", f"/queues/{name}", json_body=members)
    assert status == want, (members, body)
    return body


def get_queue(hookwheel, name):
    status, _, body = hookwheel.request("GET", f"/queues/{name}")
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


def test_a_rate_reads_back_as_the_put_answered_it(hookwheel):
    for rate in (1234.5678, 0.0012345678, 99999.99):
        set_ = put(hookwheel, "precise", {"max_dispatches_per_second": rate})
        status, _, body = hookwheel.request("GET", "/queues/precise")
        assert status == 200, body
        assert body["max_dispatches_per_second"] == set_["max_dispatches_per_second"] == rate, (rate, set_, body)


# --------------------------------------------------------------------------
# PATCH /queues/{name}


def test_a_patch_of_paused_keeps_parallelism_rate_and_scope_and_answers_as_get(hookwheel):
    put(hookwheel, "keep", {"parallelism": 4, "max_dispatches_per_second": 2.5, "scope": "instance"})
    got = patch(hookwheel, "keep", {"paused": True})
    assert got == get_queue(hookwheel, "keep"), got  # the queue as GET shows it, counts too
    assert {k: got[k] for k in ("parallelism", "paused", "max_dispatches_per_second", "scope", "configured")} == {
        "parallelism": 4, "paused": True, "max_dispatches_per_second": 2.5, "scope": "instance",
        "configured": True}, got
    assert "timers" in got and "due" in got, got
    got = patch(hookwheel, "keep", {"paused": False, "max_dispatches_per_second": 0})
    assert (got["parallelism"], got["paused"], got["max_dispatches_per_second"], got["scope"]) == (
        4, False, 0, "instance"), got
    got = patch(hookwheel, "keep", {"scope": "deployment"})
    assert (got["parallelism"], got["scope"]) == (4, "deployment"), got


def test_a_patch_of_a_never_stored_queue_starts_from_the_defaults_get_shows(hookwheel):
    defaults = get_queue(hookwheel, "fresh")
    assert defaults["configured"] is False, defaults
    got = patch(hookwheel, "fresh", {"max_dispatches_per_second": 5})
    assert got == {**defaults, "max_dispatches_per_second": 5, "configured": True}, (defaults, got)
    assert got["scope"] == "instance" and got["paused"] is False, got
    assert get_queue(hookwheel, "fresh") == got


def test_a_bad_patch_names_the_field_and_stores_nothing(hookwheel, redis):
    put(hookwheel, "strict", {"parallelism": 2, "max_dispatches_per_second": 1})
    before = get_queue(hookwheel, "strict")
    stored = redis.cmd("HGET", QUEUES_KEY, "strict")
    version = redis.cmd("GET", QUEUES_KEY + ":version")
    for bad, field in [({"parallelism": 0}, "parallelism"), ({"parallelism": 1.5}, "parallelism"),
                       ({"paused": "yes"}, "paused"), ({"paused": None}, "paused"),
                       ({"max_dispatches_per_second": -1}, "max_dispatches_per_second"),
                       ({"max_dispatches_per_second": 0.0001}, "max_dispatches_per_second"),
                       ({"scope": "cluster"}, "scope"), ({"speed": 1}, "speed"),
                       ({"paused": True, "parallelism": 0}, "parallelism"),  # one bad member: nothing changes
                       ({}, ""), ([], ""), ("paused", "")]:
        for name in ("strict", "untouched"):
            status, headers, body = hookwheel.request("PATCH", f"/queues/{name}", json_body=bad)
            assert status == 400 and body.get("field", "") == field, (bad, body)
            assert headers["Content-Type"].startswith("application/problem+json"), headers
    status, _, body = hookwheel.request("PATCH", "/queues/strict", raw_body=b'{"paused": tru',
                                        headers={"Content-Type": "application/json"})
    assert status == 400, body
    # a body that is not JSON is told so and why, not that it must be an object
    for method in ("PATCH", "PUT"):
        for raw, why in ((b'{"paused": true, "paused": false}', "duplicate object key"),
                         (b'{"paused": true,}', "expected"), (b'{"paused": true} x', "end of file expected")):
            status, _, body = hookwheel.request(method, "/queues/strict", raw_body=raw,
                                                headers={"Content-Type": "application/json"})
            assert status == 400 and body["detail"].startswith("malformed JSON: ") and why in body["detail"], (
                method, raw, body)
    status, _, body = hookwheel.request("PATCH", "/queues/strict", raw_body=b'{"paused": true}',
                                        headers={"Content-Type": "text/plain"})
    assert status == 415, body
    status, _, body = hookwheel.request("PATCH", "/queues/bad%20name", json_body={"paused": True})
    assert status == 404, body
    assert get_queue(hookwheel, "strict") == before
    assert redis.cmd("HGET", QUEUES_KEY, "strict") == stored
    assert redis.cmd("HEXISTS", QUEUES_KEY, "untouched") == 0
    assert redis.cmd("GET", QUEUES_KEY + ":version") == version, "a refused PATCH bumped the change feed"


def test_concurrent_patches_of_different_members_both_hold(hookwheel):
    rounds, errors = 60, []

    def loop(member, values):
        with hookwheel.api.session() as s:
            for v in values:
                status, _, body = s.request("PATCH", "/queues/contended", json_body={member: v})
                if status != 200 or body[member] != v:
                    errors.append((member, v, status, body))

    pauses = [i % 2 == 0 for i in range(rounds)] + [True]
    sizes = list(range(1, rounds + 1)) + [77]
    workers = [threading.Thread(target=loop, args=("paused", pauses)),
               threading.Thread(target=loop, args=("parallelism", sizes))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors[:3]
    got = get_queue(hookwheel, "contended")
    assert (got["paused"], got["parallelism"], got["configured"]) == (True, 77, True), got
    assert (got["max_dispatches_per_second"], got["scope"]) == (0, "instance"), got  # the defaults, untouched


def test_the_engine_holds_a_queue_paused_by_patch_and_delivers_once_patched_back(hookwheel, receiver):
    put(hookwheel, "patched", {"parallelism": 2})
    patch(hookwheel, "patched", {"paused": True})
    time.sleep(APPLY_S)
    status, _, body = hookwheel.create({"id": "patched-1", "url": receiver.url("/patched"), "delay_ms": 0,
                                        "queue": "patched"})
    assert status == 201, body
    time.sleep(1.0)
    assert receiver.requests("/patched") == [], "a queue paused by PATCH delivered"
    assert hookwheel.get("patched-1")[2]["state"] == "scheduled"
    got = patch(hookwheel, "patched", {"paused": False})
    assert got["parallelism"] == 2, got
    assert len(receiver.wait_for(1, path="/patched", timeout=APPLY_S + scaled(2))) == 1


def test_a_patch_of_a_new_queue_beyond_max_queues_answers_409_and_stores_nothing(hookwheel_factory, redis):
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_MAX_QUEUES": "2"})
    patch(hw, "a", {"paused": True})
    put(hw, "b", {"parallelism": 2})
    status, headers, body = hw.request("PATCH", "/queues/c", json_body={"paused": True})
    assert status == 409, body
    assert headers["Content-Type"].startswith("application/problem+json"), headers
    assert "HOOKWHEEL_MAX_QUEUES" in body["detail"] and "2" in body["detail"], body
    assert redis.cmd("HLEN", QUEUES_KEY) == 2 and redis.cmd("HEXISTS", QUEUES_KEY, "c") == 0
    assert get_queue(hw, "c")["configured"] is False
    # a queue with stored controls is no new queue
    assert patch(hw, "b", {"paused": True})["parallelism"] == 2
    assert hw.request("DELETE", "/queues/a")[0] == 204
    assert patch(hw, "c", {"paused": True})["configured"] is True
