"""Integration tests of wall-clock steps: due times are wall-clock epoch
milliseconds (shared through Redis), so an NTP step or an operator's `date`
moves every instance's idea of now. A step back must not hold timers due
after it for the length of the step: hookwheel runs here with its clock
shifted by an LD_PRELOAD library (clockshift.c) that the test steps."""

import os
import struct
import subprocess
import time

import pytest

from conftest import CLUSTER_MODE, assert_created, scaled

HERE = os.path.dirname(os.path.abspath(__file__))
HOUR_MS = 3600 * 1000


@pytest.fixture
def clockshift(tmp_path):
    """(env for hookwheel, step(offset_ms)): the shim built, its offset file at 0."""
    lib = tmp_path / "libclockshift.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(lib), os.path.join(HERE, "clockshift.c"), "-ldl"],
                   check=True)
    offset = tmp_path / "clock-offset"
    offset.write_bytes(struct.pack("=q", 0))
    env = {"LD_PRELOAD": str(lib), "CLOCKSHIFT_FILE": str(offset),
           "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}

    def step(offset_ms):
        with open(offset, "r+b") as f:  # in place: the process maps this file
            f.write(struct.pack("=q", offset_ms))

    return env, step


@pytest.mark.skipif(CLUSTER_MODE, reason="one instance's clock; the topology does not matter")
def test_timers_due_after_a_step_back_of_the_wall_clock_fire_on_time(redis, hookwheel_factory, receiver,
                                                                    clockshift):
    """The wall clock steps back an hour. A timer due within the window
    (straight into the wheel) and one due beyond it (claimed by a sweep) are
    both delivered about when due, not an hour later."""
    env, step = clockshift
    hw = hookwheel_factory(redis, env=env, args=["--window-ms", "1000"])
    time.sleep(1.0)  # a few sweeps and ticks at the unshifted time
    step(-HOUR_MS)
    time.sleep(0.2)
    ids = []
    for path, delay in (("/near", 200), ("/far", 2500)):
        status, headers, timer = hw.create({"url": receiver.url(path), "delay_ms": delay})
        assert_created(status, headers, timer)
        ids.append(timer["id"])
    got = receiver.wait_for(2, timeout=scaled(15))
    assert sorted(r.path for r in got) == ["/far", "/near"], [hw.get(i) for i in ids]


@pytest.mark.skipif(CLUSTER_MODE, reason="one instance's clock; the topology does not matter")
def test_a_rate_limited_queue_goes_on_after_a_step_back_of_the_wall_clock(redis, hookwheel_factory, receiver,
                                                                         clockshift):
    """A queue paced at 5 dispatches a second (per instance) keeps its pace after the wall
    clock steps back an hour: its bucket refills from the new time on."""
    env, step = clockshift
    hw = hookwheel_factory(redis, env=env)
    status, _, body = hw.request("PUT", "/queues/paced", json_body={"max_dispatches_per_second": 5, "scope": "instance"})
    assert status == 200, body
    time.sleep(scaled(1.5))  # the settings applied
    status, headers, timer = hw.create({"url": receiver.url("/before"), "delay_ms": 0, "queue": "paced"})
    assert_created(status, headers, timer)
    assert len(receiver.wait_for(1, path="/before", timeout=scaled(10))) == 1
    step(-HOUR_MS)
    time.sleep(0.2)
    for i in range(10):
        status, headers, timer = hw.create({"url": receiver.url("/after"), "delay_ms": 0, "queue": "paced"})
        assert_created(status, headers, timer)
    got = receiver.wait_for(10, path="/after", timeout=scaled(10))
    assert len(got) == 10, hw.log_tail(20)


@pytest.mark.skipif(CLUSTER_MODE, reason="one instance's clock; the topology does not matter")
def test_the_instance_lease_is_renewed_after_a_step_back_of_the_wall_clock(redis, hookwheel_factory, clockshift):
    """The instance's lease key lives by its PX, not by the wall clock: after
    the clock steps back an hour it is still renewed every ttl/3, so it never
    lapses and no other instance takes this one's claims."""
    env, step = clockshift
    hw = hookwheel_factory(redis, env=env, args=["--lease-ttl-ms", "1500"])
    key = f"hw:instance:{hw.instance_id}"
    time.sleep(0.5)
    step(-HOUR_MS)
    for _ in range(8):  # well past the ttl
        time.sleep(0.4)
        assert redis.cmd("GET", key) == hw.instance_id, hw.log_tail(20)
    assert "lease had lapsed" not in hw.log_tail(400)


@pytest.mark.skipif(CLUSTER_MODE, reason="one instance's clock; the topology does not matter")
def test_an_attempt_across_a_step_back_of_the_wall_clock_has_no_absurd_duration(redis, hookwheel_factory, receiver,
                                                                               clockshift):
    """The clock steps back an hour while the receiver takes its time: the
    attempt's recorded duration is not the unsigned wrap of a negative
    difference (49 days)."""
    from conftest import Reply
    env, step = clockshift
    receiver.plan("/slow", [Reply(200, delay_s=0.6)])
    hw = hookwheel_factory(redis, env=env)
    status, headers, timer = hw.create({"url": receiver.url("/slow"), "delay_ms": 0})
    assert_created(status, headers, timer)
    deadline = time.monotonic() + scaled(10)
    while not receiver.requests("/slow") and time.monotonic() < deadline:
        time.sleep(0.01)
    step(-HOUR_MS)
    done = hw.wait_state(timer["id"], ("delivered", "failed"), timeout=scaled(10))
    assert done.get("state") == "delivered", done
    assert 0 <= done["last_attempt"]["duration_ms"] < 60000, done["last_attempt"]


@pytest.mark.skipif(CLUSTER_MODE, reason="one instance's clock; the topology does not matter")
def test_a_watchdog_lease_is_renewed_after_a_step_back_of_the_wall_clock(redis, hookwheel_factory, clockshift):
    """The clock steps back an hour. A lease whose holder heartbeats keeps its
    key (the renewal schedule in Redis was written on the clock before the
    step, and is not held up for an hour by it), and a lease whose holder
    fell silent just before the step still expires within 2 x ttl of its
    last heartbeat, not an hour later."""
    from test_leases import Heartbeats, Leases, PttlWatch
    from conftest import LEASE_PREFIX
    env, step = clockshift
    hw = hookwheel_factory(redis, env=env)
    ls = Leases(hw)
    ttl = 1500
    for key in ("live", "dead"):
        status, _, body = ls.acquire(key, "holder", ttl)
        assert status == 201, body
    live = PttlWatch(redis, LEASE_PREFIX + "live")
    beats = Heartbeats(ls, "live", "holder", ttl / 4000)
    try:
        time.sleep(1.0)
        assert ls.heartbeat("dead", "holder")[0] == 200
        silent = time.time()
        step(-HOUR_MS)
        stepped = time.time()
        gone = None
        while time.time() < stepped + 4 * ttl / 1000:
            if gone is None and redis.cmd("EXISTS", LEASE_PREFIX + "dead") == 0:
                gone = time.time()
            time.sleep(0.02)
        beats.stop()
        after = [v for _, v in live.since(stepped)]
        assert len(after) > 100 and -2 not in after, (min(after), beats.statuses, hw.log_tail(20))
        assert beats.statuses[404] == 0, beats.statuses
        assert gone is not None and gone - silent <= 2 * ttl / 1000 + scaled(0.3), gone and gone - silent
    finally:
        beats.stop()
        live.stop()
