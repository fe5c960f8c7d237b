"""Selections by label against a model kept here: a seeded random mix of
timers (generated, hex and other ids, two namespaces, labels of many and of
few timers per partition, some delivered, expired, cancelled or paused one
by one, some ids created again after their record expired), then selector
walks with small pages, bulk pause / resume / cancel, listings by label, and
timers created and cancelled between pages. Each walk must meet exactly the
matching timers, each once; a timer reported cancelled must never arrive.
Reproducible: HOOKWHEEL_TEST_SEED picks the seed (printed on failure)."""
import random
import time
import uuid

import pytest

from conftest import CLUSTER_MODE, HARNESS, SLOW, scaled, wait_until

SEED = int(HARNESS.get("HOOKWHEEL_TEST_SEED", "20261127"))
TOKENS = {"team-a": "token-a-0123456789abcdef", "team-b": "token-b-0123456789abcdef"}
FAR = 3_600_000  # never due during the test


def auth(ns):
    return {"Authorization": f"Bearer {TOKENS[ns]}"}


class Model:
    """What each timer is: (namespace, id) -> {labels, queue, state, soon}."""

    def __init__(self):
        self.t = {}

    def live(self, ns):
        return {k: v for k, v in self.t.items() if k[0] == ns and v["state"] != "gone"}

    def matching(self, ns, labels, queue=None, state=None):
        return {k[1] for k, v in self.live(ns).items()
                if all(v["labels"].get(lk) == lv for lk, lv in labels.items())
                and (queue is None or v["queue"] == queue) and (state is None or v["state"] == state)}


def walk(api, ns, op, body, rng, between=None):
    """Every page of a selector call, each with a random small limit; between(page) runs
    after each page but the last. Returns the pages."""
    pages, cursor = [], None
    while True:
        b = {**body, "limit": rng.randint(1, 7), **({"cursor": cursor} if cursor else {})}
        status, _, page = api.request("POST", f"/timers/{op}", json_body=b, headers=auth(ns), timeout=scaled(30))
        assert status == 200, (b, page)
        pages.append(page)
        cursor = page["next_cursor"]
        if cursor is None:
            return pages
        if between:
            between(page)
        assert len(pages) < 2000


def listing(api, ns, state, label, rng):
    ids, cursor = [], None
    while True:
        q = f"/timers?state={state}&label={label}&limit={rng.randint(1, 5)}" + (f"&cursor={cursor}" if cursor else "")
        status, _, page = api.request("GET", q, headers=auth(ns))
        assert status == 200, page
        ids += [t["id"] for t in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return ids


@pytest.mark.skipif(CLUSTER_MODE or SLOW, reason="a model check of the Lua functions: once, on one Redis, plain")
def test_selections_by_label_match_a_model_exactly(tmp_path, redis, receiver, hookwheel_factory):
    rng = random.Random(SEED)
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{ns} {tok}\n" for ns, tok in TOKENS.items()))
    # Two partitions: a label of 300 timers has ~150 a partition, past a bucket's 128.
    hw = hookwheel_factory(redis, args=["--partitions", "2", "--retention-s", "1"],
                           env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    api = hw.api
    m = Model()
    pool = {"big": ["1"], "mid": ["a", "b", "c"], "few": [str(i) for i in range(12)], "tag": ["x:y@z", "q"]}

    def labels_for(i):
        ls = {"big": "1"} if rng.random() < 0.7 else {}
        for k in ("mid", "few", "tag"):
            if rng.random() < 0.4:
                ls[k] = rng.choice(pool[k])
        return ls

    def new_id(i):
        kind = rng.random()
        if kind < 0.3:
            return None  # hookwheel makes it: 32 hex digits
        if kind < 0.5:
            return uuid.UUID(int=rng.getrandbits(128)).hex
        if kind < 0.6:
            return uuid.UUID(int=rng.getrandbits(128)).hex.upper()
        if kind < 0.7:
            return f"long-{i}-" + "x" * 70  # too long for a bucket entry
        return f"ord-{i}:{rng.randint(0, 999)}"

    def create(ns, specs, keys):
        status, _, body = api.request("POST", "/timers/batch", json_body={"timers": specs}, headers=auth(ns),
                                      timeout=scaled(30))
        assert status == 200 and body["failed"] == 0, body
        for it, spec, key in zip(body["items"], specs, keys):
            m.t[(ns, it["id"])] = {"labels": spec.get("labels", {}), "queue": spec.get("queue", "default"),
                                   "state": "scheduled", "soon": spec["delay_ms"] < FAR, **key}

    # ---- the timers, in several batches (buckets fill up between them) and one by one
    i = 0
    for ns, n in (("team-a", 520), ("team-b", 140)):
        left = n
        while left:
            k = min(left, rng.randint(20, 150))
            specs, keys = [], []
            for _ in range(k):
                soon = rng.random() < 0.12
                spec = {"url": receiver.url(f"/{ns}"), "delay_ms": rng.randint(100, 800) if soon else FAR,
                        "labels": labels_for(i)}
                tid = new_id(i)
                if tid:
                    spec["id"] = tid
                if rng.random() < 0.3:
                    spec["queue"] = rng.choice(["q1", "q2"])
                specs.append(spec)
                keys.append({})
                i += 1
            create(ns, specs, keys)
            left -= k
    # one batch of 300 (slices of 128 a partition) with ids twice: the same spec again is the
    # same timer (200), other labels are refused (409) and indexed nowhere
    specs = []
    for j in range(300):
        specs.append({"id": f"dup-{j}", "url": receiver.url("/team-a"), "delay_ms": FAR, "labels": labels_for(j)})
    for j in rng.sample(range(300), 30):
        specs.append(dict(specs[j]))
        specs.append({**specs[j], "labels": {"mid": "b", "few": "11"}})
    rng.shuffle(specs)
    status, _, body = api.request("POST", "/timers/batch", json_body={"timers": specs}, headers=auth("team-a"),
                                  timeout=scaled(30))
    assert status == 200 and body["created"] == 300 and body["existing"] + body["failed"] == 60, body["items"][:3]
    for it, spec in zip(body["items"], specs):
        if it["status"] == 201:
            m.t[("team-a", it["id"])] = {"labels": spec["labels"], "queue": "default", "state": "scheduled",
                                         "soon": False}
    for it, spec in zip(body["items"], specs):
        if it["status"] != 201:
            assert (it["status"] == 200) == (spec["labels"] == m.t[("team-a", it["id"])]["labels"]), it
    # an atomic batch whose partition group holds a taken id stores none of that group
    taken = next(tid for (ns, tid) in m.t if ns == "team-a" and tid.startswith("dup-"))
    specs = [{"id": taken, "url": receiver.url("/team-a"), "delay_ms": FAR, "labels": {"few": "5"}}]
    specs += [{"id": f"atom-{j}", "url": receiver.url("/team-a"), "delay_ms": FAR,
               "labels": {"big": "1", "few": "5"}} for j in range(40)]
    status, _, body = api.request("POST", "/timers/batch", json_body={"timers": specs, "atomic": True},
                                  headers=auth("team-a"))
    assert status == 200 and body["items"][0]["status"] == 409, body
    for it, spec in zip(body["items"][1:], specs[1:]):
        assert it["status"] in (201, 424), it
        if it["status"] == 201:
            m.t[("team-a", it["id"])] = {"labels": spec["labels"], "queue": "default", "state": "scheduled",
                                         "soon": False}
    assert any(it["status"] == 424 for it in body["items"])
    # the same user ids in the other namespace, other labels
    shared = [tid for (ns, tid) in list(m.t) if ns == "team-a" and tid.startswith("ord-")][:20]
    create("team-b", [{"id": tid, "url": receiver.url("/team-b"), "delay_ms": FAR, "labels": {"big": "1", "few": "0"}}
                      for tid in shared], [{}] * len(shared))
    # one by one: cancels and pauses
    for (ns, tid), t in rng.sample(sorted(m.t.items()), 60):
        if t["soon"]:
            continue
        if rng.random() < 0.5:
            status, _, body = api.request("DELETE", f"/timers/{tid}", headers=auth(ns))
            assert status == 200, body
            t["state"] = "cancelled"
        else:
            status, _, body = api.request("POST", f"/timers/{tid}/pause", headers=auth(ns))
            assert status == 200, body
            t["state"] = "paused"
    # the soon ones are delivered; those and the cancelled ones expire (retention 1 s)
    soon = [k for k, t in m.t.items() if t["soon"]]
    assert soon
    for ns in TOKENS:
        want = sum(1 for k in soon if k[0] == ns)
        receiver.wait_for(want, timeout=scaled(20), path=f"/{ns}")
    finished = [k for k, t in m.t.items() if t["soon"] or t["state"] == "cancelled"]
    assert wait_until(lambda: all(api.request("GET", f"/timers/{tid}", headers=auth(ns))[0] == 404
                                  for ns, tid in finished), timeout=scaled(20))
    for k in finished:
        m.t[k]["state"] = "gone"
    # some of the expired ids are created again with other labels (before their old entries
    # leave the index, which happens when a claim sees them expired)
    again = [k for k in finished if "ord-" in k[1] or "long-" in k[1]][:12]
    for ns in TOKENS:
        ids = [tid for (n, tid) in again if n == ns]
        if ids:
            create(ns, [{"id": tid, "url": receiver.url(f"/{ns}"), "delay_ms": FAR, "labels": {"mid": "c"}}
                        for tid in ids], [{}] * len(ids))
    per_label = {}
    for (ns, tid), t in m.live("team-a").items():
        for lk, lv in t["labels"].items():
            per_label[f"{lk}:{lv}"] = per_label.get(f"{lk}:{lv}", 0) + 1
    assert per_label["big:1"] > 3 * 128 and min(v for k, v in per_label.items() if k.startswith("few:")) < 32
    # big:1 has entries in its partitions' shared buckets and in its own chunks
    for p in (0, 1):
        assert redis.keys(f"hw:{{{p}}}:lb:team-a:*:big:1")
        assert any(redis.cmd("ZRANGEBYLEX", k, "[big:1\x01", "(big:1\n") for k in redis.keys(f"hw:{{{p}}}:lbs:team-a:*"))

    def check_walk(ns, sel, extra=None):
        body = {"labels": sel, "dry_run": True, **(extra or {})}
        pages = walk(api, ns, "cancel", body, rng)
        met = [x["id"] for p in pages for x in p["matches"]]
        want = m.matching(ns, sel, (extra or {}).get("queue"), (extra or {}).get("state"))
        assert sum(p["matched"] for p in pages) == len(met)
        assert len(met) == len(set(met)), ("met twice", sorted({x for x in met if met.count(x) > 1}), sel, SEED)
        assert set(met) == want, ("missing", sorted(want - set(met)), "extra", sorted(set(met) - want), sel, SEED)
        for p in pages:
            for x in p["matches"]:
                assert x["state"] == m.t[(ns, x["id"])]["state"], (x, sel, SEED)

    # ---- dry runs and listings
    selectors = [{"big": "1"}, {"mid": "c"}, {"few": "3"}, {"few": "5"}, {"few": "11", "mid": "b"}, {"tag": "x:y@z"}, {"big": "1", "mid": "a"},
                 {"few": "0", "big": "1"}, {"mid": "b", "tag": "q"}]
    for ns in TOKENS:
        for sel in selectors:
            check_walk(ns, sel)
            check_walk(ns, sel, {"state": "paused"})
            check_walk(ns, sel, {"queue": rng.choice(["q1", "default"])})
        for label in ("big:1", "mid:c", "few:0", "few:5", "tag:x:y@z"):
            k, v = label.split(":", 1)
            for state in ("scheduled", "paused"):
                got = listing(api, ns, state, label, rng)
                assert len(got) == len(set(got)) and set(got) == m.matching(ns, {k: v}, state=state), \
                    (ns, state, label, SEED)

    # ---- bulk pause of mid:a (scheduled ones), then resume of the paused big:1 ones of q1
    def bulk(ns, op, sel, extra=None, between=None, expect=None):
        pages = walk(api, ns, op, {"labels": sel, **(extra or {})}, rng, between)
        key = {"pause": "paused", "resume": "resumed", "cancel": "cancelled"}[op]
        done = [x for p in pages for x in p[key]]
        late = [x for p in pages for x in p["too_late"]]
        assert len(done) == len(set(done)) and not late, (op, sel, late, SEED)
        assert sum(p["matched"] for p in pages) == len(done)
        if expect is not None:
            assert set(done) == expect, ("missing", sorted(expect - set(done)), "extra", sorted(set(done) - expect),
                                         op, sel, SEED)
        return done

    for ns in TOKENS:
        for tid in bulk(ns, "pause", {"mid": "a"}, {"state": "scheduled"},
                        expect=m.matching(ns, {"mid": "a"}, state="scheduled")):
            m.t[(ns, tid)]["state"] = "paused"
        for tid in bulk(ns, "resume", {"big": "1"}, {"queue": "q1", "state": "paused"},
                        expect=m.matching(ns, {"big": "1"}, "q1", "paused")):
            m.t[(ns, tid)]["state"] = "scheduled"
        check_walk(ns, {"big": "1"})
        check_walk(ns, {"mid": "a"}, {"state": "paused"})

    # ---- a bulk cancel of big:1 while timers come and go between its pages: every timer that
    # keeps the label is met once; one created meanwhile at most once; one cancelled meanwhile
    # by its id is met (as cancelled) if its record is still there
    ns = "team-a"
    before = m.matching(ns, {"big": "1"})
    made, cut, n = {}, set(), [0]
    untouched = sorted(before)

    def between(page):
        n[0] += 1
        # the walk's own cancels are touched: with retention 1 s they may be gone by the next page
        met = set(page["cancelled"])
        untouched[:] = [tid for tid in untouched if tid not in met]
        if n[0] % 5 == 0:
            specs = [{"id": f"mid-walk-{n[0]}-{j}", "url": receiver.url(f"/{ns}"), "delay_ms": FAR,
                      "labels": {"big": "1", "few": str(j)}} for j in range(3)]
            specs.append({"url": receiver.url(f"/{ns}"), "delay_ms": FAR, "labels": {"big": "1"}})
            status, _, body = api.request("POST", "/timers/batch", json_body={"timers": specs}, headers=auth(ns))
            assert status == 200 and body["failed"] == 0
            for it in body["items"]:
                made[it["id"]] = True
        if n[0] % 7 == 0 and untouched:
            tid = untouched.pop(rng.randrange(len(untouched)))
            status, _, _ = api.request("DELETE", f"/timers/{tid}", headers=auth(ns))
            assert status == 200
            cut.add(tid)
    done = bulk(ns, "cancel", {"big": "1"}, between=between)
    # the ones cancelled by id meanwhile may have expired (retention 1 s) before the walk came to them
    assert before - cut <= set(done) <= before | set(made), \
        ("missing", sorted(before - cut - set(done)), "extra", sorted(set(done) - before - set(made)), SEED)
    for tid in set(done) | cut:
        m.t[(ns, tid)] = {**m.t.get((ns, tid), {"labels": {"big": "1"}, "queue": "default", "soon": False}),
                          "state": "cancelled"}
    for tid in set(made) - set(done):
        m.t[(ns, tid)] = {"labels": {"big": "1"}, "queue": "default", "soon": False, "state": "scheduled"}
    # ---- a bulk cancel of timers due while its pages go: each is cancelled (and never arrives)
    # or too late (its attempt began: it arrives), met once unless it was delivered and expired
    ns = "team-b"
    race = [{"id": f"race-{j}", "url": receiver.url(f"/{ns}"), "delay_ms": rng.randint(50, 700),
             "labels": {"race": "1", **({"big": "1"} if j % 2 else {})}} for j in range(40)]
    status, _, body = api.request("POST", "/timers/batch", json_body={"timers": race}, headers=auth(ns))
    assert status == 200 and body["failed"] == 0
    time.sleep(0.05)
    pages = walk(api, ns, "cancel", {"labels": {"race": "1"}}, rng, between=lambda page: time.sleep(0.03))
    cancelled = [x for p in pages for x in p["cancelled"]]
    late = {x["id"]: x["state"] for p in pages for x in p["too_late"]}
    assert len(cancelled) == len(set(cancelled)) and not set(cancelled) & set(late)
    assert sum(p["matched"] for p in pages) == len(cancelled) + len(late)
    assert set(late.values()) <= {"firing", "delivered"}, late
    race_ids = {r["id"] for r in race}
    assert set(cancelled) | set(late) <= race_ids
    for tid in race_ids - set(cancelled):
        soon.append((ns, tid))
        m.t[(ns, tid)] = {"labels": {}, "queue": "default", "soon": True, "state": "gone"}
    for tid in cancelled:
        m.t[(ns, tid)] = {"labels": {}, "queue": "default", "soon": False, "state": "cancelled"}
    receiver.wait_for(sum(1 for k in soon if k[0] == ns), timeout=scaled(20), path=f"/{ns}")
    assert wait_until(lambda: all(api.request("GET", f"/timers/{tid}", headers=auth(ns))[0] == 404
                                  for tid in race_ids - set(cancelled)), timeout=scaled(20))
    # ---- the same with a bulk pause: a paused timer does not arrive until it is resumed
    hold = [{"id": f"hold-{j}", "url": receiver.url("/hold"), "delay_ms": rng.randint(50, 700),
             "labels": {"hold": "1"}} for j in range(40)]
    status, _, body = api.request("POST", "/timers/batch", json_body={"timers": hold}, headers=auth(ns))
    assert status == 200 and body["failed"] == 0
    time.sleep(0.05)
    pages = walk(api, ns, "pause", {"labels": {"hold": "1"}}, rng, between=lambda page: time.sleep(0.03))
    paused = [x for p in pages for x in p["paused"]]
    late = [x["id"] for p in pages for x in p["too_late"]]
    assert len(paused) == len(set(paused)) and not set(paused) & set(late)
    time.sleep(1.0)
    assert not {r.timer_id for r in receiver.requests("/hold")} & set(paused)
    pages = walk(api, ns, "resume", {"labels": {"hold": "1"}, "state": "paused"}, rng)
    assert sorted(x for p in pages for x in p["resumed"]) == sorted(paused)
    receiver.wait_for(len(hold), timeout=scaled(20), path="/hold")
    time.sleep(0.3)
    assert sorted(r.timer_id for r in receiver.requests("/hold")) == sorted(h["id"] for h in hold)
    # the others of the namespace are as they were, and the other namespace's too
    for (n_, tid), t in sorted(m.t.items()):
        status, _, body = api.request("GET", f"/timers/{tid}", headers=auth(n_))
        if t["state"] == "gone":
            assert status == 404, (n_, tid, body, SEED)
        elif t["state"] == "cancelled":
            assert status == 404 or body["state"] == "cancelled", (n_, tid, body, SEED)
        else:
            assert status == 200 and body["state"] == t["state"], (n_, tid, t, body, SEED)
    # nothing cancelled arrived; every soon one arrived once
    time.sleep(0.3)
    for n_ in TOKENS:
        got = [r.timer_id for r in receiver.requests(f"/{n_}")]
        assert sorted(got) == sorted(tid for (x, tid) in soon if x == n_), (n_, SEED)
