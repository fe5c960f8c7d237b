"""One namespace's hanging targets do not hold every dispatch slot
(HOOKWHEEL_MAX_INFLIGHT_PER_NAMESPACE, README "Authentication and
namespaces"): with API tokens a namespace has at most half of
HOOKWHEEL_MAX_INFLIGHT in flight by default, all its queues together, so
another namespace's timers start at once; the held namespace goes on as soon
as one of its attempts ends. Without tokens there is one namespace and no
such cap.

Real redis-server, real binary, a real receiver whose /hang path answers only
after HANG_S."""
import json
import time

from conftest import Reply, now_ms, scaled, wait_until

TOKEN_A = "tenant-a-token-7d2e41c9a0b8"
TOKEN_B = "tenant-b-token-3f90b6e15d27"
MAX_INFLIGHT = 8
HANG_S = 25.0         # the hanging target answers this late (longer than any wait below)
B_WITHIN_S = 6.0      # another namespace's timers start within this (they would wait HANG_S without the cap)
GRACE = {"HOOKWHEEL_SHUTDOWN_GRACE_MS": "200"}  # do not wait for the hanging attempts at the end


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def create(hw, tid, url, queue, token=None):
    status, _, body = hw.api.create({"id": tid, "url": url, "queue": queue, "delay_ms": 0,
                                     "timeout_ms": int(HANG_S * 2000)},
                                    headers=bearer(token) if token else None)
    assert status == 201, body


def three_start_at_once(hw, receiver, path, queue, token):
    """Creates three timers due now to path through hw; all three must start
    within B_WITHIN_S."""
    t0 = now_ms()
    for i in range(3):
        create(hw, f"{path.strip('/')}-{i}", receiver.url(path), queue, token)
    got = receiver.wait_for(3, B_WITHIN_S, path=path)
    assert len(got) == 3, f"{len(got)} of 3 timers to {path} started within {B_WITHIN_S} s"
    assert now_ms() - t0 < B_WITHIN_S * 1000


def wait_hanging(receiver, n):
    """Waits until n requests to /hang are being answered; returns how many arrived."""
    got = receiver.wait_for(n, scaled(10), path="/hang")
    return len(got)


def test_a_namespace_whose_targets_hang_leaves_slots_to_another(tmp_path, redis, receiver, hookwheel_factory):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"a {TOKEN_A}\nb {TOKEN_B}\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens),
                                       "HOOKWHEEL_MAX_INFLIGHT": str(MAX_INFLIGHT), **GRACE})
    receiver.default("/hang", Reply(204, delay_s=HANG_S))
    # Twelve of a's timers in two queues: the cap is the namespace's, not a queue's.
    for i in range(12):
        create(hw, f"a-{i}", receiver.url("/hang"), f"q{i % 2}", TOKEN_A)
    assert wait_hanging(receiver, MAX_INFLIGHT // 2) == MAX_INFLIGHT // 2
    time.sleep(1.0)  # a's other timers are due and would start now, were there no cap
    assert len(receiver.requests("/hang")) == MAX_INFLIGHT // 2
    assert receiver.max_concurrent("/hang") == MAX_INFLIGHT // 2

    three_start_at_once(hw, receiver, "/b", "q0", TOKEN_B)  # b's do not wait behind a's hanging attempts
    assert len(receiver.requests("/hang")) == MAX_INFLIGHT // 2  # b's attempts ended; a is still at its cap

    # a's held timers wait their turn, not lost.
    status, _, body = hw.api.request("GET", "/timers/a-11", headers=bearer(TOKEN_A))
    assert status == 200 and body["state"] in ("scheduled", "firing"), body
    # and the operator is told (at most every 10 s a namespace), b is not named
    def held():
        return [json.loads(l) for l in hw.log.read_text(errors="replace").splitlines()
                if '"msg":"a namespace had its cap of attempts in flight' in l]
    assert wait_until(held, scaled(15)), hw.log_tail(10)
    assert {r["namespace"] for r in held()} == {"a"} and held()[0]["cap"] == MAX_INFLIGHT // 2
    assert held()[0]["level"] == "warn"


def test_a_held_namespace_goes_on_when_one_of_its_attempts_ends(tmp_path, redis, receiver, hookwheel_factory):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"a {TOKEN_A}\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens),
                                       "HOOKWHEEL_MAX_INFLIGHT": str(MAX_INFLIGHT),
                                       "HOOKWHEEL_MAX_INFLIGHT_PER_NAMESPACE": "2", **GRACE})
    receiver.plan("/hang", [Reply(204, delay_s=1.0), Reply(204, delay_s=HANG_S)])
    receiver.default("/hang", Reply(204, delay_s=HANG_S))
    for i in range(4):
        create(hw, f"a-{i}", receiver.url("/hang"), "q", TOKEN_A)
    assert wait_hanging(receiver, 2) == 2
    # The first answers after 1 s: its slot goes to the third timer, and no more start.
    got = receiver.wait_for(3, scaled(10), path="/hang")
    assert len(got) == 3
    time.sleep(1.0)
    assert len(receiver.requests("/hang")) == 3
    assert receiver.max_concurrent("/hang") == 2


def test_without_tokens_one_namespace_may_use_every_slot(redis, receiver, hookwheel_factory):
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_MAX_INFLIGHT": str(MAX_INFLIGHT), **GRACE})
    receiver.default("/hang", Reply(204, delay_s=HANG_S))
    for i in range(MAX_INFLIGHT + 2):
        create(hw, f"t-{i}", receiver.url("/hang"), f"q{i % 2}")
    assert wait_hanging(receiver, MAX_INFLIGHT) == MAX_INFLIGHT
    time.sleep(1.0)
    assert len(receiver.requests("/hang")) == MAX_INFLIGHT  # the global cap, not half of it


def test_permits_of_a_shared_queue_go_where_the_namespace_cap_lets_them_be_used(
        tmp_path, redis, receiver, hookwheel_factory):
    """A deployment-wide queue (parallelism 1, shared through permits in
    Redis) whose namespace is at its cap on one instance: that instance's
    waiting timers of the queue do not hold the permit, so another instance
    runs the queue's timers meanwhile."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"a {TOKEN_A}\n")
    env = {"HOOKWHEEL_API_TOKENS_FILE": str(tokens), "HOOKWHEEL_MAX_INFLIGHT": "4", **GRACE}
    one, two = hookwheel_factory(redis, env=env), hookwheel_factory(redis, env=env)
    status, _, body = one.api.request("PUT", "/queues/shared", json_body={"parallelism": 1}, headers=bearer(TOKEN_A))
    assert status in (200, 201) and body["scope"] == "deployment", body
    time.sleep(1.2)  # every instance reads the queue's controls (every 0.5 s)
    receiver.default("/hang", Reply(204, delay_s=HANG_S))
    for i in range(2):  # a's cap on each instance is 2: held by `one` with these
        create(one, f"hang-{i}", receiver.url("/hang"), "slow", TOKEN_A)
    assert wait_hanging(receiver, 2) == 2
    for i in range(2):  # held by `one` (created through it, due now), behind a's cap there
        create(one, f"s1-{i}", receiver.url("/s1"), "shared", TOKEN_A)
    time.sleep(1.0)     # `one` would have asked for the queue's permits meanwhile
    # `one` neither wants nor holds any: an entry is "<held> <rate> <want> <expires>"
    entry = redis.cmd("HGET", "hw:{queues}:pm:a/shared", one.instance_id)
    assert entry is None or entry.split()[0::2] == ["0", "0"], entry
    three_start_at_once(two, receiver, "/s2", "shared", TOKEN_A)  # the queue's timers run on the other instance
    assert receiver.requests("/s1") == []  # still behind a's cap on `one`
    assert receiver.max_concurrent("/s2") == 1
