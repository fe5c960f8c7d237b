"""Concurrent creates of one id (POST /timers and POST /timers/batch): every
answer agrees with what Redis holds afterwards (one 201 per stored id, 200
for a repeat of its spec, 409 for another spec), and the records, the
waiting index and the counts hold exactly the timers answered 2xx. Also
creates racing cancels, creates while Redis is stopped (503, then a repeat
after its restart), creates due within the claim window at the resident cap
(each arrives once, never early), ids at the length limit and namespaces.
Real redis-server, real hookwheel processes, a real receiver."""
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import SLOW, RespClient, now_ms, scaled, wait_until

from test_counts import assert_counts_equal_scan, nodes

# Races of the Redis functions and the answers built from them: once, on the
# plain build (the create path's C runs under the sanitizers in test_timers
# and test_batch).
pytestmark = pytest.mark.skipif(SLOW, reason="runs once, on the plain build")

FAR = 3_600_000


def spec_of(tid, variant, fire_at_ms, receiver, queue="races"):
    return {"id": tid, "url": receiver.url(f"/v{variant}"), "fire_at_ms": fire_at_ms, "queue": queue}


def stored_ids(redis):
    """{key id: 1} of every timer record, and the waiting entries (index and
    claimed sets) as {key id: how many}."""
    records, waiting = set(), {}
    for node in nodes(redis):
        with RespClient(node.port) as c:
            cursor = b"0"
            while True:
                cursor, keys = c.call("SCAN", cursor, "MATCH", "hw:{*", "COUNT", 1000)
                for k in keys:
                    k = k.decode()
                    if ":t:" in k:
                        records.add(k.split(":t:", 1)[1])
                    elif k.endswith(":scheduled") and ":ix:" in k or ":cl:" in k:
                        for m in c.call("ZRANGE", k, 0, -1):
                            m = m.decode()
                            waiting[m] = waiting.get(m, 0) + 1
                if cursor == b"0":
                    break
    return records, waiting


def check_answers(answers, stored_url):
    """answers: [(id, url asked, status, body)]. stored_url: {id: url}."""
    created = {}
    for tid, url, status, body in answers:
        assert status in (200, 201, 409), (tid, status, body)
        if status == 201:
            created[tid] = created.get(tid, 0) + 1
            assert body["url"] == url == stored_url.get(tid), (tid, url, body, stored_url.get(tid))
        elif status == 200:
            assert body["url"] == url == stored_url.get(tid), (tid, url, body, stored_url.get(tid))
        else:
            assert tid in stored_url and url != stored_url[tid], (tid, url, body, stored_url.get(tid))
            assert body.get("state") == "scheduled", body
    assert created == {tid: 1 for tid in stored_url}, "exactly one 201 per stored id"


def check_store(redis, api, stored_url, queue="races"):
    records, waiting = stored_ids(redis)
    assert records == set(stored_url), (records ^ set(stored_url))
    assert waiting == {tid: 1 for tid in stored_url}, "each stored timer waits once, in its index or a claim"
    for tid in random.Random(7).sample(sorted(stored_url), min(40, len(stored_url))):
        status, _, t = api.get(tid)
        assert status == 200 and t["url"] == stored_url[tid] and t["state"] == "scheduled", (tid, t)
    body = assert_counts_equal_scan(redis, api, queue)
    assert body["timers"]["scheduled"] == len(stored_url), body["timers"]


def test_concurrent_creates_of_new_repeated_and_conflicting_ids_agree_with_redis(redis, hookwheel, receiver):
    rnd = random.Random(1234)
    fire = int(now_ms()) + FAR
    ids = [f"race-{i}" for i in range(400)]
    calls = [(tid, rnd.choice((0, 0, 0, 1))) for tid in ids for _ in range(rnd.randint(1, 8))]
    rnd.shuffle(calls)
    answers, lock = [], threading.Lock()

    def worker(k):
        with hookwheel.api.session() as s:
            for tid, v in calls[k::64]:
                spec = spec_of(tid, v, fire, receiver)
                status, _, body = s.create(spec)
                with lock:
                    answers.append((tid, spec["url"], status, body))

    with ThreadPoolExecutor(64) as ex:
        list(ex.map(worker, range(64)))
    assert len(answers) == len(calls)
    stored_url = {tid: body["url"] for tid, _, st, body in answers if st == 201}
    assert set(stored_url) == set(ids)
    check_answers(answers, stored_url)
    check_store(redis, hookwheel.api, stored_url)


def test_concurrent_batches_with_ids_repeated_within_and_across_batches_agree_with_redis(redis, hookwheel, receiver):
    rnd = random.Random(4321)
    fire = int(now_ms()) + FAR
    ids = [f"brace-{i}" for i in range(300)]
    batches = []
    for _ in range(160):
        items = [(rnd.choice(ids), rnd.choice((0, 0, 0, 1))) for _ in range(rnd.randint(1, 40))]
        for _ in range(rnd.randint(0, 3)):  # an id again within the batch
            items.insert(rnd.randrange(len(items) + 1), rnd.choice(items))
        batches.append((items, rnd.random() < 0.5))
    answers, lock = [], threading.Lock()

    def worker(k):
        with hookwheel.api.session() as s:
            for items, atomic in batches[k::64]:
                specs = [spec_of(tid, v, fire, receiver) for tid, v in items]
                status, _, body = s.request("POST", "/timers/batch", json_body={"timers": specs, "atomic": atomic})
                assert status == 200, body
                with lock:
                    answers.append((specs, atomic, body["items"]))

    with ThreadPoolExecutor(64) as ex:
        list(ex.map(worker, range(64)))
    assert len(answers) == len(batches)
    stored_url, flat = {}, []
    for specs, atomic, items in answers:
        for spec, it in zip(specs, items):
            assert it["id"] == spec["id"], (spec, it)
            if it["status"] == 201:
                assert spec["id"] not in stored_url, ("a second 201", spec, it)
                stored_url[spec["id"]] = spec["url"]
            flat.append((spec["id"], spec["url"], it, atomic, specs))
    for tid, url, it, atomic, specs in flat:
        st = it["status"]
        assert st in ((200, 201, 409, 424) if atomic else (200, 201, 409)), it
        assert it["stored"] == (st in (200, 201)), it
        if st in (200, 201):
            assert stored_url.get(tid) == url, (tid, url, it)
        elif st == 409 and "state" not in it:  # held by another item of the atomic batch: none stored
            assert atomic and any(s["id"] == tid and s["url"] != url for s in specs), (tid, url, it)
        elif st == 409:
            assert it["state"] == "scheduled", it
            assert tid in stored_url and stored_url[tid] != url, (
                "a 409 names a stored timer with another spec", tid, url, stored_url.get(tid), it, atomic,
                [s["url"] for s in specs if s["id"] == tid])
    check_store(redis, hookwheel.api, stored_url)


def test_an_atomic_batch_whose_items_conflict_with_each_other_names_no_stored_timer(hookwheel, receiver):
    fire = int(now_ms()) + FAR
    first, other = spec_of("twice", 0, fire, receiver), spec_of("twice", 1, fire, receiver)
    status, _, body = hookwheel.request("POST", "/timers/batch", json_body={"timers": [first, other], "atomic": True})
    assert status == 200, body
    a, b = body["items"]
    assert (a["status"], a["stored"], b["status"], b["stored"]) == (424, False, 409, False), body
    assert "state" not in b and "another item" in b["detail"], b  # no timer holds the id
    assert "stored timer" not in a["detail"], a
    assert hookwheel.get("twice")[0] == 404
    # not atomic: the first is stored and the second conflicts with it
    status, _, body = hookwheel.request("POST", "/timers/batch", json_body={"timers": [first, other]})
    a, b = body["items"]
    assert (a["status"], b["status"], b["state"]) == (201, 409, "scheduled"), body


def test_creates_racing_cancels_of_the_same_id_agree_with_redis(redis, hookwheel, receiver):
    rnd = random.Random(99)
    fire = int(now_ms()) + FAR
    ids = [f"cx-{i}" for i in range(150)]
    calls = [(tid, op) for tid in ids for op in ["create"] * rnd.randint(1, 4) + ["cancel"] * rnd.randint(0, 2)]
    rnd.shuffle(calls)
    answers, lock = [], threading.Lock()

    def worker(k):
        with hookwheel.api.session() as s:
            for tid, op in calls[k::64]:
                if op == "create":
                    status, _, body = s.create(spec_of(tid, 0, fire, receiver))
                else:
                    status, _, body = s.request("DELETE", f"/timers/{tid}")
                with lock:
                    answers.append((tid, op, status, body))

    with ThreadPoolExecutor(64) as ex:
        list(ex.map(worker, range(64)))
    scheduled = {}
    for tid in ids:
        mine = [a for a in answers if a[0] == tid]
        creates = [st for _, op, st, _ in mine if op == "create"]
        cancels = [st for _, op, st, _ in mine if op == "cancel"]
        assert creates.count(201) == 1 and set(creates) <= {200, 201}, (tid, mine)
        assert set(cancels) <= {200, 404}, (tid, mine)
        status, _, t = hookwheel.get(tid)
        assert status == 200, (tid, t)
        assert t["state"] == ("cancelled" if 200 in cancels else "scheduled"), (tid, t, mine)
        if t["state"] == "scheduled":
            scheduled[tid] = t["url"]
    records, waiting = stored_ids(redis)
    assert records == set(ids)
    assert waiting == {tid: 1 for tid in scheduled}
    body = assert_counts_equal_scan(redis, hookwheel.api, "races")
    assert body["timers"]["scheduled"] == len(scheduled), body["timers"]


def test_creates_while_redis_is_stopped_are_503_and_a_repeat_after_the_restart_is_consistent(
        redis, hookwheel_factory, receiver):
    hw = hookwheel_factory(redis, args=["--window-ms", "4000"])
    rnd = random.Random(5)
    start = int(now_ms())
    # half due within the claim window from the repeat on (held at once), half far
    specs = [spec_of(f"rs-{i}", 0, start + (3500 if i % 2 else FAR), receiver) for i in range(600)]
    answers, lock = {}, threading.Lock()
    # Each worker posts half its creates, then waits until Redis is stopped
    # and posts the rest: the stop comes once half the workers are halfway
    # (the others still posting, so some creates meet the stop itself), and
    # the second halves meet a stopped Redis however fast the first went.
    halfway, stopped, at_half = threading.Event(), threading.Event(), [0]
    sleeps = [[rnd.random() * 0.02 for _ in specs[k::64]] for k in range(64)]

    def worker(k):
        mine = specs[k::64]
        with hw.api.session() as s:
            for i, spec in enumerate(mine):
                if i == len(mine) // 2:
                    with lock:
                        at_half[0] += 1
                        if at_half[0] == 32:
                            halfway.set()
                    stopped.wait(scaled(20))
                time.sleep(sleeps[k][i])
                try:
                    status, _, body = s.create(spec)
                except OSError as e:
                    status, body = "exception", repr(e)
                with lock:
                    answers[spec["id"]] = (status, body)

    def stopper():
        halfway.wait(scaled(20))
        redis.stop()
        stopped.set()
        time.sleep(0.6)
        redis.restart()

    t = threading.Thread(target=stopper)
    t.start()
    with ThreadPoolExecutor(64) as ex:
        list(ex.map(worker, range(64)))
    t.join()
    statuses = [st for st, _ in answers.values()]
    assert set(statuses) <= {201, 503}, [a for a in answers.values() if a[0] not in (201, 503)][:3]
    assert 201 in statuses and 503 in statuses, "some creates came while Redis was stopped"
    wait_until(lambda: hw.request("GET", "/readyz")[0] == 200, scaled(20))
    for spec in specs:
        status, _, body = hw.create(spec)
        before = answers[spec["id"]][0]
        assert status in ((200,) if before == 201 else (200, 201)), (spec["id"], before, status, body)
        assert body["url"] == spec["url"] and body["fire_at_ms"] == spec["fire_at_ms"], body
    # each due one arrives exactly once, never early; the rest wait
    due = {s["id"]: s["fire_at_ms"] for s in specs if s["fire_at_ms"] < start + FAR}
    got = receiver.wait_for(len(due), timeout=scaled(30), path="/v0")
    time.sleep(1.0)
    got = receiver.requests("/v0")
    assert sorted(r.timer_id for r in got) == sorted(due), "each due timer arrives exactly once"
    for r in got:
        assert r.wall * 1000 >= due[r.timer_id] - 5, (r, due[r.timer_id])
    far = {s["id"]: s["url"] for s in specs if s["id"] not in due}
    records, waiting = stored_ids(redis)
    assert set(far) <= records
    assert waiting == {tid: 1 for tid in far}


def test_creates_due_within_the_claim_window_at_the_resident_cap_arrive_once_never_early(
        redis, hookwheel_factory, receiver):
    hw = hookwheel_factory(redis, args=["--max-resident", "20", "--window-ms", "3000"])
    rnd = random.Random(77)
    start = int(now_ms())
    specs = [spec_of(f"cw-{i}", 0, start + 400 + rnd.randrange(2500), receiver) for i in range(140)]
    singles, batched = specs[:80], specs[80:]
    answers, lock = [], threading.Lock()

    def single(k):
        with hw.api.session() as s:
            for spec in singles[k::48]:
                for _ in range(rnd.randint(1, 2)):  # some twice: one 201, then 200
                    status, _, body = s.create(spec)
                    with lock:
                        answers.append((spec["id"], status))

    def batch(k):
        chunk = batched[k * 15:(k + 1) * 15]
        chunk = chunk + rnd.sample(chunk, 5)  # ids again within the batch
        status, _, body = hw.request("POST", "/timers/batch", json_body={"timers": chunk, "atomic": k % 2 == 0})
        assert status == 200, body
        with lock:
            answers.extend((it["id"], it["status"]) for it in body["items"])

    with ThreadPoolExecutor(64) as ex:
        futures = [ex.submit(single, k) for k in range(48)] + [ex.submit(batch, k) for k in range(4)]
        for f in futures:
            f.result()
    for spec in specs:
        got = sorted(st for tid, st in answers if tid == spec["id"])
        assert got.count(201) == 1 and set(got) <= {200, 201}, (spec["id"], got)
    receiver.wait_for(len(specs), timeout=scaled(30), path="/v0")
    time.sleep(1.0)
    got = receiver.requests("/v0")
    due = {s["id"]: s["fire_at_ms"] for s in specs}
    assert sorted(r.timer_id for r in got) == sorted(due), "each arrives exactly once"
    early = [(r.timer_id, r.wall * 1000 - due[r.timer_id]) for r in got if r.wall * 1000 < due[r.timer_id] - 5]
    assert not early, early


def test_ids_at_the_length_limit_with_odd_characters_and_in_two_namespaces(tmp_path, redis, hookwheel_factory,
                                                                           receiver):
    ta, tb = "races-team-a-token-0001", "races-team-b-token-0002"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"team-a {ta}\nteam-b {tb}\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    ha, hb = {"Authorization": f"Bearer {ta}"}, {"Authorization": f"Bearer {tb}"}
    fire = int(now_ms()) + FAR
    longest = "a:b.c_d-" * 16  # 128 bytes
    for tid in (longest, "x", "A.b_C:d-1"):
        spec = spec_of(tid, 0, fire, receiver)
        for h in (ha, hb):  # one id, two namespaces: two timers
            status, _, body = hw.request("POST", "/timers", json_body=spec, headers=h)
            assert status == 201 and body["id"] == tid, body
        for h, url in ((ha, spec["url"]), (hb, spec["url"])):
            status, _, body = hw.request("POST", "/timers", json_body=spec, headers=h)
            assert status == 200 and body["url"] == url, body
        status, _, body = hw.request("POST", "/timers", json_body=spec_of(tid, 1, fire, receiver), headers=hb)
        assert status == 409, body
        enc = tid.replace(":", "%3A").replace(".", "%2E")
        status, _, body = hw.request("GET", f"/timers/{enc}", headers=ha)
        assert status == 200 and body["id"] == tid, body
    status, _, body = hw.request("POST", "/timers/batch", headers=ha,
                                 json_body={"timers": [spec_of(longest + "a", 0, fire, receiver),
                                                       spec_of("a/b", 0, fire, receiver),
                                                       spec_of("\u00e9t\u00e9", 0, fire, receiver),
                                                       spec_of("a b", 0, fire, receiver),
                                                       spec_of("", 0, fire, receiver)]})
    assert status == 200 and [it["status"] for it in body["items"]] == [400] * 5, body
    for bad in (longest + "a", "a/b", "\u00e9t\u00e9"):
        status, _, body = hw.request("POST", "/timers", json_body=spec_of(bad, 0, fire, receiver), headers=ha)
        assert status == 400 and body["field"] == "id", body
    for path in ("/timers/a%2Fb", "/timers/%C3%A9t%C3%A9", "/timers/" + "b" * 129):
        status, _, body = hw.request("GET", path, headers=ha)
        assert status in (400, 404), (path, status, body)
    status, _, body = hw.request("DELETE", f"/timers/{longest.replace(':', '%3a')}", headers=hb)
    assert status == 200 and body["state"] == "cancelled", body
    status, _, body = hw.request("GET", f"/timers/{longest}", headers=ha)
    assert status == 200 and body["state"] == "scheduled", body
    records, waiting = stored_ids(redis)
    assert records == {f"{ns}/{tid}" for ns in ("team-a", "team-b") for tid in (longest, "x", "A.b_C:d-1")}
    assert set(waiting) == {"team-a/" + t for t in (longest, "x", "A.b_C:d-1")} | {"team-b/x", "team-b/A.b_C:d-1"}
