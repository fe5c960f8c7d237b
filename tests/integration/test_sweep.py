"""A claim sweep of a large backlog never holds up the begins of timers that
fall due meanwhile (DESIGN §3: no call holds Redis for more than about a
millisecond, so claims are sliced).

100,000 timers due at one instant T are laid out in Redis directly (copies
of a timer the API created, so the bytes are this build's own), outside the
claim window when hookwheel starts. When the window reaches T the loader
claims them all, slice by slice, through the same Redis connection as the
begins; probe timers fall due every 100 ms throughout, and each must start
within 100 ms of its due time (a generous bound; the speed itself is the
benchmark's). Real redis-server, real binary, real receiver."""
import subprocess
import time

import pytest

from conftest import CLUSTER_MODE, SLOW, RespClient, free_port, now_ms, partition, resp, scaled

N = 100_000
PROBES = 40


# Slow (100,000 attempts): run once, on the plain build. Its C paths (claim
# decoding, absorbing claimed timers, batched begins) run under the
# sanitizers in test_timers.py and test_listing.py at smaller scale.
@pytest.mark.skipif(SLOW, reason="runs once, on the plain build")
@pytest.mark.skipif(CLUSTER_MODE, reason="loads 100,000 timers into one Redis's partitions directly")
def test_a_sweep_of_100000_due_timers_never_delays_a_begin_by_more_than_100_ms(redis, receiver, hookwheel_factory):
    hw = hookwheel_factory(redis)
    closed = free_port()  # nothing listens: the bulk's attempts fail fast
    status, _, t = hw.create({"id": "template", "url": f"http://127.0.0.1:{closed}/bulk",
                              "fire_at_ms": int(now_ms()) + 3_600_000, "retry": {"max_attempts": 1}})
    assert status == 201, t
    with RespClient(redis.port) as c:
        template = c.call("GET", f"hw:{{{partition('template')}}}:t:template")
    assert isinstance(template, bytes) and template[0] == 0xB2, template[:8]

    # outside the 5 s window until the layout is in (about 2 s on an idle
    # machine; 11 s leaves room for a machine busy with other tests)
    due = int(now_ms()) + 14000 + N // 50
    head = template[:4] + due.to_bytes(6, "little") + template[10:]
    cmds = []
    for i in range(N):
        tid = f"bulk-{i:06d}"
        p = partition(tid)
        cmds.append(resp("SET", f"hw:{{{p}}}:t:{tid}", head))
        cmds.append(resp("ZADD", f"hw:{{{p}}}:ix::scheduled", due, tid))
    cmds.extend(resp("SADD", f"hw:{{{p}}}:nss", "") for p in range(16))
    out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(redis.port), "--pipe"],
                         input=b"".join(cmds), capture_output=True, timeout=120)
    assert out.returncode == 0 and b"errors: 0" in out.stdout, out.stdout + out.stderr
    assert now_ms() < due - 5000 - 500, "laying the backlog out took too long for the test's plan"

    # probes due every 100 ms from when the window reaches T until T
    first = due - 4900
    for k in range(PROBES):
        status, _, body = hw.create({"id": f"probe-{k:02d}", "url": receiver.url("/probe"),
                                     "fire_at_ms": first + 100 * k})
        assert status == 201, body

    got = receiver.wait_for(PROBES, path="/probe", timeout=(due - now_ms()) / 1000 + scaled(5))
    assert len(got) == PROBES
    late = sorted((r.wall_ms - (first + 100 * int(r.timer_id[6:])), r.timer_id) for r in got)
    assert late[0][0] >= -1, f"a probe started early: {late[0]}"
    print(f"probe lateness ms: median {late[PROBES // 2][0]:.1f}, max {late[-1][0]:.1f}")
    assert late[-1][0] <= 100, f"probes started late while the backlog was claimed: {late[-5:]}"

    # the backlog was claimed meanwhile (else the test measured nothing):
    # only the far-off template still waits in an index
    def waiting():
        return sum(int(redis.cmd("ZCARD", f"hw:{{{p}}}:ix::scheduled")) for p in range(16))
    deadline = time.monotonic() + scaled(10)
    while waiting() > 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert waiting() == 1
    held = sum(int(redis.cmd("ZCARD", k)) for k in redis.keys("hw:*:cl:*"))
    failed = sum(int(redis.cmd("ZCARD", k)) for k in redis.keys("hw:*:ix::failed"))
    assert held + failed >= N, (held, failed)

    # and every one of them is attempted once due (its target refuses the
    # connection: one attempt, then failed), so the instance stops idle
    def failed_count():
        return sum(int(redis.cmd("ZCARD", f"hw:{{{p}}}:ix::failed")) for p in range(16))
    deadline = time.monotonic() + (due - now_ms()) / 1000 + scaled(60)
    while failed_count() < N and time.monotonic() < deadline:
        time.sleep(0.2)
    assert failed_count() == N


FINISH_BATCH_MAX = 24  # service/engine.c: timers a finish call records


@pytest.mark.skipif(CLUSTER_MODE, reason="reads one Redis's SLOWLOG")
def test_the_outcomes_of_a_burst_are_recorded_in_calls_of_at_most_24_timers(redis, receiver, hookwheel_factory):
    """A finish costs Redis about 10 us a timer alone, and several times that
    on a busy machine (a one-shot's end writes its record once more), so a
    burst's outcomes go in calls of at most 24 timers (under 1 ms of Redis
    each), never one call for all that ended together: a begin due meanwhile
    waits behind no more than that. One partition and room for every attempt
    at once, so that the whole burst ends together. A call whose time
    budget ran out (TIMERS_CALL_BUDGET_US) answers for its first timers and
    the rest go again in another call, so the calls carry at least the
    burst's timers in all, and every outcome is recorded once."""
    n = 400
    hw = hookwheel_factory(redis, args=["--partitions", "1", "--max-inflight", str(n),
                                        "--queue-parallelism", str(n)])
    redis.cmd("CONFIG", "SET", "slowlog-max-len", "100000")
    redis.cmd("CONFIG", "SET", "slowlog-log-slower-than", "0")
    redis.cmd("SLOWLOG", "RESET")
    try:
        due = int(now_ms()) + int(scaled(3) * 1000)
        for i in range(n):
            status, _, body = hw.create({"id": f"burst-{i:03d}", "url": receiver.url("/burst"), "fire_at_ms": due})
            assert status == 201, body
        assert len(receiver.wait_for(n, path="/burst", timeout=(due - now_ms()) / 1000 + scaled(20))) == n
        deadline = time.monotonic() + scaled(10)
        sizes = []
        ids, done = [f"burst-{i:03d}" for i in range(n)], {}
        while ids and time.monotonic() < deadline:  # the last outcomes are written just after
            done.update((i, t) for i, t in ((i, hw.get(i)[2]) for i in ids) if t.get("state") == "delivered")
            ids = [i for i in ids if i not in done]
            time.sleep(0.1 if ids else 0)
        while sum(sizes) < n and time.monotonic() < deadline:
            time.sleep(0.2)
            # FCALL <function> <numkeys: the timers> <their keys...> <arguments...>
            with RespClient(redis.port) as c:  # (raw: the arguments of a write may be binary)
                log = c.call("SLOWLOG", "GET", "-1")
            sizes = [int(e[3][2]) for e in log if e[3][0].upper() == b"FCALL" and e[3][1].endswith(b"_finish")]
    finally:
        redis.cmd("CONFIG", "SET", "slowlog-log-slower-than", "10000")
    assert ids == []  # every outcome recorded
    assert sum(sizes) >= n, sizes  # each in a call of its own batch or a call for the rest of it
    assert all(t["attempts"] == 1 for t in done.values()), done  # once each
    assert max(sizes) <= FINISH_BATCH_MAX, sorted(sizes)
    assert max(sizes) > 1, sizes  # and still batched
