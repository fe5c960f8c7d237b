"""Concurrent creates of one id (POST /timers and POST /timers/batch): every
answer agrees with what Redis holds afterwards (one 201 per stored id, 200
for a repeat of its spec, 409 for another spec), and the records, the
waiting index and the counts hold exactly the timers answered 2xx. Real
redis-server, real hookwheel processes, a real receiver."""
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from conftest import RespClient, now_ms, scaled, wait_until
from test_counts import assert_counts_equal_scan, nodes

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
