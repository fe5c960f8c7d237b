"""POST /timers/batch and labels, with a real redis-server, the real binary
and a real receiver."""
import signal
import threading
import time

from conftest import CLUSTER_MODE, Reply, partition, scaled, wait_until
from contract import assert_matches_contract


def batch(api, specs, atomic=None, headers=None):
    body = {"timers": specs}
    if atomic is not None:
        body["atomic"] = atomic
    status, hdrs, answer = api.request("POST", "/timers/batch", json_body=body, headers=headers)
    assert_matches_contract("POST", "/timers/batch", status, hdrs, answer)
    return status, hdrs, answer


def test_a_batch_answers_every_item_in_order_and_the_stored_ones_fire(hookwheel, receiver):
    api = hookwheel.api
    status, _, body = api.create({"id": "taken-10", "url": receiver.url("/old"), "delay_ms": 60_000})
    assert status == 201, body
    specs = [{"id": f"b-{i:04d}", "url": receiver.url("/b"), "delay_ms": 1500 + i % 500} for i in range(1000)]
    specs[3] = {"id": "b-0003", "url": "ftp://example.com/", "delay_ms": 1000}       # bad scheme
    specs[700] = {"id": "b-0700", "url": receiver.url("/b"), "delay_ms": -5}         # bad delay
    specs[10] = {"id": "taken-10", "url": receiver.url("/other"), "delay_ms": 1000}  # id held, other spec
    status, _, body = batch(api, specs)
    assert status == 200, body
    assert (body["created"], body["existing"], body["failed"]) == (997, 0, 3), {k: body[k] for k in body if k != "items"}
    items = body["items"]
    assert [it["index"] for it in items] == list(range(1000))
    assert items[3]["status"] == 400 and items[3]["field"] == "timers[3].url" and not items[3]["stored"], items[3]
    assert items[700]["status"] == 400 and items[700]["field"] == "timers[700].delay_ms", items[700]
    assert items[10]["status"] == 409 and items[10]["id"] == "taken-10" and items[10]["state"] == "scheduled", items[10]
    stored = [it for it in items if it["stored"]]
    assert len(stored) == 997 and all(it["status"] == 201 for it in stored)
    assert [it["id"] for it in stored] == [s["id"] for i, s in enumerate(specs) if i not in (3, 10, 700)]
    receiver.wait_for(997, timeout=scaled(30), path="/b")
    time.sleep(0.5)
    got = [r.timer_id for r in receiver.requests("/b")]
    assert sorted(got) == sorted(it["id"] for it in stored), "each stored timer fires exactly once"
    # the conflicting item left the holder alone
    status, _, t = api.get("taken-10")
    assert status == 200 and t["url"] == receiver.url("/old")
    # a repeat of the same batch is idempotent item by item
    status, _, again = batch(api, specs[:20])
    assert status == 200
    assert [it["status"] for it in again["items"]] == [200 if i not in (3, 10) else (400 if i == 3 else 409)
                                                       for i in range(20)]


def test_an_atomic_batch_with_an_invalid_item_stores_nothing(hookwheel, receiver):
    api = hookwheel.api
    specs = [{"id": f"a-{i}", "url": receiver.url("/a"), "delay_ms": 1000} for i in range(50)]
    specs[7]["retry"] = {"max_attempts": 0}
    status, _, body = batch(api, specs, atomic=True)
    assert status == 400, body
    assert body["items"][7]["field"] == "timers[7].retry.max_attempts"
    assert all(it["status"] == 424 and not it["stored"] for i, it in enumerate(body["items"]) if i != 7)
    for i in (0, 6, 8, 49):
        assert api.get(f"a-{i}")[0] == 404


def test_an_atomic_batch_stores_a_partition_group_whole_or_not_at_all(hookwheel, receiver):
    api = hookwheel.api
    status, _, _ = api.create({"id": "held", "url": receiver.url("/x"), "delay_ms": 60_000})
    assert status == 201
    specs = [{"id": f"g-{i}", "url": receiver.url("/g"), "delay_ms": 60_000} for i in range(200)]
    specs.append({"id": "held", "url": receiver.url("/y"), "delay_ms": 60_000})
    status, _, body = batch(api, specs, atomic=True)
    assert status == 200, body
    items = body["items"]
    assert items[200]["status"] == 409
    unstored = [it["id"] for it in items[:200] if it["status"] == 424]
    stored = [it["id"] for it in items[:200] if it["status"] == 201]
    assert unstored and stored and len(unstored) + len(stored) == 200, "one partition's group is refused whole"
    for tid in unstored:
        assert api.get(tid)[0] == 404
    for tid in stored[:20]:
        assert api.get(tid)[0] == 200
    # without atomic the same batch stores all but the conflicting one
    status, _, body = batch(api, specs)
    assert body["items"][200]["status"] == 409
    assert all(it["status"] in (200, 201) for it in body["items"][:200])


def test_an_id_repeated_within_a_batch_is_answered_as_a_repeat_of_its_first_item(hookwheel, receiver):
    api = hookwheel.api
    status, _, _ = api.create({"id": "rp-held", "url": receiver.url("/held"), "delay_ms": 60_000})
    assert status == 201
    one = {"id": "rp-1", "url": receiver.url("/rp"), "delay_ms": 60_000}
    other = {**one, "url": receiver.url("/other")}
    held = {"id": "rp-held", "url": receiver.url("/held"), "delay_ms": 60_000}
    status, _, body = batch(api, [one, one, other, held, {**held, "delay_ms": 1}])
    assert status == 200, body
    assert [(it["status"], it["stored"]) for it in body["items"]] == [
        (201, True), (200, True), (409, False), (200, True), (409, False)], body["items"]
    assert body["items"][2]["state"] == "scheduled"
    status, _, t = api.get("rp-1")
    assert status == 200 and t["url"] == receiver.url("/rp")
    # atomic: a conflict in the call leaves its partition's new items unstored, a repeat of one of
    # them too; another partition's group is stored whole
    parts = 64 if CLUSTER_MODE else 16
    same = next(f"rp-s{k}" for k in range(1000) if partition(f"rp-s{k}", parts) == partition("rp-held", parts))
    apart = next(f"rp-a{k}" for k in range(1000) if partition(f"rp-a{k}", parts) != partition("rp-held", parts))
    mine = {"id": same, "url": receiver.url("/rp"), "delay_ms": 60_000}
    theirs = {**mine, "id": apart}
    status, _, body = batch(api, [mine, theirs, mine, theirs, {**held, "delay_ms": 1}], atomic=True)
    assert status == 200, body
    assert [it["status"] for it in body["items"]] == [424, 201, 424, 200, 409], body["items"]
    assert api.get(same)[0] == 404 and api.get(apart)[0] == 200


def test_batch_request_errors(hookwheel, receiver):
    api = hookwheel.api
    status, _, body = api.request("POST", "/timers/batch", json_body=[{"url": receiver.url("/")}])
    assert status == 400
    status, _, body = batch(api, [])
    assert status == 400 and body["field"] == "timers"
    status, _, body = batch(api, [{"url": receiver.url("/"), "delay_ms": 1}] * 1001)
    assert status == 400 and body["field"] == "timers" and "1000" in body["detail"]
    status, _, body = api.request("POST", "/timers/batch", json_body={"timers": [], "atomicity": True})
    assert status == 400 and body["field"] == "atomicity"
    status, _, body = api.request("POST", "/timers/batch", json_body={"timers": [{}], "atomic": "yes"})
    assert status == 400 and body["field"] == "atomic"
    # an item that is not an object is that item's problem
    status, _, body = batch(api, [17, {"url": receiver.url("/"), "delay_ms": 60_000}])
    assert status == 200 and body["items"][0]["status"] == 400 and body["items"][1]["status"] == 201


def test_a_large_batch_body_is_accepted_up_to_its_own_cap(hookwheel_factory, redis, receiver):
    hw = hookwheel_factory(redis, args=["--max-batch-body-bytes=200000"])
    pad = "x" * 150
    specs = [{"id": f"big-{i}", "url": receiver.url("/big"), "delay_ms": 60_000, "body": pad} for i in range(600)]
    status, _, body = batch(hw.api, specs)
    assert status == 200 and body["created"] == 600, body if status != 200 else body["failed"]
    specs = [{"id": f"big2-{i}", "url": receiver.url("/big"), "delay_ms": 60_000, "body": pad} for i in range(1000)]
    status, _, body = batch(hw.api, specs)
    assert status == 413, body
    # single creates keep the smaller cap
    status, _, _ = hw.api.create({"url": receiver.url("/"), "delay_ms": 1000, "body": "y" * 70_000})
    assert status == 413
    # and so does each item of a batch: the one too large is refused alone
    specs = [{"id": "fits", "url": receiver.url("/big"), "delay_ms": 60_000, "body": "y" * 60_000},
             {"id": "too-big", "url": receiver.url("/big"), "delay_ms": 60_000, "body": "y" * 70_000}]
    status, _, body = batch(hw.api, specs)
    assert status == 200 and body["created"] == 1 and body["failed"] == 1, body
    item = body["items"][1]
    assert item["status"] == 413 and item["id"] == "too-big", item
    assert "HOOKWHEEL_MAX_BODY_BYTES" in item["detail"], item
    assert hw.api.get("too-big")[0] == 404
    status, _, body = batch(hw.api, specs, atomic=True)
    assert status == 400 and body["items"][1]["status"] == 413, body


def label_page(api, state, label, cursor=None):
    q = f"/timers?state={state}&label={label}&limit=1000"
    if cursor:
        q += f"&cursor={cursor}"
    return api.request("GET", q)


def test_labels_are_kept_returned_and_filter_listings(hookwheel, receiver):
    api = hookwheel.api
    specs = [{"id": f"l-{i:03d}", "url": receiver.url("/l"), "delay_ms": 120_000,
              "labels": {"customer": "42" if i % 3 == 0 else "7", "kind": "reminder"}} for i in range(300)]
    status, _, body = batch(api, specs)
    assert status == 200 and body["created"] == 300
    status, _, t = api.get("l-000")
    assert status == 200 and t["labels"] == {"customer": "42", "kind": "reminder"}
    ids, cursor = [], None
    while True:
        status, _, page = label_page(api, "scheduled", "customer:42", cursor)
        assert status == 200, page
        ids += [it["id"] for it in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(ids) == [f"l-{i:03d}" for i in range(0, 300, 3)]
    status, _, page = label_page(api, "scheduled", "kind:nothing")
    assert status == 200 and page["items"] == [], page
    for bad in ("customer", ":42", "cust%20omer:1", "k:" + "v" * 65, "k:a%2Fb"):
        status, _, body = api.request("GET", f"/timers?state=scheduled&label={bad}")
        assert status == 400 and body["field"] == "label", bad
    # a cancelled labelled timer is listed under its label as cancelled
    assert api.cancel("l-003")[0] == 200
    status, _, page = label_page(api, "cancelled", "customer:42")
    assert [it["id"] for it in page["items"]] == ["l-003"]


def test_label_rules(hookwheel, receiver):
    api = hookwheel.api
    url = receiver.url("/")
    for labels, field in [({"k": 1}, "labels.k"), ({"k y": "v"}, "labels.k y"), ({"k": ""}, "labels.k"),
                          ({"k": "a b"}, "labels.k"), ({f"k{i}": "v" for i in range(17)}, "labels"),
                          ("k:v", "labels"), ({"k" * 65: "v"}, "labels." + "k" * 65)]:
        status, _, body = api.create({"url": url, "delay_ms": 1000, "labels": labels})
        assert status == 400 and body["field"].startswith(field[:90]), (labels, body)
    status, _, t = api.create({"url": url, "delay_ms": 60_000, "labels": {f"k{i}": "v:x@y+z=1-2.3_4" for i in range(16)}})
    assert status == 201 and len(t["labels"]) == 16
    # labels are part of the spec: a repeat with other labels is a conflict
    status, _, _ = api.create({"id": "lab", "url": url, "delay_ms": 60_000, "labels": {"a": "1"}})
    assert status == 201
    status, _, _ = api.create({"id": "lab", "url": url, "delay_ms": 60_000, "labels": {"a": "1"}})
    assert status == 200
    status, _, _ = api.create({"id": "lab", "url": url, "delay_ms": 60_000, "labels": {"a": "2"}})
    assert status == 409
    # an empty labels object is no labels
    status, _, t = api.create({"url": url, "delay_ms": 60_000, "labels": {}})
    assert status == 201 and "labels" not in t


def test_finished_timers_leave_the_label_index_when_they_expire(hookwheel_factory, redis, receiver):
    hw = hookwheel_factory(redis, args=["--retention-s=1"])
    specs = [{"id": f"e-{i}", "url": receiver.url("/e"), "delay_ms": 100, "labels": {"batch": "e"}}
             for i in range(40)]
    status, _, body = batch(hw.api, specs)
    assert body["created"] == 40
    receiver.wait_for(40, timeout=scaled(15), path="/e")

    def index_entries():  # in the label's chunks and in its small bucket (few timers per partition)
        n = 0
        for key in redis.keys("*:lb:*batch:e"):
            n += int(redis.cmd("ZCARD", key))
        for key in redis.keys("*:lbs:*"):
            n += int(redis.cmd("ZLEXCOUNT", key, "[batch:e\t", "(batch:e\n"))
        return n
    assert index_entries() == 40
    assert wait_until(lambda: index_entries() == 0, timeout=scaled(20)), index_entries()
    assert not redis.keys("*:t:e-*") and not redis.keys("*:lx")


def test_a_batch_keeps_the_requests_trace_context_for_every_timer(hookwheel, receiver):
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    specs = [{"id": f"tr-{i}", "url": receiver.url("/tr"), "delay_ms": 200 + 50 * i} for i in range(5)]
    status, _, body = batch(hookwheel.api, specs, headers={"traceparent": tp})
    assert status == 200 and body["created"] == 5
    receiver.wait_for(5, timeout=scaled(15), path="/tr")
    seen = [r.headers.get("traceparent") for r in receiver.requests("/tr")]
    assert all(s and s.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-") and s.endswith("-01") for s in seen), seen
    assert len({s.split("-")[2] for s in seen}) == 5, "a span id per attempt"


def test_a_stop_while_batches_of_timers_due_soon_arrive_exits_cleanly(redis, receiver, hookwheel_factory):
    # Each batch's timers fall due within the claim window: the instance
    # that writes them holds them at once, handing each to its engine as
    # the batch's reply is read. A SIGTERM meanwhile must neither free a
    # timer still on its way to the engine nor count one through a freed
    # queue name (the sanitizer build reports either), and the instance
    # exits 0 every time.
    receiver.default("/soon", Reply(204))
    for round_ in range(6):
        hw = hookwheel_factory(redis)
        stop = threading.Event()

        def send():
            while not stop.is_set():
                specs = [{"url": receiver.url("/soon"), "delay_ms": 3000, "queue": f"soon-{i % 3}"}
                         for i in range(1000)]
                try:
                    hw.api.request("POST", "/timers/batch", json_body={"timers": specs}, timeout=scaled(5))
                except Exception:  # (the listening socket closed: the stop began)
                    return
        senders = [threading.Thread(target=send) for _ in range(2)]
        for t in senders:
            t.start()
        time.sleep(1.0 + 0.1 * round_)
        try:
            code = hw.stop(signal.SIGTERM)
        finally:
            stop.set()
            for t in senders:
                t.join()
        assert code == 0, f"round {round_}: hookwheel exited with {code} on SIGTERM; log tail:\n{hw.log_tail()}"
