"""What one namespace does, within its limits, does not make another
namespace's timers late (DESIGN.md §1 "on time"):

- a flood of timers due at one instant: the loader claims every timer due
  within the claim window ahead of its due time, sweeping again at once
  while partitions return full batches, so the timers due just after the
  flood are in memory and start on time (README "How it works");
- a flood larger than its namespace's cap in memory: every claim call gives
  each namespace with due timers its share, so the other namespace's timers
  due just after the flood are claimed and start on time;
- GET /stats of a namespace with thousands of queues: the minutes' hashes
  are scanned a few hundred fields a call and the answer is written on the
  HTTP thread, so neither Redis nor the store's writer thread, which every
  namespace's creates and attempts share, is held for long (README
  "Delivery figures per minute");
- GET /queues of a namespace with 20,000 queues: the counts are merged by
  hash and the answer written on the HTTP thread as well.

Real redis-server, real binary, real receiver."""
import re
import subprocess
import threading
import time
from datetime import datetime

import pytest

from conftest import CLUSTER_MODE, SLOW, now_ms, resp, scaled, wait_until

TOKEN_A = "tenant-a-token-5c1e9f27b8d4"
TOKEN_B = "tenant-b-token-a0e6d3b58c21"
FLOOD = 50_000
LEAD_MS = 12_000     # the flood is created this long before it is due: past the 5 s claim window
LATE_MS = 500        # a timer of the other namespace may start this late at most


def two_namespaces(tmp_path, redis, hookwheel_factory, **env):
    """hookwheel with the tokens of namespaces a and b, and env's settings."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"a {TOKEN_A}\nb {TOKEN_B}\n")
    return hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens), **env})


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def started_ms(timer):
    at = timer["last_attempt"]["at"]
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp() * 1000


def claimed(hw):
    status, _, text = hw.api.request("GET", "/metrics", headers=bearer(TOKEN_A))
    assert status == 200
    text = text if isinstance(text, str) else text.decode()
    m = re.search(r"^hookwheel_timers_claimed (\d+)", text, re.M)
    return int(m.group(1)) if m else 0


def flood_then_b(hw, receiver, flood, due):
    """Starts a's queue bulk at 5 a second, creates `flood` of a's timers
    due at `due` in it, then b's ten due 100 ms apart just after; returns
    b's due times by id."""
    status, _, q = hw.api.request("PUT", "/queues/bulk", json_body={"max_dispatches_per_second": 5, "scope": "instance"},
                                  headers=bearer(TOKEN_A))
    assert status in (200, 201), q
    for k in range(flood // 1000):
        items = [{"id": f"a{k}-{i}", "url": receiver.url("/a"), "queue": "bulk", "fire_at_ms": due}
                 for i in range(1000)]
        status, _, body = hw.api.request("POST", "/timers/batch", json_body={"timers": items},
                                         headers=bearer(TOKEN_A), timeout=scaled(60))
        assert status in (200, 201) and body["created"] == 1000, (status, body)
    b_due = {f"b{i}": due + 100 * (i + 1) for i in range(10)}
    for tid, at in b_due.items():
        status, _, t = hw.api.create({"id": tid, "url": receiver.url("/b"), "fire_at_ms": at},
                                     headers=bearer(TOKEN_B))
        assert status == 201, t
    return b_due


def b_lateness(hw, receiver, b_due):
    """Waits for b's timers; ms from each one's due time to its attempt's start."""
    got = receiver.wait_for(len(b_due), scaled(30), path="/b")
    assert len(got) == len(b_due), got
    late = {}
    for tid, at in b_due.items():
        seen = {}

        def delivered():
            seen["t"] = hw.api.request("GET", f"/timers/{tid}", headers=bearer(TOKEN_B))[2]
            return seen["t"].get("state") == "delivered"
        assert wait_until(delivered, scaled(10)), seen
        late[tid] = round(started_ms(seen["t"]) - at)
    return late


@pytest.mark.skipif(CLUSTER_MODE or SLOW, reason="one instance's sweep on one Redis (claims on a cluster are "
                    "test_cluster.py's), run once: 50,000 creates in 6 s are not a sanitizer build's")
def test_timers_due_just_after_another_namespace_s_flood_of_50000_start_on_time(
        tmp_path, redis, receiver, hookwheel_factory):
    hw = two_namespaces(tmp_path, redis, hookwheel_factory)
    # The flood's queue starts a few a second on this instance: what is
    # measured is its claim, not this machine's speed at delivering 50,000
    # requests.
    due = int(now_ms()) + LEAD_MS
    b_due = flood_then_b(hw, receiver, FLOOD, due)
    assert now_ms() < due - 6000, "creating the flood took too long for this test"
    held_at_due = None
    while now_ms() < due:
        held_at_due = claimed(hw)
        time.sleep(0.05)
    late = b_lateness(hw, receiver, b_due)
    assert max(late.values()) <= LATE_MS, (
        f"namespace b's attempts started late (ms after fire_at): {late}; at the flood's due time "
        f"this instance held {held_at_due} of its {FLOOD} timers")
    assert held_at_due >= FLOOD, held_at_due


@pytest.mark.skipif(CLUSTER_MODE or SLOW, reason="one instance's sweep on one Redis, run once: 200,000 creates")
def test_timers_due_just_after_a_flood_larger_than_its_namespace_s_cap_start_on_time(
        tmp_path, redis, receiver, hookwheel_factory):
    # a's flood due at one instant is more than a's cap in memory (half of
    # HOOKWHEEL_MAX_RESIDENT), and claiming the cap's worth takes longer than
    # the claim window's lead: b's timers due just after it were claimed
    # only once a's cap was full (up to 2 s late), unless every claim call
    # gives each namespace its share.
    hw = two_namespaces(tmp_path, redis, hookwheel_factory, HOOKWHEEL_MAX_RESIDENT="300000",
                        HOOKWHEEL_WINDOW_MS="1000")
    due = int(now_ms()) + 20_000
    b_due = flood_then_b(hw, receiver, 200_000, due)
    assert now_ms() < due - 3000, "creating the flood took too long for this test"
    late = b_lateness(hw, receiver, b_due)
    assert max(late.values()) <= LATE_MS, f"namespace b's attempts started late (ms after fire_at): {late}"
    # a's claims went on beside b's: a holds its cap (less the few its queue started), no more
    assert wait_until(lambda: claimed(hw) >= 140_000, scaled(20)), claimed(hw)
    assert claimed(hw) <= 150_000


@pytest.mark.skipif(CLUSTER_MODE, reason="writes its figures into one Redis with redis-cli --pipe")
def test_a_timer_starts_on_time_while_another_namespace_reads_the_figures_of_20000_queues(
        tmp_path, redis, receiver, hookwheel_factory):
    hw = two_namespaces(tmp_path, redis, hookwheel_factory)
    # Namespace a's figures of the last five minutes and the next one (the
    # reads may cross into it), as 20,000 queues' deliveries would have left
    # them (persistence/stats.h: <queue>/d, /a, /l<bucket>): 60,000 fields
    # a minute.
    minute = int(now_ms()) // 60000
    cmds = [resp("HSET", f"hw:stats:{{ns:a}}:{m}", f"q{i:05d}/d", 1, f"q{i:05d}/a", 1, f"q{i:05d}/l3", 1)
            for m in range(minute - 4, minute + 2) for i in range(20_000)]
    out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(redis.port), "--pipe"],
                         input=b"".join(cmds), capture_output=True, timeout=120)
    assert out.returncode == 0 and b"errors: 0" in out.stdout, out.stdout + out.stderr
    reads = b_on_time_while(hw, receiver, "/stats?minutes=5", lambda body: (
        len(body["queues"]), body["queue_totals"]["q00042"]))
    # every field counted once: 5 minutes of 1 delivery and 1 attempt each
    assert all(r[:2] == (200, (20_000, {"delivered": 5, "failed": 0, "attempts": 5, "failed_attempts": 0}))
               for r in reads), reads


@pytest.mark.skipif(CLUSTER_MODE, reason="the same C paths as on one Redis; 20,000 creates")
def test_a_timer_starts_on_time_while_another_namespace_lists_its_20000_queues(
        tmp_path, redis, receiver, hookwheel_factory):
    hw = two_namespaces(tmp_path, redis, hookwheel_factory)
    for k in range(0, 20_000, 1000):  # a timer an hour ahead in each of 20,000 queues
        status, _, body = hw.api.request("POST", "/timers/batch", json_body={"timers": [
            {"url": receiver.url("/a"), "delay_ms": 3_600_000, "queue": f"q{i:05d}"} for i in range(k, k + 1000)]},
            headers=bearer(TOKEN_A), timeout=scaled(60))
        assert status == 200 and body["created"] == 1000, body
    status, _, body = hw.api.request("PUT", "/queues/q00042", json_body={"parallelism": 3}, headers=bearer(TOKEN_A))
    assert status == 200, body

    def summary(body):
        qs = body["queues"]
        return (len(qs), len({q["name"] for q in qs}), sum(q["timers"]["scheduled"] for q in qs),
                [(q["name"], q["parallelism"], q["configured"]) for q in qs if q["name"] == "q00042"])
    reads = b_on_time_while(hw, receiver, "/queues", summary)
    # every queue once, with its one timer; the configured one with its controls
    assert all(r[:2] == (200, (20_000, 20_000, 20_000, [("q00042", 3, True)])) for r in reads), reads


def b_on_time_while(hw, receiver, path, summary):
    """Namespace a reads path with four clients (--max-expensive-per-namespace)
    back to back while namespace b creates a timer due 700 ms later; asserts
    b's create is answered within a second and its attempt starts at most
    LATE_MS late. Returns a's reads: (status, summary(body) or the body, ms)."""
    reads, done = [], threading.Event()

    def read():  # until b's timer has run, four reads at least
        while not done.is_set() or len(reads) < 4:
            t0 = time.monotonic()
            status, _, body = hw.api.request("GET", path, headers=bearer(TOKEN_A), timeout=scaled(60))
            reads.append((status, summary(body) if status == 200 else body, round((time.monotonic() - t0) * 1000)))

    readers = [threading.Thread(target=read) for _ in range(4)]
    for reader in readers:
        reader.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    due = int(now_ms()) + 700
    status, _, t = hw.api.create({"id": "b-on-time", "url": receiver.url("/b"), "fire_at_ms": due},
                                 headers=bearer(TOKEN_B))
    created_ms = round((time.monotonic() - t0) * 1000)
    assert status == 201, t
    seen = {}

    def delivered():
        seen["t"] = hw.api.request("GET", "/timers/b-on-time", headers=bearer(TOKEN_B))[2]
        return seen["t"].get("state") == "delivered"
    delivered_in_time = wait_until(delivered, scaled(60))
    done.set()
    for reader in readers:
        reader.join()
    assert delivered_in_time, seen
    late = round(started_ms(seen["t"]) - due)
    assert created_ms <= 1000 and late <= LATE_MS, (
        f"namespace b's create was answered in {created_ms} ms and its attempt started {late} ms late "
        f"while namespace a read {path} (status, what, ms): {[(r[0], r[2]) for r in reads]}")
    return reads
