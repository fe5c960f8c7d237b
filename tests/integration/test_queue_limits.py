"""Queue limits that hold for the whole deployment: two instances on one
Redis share a queue's parallelism and its dispatch rate through permits in
Redis; scope "instance" keeps the per-instance limits; a crashed instance's
permits come back. Real redis-server, two real binaries, a real receiver."""
import os
import signal
import time

import pytest

from conftest import CLUSTER_MODE, SLOW, Reply, create_many, most_in_a_window, now_ms, scaled, wait_until

APPLY_S = 1.2  # settings are read every 0.5 s


def put(hw, name, settings):
    status, _, body = hw.request("PUT", f"/queues/{name}", json_body=settings)
    assert status == 200, body
    return body


def two(redis, hookwheel_factory):
    return hookwheel_factory(redis), hookwheel_factory(redis)


def create_split(a, b, specs):
    """Half the timers through each instance, so that each holds some."""
    for hw, part in ((a, specs[0::2]), (b, specs[1::2])):
        _, errors = create_many(hw.api, part, threads=4)
        assert not errors, errors[:3]


def delivering_instances(hw, ids):
    seen = set()
    for timer_id in ids:
        status, _, body = hw.get(timer_id)
        assert status == 200, body
        seen.update(att["instance"] for att in body["attempt_history"])
    return seen


def burst(receiver, path, n, prefix, queue, delay_ms=1500):
    due = int(now_ms()) + delay_ms
    return [{"id": f"{prefix}-{i:02d}", "url": receiver.url(path), "fire_at_ms": due, "queue": queue}
            for i in range(n)]


def test_parallelism_3_holds_across_two_instances(redis, hookwheel_factory, receiver):
    a, b = two(redis, hookwheel_factory)
    body = put(a, "shared", {"parallelism": 3})
    assert body["scope"] == "deployment"
    time.sleep(APPLY_S)
    receiver.default("/shared", Reply(204, delay_s=0.3))
    specs = burst(receiver, "/shared", 30, "sh", "shared")
    create_split(a, b, specs)
    got = receiver.wait_for(30, path="/shared", timeout=scaled(30))
    assert len(got) == 30
    assert receiver.max_concurrent("/shared") <= 3
    assert receiver.max_concurrent("/shared") >= 2, "the queue never ran more than one at a time"
    # both instances delivered: with limits per instance this would allow 6
    assert delivering_instances(a, [s["id"] for s in specs]) == {a.instance_id, b.instance_id}
    assert wait_until(lambda: not redis.keys("hw:{queues}:pm:*"), scaled(5)), \
        "idle instances keep permits: " + repr(redis.keys("hw:{queues}:pm:*"))


def test_a_deployment_s_parallelism_may_exceed_one_instance_s_slots(redis, hookwheel_factory, receiver):
    # Two instances of 2 slots each share a queue of 3: more than either
    # instance could run, fewer than both together.
    env = {"HOOKWHEEL_MAX_INFLIGHT": "2", "HOOKWHEEL_QUEUE_PARALLELISM": "2"}
    a, b = hookwheel_factory(redis, env=env), hookwheel_factory(redis, env=env)
    body = put(a, "wide", {"parallelism": 3})
    assert (body["parallelism"], body["scope"]) == (3, "deployment"), body
    time.sleep(APPLY_S)
    receiver.default("/wide", Reply(204, delay_s=0.5))
    specs = burst(receiver, "/wide", 24, "wi", "wide")
    create_split(a, b, specs)
    assert len(receiver.wait_for(24, path="/wide", timeout=scaled(30))) == 24
    assert receiver.max_concurrent("/wide") == 3, receiver.max_concurrent("/wide")
    assert delivering_instances(a, [s["id"] for s in specs]) == {a.instance_id, b.instance_id}


def test_scope_instance_keeps_the_limit_per_instance(redis, hookwheel_factory, receiver):
    a, b = two(redis, hookwheel_factory)
    body = put(a, "local", {"parallelism": 3, "scope": "instance"})
    assert body["scope"] == "instance"
    time.sleep(APPLY_S)
    receiver.default("/local", Reply(204, delay_s=0.5))
    specs = burst(receiver, "/local", 30, "lo", "local")
    create_split(a, b, specs)
    assert len(receiver.wait_for(30, path="/local", timeout=scaled(30))) == 30
    assert receiver.max_concurrent("/local") > 3  # 3 per instance: up to 6
    assert receiver.max_concurrent("/local") <= 6
    assert not redis.keys("hw:{queues}:pm:*"), "a per-instance queue took permits"


@pytest.mark.skipif(CLUSTER_MODE or SLOW, reason="the rate shares take the parallelism test's paths (and the "
                    "limiter's unit tests); on a cluster the permit keys are that test's")
def test_a_rate_of_8_per_second_holds_across_two_instances(redis, hookwheel_factory, receiver):
    a, b = two(redis, hookwheel_factory)
    put(a, "paced", {"max_dispatches_per_second": 8})
    time.sleep(APPLY_S)
    specs = burst(receiver, "/paced", 32, "pa", "paced")
    create_split(a, b, specs)
    got = receiver.wait_for(32, path="/paced", timeout=scaled(30))
    assert len(got) == 32
    times = [r.wall_ms for r in got]
    # each instance's bucket may hold one token: 8 a second, plus one each
    assert most_in_a_window(times) <= 10, most_in_a_window(times)
    assert max(times) - min(times) >= 2500  # 32 at 8/s: about 4 s (16/s if per instance)
    assert delivering_instances(a, [s["id"] for s in specs]) == {a.instance_id, b.instance_id}


@pytest.mark.skipif(CLUSTER_MODE, reason="on a cluster the permit keys are the parallelism test's")
def test_a_crashed_instance_s_permits_come_back(redis, hookwheel_factory, receiver):
    a, b = two(redis, hookwheel_factory)
    put(a, "crash", {"parallelism": 2})
    time.sleep(APPLY_S)
    receiver.default("/crash", Reply(204, delay_s=1.0))
    first = burst(receiver, "/crash", 6, "ca", "crash", delay_ms=800)
    _, errors = create_many(a.api, first, threads=2)
    assert not errors, errors
    assert receiver.wait_for(2, path="/crash", timeout=scaled(10))
    key = "hw:{queues}:pm:crash"
    assert a.instance_id in redis.cmd("HKEYS", key)
    a.kill9()
    killed = time.monotonic()
    second = burst(receiver, "/crash", 4, "cb", "crash", delay_ms=300)
    _, errors = create_many(b.api, second, threads=2)
    assert not errors, errors
    # b runs nothing until a's permits expire (3 s after a's last renewal),
    # then all of its own; a's claimed timers come back with its lease
    assert receiver.wait_until(lambda rs: sum(1 for r in rs if r.timer_id.startswith("cb-")) == 4,
                               scaled(20))
    assert a.instance_id not in redis.cmd("HKEYS", key)
    assert time.monotonic() - killed >= 2.0, "b started before a's permits expired"
    assert receiver.max_concurrent("/crash") <= 2 + 2  # a's two cut-off requests may still be open


def test_scope_is_validated_and_returned(hookwheel):
    status, _, body = hookwheel.request("PUT", "/queues/q1", json_body={"scope": "cluster"})
    assert status == 400 and body["field"] == "scope", body
    status, _, body = hookwheel.request("GET", "/queues/never-set")
    assert status == 200 and body["scope"] == "instance", body  # the defaults hold per instance
    put(hookwheel, "q1", {"parallelism": 2, "scope": "instance"})
    status, _, body = hookwheel.request("GET", "/queues/q1")
    assert body["scope"] == "instance" and body["parallelism"] == 2, body
    put(hookwheel, "q1", {"parallelism": 2})
    status, _, body = hookwheel.request("GET", "/queues")
    assert [q["scope"] for q in body["queues"] if q["name"] == "q1"] == ["deployment"], body


@pytest.mark.skipif(CLUSTER_MODE, reason="on a cluster the permit keys are the parallelism test's")
def test_a_rate_holds_for_timers_due_one_by_one_with_idle_gaps_between(redis, hookwheel_factory, receiver):
    # 0.5 starts a second: one start every 2 s. Timers due 0.8 s apart leave
    # the queue idle between them long enough for its permits to go back
    # (renewed every 250 ms); coming back must not bring a fresh token.
    hw = hookwheel_factory(redis)
    put(hw, "trickle", {"max_dispatches_per_second": 0.5})
    time.sleep(APPLY_S)
    due = int(now_ms()) + 1500
    specs = [{"id": f"tr-{i}", "url": receiver.url("/trickle"), "fire_at_ms": due + i * 800, "queue": "trickle"}
             for i in range(4)]
    _, errors = create_many(hw.api, specs, threads=1)
    assert not errors, errors
    got = receiver.wait_for(4, path="/trickle", timeout=scaled(20))
    assert len(got) == 4
    times = sorted(r.wall_ms for r in got)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert min(gaps) >= 1500, gaps  # 0.8 s apart when each comeback brings a token


@pytest.mark.skipif(CLUSTER_MODE, reason="on a cluster the permit keys are the parallelism test's")
def test_a_rate_holds_when_instances_take_turns_with_idle_gaps(redis, hookwheel_factory, receiver):
    # 0.5 starts a second for the deployment, and timers due 0.8 s apart on
    # alternate instances: each instance is idle and has given its permits
    # back when its next timer comes due, so only the permits in Redis can
    # know that the other one has just started an attempt.
    a, b = two(redis, hookwheel_factory)
    put(a, "turns", {"max_dispatches_per_second": 0.5})
    time.sleep(APPLY_S)
    due = int(now_ms()) + 1500
    for i in range(4):
        spec = {"id": f"tu-{i}", "url": receiver.url("/turns"), "fire_at_ms": due + i * 800, "queue": "turns"}
        _, errors = create_many((a, b)[i % 2].api, [spec], threads=1)
        assert not errors, errors
    got = receiver.wait_for(4, path="/turns", timeout=scaled(20))
    assert len(got) == 4
    times = sorted(r.wall_ms for r in got)
    gaps = [y - x for x, y in zip(times, times[1:])]
    assert min(gaps) >= 1500, gaps
    assert delivering_instances(a, [f"tu-{i}" for i in range(4)]) == {a.instance_id, b.instance_id}


@pytest.mark.skipif(CLUSTER_MODE, reason="on a cluster the permit keys are the parallelism test's")
def test_a_stopping_instance_keeps_its_permits_while_its_attempts_run(redis, hookwheel_factory, receiver):
    # a stops (SIGTERM) with two 6 s attempts of a parallelism-2 queue in
    # flight; it lets them finish (HOOKWHEEL_SHUTDOWN_GRACE_MS, 10 s), and
    # until they do the queue's two permits are still its own
    a, b = two(redis, hookwheel_factory)
    put(a, "stopping", {"parallelism": 2})
    time.sleep(APPLY_S)
    receiver.default("/stopping", Reply(204, delay_s=6.0))
    _, errors = create_many(a.api, burst(receiver, "/stopping", 2, "sa", "stopping", delay_ms=300), threads=1)
    assert not errors, errors
    assert len(receiver.wait_for(2, path="/stopping", timeout=scaled(10))) == 2
    _, errors = create_many(b.api, burst(receiver, "/stopping", 2, "sb", "stopping", delay_ms=300), threads=1)
    assert not errors, errors
    os.kill(a.proc.pid, signal.SIGTERM)
    got = receiver.wait_for(4, path="/stopping", timeout=scaled(20))
    assert len(got) == 4
    assert receiver.max_concurrent("/stopping") <= 2, "b started while a's attempts still ran"
    assert a.stop() == 0


def test_a_shared_queue_going_idle_is_not_logged_as_a_failed_renewal(redis, hookwheel_factory, receiver):
    """Once a deployment-wide queue's work is done the instance holds and asks
    nothing; the grant's expiry then came and was logged at warn as permits
    that 'could not be renewed', with Redis healthy, after every burst."""
    hw = hookwheel_factory(redis)
    put(hw, "idleq", {"parallelism": 2})
    time.sleep(APPLY_S)
    receiver.default("/idleq", Reply(204))
    for i in range(3):
        status, _, body = hw.create({"url": receiver.url("/idleq"), "delay_ms": 100, "queue": "idleq"})
        assert status == 201, body
    assert len(receiver.wait_for(3, path="/idleq", timeout=scaled(5))) == 3
    time.sleep(6.0)  # well past the permits' time to live (3 s)
    text = hw.log.read_text(errors="replace")
    assert "could not be renewed" not in text, hw.log_tail(20)
