"""Bulk instructions by selector (POST /timers/cancel, pause, resume,
reschedule): exact receipts, paging, Idempotency-Key, against a real
redis-server, the real binary and a real receiver."""
import signal
import subprocess
import threading
import time
import uuid

import pytest

from conftest import (CLUSTER_MODE, HOOKWHEEL_BIN, SLOW, Reply, RespClient, free_port, partition, scaled,
                      wait_until)
from contract import assert_matches_contract


def batch(api, specs, headers=None):
    for i in range(0, len(specs), 1000):
        status, _, body = api.request("POST", "/timers/batch", json_body={"timers": specs[i:i + 1000]},
                                      headers=headers, timeout=scaled(60))
        assert status == 200 and body["failed"] == 0, (status, body if status != 200 else body["items"][:3])


def select(api, op, body, key=None, headers=None):
    hdrs = dict(headers or {})
    if key:
        hdrs["Idempotency-Key"] = key
    status, rh, answer = api.request("POST", f"/timers/{op}", json_body=body, headers=hdrs, timeout=scaled(60))
    assert_matches_contract("POST", f"/timers/{op}", status, rh, answer)
    return status, rh, answer


def walk(api, op, body, key=None, headers=None):
    """Every page of a selector operation; returns the pages' bodies."""
    pages, cursor = [], None
    while True:
        status, _, page = select(api, op, {**body, **({"cursor": cursor} if cursor else {})}, key, headers)
        assert status == 200, page
        pages.append(page)
        cursor = page["next_cursor"]
        if cursor is None:
            return pages
        assert len(pages) < 1000


@pytest.mark.skipif(SLOW, reason="runs once, on the plain build (100,000 timers)")
def test_a_selector_cancel_is_exact_under_load_and_its_receipt_repeats(hookwheel, receiver):
    api = hookwheel.api
    receiver.default("/d", Reply(204, delay_s=0.02))  # a slow receiver
    t0 = int(time.time() * 1000) + 3000
    specs = []
    for i in range(100_000):
        labelled = i % 2 == 0
        specs.append({"id": f"{'c42' if labelled else 'oth'}-{i}", "url": receiver.url("/d"),
                      "fire_at_ms": t0 + (i * 7919) % 10_000,
                      "labels": {"customer": "42" if labelled else "7", "kind": "reminder"}})
    batch(api, specs)
    # at 5 s into the 10 s of due times, cancel customer 42's timers
    time.sleep(max(0, (t0 + 5000) / 1000 - time.time()))
    body = {"labels": {"customer": "42"}, "limit": 10_000}
    pages = walk(api, "cancel", body, key="cancel-c42")
    cancelled = [tid for p in pages for tid in p["cancelled"]]
    too_late = [t for p in pages for t in p["too_late"]]
    matched = sum(p["matched"] for p in pages)
    assert matched == 50_000 and len(cancelled) + len(too_late) == matched
    assert len(set(cancelled)) == len(cancelled) and not set(cancelled) & {t["id"] for t in too_late}
    assert cancelled and too_late, "the cancel came while customer 42's timers were firing"
    assert all(t["state"] in ("firing", "delivered") for t in too_late), too_late[:5]
    # the same call with the same key answers the same receipt, page by page
    again = walk(api, "cancel", body, key="cancel-c42")
    assert len(again) == len(pages)
    for p, q in zip(pages, again):
        assert q.pop("replayed") is True
        assert q == p
    # a different request under the same key is refused
    status, _, prob = select(api, "cancel", {"labels": {"customer": "7"}}, key="cancel-c42")
    assert status == 422, prob
    # wait for everything that was not cancelled to arrive
    expected = 100_000 - len(cancelled)
    receiver.wait_for(expected, timeout=scaled(180), path="/d")
    time.sleep(1.0)
    got = [r.timer_id for r in receiver.requests("/d")]
    gotset = set(got)
    assert not gotset & set(cancelled), "a cancelled timer reached the receiver"
    assert {t["id"] for t in too_late} <= gotset, "every too_late timer had its attempt"
    others = {s["id"] for s in specs if s["id"].startswith("oth-")}
    assert others <= gotset, "the other customer's timers are untouched"
    assert len(got) == expected
    for tid in cancelled[:50]:
        status, _, t = api.get(tid)
        assert status == 200 and t["state"] == "cancelled" and t["attempts"] == 0


def test_pause_resume_reschedule_and_dry_run_by_selector(hookwheel, receiver):
    api = hookwheel.api
    specs = [{"id": f"s-{i}", "url": receiver.url("/s"), "delay_ms": 60_000,
              "queue": "q1" if i % 2 else "q2", "labels": {"tenant": "t1", "wave": str(i % 3)}} for i in range(90)]
    specs += [{"id": f"u-{i}", "url": receiver.url("/u"), "delay_ms": 60_000, "labels": {"tenant": "t2"}}
              for i in range(30)]
    batch(api, specs)
    # dry run: lists, changes nothing
    status, _, page = select(api, "pause", {"labels": {"tenant": "t1", "wave": "0"}, "queue": "q1", "dry_run": True})
    assert status == 200 and page["dry_run"] is True
    want = sorted(s["id"] for s in specs[:90] if s["labels"]["wave"] == "0" and s["queue"] == "q1")
    assert sorted(m["id"] for m in page["matches"]) == want and page["matched"] == len(want)
    assert all(m["state"] == "scheduled" for m in page["matches"])
    assert api.get(want[0])[2]["state"] == "scheduled"
    # pause them
    status, _, page = select(api, "pause", {"labels": {"tenant": "t1", "wave": "0"}, "queue": "q1"})
    assert sorted(page["paused"]) == want and page["too_late"] == [] and page["next_cursor"] is None
    for tid in want:
        assert api.get(tid)[2]["state"] == "paused"
    # the queue's counts follow (batch creates and selector pauses are counted)
    status, _, q = api.request("GET", "/queues/q1")
    assert q["timers"]["paused"] == len(want) and q["timers"]["scheduled"] == 45 - len(want), q
    # a state filter: only the paused ones of tenant t1 resume
    status, _, page = select(api, "resume", {"labels": {"tenant": "t1"}, "state": "paused"})
    assert sorted(page["resumed"]) == want
    # reschedule all of tenant t1 to 300 ms from now: they fire; t2 is untouched
    status, _, page = select(api, "reschedule", {"labels": {"tenant": "t1"}, "delay_ms": 300})
    assert status == 200 and len(page["rescheduled"]) == 90, page
    receiver.wait_for(90, timeout=scaled(20), path="/s")
    time.sleep(0.5)
    assert len(receiver.requests("/s")) == 90 and receiver.requests("/u") == []
    # now they are finished: a cancel is too late for each, with its state
    status, _, page = select(api, "cancel", {"labels": {"tenant": "t1"}, "limit": 7})
    assert page["matched"] == 7 and page["cancelled"] == [] and len(page["too_late"]) == 7
    assert all(t["state"] == "delivered" for t in page["too_late"]) and page["next_cursor"]
    # paging with a small limit visits every match once
    pages = walk(api, "cancel", {"labels": {"tenant": "t2"}, "limit": 7})
    ids = [tid for p in pages for tid in p["cancelled"]]
    assert sorted(ids) == sorted(f"u-{i}" for i in range(30))


def test_selector_errors(hookwheel, receiver):
    api = hookwheel.api
    for body, field in [({}, "labels"), ({"labels": {}}, "labels"), ({"labels": {"a b": "1"}}, "labels.a b"),
                        ({"labels": {"a": "1"}, "state": "gone"}, "state"), ({"labels": {"a": "1"}, "x": 1}, "x"),
                        ({"labels": {"a": "1"}, "limit": 0}, "limit"), ({"labels": {"a": "1"}, "limit": 10001}, "limit"),
                        ({"labels": {"a": "1"}, "cursor": "nope"}, "cursor"),
                        ({"labels": {"a": "1"}, "dry_run": 1}, "dry_run"),
                        ({"labels": {"a": "1"}, "delay_ms": 5}, "delay_ms")]:
        status, _, prob = select(api, "cancel", body)
        assert status == 400 and prob["field"] == field, (body, prob)
    status, _, prob = select(api, "reschedule", {"labels": {"a": "1"}})
    assert status == 400, prob
    status, _, prob = select(api, "cancel", {"labels": {"a": "1"}}, key="bad key")
    assert status == 400 and prob["field"] == "Idempotency-Key"
    for op in ("cancel", "pause", "resume", "reschedule"):  # a body over HOOKWHEEL_MAX_BODY_BYTES
        status, _, prob = select(api, op, {"labels": {"a": "1"}, "note": "x" * 70_000})
        assert status == 413, (op, prob)
    status, _, page = select(api, "cancel", {"labels": {"nobody": "here"}})
    assert status == 200 and page == {"matched": 0, "dry_run": False, "cancelled": [], "too_late": [],
                                      "next_cursor": None}


def test_a_key_used_with_one_request_refuses_another_from_any_cursor(hookwheel, receiver):
    api = hookwheel.api
    specs = [{"id": f"ky-{i}", "url": receiver.url("/k"), "delay_ms": 3_600_000,
              "labels": {"c": "1" if i % 2 else "2"}} for i in range(100)]
    batch(api, specs)
    body = {"labels": {"c": "1"}, "limit": 5}
    status, _, first = select(api, "pause", body, key="ky")
    assert status == 200 and first["next_cursor"], first
    # another request under the key, from the first page's cursor: refused, nothing done
    status, _, prob = select(api, "cancel", {"labels": {"c": "2"}, "cursor": first["next_cursor"]}, key="ky")
    assert status == 422, prob
    status, _, page = select(api, "cancel", {"labels": {"c": "2"}, "dry_run": True})
    assert page["matched"] == 50 and all(m["state"] == "scheduled" for m in page["matches"]), page
    # the request the key came with goes on to its end
    pages = [first] + walk(api, "pause", {**body, "cursor": first["next_cursor"]}, key="ky")
    paused = [tid for p in pages for tid in p["paused"]]
    assert sorted(paused) == sorted(s["id"] for s in specs if s["labels"]["c"] == "1")


@pytest.mark.skipif(CLUSTER_MODE, reason="stops the one redis-server")
def test_selector_operations_count_towards_the_namespace_cap_as_help_says(redis, hookwheel_factory):
    hw = hookwheel_factory(redis, args=["--max-expensive-per-namespace", "1"])
    first = []
    redis.proc.send_signal(signal.SIGSTOP)  # the first selector waits for Redis, in the gate
    try:
        t = threading.Thread(target=lambda: first.append(select(hw.api, "cancel", {"labels": {"a": "1"}})))
        t.start()
        time.sleep(0.5)
        status, headers, prob = select(hw.api, "pause", {"labels": {"b": "1"}})
        assert status == 429 and headers.get("Retry-After"), prob
        assert "selector operations" in prob["detail"], prob
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    t.join(scaled(30))
    assert first and first[0][0] == 200, first
    out = subprocess.run([HOOKWHEEL_BIN, "--help"], capture_output=True, text=True, check=True).stdout
    cap = out[out.index("--max-expensive-per-namespace"):].split("\n  --")[0]
    assert "selector operations" in cap, cap


def test_a_selector_sees_only_its_namespace(tmp_path, redis, receiver, hookwheel_factory):
    tokens = tmp_path / "tokens"
    tokens.write_text("team-a token-a-0123456789abcdef\nteam-b token-b-0123456789abcdef\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    a = {"Authorization": "Bearer token-a-0123456789abcdef"}
    b = {"Authorization": "Bearer token-b-0123456789abcdef"}
    spec = [{"id": f"n-{i}", "url": receiver.url("/n"), "delay_ms": 60_000, "labels": {"c": "1"}} for i in range(20)]
    batch(hw.api, spec, headers=a)
    batch(hw.api, spec, headers=b)
    status, _, page = select(hw.api, "cancel", {"labels": {"c": "1"}}, headers=a)
    assert status == 200 and len(page["cancelled"]) == 20
    status, _, t = hw.api.request("GET", "/timers/n-0", headers=b)
    assert t["state"] == "scheduled"
    status, _, page = hw.api.request("GET", "/timers?state=scheduled&label=c:1&limit=100", headers=b)
    assert len(page["items"]) == 20
    status, _, page = hw.api.request("GET", "/timers?state=scheduled&label=c:1&limit=100", headers=a)
    assert page["items"] == []


def test_a_walk_meets_every_match_once_when_chunks_are_large(redis, receiver, hookwheel_factory):
    # one partition: 15,000 timers of one label put ~234 in each of its 64 index chunks, more than
    # one call reads from a chunk at a time (200); a sparse filter (one in ten) makes a call read on
    hw = hookwheel_factory(redis, args=["--partitions", "1"])
    specs = [{"id": f"big-{i}", "url": receiver.url("/big"), "delay_ms": 600_000, "labels": {"wave": "big"},
              "queue": "tenth" if i % 10 == 0 else "rest"} for i in range(15_000)]
    batch(hw.api, specs)
    pages = walk(hw.api, "cancel", {"labels": {"wave": "big"}, "queue": "tenth", "dry_run": True, "limit": 10_000})
    ids = [m["id"] for p in pages for m in p["matches"]]
    assert len(set(ids)) == len(ids) == 1_500 == sum(p["matched"] for p in pages)
    pages = walk(hw.api, "cancel", {"labels": {"wave": "big"}, "dry_run": True, "limit": 10_000})
    ids = [m["id"] for p in pages for m in p["matches"]]
    assert len(ids) == 15_000 and len(set(ids)) == 15_000


def test_a_page_repeated_from_its_cursor_under_the_key_replays_whatever_its_limit(hookwheel, receiver):
    api = hookwheel.api
    batch(api, [{"id": f"r-{i}", "url": receiver.url("/r"), "delay_ms": 600_000, "labels": {"g": "r"}}
                for i in range(300)])
    status, _, first = select(api, "cancel", {"labels": {"g": "r"}, "limit": 100}, key="k-r")
    assert status == 200 and len(first["cancelled"]) == 100 and first["next_cursor"]
    body = {"labels": {"g": "r"}, "limit": 100, "cursor": first["next_cursor"]}
    status, _, second = select(api, "cancel", body, key="k-r")
    assert status == 200 and len(second["cancelled"]) == 100
    # the same page again, from the same cursor, with another limit: the calls it made are replayed
    status, _, again = select(api, "cancel", {**body, "limit": 100}, key="k-r")
    assert again.pop("replayed") is True and again == second
    status, _, again = select(api, "cancel", {**body, "limit": 150}, key="k-r")
    assert status == 200, again
    assert again["cancelled"][:100] == second["cancelled"] and len(again["cancelled"]) == 150
    # another selector under the key is refused
    status, _, _ = select(api, "cancel", {**body, "queue": "x"}, key="k-r")
    assert status == 422


def lb_hash(s):
    """_record.lua lb_hash: a timer's chunk in a label's index is lb_hash(id) % 64, a label's
    bucket lb_hash(label) % 256."""
    h = 0
    for b in s.encode():
        h = (h * 31 + b) % 1000003
    return h


@pytest.mark.skipif(CLUSTER_MODE, reason="reads one Redis's keys")
def test_a_labels_first_timers_of_a_partition_share_a_bucket_and_a_walk_meets_each_once(
        hookwheel_factory, redis, receiver):
    hw = hookwheel_factory(redis, args=["--retention-s=1"])
    # 41 timers of one partition with the label few:1. Their entries go to a
    # bucket the partition's labels share while it has room (128 entries):
    # with 120 of other labels there, the first 8 go there, the other 33 to
    # the label's own chunks.
    ids, k = [], 0
    while len(ids) < 41:
        i = f"few-{k}"
        k += 1
        if partition(i) == partition("few-0"):
            ids.append(i)
    p = partition("few-0")
    stale = ids[0]
    bucket = f"hw:{{{p}}}:lbs::{lb_hash('few:1') % 256}"
    for k in range(120):
        redis.cmd("ZADD", bucket, 0, f"other:{k}\t{k}")
    # An entry an expired timer of the same id left in a chunk (its labels
    # leave the index only when a claim sees it expired): created again, the
    # id has an entry in both places, and a walk still meets it once.
    redis.cmd("ZADD", f"hw:{{{p}}}:lb::{lb_hash(stale) % 64}:few:1", 0, stale)
    short = set(ids[1:6] + ids[30:35])  # delivered at once, then expire: their entries go from both places
    specs = [{"id": i, "url": receiver.url("/few"), "delay_ms": 200 if i in short else 600_000,
              "labels": {"few": "1"}} for i in ids]
    batch(hw.api, specs)

    def placed():
        small = [m.split("\t", 1)[1] for key in redis.keys(f"hw:{{{p}}}:lbs:*")
                 for m in redis.cmd("ZRANGEBYLEX", key, "[few:1\t", "(few:1\n")]
        chunks = [m for key in redis.keys(f"hw:{{{p}}}:lb::*:few:1") for m in redis.cmd("ZRANGE", key, 0, -1)]
        return small, chunks
    small, chunks = placed()
    assert sorted(small) == sorted(ids[:8]) and sorted(chunks) == sorted(ids[8:] + [stale]), (small, chunks)
    assert redis.cmd("OBJECT", "ENCODING", bucket) == "listpack"
    receiver.wait_for(len(short), timeout=scaled(15), path="/few")
    wait_until(lambda: len(placed()[0]) + len(placed()[1]) == 32, timeout=scaled(20))
    small, chunks = placed()
    assert not short & set(small + chunks) and set(small + chunks) == set(ids) - short
    # A walk of small pages crosses from the chunks to the bucket and meets every timer once
    pages = walk(hw.api, "cancel", {"labels": {"few": "1"}, "dry_run": True, "limit": 3})
    met = [m["id"] for page in pages for m in page["matches"]]
    assert len(pages) > 5 and sorted(met) == sorted(set(ids) - short)
    # ... and so does a listing by the label
    status, _, page = hw.api.request("GET", "/timers?state=scheduled&label=few:1&limit=100")
    assert status == 200 and sorted(t["id"] for t in page["items"]) == sorted(met)


@pytest.mark.skipif(CLUSTER_MODE, reason="reads one Redis's keys")
def test_hex_ids_are_packed_in_a_bucket_and_entries_of_the_long_form_are_still_met_once(
        tmp_path, hookwheel_factory, redis, receiver):
    hw = hookwheel_factory(redis, args=["--retention-s=1"])
    # 30 timers of one partition with ids of 32 hex digits (the form hookwheel makes) and the
    # label hx:1: a bucket has room for them all, each entry "hx:1\x01" and the id's 16 bytes
    ids = []
    while len(ids) < 30:
        i = uuid.uuid4().hex
        if not ids or partition(i) == partition(ids[0]):
            ids.append(i)
    # ids[2:12] will be turned into long entries and ids[12] get one of each form: in id order,
    # two short ones first, then three, ids[12], five (a page that stops before ids[12]'s long
    # entry, which the walk reads but does not return, must still go on to the five)
    s = sorted(ids[2:13])
    ids[2:13] = s[:5] + s[6:] + [s[5]]
    p = partition(ids[0])
    bucket = f"hw:{{{p}}}:lbs::{lb_hash('hx:1') % 256}"
    short = set(ids[:4])  # delivered at once, then expire
    batch(hw.api, [{"id": i, "url": receiver.url("/hx"), "delay_ms": 200 if i in short else 600_000,
                    "labels": {"hx": "1"}} for i in ids])

    def entries():
        with RespClient(redis.port) as c:
            return c.call("ZRANGEBYLEX", bucket, "[hx:1\x01", "(hx:1\n")
    assert sorted(entries()) == sorted(b"hx:1\x01" + bytes.fromhex(i) for i in ids)
    # The entries a build before the packed form wrote: "<label>\t<id>". Ten of them (two of
    # them short ones) as such a build left them, and one id with an entry of each form.
    with RespClient(redis.port) as c:
        for i in ids[2:12]:
            c.call("ZREM", bucket, b"hx:1\x01" + bytes.fromhex(i))
            c.call("ZADD", bucket, 0, f"hx:1\t{i}")
        c.call("ZADD", bucket, 0, f"hx:1\t{ids[12]}")
    assert len(entries()) == 31
    receiver.wait_for(len(short), timeout=scaled(15), path="/hx")
    # A walk of small pages crosses the packed entries and the long ones and meets every timer
    # once (a short one whose record has expired meanwhile, retention 1 s, is not met)
    pages = walk(hw.api, "cancel", {"labels": {"hx": "1"}, "dry_run": True, "limit": 1})
    met = [m["id"] for page in pages for m in page["matches"]]
    assert len(met) == len(set(met)) and set(ids) - short <= set(met) <= set(ids), met
    assert len(pages) >= 26
    # ... and a listing by the label finds the scheduled ones of either form
    status, _, page = hw.api.request("GET", "/timers?state=scheduled&label=hx:1&limit=100")
    assert status == 200 and sorted(t["id"] for t in page["items"]) == sorted(set(ids) - short)
    # The expired ones leave the index, from either form
    want = sorted([b"hx:1\x01" + bytes.fromhex(i) for i in ids[12:]] + [f"hx:1\t{i}".encode() for i in ids[4:13]])
    assert wait_until(lambda: sorted(entries()) == want, timeout=scaled(20)), entries()
    status, _, answer = select(hw.api, "cancel", {"labels": {"hx": "1"}})
    assert status == 200 and sorted(answer["cancelled"]) == sorted(set(ids) - short), answer
    # A namespace's hex ids: the entry holds the packed digits, a walk gives back the whole id
    tokens = tmp_path / "tokens"
    tokens.write_text("team-a token-a-0123456789abcdef\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    team = {"Authorization": "Bearer token-a-0123456789abcdef"}
    nids = [uuid.uuid4().hex for _ in range(5)]
    batch(hw.api, [{"id": i, "url": receiver.url("/hx"), "delay_ms": 600_000, "labels": {"hx": "1"}}
                   for i in nids], headers=team)
    with RespClient(redis.port) as c:
        held = [m for key in c.call("KEYS", "hw:*:lbs:team-a:*")
                for m in c.call("ZRANGEBYLEX", key, "[hx:1\x01", "(hx:1\n")]
    assert sorted(held) == sorted(b"hx:1\x01" + bytes.fromhex(i) for i in nids)
    pages = walk(hw.api, "cancel", {"labels": {"hx": "1"}, "limit": 2}, headers=team)
    assert sorted(i for page in pages for i in page["cancelled"]) == sorted(nids)
    for i in nids:
        status, _, t = hw.api.request("GET", f"/timers/{i}", headers=team)
        assert status == 200 and t["state"] == "cancelled"


def label_entries(redis):
    """Every entry of every label index (buckets and chunks) in Redis."""
    return sum(int(redis.cmd("ZCARD", key)) for key in redis.keys("hw:*:lb*"))


@pytest.mark.skipif(CLUSTER_MODE, reason="reads one Redis's keys")
def test_the_label_entries_of_expired_timers_all_leave_the_index(hookwheel_factory, redis):
    # 200 labelled timers a second for 6 s, each failing at once (its
    # target refuses the connection) and expiring a second later, so that
    # finishes, which trim the expired, keep meeting records at their
    # expiry. A trim that met one with less than 1 ms to live (PTTL 0)
    # dropped it from the expiry list and kept its label entries for ever:
    # a few in a hundred stayed.
    hw = hookwheel_factory(redis, args=["--retention-s=1"])
    url = f"http://127.0.0.1:{free_port()}/refused"
    start = time.monotonic()
    for k in range(60):
        batch(hw.api, [{"url": url, "delay_ms": 50, "labels": {"flow": "1", "n": str(i % 7)},
                        "retry": {"max_attempts": 1}} for i in range(20)])
        time.sleep(max(0.0, start + (k + 1) / 10 - time.monotonic()))
    assert label_entries(redis) > 0

    def gone():  # the records expired, and the sweeps (every 2.5 s) trimmed their expiry list
        return not redis.keys("hw:*:t:*") and not any(int(redis.cmd("ZCARD", k)) for k in redis.keys("hw:*:lx"))
    assert wait_until(gone, timeout=scaled(30)), hw.log_tail(10)
    assert label_entries(redis) == 0, sorted(redis.keys("hw:*:lb*"))[:5]


@pytest.mark.skipif(CLUSTER_MODE, reason="reads one Redis's keys")
def test_a_selector_drops_the_label_entries_of_a_timer_that_is_gone(hookwheel, redis, receiver):
    # Entries earlier builds left (see the test above) are dropped by the
    # first selector walk that meets them: a hex id (a packed entry in its
    # label's bucket) and one of another form (the long way), their records
    # gone without their entries.
    ids = [uuid.uuid4().hex, "gone-1"]
    batch(hookwheel.api, [{"id": i, "url": receiver.url("/gone"), "delay_ms": 600_000,
                           "labels": {"lost": "1"}} for i in ids])
    for i in ids:
        assert redis.cmd("DEL", f"hw:{{{partition(i)}}}:t:{i}") == 1
    assert label_entries(redis) == 2
    status, _, answer = select(hookwheel.api, "cancel", {"labels": {"lost": "1"}, "dry_run": True})
    assert status == 200 and answer["matched"] == 0, answer
    assert label_entries(redis) == 0, sorted(redis.keys("hw:*:lb*"))


def test_an_id_created_again_is_not_matched_by_the_labels_of_its_expired_timer(hookwheel_factory, redis, receiver):
    # A finished timer's label entries leave the index only when a claim sees its record expired
    # (a sweep, every half window: a long one here). The same id created again meanwhile with
    # other labels is not a timer of the old labels: neither a selector nor a listing by them
    # meets it.
    hw = hookwheel_factory(redis, args=["--retention-s=1", "--window-ms=60000"])
    api = hw.api
    status, _, _ = api.create({"id": "again-1", "url": receiver.url("/again"), "delay_ms": 50,
                               "labels": {"customer": "42", "kind": "old"}})
    assert status == 201
    receiver.wait_for(1, timeout=scaled(10), path="/again")
    assert wait_until(lambda: api.get("again-1")[0] == 404, timeout=scaled(10))
    status, _, _ = api.create({"id": "again-1", "url": receiver.url("/again"), "delay_ms": 600_000,
                               "labels": {"customer": "7"}})
    assert status == 201
    status, _, page = api.request("GET", "/timers?state=scheduled&label=customer:42")
    assert status == 200 and page["items"] == [], page
    for labels in ({"customer": "42"}, {"kind": "old"}, {"customer": "7", "kind": "old"}):
        status, _, answer = select(api, "cancel", {"labels": labels})
        assert status == 200 and answer["matched"] == 0 and answer["cancelled"] == [], (labels, answer)
    status, _, t = api.get("again-1")
    assert t["state"] == "scheduled" and t["labels"] == {"customer": "7"}
    # its own label still finds it
    status, _, answer = select(api, "cancel", {"labels": {"customer": "7"}})
    assert answer["cancelled"] == ["again-1"], answer


def test_a_selector_over_timers_with_big_specs_meets_each_once_across_calls(redis, receiver, hookwheel_factory):
    # A match's labels are read from its record; a record over 1 KB counts one more index entry
    # per KB against a call's budget (1,024), so 40 timers of 48 KB in one partition take two or
    # more calls: each is still met once, and every one is cancelled.
    api = hookwheel_factory(redis, args=["--partitions=1"]).api
    pad = "y" * 48_000
    specs = [{"id": f"big-{i}", "url": receiver.url("/big"), "delay_ms": 600_000, "json": {"pad": pad, "i": i},
              "labels": {"size": "big"}} for i in range(40)]
    specs += [{"id": f"small-{i}", "url": receiver.url("/big"), "delay_ms": 600_000, "labels": {"size": "big"}}
              for i in range(40)]
    for s in specs:
        status, _, body = api.create(s)
        assert status == 201, body
    pages = walk(api, "cancel", {"labels": {"size": "big"}, "dry_run": True, "limit": 1000})
    met = [m["id"] for p in pages for m in p["matches"]]
    assert sorted(met) == sorted(s["id"] for s in specs), met
    pages = walk(api, "cancel", {"labels": {"size": "big"}, "limit": 1000})
    cancelled = [tid for p in pages for tid in p["cancelled"]]
    assert sorted(cancelled) == sorted(s["id"] for s in specs)
    for s in specs[::7]:
        assert api.get(s["id"])[2]["state"] == "cancelled"


def test_timers_a_selector_makes_due_soon_fire_on_time_whatever_the_claim_window(redis, receiver, hookwheel_factory):
    # A selector's reschedule or resume leaves its timers in Redis, held by
    # no instance: they waited for the next sweep, up to half the claim
    # window (300 s here) late, where the one-timer calls are on time.
    hw = hookwheel_factory(redis, args=["--window-ms", "600000"])
    api = hw.api
    far = [{"id": f"far-{i}", "url": receiver.url("/far"), "delay_ms": 3_600_000, "labels": {"wave": "far"}}
           for i in range(10)]
    batch(api, far)
    t0 = time.time()
    status, _, page = select(api, "reschedule", {"labels": {"wave": "far"}, "delay_ms": 300})
    assert status == 200 and len(page["rescheduled"]) == 10, page
    got = receiver.wait_for(10, timeout=scaled(5), path="/far")
    assert len(got) == 10 and all(r.wall_ms >= t0 * 1000 + 300 - 5 for r in got), [r.wall_ms for r in got]

    due = int(time.time() * 1000) + 2000  # claimed at create (within the window), then paused and resumed
    near = [{"id": f"near-{i}", "url": receiver.url("/near"), "fire_at_ms": due, "labels": {"wave": "near"}}
            for i in range(10)]
    batch(api, near)
    status, _, page = select(api, "pause", {"labels": {"wave": "near"}})
    assert status == 200 and len(page["paused"]) == 10, page
    status, _, page = select(api, "resume", {"labels": {"wave": "near"}})
    assert status == 200 and len(page["resumed"]) == 10, page
    got = receiver.wait_for(10, timeout=scaled(7), path="/near")
    assert len(got) == 10 and all(r.wall_ms >= due for r in got), [r.wall_ms - due for r in got]
