"""One tenant's listings cannot take hookwheel down for the others: every
listing and dead-letter call holds Redis for a bounded time (entries examined
and bytes returned per partition call), a page's text stays under
HOOKWHEEL_LIST_MAX_BYTES with an exact cursor, and a namespace has at most
HOOKWHEEL_MAX_EXPENSIVE_PER_NAMESPACE such calls in flight (429 beyond).
Real redis-server, real binary."""
import http.client
import json
import re
import subprocess
import threading
import time
from urllib.parse import quote

import pytest

from conftest import CLUSTER_MODE, RespClient, now_ms, partition, resp, scaled

TOKEN_BIG = "tenant-big-token-7d3e2a91c4"
TOKEN_SMALL = "tenant-small-token-0b5f8e62a7"
N = 160_000  # 10,000 a partition: a filtered page used to examine them all in one call


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def start(tmp_path, redis, hookwheel_factory, env=None):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"big {TOKEN_BIG}\nsmall {TOKEN_SMALL}\n")
    return hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens), **(env or {})})


def lay_out(redis, hw, receiver, n):
    """n scheduled timers of namespace "big" in queue "bulk", written to Redis
    as copies of one the API created, due an hour on, one ms apart."""
    status, _, t = hw.create({"id": "tmpl", "url": receiver.url("/bulk"), "queue": "bulk",
                              "fire_at_ms": int(now_ms()) + 3_600_000}, headers=bearer(TOKEN_BIG))
    assert status == 201, t
    with RespClient(redis.port) as c:
        template = c.call("GET", f"hw:{{{partition('big/tmpl')}}}:t:big/tmpl")
    assert isinstance(template, bytes) and template[0] == 0xB2, template
    base = int(now_ms()) + 3_600_000
    cmds = []
    for i in range(n):
        kid, due = f"big/b{i:06d}", base + i
        p = partition(kid)
        cmds.append(resp("SET", f"hw:{{{p}}}:t:{kid}", template[:4] + due.to_bytes(6, "little") + template[10:]))
        cmds.append(resp("ZADD", f"hw:{{{p}}}:ix:big:scheduled", due, kid))
    cmds.extend(resp("SADD", f"hw:{{{p}}}:nss", "big") for p in range(16))
    out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(redis.port), "--pipe"],
                         input=b"".join(cmds), capture_output=True, timeout=120)
    assert out.returncode == 0 and b"errors: 0" in out.stdout, out.stdout + out.stderr


@pytest.mark.skipif(CLUSTER_MODE, reason="loads its timers into one Redis with redis-cli --pipe; listings on a cluster are test_cluster.py's")
def test_a_storm_of_filtered_listings_never_holds_redis_nor_delays_another_tenants_create(
        tmp_path, redis, receiver, hookwheel_factory):
    hw = start(tmp_path, redis, hookwheel_factory)
    lay_out(redis, hw, receiver, N)
    redis.cmd("CONFIG", "SET", "slowlog-log-slower-than", "2000")
    redis.cmd("CONFIG", "SET", "slowlog-max-len", "1024")
    redis.cmd("SLOWLOG", "RESET")

    stop, seen, lock = threading.Event(), {}, threading.Lock()

    def storm():  # filtered pages that match nothing: the most examining per answer
        with hw.api.session() as s:
            cursor = None
            while not stop.is_set():
                q = "/timers?state=scheduled&limit=1000&queue=x" + (f"&cursor={quote(cursor)}" if cursor else "")
                status, h, body = s.request("GET", q, headers=bearer(TOKEN_BIG), timeout=scaled(30))
                with lock:
                    seen[status] = seen.get(status, 0) + 1
                if status == 200:
                    assert body["items"] == [], body["items"][:1]
                    cursor = body["next_cursor"]
                else:
                    assert status == 429 and h.get("Retry-After"), (status, body)
                    time.sleep(0.01)

    threads = [threading.Thread(target=storm) for _ in range(8)]
    for t in threads:
        t.start()
    slow = []
    try:
        time.sleep(0.3)
        with hw.api.session() as s:
            for i in range(25):
                t0 = time.monotonic()
                status, _, body = s.create({"id": f"probe-{i}", "url": receiver.url("/probe"),
                                            "delay_ms": 3_600_000}, headers=bearer(TOKEN_SMALL))
                took = time.monotonic() - t0
                assert status == 201, (status, body)
                slow.append(took)
                time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join()
    log = redis.cmd("SLOWLOG", "GET", "1024")
    fcalls = int(re.search(r"cmdstat_fcall:calls=(\d+)", redis.cmd("INFO", "commandstats")).group(1))
    worst = max(log, key=lambda e: e[2], default=[0, 0, 0, ["-"]])
    durs = sorted(e[2] for e in log)
    print("slowlog us:", len(durs), durs[len(durs) // 2] if durs else 0, durs[-10:])
    print(f"listings: {seen}; slowest create {max(slow) * 1000:.0f} ms; "
          f"slowest Redis command {worst[2]} us: {worst[3][:3]}")
    assert seen.get(200, 0) >= 8, seen  # the storm did run
    assert max(slow) < 1.0, f"another namespace's create waited {max(slow):.2f} s during the storm"
    # The slowlog times the wall clock: on these 2 shared cores (8 storm threads, hookwheel under
    # the sanitizers, or another part of the suite running beside this one) Redis can be
    # descheduled in the middle of a call, which measured 24 and 40 ms against a median of 2. A
    # listing that examined without bound is slow in every call, so at most 2 % of the calls
    # (and at least one) may pass 20 ms, and none 100 ms.
    over = [e for e in log if e[2] >= 20_000]
    assert len(over) <= max(1, fcalls // 50) and worst[2] < 100_000, \
        (f"{len(over)} of {fcalls} Redis function calls held Redis 20 ms or more, the worst {worst[2]} us: "
         f"{worst[3][:4]}")


def test_beyond_the_cap_a_namespace_gets_429_with_retry_after_and_others_do_not(
        tmp_path, redis, receiver, hookwheel_factory):
    hw = start(tmp_path, redis, hookwheel_factory, env={"HOOKWHEEL_MAX_EXPENSIVE_PER_NAMESPACE": "2"})
    redis.cmd("CLIENT", "PAUSE", "1200", "ALL")  # the calls below stay in flight meanwhile
    held = []

    def listing(token):
        held.append(hw.request("GET", "/timers?state=failed", headers=bearer(token), timeout=scaled(10)))

    threads = [threading.Thread(target=listing, args=(TOKEN_BIG,)) for _ in range(2)]
    threads.append(threading.Thread(target=listing, args=(TOKEN_SMALL,)))
    for t in threads:
        t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    status, h, problem = hw.request("GET", "/timers?state=scheduled", headers=bearer(TOKEN_BIG))
    assert status == 429 and time.monotonic() - t0 < 0.5, (status, problem)
    assert h.get("Content-Type", "").startswith("application/problem+json"), h
    assert int(h.get("Retry-After", "0")) >= 1 and problem["status"] == 429, (h, problem)
    status, h, problem = hw.request("POST", "/dead-letters/purge", headers=bearer(TOKEN_BIG))
    assert status == 429 and problem["status"] == 429, (status, problem)
    for t in threads:
        t.join()
    assert sorted(s for s, _, _ in held) == [200, 200, 200], held
    # the slots are given back with the answers
    for path in ("/timers?state=scheduled", "/timers?state=scheduled"):
        status, _, body = hw.request("GET", path, headers=bearer(TOKEN_BIG))
        assert status == 200, body
    status, _, body = hw.request("POST", "/dead-letters/replay", headers=bearer(TOKEN_BIG))
    assert status == 200 and body == {"replayed": 0, "more": False}, body


def test_queue_reads_count_towards_the_cap_as_listings_do(tmp_path, redis, receiver, hookwheel_factory):
    """GET /queues reads the counts of every partition (up to 500 due timers
    examined in each): 8 clients of one namespace asking for it in a loop
    kept Redis busy enough that another namespace's attempts started
    hundreds of milliseconds late, more the longer it went on."""
    hw = start(tmp_path, redis, hookwheel_factory, env={"HOOKWHEEL_MAX_EXPENSIVE_PER_NAMESPACE": "2"})
    status, _, body = hw.request("PUT", "/queues/q", json_body={"parallelism": 4}, headers=bearer(TOKEN_BIG))
    assert status == 200, body
    redis.cmd("CLIENT", "PAUSE", "1200", "ALL")  # the calls below stay in flight meanwhile
    held = []

    def read(token, path):
        held.append(hw.request("GET", path, headers=bearer(token), timeout=scaled(10)))

    threads = [threading.Thread(target=read, args=(TOKEN_BIG, path)) for path in ("/queues", "/queues/q")]
    threads.append(threading.Thread(target=read, args=(TOKEN_SMALL, "/queues")))
    for t in threads:
        t.start()
    time.sleep(0.3)
    for method, path, body in (("GET", "/queues", None), ("GET", "/queues/q", None),
                               ("PATCH", "/queues/q", {"paused": True}),
                               ("GET", "/timers?state=scheduled", None)):
        t0 = time.monotonic()
        status, h, problem = hw.request(method, path, json_body=body, headers=bearer(TOKEN_BIG))
        assert status == 429 and time.monotonic() - t0 < 0.5, (method, path, status, problem)
        assert int(h.get("Retry-After", "0")) >= 1 and problem["status"] == 429, (h, problem)
    for t in threads:
        t.join()
    assert sorted(s for s, _, _ in held) == [200, 200, 200], held
    # the refused PATCH stored nothing, and the slots are given back with the answers
    for path in ("/queues/q", "/queues/q", "/queues"):
        status, _, body = hw.request("GET", path, headers=bearer(TOKEN_BIG))
        assert status == 200, body
    status, _, body = hw.request("PATCH", "/queues/q", json_body={"parallelism": 5}, headers=bearer(TOKEN_BIG))
    assert status == 200 and body["parallelism"] == 5 and body["paused"] is False, body


def test_stats_reads_count_towards_the_cap_as_listings_do(tmp_path, redis, receiver, hookwheel_factory):
    """GET /stats reads up to 60 minute hashes, each with a field per figure
    of each of the namespace's queues, and decodes them on the store's writer
    thread: 8 clients of a namespace with 5,000 queues reading it in a loop
    made another namespace's attempts start up to about a second late."""
    hw = start(tmp_path, redis, hookwheel_factory, env={"HOOKWHEEL_MAX_EXPENSIVE_PER_NAMESPACE": "2"})
    redis.cmd("CLIENT", "PAUSE", "1200", "ALL")  # the calls below stay in flight meanwhile
    held = []

    def read(token, path):
        held.append(hw.request("GET", path, headers=bearer(token), timeout=scaled(10)))

    threads = [threading.Thread(target=read, args=(TOKEN_BIG, path)) for path in ("/stats", "/stats?minutes=5")]
    threads.append(threading.Thread(target=read, args=(TOKEN_SMALL, "/stats")))
    for t in threads:
        t.start()
    time.sleep(0.3)
    for path in ("/stats", "/queues", "/timers?state=scheduled"):
        t0 = time.monotonic()
        status, h, problem = hw.request("GET", path, headers=bearer(TOKEN_BIG))
        assert status == 429 and time.monotonic() - t0 < 0.5, (path, status, problem)
        assert int(h.get("Retry-After", "0")) >= 1 and problem["status"] == 429, (h, problem)
    for t in threads:
        t.join()
    assert sorted(s for s, _, _ in held) == [200, 200, 200], held
    for path in ("/stats", "/stats", "/stats?queue=q"):  # the slots are given back with the answers
        status, _, body = hw.request("GET", path, headers=bearer(TOKEN_BIG))
        assert status == 200 and "minutes" in body, body


def test_pages_of_large_timers_stay_under_the_byte_bound_and_list_each_timer_once(
        tmp_path, redis, receiver, hookwheel_factory):
    max_bytes = 65536
    hw = start(tmp_path, redis, hookwheel_factory, env={"HOOKWHEEL_LIST_MAX_BYTES": str(max_bytes)})
    body = "x" * 20_000
    base = int(now_ms()) + 3_600_000
    ids = [f"large-{i:02d}" for i in range(40)]
    for i, tid in enumerate(ids):
        status, _, t = hw.create({"id": tid, "url": receiver.url("/large"), "body": body,
                                  "fire_at_ms": base + (i * 7) % 40}, headers=bearer(TOKEN_BIG))
        assert status == 201, t
    got, cursor, pages = [], None, 0
    while True:
        q = "/timers?state=scheduled&limit=1000" + (f"&cursor={quote(cursor)}" if cursor else "")
        conn = http.client.HTTPConnection("127.0.0.1", hw.port, timeout=scaled(10))
        conn.request("GET", q, headers=bearer(TOKEN_BIG))
        r = conn.getresponse()
        text = r.read()  # the page is written as the client takes it (chunked): its bytes, not a Content-Length
        conn.close()
        status, page = r.status, json.loads(text)
        assert status == 200, page
        assert len(text) <= max_bytes, (pages, len(text))
        assert page["items"] or page["next_cursor"], page
        got += [it["id"] for it in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert pages < 100, "the listing does not end"
    assert pages >= 10, pages  # three 20 KB timers fit a page, not forty
    assert sorted(got) == ids and len(got) == len(set(got)), got
    fires = [base + (i * 7) % 40 for i in range(40)]
    assert got == [tid for _, tid in sorted(zip(fires, ids))], got
