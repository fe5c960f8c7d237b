"""The embedded Redis (no --redis-url: hookwheel starts its own redis-server
child, AOF on, in the data directory): what hookwheel does when that child
goes away while it runs. Real redis-server, real hookwheel, real receiver."""

import json
import os
import signal
import time

from conftest import now_ms, scaled, wait_until


def embedded_redis_pid(hw):
    """The pid of the child the log says it started last."""
    pid = None
    with open(hw.log, errors="replace") as f:
        for line in f:
            if line.startswith("{"):
                rec = json.loads(line)
                if rec.get("msg") in ("embedded redis started", "embedded redis restarted"):
                    pid = rec["pid"]
    assert pid, hw.log_tail()
    return pid


def test_an_embedded_redis_that_dies_is_started_again_and_its_timers_still_fire(
        tmp_path, receiver, hookwheel_factory):
    hw = hookwheel_factory(None)
    # the due time as the server is given it (a float would count a delivery in its due ms early)
    due = int(now_ms()) + 4000
    status, _, _ = hw.create({"id": "survives-redis", "url": receiver.url("/hook"), "fire_at_ms": int(due)})
    assert status == 201
    pid = embedded_redis_pid(hw)
    os.kill(pid, signal.SIGKILL)  # the OOM killer, say
    # the store sees the connection go, /readyz says so ...
    assert wait_until(lambda: hw.request("GET", "/readyz")[0] == 503, scaled(5)), hw.log_tail()
    # ... and the child is started again on its AOF: ready again, the timer there
    assert wait_until(lambda: hw.request("GET", "/readyz")[0] == 200, scaled(15)), hw.log_tail()
    assert embedded_redis_pid(hw) != pid
    with open(hw.log) as f:
        exited = [json.loads(line) for line in f if '"embedded redis exited' in line]
    assert len(exited) == 1 and exited[0]["status"] == "signal 9", exited
    assert receiver.wait_for(1, scaled(15), path="/hook"), hw.log_tail()
    got = receiver.requests("/hook")
    assert len(got) == 1 and got[0].wall_ms >= due
    assert hw.wait_state("survives-redis", ("delivered",), scaled(5))["state"] == "delivered"
    # the child that died was reaped: no zombie under hookwheel
    children = open(f"/proc/{hw.proc.pid}/task/{hw.proc.pid}/children").read().split()
    assert children == [str(embedded_redis_pid(hw))]
    assert hw.stop() == 0
    assert wait_until(lambda: not os.path.exists(f"/proc/{embedded_redis_pid(hw)}"), scaled(5))


def test_an_instance_killed_with_sigkill_and_started_again_at_once_delivers_its_timers(
        tmp_path, receiver, hookwheel_factory):
    # A supervisor restarting hookwheel right after a kill -9: the embedded
    # Redis of the killed process is still shutting down when the new one
    # starts on the same data directory.
    hw = hookwheel_factory(None, args=["--lease-ttl-ms", "1500"])
    due = int(now_ms()) + 3000
    for i in range(5):
        status, _, _ = hw.create({"id": f"kept-{i}", "url": receiver.url("/kept"), "fire_at_ms": int(due)})
        assert status == 201
    old_redis = embedded_redis_pid(hw)
    hw.kill9()
    hw.start()  # the same data directory and instance id, a new pid
    # (start() would try again after an exit saying "in use", as for a port)
    assert "data dir already in use" not in hw.log_tail(400), hw.log_tail()
    assert embedded_redis_pid(hw) != old_redis
    got = receiver.wait_for(5, scaled(20), path="/kept")
    assert sorted(r.timer_id for r in got) == [f"kept-{i}" for i in range(5)], hw.log_tail()
    assert all(r.wall_ms >= due for r in got)
