"""The embedded Redis (no --redis-url: hookwheel starts its own redis-server
child, AOF on, in the data directory): what hookwheel does when that child
goes away while it runs. Real redis-server, real hookwheel, real receiver."""

import json
import os
import signal
import socket
import threading
import time

from conftest import Hookwheel, free_port, now_ms, scaled, stop_process, wait_until


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


def silent_listener(path):
    """A Unix socket at path that something listens on and never answers
    (a redis busy with its shutdown): connections wait in its backlog."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(64)
    return s


def test_a_redis_that_no_longer_answers_on_the_socket_but_goes_is_waited_for(tmp_path, hookwheel_factory):
    """The redis of a hookwheel just killed gets SIGTERM and, busy with its
    shutdown, may accept connections without answering before it goes: a
    start made at once waits for it, as for one that still answers."""
    listener = silent_listener(str(tmp_path / "data-1" / "redis.sock"))
    timer = threading.Timer(1.0, listener.close)  # gone; its socket file stays, as a killed redis's
    timer.start()
    try:
        hw = hookwheel_factory(None)
    finally:
        timer.join()
    assert "data dir already in use" not in hw.log_tail(400), hw.log_tail()
    assert hw.create({"id": "after-a-busy-owner", "url": "http://127.0.0.1:9/x", "delay_ms": 60000})[0] == 201


def test_a_data_dir_whose_socket_something_listens_on_without_answering_is_refused(tmp_path):
    """A listener that never answers and never goes (another hookwheel's
    redis, stuck) keeps its data dir: refused after the wait, its socket
    left in place, however many probes its backlog holds."""
    sock = tmp_path / "data-x" / "redis.sock"
    listener = silent_listener(str(sock))
    hw = Hookwheel(tmp_path, None, name="x")
    hw.port = free_port()
    hw._spawn()
    try:
        code = hw.proc.wait(timeout=scaled(20))
    finally:
        if hw.proc.poll() is None:
            stop_process(hw.proc, signal.SIGKILL, timeout=5)
        listener.close()
    assert code != 0 and "data dir already in use" in hw.log_tail(), (code, hw.log_tail())
    assert sock.is_socket(), "the socket of a listener was taken away"


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
