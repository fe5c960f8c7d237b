"""One namespace's backlog that cannot start does not fill the instance's
memory (HOOKWHEEL_MAX_RESIDENT_PER_NAMESPACE, README "Authentication and
namespaces"): with API tokens a namespace holds at most half of
HOOKWHEEL_MAX_RESIDENT in memory by default, so another namespace's due
timers are still claimed, at create and by the sweeps. Without tokens there
is one namespace and no such cap.

Real redis-server, real binary, a real receiver."""
import json
import threading
import time

from conftest import now_ms, scaled, wait_until

TOKEN_A = "tenant-a-token-51c0e9d2b7a4"
TOKEN_B = "tenant-b-token-8e27f3a6c1d9"
MAX_RESIDENT = 40


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def claimed(hw):
    status, _, text = hw.api.request("GET", "/metrics", headers=bearer(TOKEN_A))  # (any token; none without)
    assert status == 200
    line = next(x for x in text.decode().splitlines() if x.startswith("hookwheel_timers_claimed "))
    return int(float(line.split()[1]))


def start(tmp_path, redis, hookwheel_factory, tokens=True, extra=None):
    env = {"HOOKWHEEL_MAX_RESIDENT": str(MAX_RESIDENT), "HOOKWHEEL_WINDOW_MS": "1000", **(extra or {})}
    if tokens:
        f = tmp_path / "tokens"
        f.write_text(f"a {TOKEN_A}\nb {TOKEN_B}\n")
        env["HOOKWHEEL_API_TOKENS_FILE"] = str(f)
    return hookwheel_factory(redis, env=env)


def paused_backlog(hw, receiver, token):
    """Pauses a's queue qa and creates 100 timers due in 200 ms in it."""
    h = bearer(token) if token else None
    assert hw.api.request("PUT", "/queues/qa", json_body={"paused": True}, headers=h)[0] == 200
    time.sleep(1.2)  # the engine reads queue settings every 500 ms
    items = [{"id": f"a-{i}", "url": receiver.url("/a"), "queue": "qa", "delay_ms": 200} for i in range(100)]
    status, _, body = hw.api.request("POST", "/timers/batch", json_body={"timers": items}, headers=h)
    assert status == 200 and body["failed"] == 0, body


def test_a_namespace_whose_queue_is_paused_leaves_room_in_memory_to_another(tmp_path, redis, receiver,
                                                                              hookwheel_factory):
    hw = start(tmp_path, redis, hookwheel_factory)
    paused_backlog(hw, receiver, TOKEN_A)
    # a's due timers fill its half of the memory and no more: the batch took
    # its room before it wrote, and the sweeps after it find none
    assert wait_until(lambda: claimed(hw) >= MAX_RESIDENT // 2, scaled(5))
    for _ in range(10):  # several sweeps (the window is 1 s)
        assert claimed(hw) == MAX_RESIDENT // 2
        time.sleep(0.1)
    # b's timers are claimed and start on time: at create (due within the window)...
    due = int(now_ms()) + 300
    for i in range(5):
        status, _, body = hw.api.create({"id": f"b-near-{i}", "url": receiver.url("/b"), "fire_at_ms": due},
                                        headers=bearer(TOKEN_B))
        assert status == 201, body
    got = receiver.wait_for(5, scaled(5), path="/b")
    assert len(got) == 5 and all(r.wall_ms >= due for r in got)
    # ... and by a sweep (due beyond the window at create), after a's due timers in due order
    due = int(now_ms()) + 2500
    for i in range(5):
        assert hw.api.create({"id": f"b-far-{i}", "url": receiver.url("/b2"), "fire_at_ms": due},
                             headers=bearer(TOKEN_B))[0] == 201
    got = receiver.wait_for(5, 2.5 + scaled(5), path="/b2")
    assert len(got) == 5 and all(r.wall_ms >= due for r in got)
    assert claimed(hw) < MAX_RESIDENT
    assert receiver.requests("/a") == []
    # the operator is told (at most every 10 s), b is not named
    def at_cap():
        return [json.loads(x) for x in hw.log.read_text(errors="replace").splitlines()
                if '"msg":"a namespace had its cap of timers held in memory' in x]
    assert wait_until(at_cap, scaled(15)), hw.log_tail(10)
    assert {r["namespace"] for r in at_cap()} == {"a"} and at_cap()[0]["cap"] == MAX_RESIDENT // 2
    assert at_cap()[0]["level"] == "warn" and at_cap()[0]["held"] >= MAX_RESIDENT // 2
    # resumed, a's backlog drains through its half
    assert hw.api.request("PUT", "/queues/qa", json_body={"paused": False}, headers=bearer(TOKEN_A))[0] == 200
    assert len(receiver.wait_for(100, scaled(20), path="/a")) == 100


def test_without_tokens_a_paused_queue_may_take_every_place_as_documented(tmp_path, redis, receiver,
                                                                          hookwheel_factory):
    hw = start(tmp_path, redis, hookwheel_factory, tokens=False)
    paused_backlog(hw, receiver, None)
    assert wait_until(lambda: claimed(hw) >= MAX_RESIDENT, scaled(5)), claimed(hw)


def test_the_cap_can_be_set(tmp_path, redis, receiver, hookwheel_factory):
    hw = start(tmp_path, redis, hookwheel_factory, extra={"HOOKWHEEL_MAX_RESIDENT_PER_NAMESPACE": "10"})
    paused_backlog(hw, receiver, TOKEN_A)
    assert wait_until(lambda: claimed(hw) >= 10, scaled(5))
    for _ in range(10):  # several sweeps
        assert claimed(hw) == 10, claimed(hw)
        time.sleep(0.1)


def concurrent_batches(hw, receiver, token, n_batches, per_batch):
    """Pauses a's queue qa and sends n_batches batches of per_batch timers due
    in 200 ms at once, each on its own connection."""
    h = bearer(token) if token else None
    assert hw.api.request("PUT", "/queues/qa", json_body={"paused": True}, headers=h)[0] == 200
    time.sleep(1.2)  # the engine reads queue settings every 500 ms
    go = threading.Barrier(n_batches)
    answers = []

    def send(k):
        items = [{"id": f"a-{k}-{i}", "url": receiver.url("/a"), "queue": "qa", "delay_ms": 200}
                 for i in range(per_batch)]
        go.wait()
        answers.append(hw.api.request("POST", "/timers/batch", json_body={"timers": items}, headers=h))

    threads = [threading.Thread(target=send, args=(k,)) for k in range(n_batches)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(status == 200 and body["failed"] == 0 for status, _, body in answers), answers


def test_batches_at_once_take_no_more_than_the_namespace_cap(tmp_path, redis, receiver, hookwheel_factory):
    # each batch takes its room before it writes: ten at once cannot each
    # take the room they saw
    hw = start(tmp_path, redis, hookwheel_factory, extra={"HOOKWHEEL_MAX_RESIDENT_PER_NAMESPACE": "10"})
    concurrent_batches(hw, receiver, TOKEN_A, 10, 10)
    assert wait_until(lambda: claimed(hw) >= 10, scaled(5))
    for _ in range(10):
        assert claimed(hw) == 10, claimed(hw)
        time.sleep(0.1)


def test_batches_at_once_take_no_more_than_the_memory_cap(tmp_path, redis, receiver, hookwheel_factory):
    hw = start(tmp_path, redis, hookwheel_factory, tokens=False)
    concurrent_batches(hw, receiver, None, 10, 10)
    assert wait_until(lambda: claimed(hw) >= MAX_RESIDENT, scaled(5))
    for _ in range(10):
        assert claimed(hw) == MAX_RESIDENT, claimed(hw)
        time.sleep(0.1)
