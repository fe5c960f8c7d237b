"""GET /timers: cursor pagination over a namespace's timers in one state,
with a real redis-server and the real binary."""
import re
import subprocess
import threading
import time
from urllib.parse import quote

import pytest

from conftest import (CLUSTER_MODE, RedisServer, Reply, RespClient, assert_created, create_many, partition,
                      scaled, wait_until)


def page(api, state, limit=100, cursor=None, queue=None, headers=None):
    q = f"/timers?state={state}&limit={limit}"
    if cursor:
        q += f"&cursor={quote(cursor)}"
    if queue:
        q += f"&queue={queue}"
    status, _, body = api.request("GET", q, headers=headers)
    assert status == 200, body
    assert set(body) == {"items", "next_cursor"}, body
    return body


def walk(api, state, limit=100, queue=None, headers=None):
    """Every item of a listing, following next_cursor to the end."""
    items, cursor, pages = [], None, 0
    while True:
        body = page(api, state, limit, cursor, queue, headers)
        assert len(body["items"]) <= limit
        items += body["items"]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return items, pages
        assert pages < 10000, "the listing does not end"


def test_ten_thousand_timers_are_listed_once_each_in_due_order_while_others_come_and_go(hookwheel, receiver):
    base = int(time.time() * 1000) + 3_600_000
    specs = [{"id": f"far-{i:05d}", "url": receiver.url("/far"), "fire_at_ms": base + (i * 7919) % 10000 * 10}
             for i in range(10000)]
    fire_at, errors = create_many(hookwheel.api, specs)
    assert not errors, errors[:3]
    stop = threading.Event()
    churn = {"created": 0}

    def make_churn():  # timers created and delivered while the listing runs
        with hookwheel.api.session() as s:
            n = 0
            while not stop.is_set():
                status, _, _ = s.create({"id": f"churn-{n}", "url": receiver.url("/churn"), "delay_ms": n % 300})
                assert status == 201
                n += 1
        churn["created"] = n

    t = threading.Thread(target=make_churn)
    t.start()
    try:
        items, pages = walk(hookwheel.api, "scheduled", limit=100)
    finally:
        stop.set()
        t.join()
    far = [it for it in items if it["id"].startswith("far-")]
    ids = [it["id"] for it in far]
    assert len(ids) == len(set(ids)), "a timer was listed twice"
    assert set(ids) == set(fire_at), f"{len(set(fire_at) - set(ids))} timers were never listed"
    dues = [(it["fire_at_ms"], it["id"]) for it in far]
    assert dues == sorted(dues), "the listing is not in due order"
    assert all(it["state"] == "scheduled" for it in far)
    assert pages >= 100
    assert churn["created"] > 0
    assert len(receiver.requests("/churn")) > 0, "nothing was delivered meanwhile"


def test_timers_clumped_by_partition_fill_every_page_in_due_order(hookwheel, receiver):
    # A page first asks each partition for its share (about 2 x limit / partitions); here the
    # timers of one partition are due one after another (a clump of 20, then the next
    # partition's, twice round), so the shares fall short where the page needs a whole clump:
    # later rounds ask the partition that bounds the page for the rest, and every page is full.
    parts = 64 if CLUSTER_MODE else 16
    by_part = {p: [] for p in range(parts)}
    k = 0
    while min(len(v) for v in by_part.values()) < 40:
        tid = f"clump-{k}"
        if len(by_part[partition(tid, parts)]) < 40:
            by_part[partition(tid, parts)].append(tid)
        k += 1
    base = int(time.time() * 1000) + 3_600_000
    specs, at = [], base
    for cycle in range(2):
        for p in range(parts):
            for tid in by_part[p][cycle * 20:(cycle + 1) * 20]:
                specs.append({"id": tid, "url": receiver.url("/clump"), "fire_at_ms": at})
                at += 10
    fire_at, errors = create_many(hookwheel.api, specs)
    assert not errors, errors[:3]
    expected = [s["id"] for s in specs]  # due order
    for limit in (100, 7):
        items, cursor, sizes = [], None, []
        while True:
            body = page(hookwheel.api, "scheduled", limit, cursor)
            items += body["items"]
            sizes.append(len(body["items"]))
            cursor = body["next_cursor"]
            if cursor is None:
                break
            assert len(sizes) < 1000, "the listing does not end"
        assert [it["id"] for it in items] == expected, f"limit {limit}: not every timer once, in due order"
        assert all(n == limit for n in sizes[:-1]), f"limit {limit}: short pages {sizes}"


def test_a_page_reads_about_twice_its_limit_of_records_not_every_partitions_limit(redis, hookwheel, receiver):
    # 16 partitions, a page of 1,000: each partition is asked for 125 (twice its part of the
    # page), so the page reads about 2,000 keys (1,820 measured); asking each partition for the
    # whole limit (up to its scan budget of 256 entries, a peek and a read each) read 5,087.
    base = int(time.time() * 1000) + 3_600_000
    specs = [{"id": f"rd-{i:05d}", "url": receiver.url("/rd"), "fire_at_ms": base + (i * 7919) % 4000 * 10}
             for i in range(4000)]
    fire_at, errors = create_many(hookwheel.api, specs)
    assert not errors, errors[:3]

    def hits():
        return int(re.search(r"keyspace_hits:(\d+)", redis.cmd("INFO", "stats")).group(1))

    h0 = hits()
    items, pages = walk(hookwheel.api, "scheduled", limit=1000)
    per_page = (hits() - h0) / 4
    assert sorted(it["id"] for it in items) == sorted(fire_at)
    assert pages == 5  # four full pages, then an empty one (a full page has a next_cursor)
    print(f"{per_page:.0f} keys read per page of 1000")
    assert per_page < 3000, f"{per_page:.0f} keys read per page of 1000"


def test_finished_timers_are_listed_newest_first_and_filtered_by_queue(hookwheel, receiver):
    receiver.default("/gone", 404)
    made = []
    for i in range(25):
        queue = "blue" if i % 2 else "green"
        assert_created(*hookwheel.create({"id": f"dl-{i:02d}", "url": receiver.url("/gone"), "delay_ms": 0,
                                          "queue": queue}))
        made.append((f"dl-{i:02d}", queue))
        time.sleep(0.01)
    for tid, _ in made:
        hookwheel.wait_state(tid, "failed", timeout=scaled(5))
    items, pages = walk(hookwheel.api, "failed", limit=4)
    got = [it["id"] for it in items]
    assert sorted(got) == sorted(t for t, _ in made)
    assert pages == 7
    finished = [it["last_attempt"]["at"] for it in items]
    assert finished == sorted(finished, reverse=True), "not newest first"
    blue, _ = walk(hookwheel.api, "failed", limit=5, queue="blue")
    assert sorted(it["id"] for it in blue) == sorted(t for t, q in made if q == "blue")
    assert all(it["queue"] == "blue" for it in blue)
    # a cancelled timer moves from one listing to the other
    assert_created(*hookwheel.create({"id": "to-cancel", "url": receiver.url("/x"), "delay_ms": 600000}))
    assert "to-cancel" in [it["id"] for it in walk(hookwheel.api, "scheduled")[0]]
    status, _, _ = hookwheel.cancel("to-cancel")
    assert status == 200
    assert "to-cancel" not in [it["id"] for it in walk(hookwheel.api, "scheduled")[0]]
    assert [it["id"] for it in walk(hookwheel.api, "cancelled")[0]] == ["to-cancel"]


def test_bad_listing_queries_get_400_naming_the_parameter(hookwheel):
    for query, field in [("", "state"), ("?state=lost", "state"), ("?state=failed&limit=0", "limit"),
                         ("?state=failed&limit=1001", "limit"), ("?state=failed&limit=x", "limit"),
                         ("?state=failed&queue=a%20b", "queue"), ("?state=failed&cursor=abc", "cursor"),
                         ("?state=failed&cursor=12~a%2Fb", "cursor")]:
        status, _, body = hookwheel.request("GET", f"/timers{query}")
        assert status == 400 and body["field"] == field, (query, body)


def test_a_rare_queue_is_listed_completely_and_in_order_with_short_pages(hookwheel, receiver):
    # limit 2 with a queue filter examines at most 20 entries per partition
    # per page: most partitions stop early, and the page must end where the
    # first of them stopped, or entries of that partition would be skipped.
    base = int(time.time() * 1000) + 3_600_000
    # 1,200 common timers, then 200 rare ones right after them
    specs = [{"id": f"c-{i:04d}", "url": receiver.url("/c"), "fire_at_ms": base + i * 10,
              "queue": "rare" if i >= 1200 else "common"} for i in range(1400)]
    fire_at, errors = create_many(hookwheel.api, specs)
    assert not errors, errors[:3]
    rare = sorted((fire_at[s["id"]], s["id"]) for s in specs if s["queue"] == "rare")
    items, pages = walk(hookwheel.api, "scheduled", limit=2, queue="rare")
    assert [(it["fire_at_ms"], it["id"]) for it in items] == rare
    assert pages > len(rare) // 2, "pages were not bounded by the scan budget"


def test_held_and_firing_timers_are_listed_with_the_others_in_due_order_and_only_in_their_namespace(
        tmp_path, redis, receiver, hookwheel_factory):
    # A timer no instance holds is in its namespace's index; one an instance
    # holds (due within the window, or firing) is only in that instance's
    # claimed set, which holds every namespace's timers: a listing merges both.
    tokens = {"team-a": "team-a-token-5d8e2f7a1b", "team-b": "team-b-token-9c3a6e0d4f"}
    (tmp_path / "tokens").write_text("".join(f"{ns} {t}\n" for ns, t in tokens.items()))
    hw = hookwheel_factory(redis, args=("--window-ms", "60000"),
                           env={"HOOKWHEEL_API_TOKENS_FILE": str(tmp_path / "tokens")})
    receiver.default("/slow", Reply(204, delay_s=4))
    receiver.default("/fail", Reply(500))
    now = int(time.time() * 1000)
    retry = {"max_attempts": 3, "max_backoff_ms": 120000}
    for ns, token in tokens.items():
        auth = {"Authorization": f"Bearer {token}"}
        specs = ([{"id": f"far-{i:02d}", "fire_at_ms": now + 3_600_000 + i * 1000} for i in range(20)] +
                 [{"id": f"near-{i:02d}", "fire_at_ms": now + 30_000 + i * 500} for i in range(20)] +
                 [{"id": f"firing-{i}", "delay_ms": 0, "url": receiver.url("/slow")} for i in range(3)] +
                 [{"id": "retry-held", "delay_ms": 0, "url": receiver.url("/fail"),
                   "retry": dict(retry, min_backoff_ms=20000)},
                  {"id": "retry-later", "delay_ms": 0, "url": receiver.url("/fail"),
                   "retry": dict(retry, min_backoff_ms=120000)}])
        for spec in specs:
            status, _, body = hw.create({"url": receiver.url("/never"), **spec}, headers=auth)
            assert status == 201, body
    assert receiver.wait_for(6, path="/slow", timeout=scaled(3)) and len(receiver.requests("/slow")) == 6
    auth_a = {"Authorization": f"Bearer {tokens['team-a']}"}

    def state(tid):
        return hw.request("GET", f"/timers/{tid}", headers=auth_a)[2]["state"]
    assert wait_until(lambda: state("retry-held") == "retrying" and state("retry-later") == "retrying",
                      scaled(5))
    items, pages = walk(hw.api, "scheduled", limit=7, headers=auth_a)
    got = [(it["fire_at_ms"], it["id"]) for it in items]
    assert got == sorted(got), "not in due order"
    ids = [it["id"] for it in items]
    assert sorted(ids) == sorted([f"far-{i:02d}" for i in range(20)] + [f"near-{i:02d}" for i in range(20)] +
                                 [f"firing-{i}" for i in range(3)]), ids
    assert {it["state"] for it in items if it["id"].startswith("firing-")} == {"firing"}, items
    assert {it["state"] for it in items if not it["id"].startswith("firing-")} == {"scheduled"}
    assert pages >= 7
    items, _ = walk(hw.api, "retrying", limit=1, headers=auth_a)
    assert [it["id"] for it in items] == ["retry-held", "retry-later"], items
    # the layout: only the timers no instance holds have an index entry
    assert sum(int(redis.cmd("ZCARD", k)) for k in redis.keys("hw:*:ix:team-a:scheduled")) == 20
    assert sum(int(redis.cmd("ZCARD", k)) for k in redis.keys("hw:*:ix:team-a:retrying")) == 1
    held = set()
    for k in redis.keys("hw:*:cl:*"):
        held |= set(redis.cmd("ZRANGE", k, 0, -1))
    assert {f"team-a/near-{i:02d}" for i in range(20)} | {"team-a/retry-held"} <= held


@pytest.mark.skipif(CLUSTER_MODE, reason="starts a redis-server of its own, in a locale")
def test_a_listing_pages_in_byte_order_when_redis_runs_in_a_locale_that_collates_otherwise(
        tmp_path, receiver, hookwheel_factory):
    # Redis takes LC_COLLATE from its environment, and Lua's string comparison follows it: under
    # en_US.UTF-8 "a00" sorts before "A01", while a sorted set orders bytes ("A01" before "a00").
    # A listing merges the index with the instances' claimed sets and finds its cursor's place
    # among timers of one due time by comparing ids: in the sorted sets' order, so with pages of
    # one to three timers every timer is listed once, in byte order.
    loc = tmp_path / "locales"
    loc.mkdir()
    subprocess.run(["localedef", "-i", "en_US", "-f", "UTF-8", str(loc / "en_US.UTF-8")], check=True,
                   capture_output=True)
    server = RedisServer(tmp_path / "redis-en", env={"LOCPATH": str(loc), "LC_ALL": "en_US.UTF-8"}).start()
    try:
        with RespClient(server.port) as c:
            assert c.call("EVAL", "return tostring('B' < 'a')", "0") == b"false", "the locale did not take"
        # 10 timers held in memory (claimed at create), the others in the index: both sources
        api = hookwheel_factory(server, args=["--max-resident=10", "--window-ms=600000"]).api
        due = int(time.time() * 1000) + 300_000
        ids = [f"{c}{i:02d}" for i in range(15) for c in ("A", "a", "b-", "B_")]
        for tid in ids:
            status, _, body = api.create({"id": tid, "url": receiver.url("/loc"), "fire_at_ms": due})
            assert status == 201, body
        for limit in (1, 2, 3):
            items, _ = walk(api, "scheduled", limit=limit)
            assert [t["id"] for t in items] == sorted(ids), (limit, [t["id"] for t in items])
    finally:
        server.stop()
