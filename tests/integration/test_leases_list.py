"""GET /leases?limit=&cursor=: a namespace's held leases sorted by key, a page
at a time, each exactly what GET /leases/{key} answers. Real redis-server,
the real binary (on a Redis Cluster with the hash-tagged lease prefix)."""
import threading
from urllib.parse import quote

from conftest import HW_LEASE, LEASE_PREFIX, scaled, wait_until
from contract import assert_matches_contract
from test_leases import Leases

TOKEN_A = "leases-team-a-token-2b9d4c1e"
TOKEN_B = "leases-team-b-token-7e0a5f3c"
# what changes between two reads of one lease
MOVING = ("expires_in_ms", "renewing", "last_renewed_at", "last_heartbeat_at")


def page(leases, limit=None, cursor=None):
    q = []
    if limit is not None:
        q.append(f"limit={limit}")
    if cursor is not None:
        q.append(f"cursor={quote(cursor)}")
    status, headers, body = leases.api.request("GET", "/leases" + ("?" + "&".join(q) if q else ""),
                                               headers=leases.headers)
    assert_matches_contract("GET", "/leases", status, headers, body)
    return status, body


def walk(leases, limit):
    """Every page from the first; returns (leases, pages)."""
    got, pages, cursor = [], 0, None
    while True:
        status, body = page(leases, limit, cursor)
        assert status == 200, body
        pages += 1
        got += body["leases"]
        cursor = body["next_cursor"]
        if cursor is None:
            return got, pages
        assert pages < 100, "the cursor never ends"


def steady(lease):
    return {k: v for k, v in lease.items() if k not in MOVING}


def test_pages_of_limit_leases_sorted_by_key_cover_every_held_lease_once(hookwheel):
    leases = Leases(hookwheel)
    keys = [f"job-{i:02d}" for i in range(23)][::-1]  # acquired in reverse order
    for k in keys:
        status, _, body = leases.acquire(k, f"owner-{k}", 30000)
        assert status == 201, body
    got, pages = walk(leases, 5)
    assert [x["key"] for x in got] == sorted(keys)
    assert pages in (5, 6), pages  # 5+5+5+5+3 (a page that ends exactly at the end may add an empty one)
    for x in got:  # each is what GET /leases/{key} answers
        status, _, one = leases.get(x["key"])
        assert status == 200 and steady(one) == steady(x), (one, x)
        assert x["owner"] == f"owner-{x['key']}" and x["token"] >= 1 and x["ttl_ms"] == 30000
    status, body = page(leases)  # default limit 100
    assert status == 200 and len(body["leases"]) == 23 and body["next_cursor"] is None, body
    status, body = page(leases, limit=1000)
    assert status == 200 and len(body["leases"]) == 23


def test_released_and_expired_leases_are_not_listed(redis, hookwheel):
    leases = Leases(hookwheel)
    for k, ttl in (("keep", 30000), ("release-me", 30000), ("expire-me", 400)):
        status, _, body = leases.acquire(k, "o", ttl)
        assert status == 201, body
    assert leases.release("release-me", "o")[0] == 204
    # expire-me's holder never heartbeats: renewal stops and the key expires
    assert wait_until(lambda: leases.get("expire-me")[0] == 404, scaled(5))
    assert wait_until(lambda: [x["key"] for x in walk(leases, 10)[0]] == ["keep"], scaled(3)), walk(leases, 10)
    # the index of held leases holds what is held, once the watchdog has looked
    assert wait_until(lambda: redis.cmd("ZRANGE", HW_LEASE + "held", 0, -1) == ["keep"], scaled(3)), \
        redis.cmd("ZRANGE", HW_LEASE + "held", 0, -1)


def test_two_namespaces_never_see_each_others_leases(tmp_path, redis, hookwheel_factory):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"team-a {TOKEN_A}\nteam-b {TOKEN_B}\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    a, b = Leases(hw, TOKEN_A), Leases(hw, TOKEN_B)
    for k in ("a-1", "shared", "a-2"):
        assert a.acquire(k, "from-a", 30000)[0] == 201
    for k in ("shared", "b-1"):
        assert b.acquire(k, "from-b", 30000)[0] == 201
    got_a, _ = walk(a, 2)
    got_b, _ = walk(b, 1)
    assert [(x["key"], x["owner"]) for x in got_a] == [("a-1", "from-a"), ("a-2", "from-a"), ("shared", "from-a")]
    assert [(x["key"], x["owner"]) for x in got_b] == [("b-1", "from-b"), ("shared", "from-b")]
    # a cursor names a key in the caller's own namespace only
    status, body = page(b, 10, "a-1")
    assert status == 200 and [x["key"] for x in body["leases"]] == ["b-1", "shared"], body
    assert hw.request("GET", "/leases")[0] == 401
    assert redis.cmd("GET", LEASE_PREFIX + "team-b/shared") == "from-b"


def test_bad_limit_or_cursor_gets_a_400_problem_naming_it(hookwheel):
    leases = Leases(hookwheel)
    for bad in ("0", "1001", "-1", "x", "", "1.5", "10000"):
        status, body = page(leases, limit=bad)
        assert status == 400 and body["field"] == "limit", (bad, body)
    for bad in ("a b", "a/b", "x" * 101, ""):
        status, body = page(leases, cursor=bad)
        assert status == 400 and body["field"] == "cursor", (bad, body)
    status, body = page(leases)
    assert status == 200 and body == {"leases": [], "next_cursor": None}, body


def test_a_lease_missing_from_the_index_is_listed_again_after_its_next_renewal(redis, hookwheel):
    # as a lease acquired by a build without the index is
    leases = Leases(hookwheel)
    status, _, body = leases.acquire("older", "o", 900)  # renewed every 300 ms while alive
    assert status == 201, body
    redis.cmd("ZREM", HW_LEASE + "held", "older")
    assert page(leases)[1]["leases"] == []
    assert leases.heartbeat("older", "o")[0] == 200
    assert wait_until(lambda: [x["key"] for x in page(leases)[1]["leases"]] == ["older"], scaled(3))


# A page reads the index in slices of 256 entries, at most 8 slices a page
# (api/leases.c): a page's budget is 2,048 entries, so a run of more entries
# than that which the page skips makes it end on a skipped one.
SKIPPED = 2200


def acquire_many(hw, token, keys, threads=4):
    errors = []

    def run(part):
        with hw.api.session() as s:
            for key in part:
                status, _, body = s.request("POST", "/leases", headers={"Authorization": f"Bearer {token}"},
                                            json_body={"key": key, "owner": "w", "ttl_ms": 3600000})
                if status != 201:
                    errors.append((key, status, body))

    ts = [threading.Thread(target=run, args=(keys[i::threads],)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:5]


def test_the_open_listing_steps_over_the_namespaces_leases_and_always_ends(tmp_path, redis, hookwheel_factory):
    # Leases acquired under API tokens stay in the index (team-a/k00000 ...)
    # when hookwheel restarts open. The open API lists its own namespace's
    # only; a page that ran out of budget among team-a's ended on one of
    # them, and its next_cursor ("k02046", the key without its namespace)
    # started the next page before team-a again: every later page came back
    # empty with the same next_cursor, and zz was never listed.
    tokens = tmp_path / "tokens"
    tokens.write_text(f"team-a {TOKEN_A}\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    acquire_many(hw, TOKEN_A, [f"k{i:05d}" for i in range(SKIPPED)])
    assert hw.stop() == 0
    hw = hookwheel_factory(redis)  # open
    open_api = Leases(hw)
    for k in ("a0", "zz"):
        assert open_api.acquire(k, "w", 3600000)[0] == 201
    for limit in (10, 1, 1000):
        got, cursors, cursor = [], [], None
        for _ in range(20):
            status, body = page(open_api, limit, cursor)
            assert status == 200, body
            got += [x["key"] for x in body["leases"]]
            cursor = body["next_cursor"]
            if cursor is None:
                break
            assert cursor not in cursors, ("a page restarted behind itself", cursor, got)
            cursors.append(cursor)
        assert cursor is None, ("the listing never ends", limit, got, cursors)
        assert got == ["a0", "zz"], (limit, got)
        # a cursor never names another namespace's lease
        assert all(c in ("a0", "zz") or c == "team-a/~" for c in cursors), cursors
    # a cursor past team-a's leases, and one an earlier build gave (a key
    # without its namespace, inside team-a's), both make progress
    for cursor in ("team-a/~", "k02046"):
        status, body = page(open_api, 10, cursor)
        assert status == 200 and [x["key"] for x in body["leases"]] == ["zz"], (cursor, body)
        assert body["next_cursor"] is None, body
    for bad in ("team-a/", "team-a/k00001", "/~", "bad ns/~", "team-a/~~"):
        status, body = page(open_api, 10, bad)
        assert status == 400 and body["field"] == "cursor", (bad, body)
    # with tokens, team-a's own listing covers its leases once each (and a
    # namespace's cursor is refused there)
    hw.stop()
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    team_a = Leases(hw, TOKEN_A)
    got, pages = walk(team_a, 1000)
    assert [x["key"] for x in got] == [f"k{i:05d}" for i in range(SKIPPED)] and pages == 3, pages
    status, body = page(team_a, 10, "team-a/~")
    assert status == 400 and body["field"] == "cursor", body
