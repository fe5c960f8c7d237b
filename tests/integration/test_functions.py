"""The Redis functions' batched writes (persistence/lua/_record.lua,
batched()): claim, finish and batch create gather the zset entries, registry
members and counts of their timers and write them at the end of the call.
These tests call the functions that the real binary loaded into a real Redis
directly (FCALL), to reach the paths the service does not take on its own."""
import signal

import pytest

from conftest import CLUSTER_MODE, now_ms, owner_tag, partition

pytestmark = pytest.mark.skipif(CLUSTER_MODE, reason="calls the functions of one Redis directly")

NO_OWNER = "0" * 16


def same_partition_ids(prefix, n, partitions=16):
    """n ids of one partition, and that partition."""
    ids, p = [], None
    k = 0
    while len(ids) < n:
        i = f"{prefix}-{k}"
        k += 1
        if p is None:
            p = partition(i, partitions)
        if partition(i, partitions) == p:
            ids.append(i)
    return ids, p


def function_name(redis, script):
    (lib,) = [x[1] for x in redis.cmd("FUNCTION", "LIST")]
    return f"{lib}_{script}"


def owner_of(redis, key):
    """The owner tag in a timer's head (_record.lua: bytes 10-25)."""
    return redis.cmd("GETRANGE", key, 10, 25)


def test_a_claim_that_fails_midway_still_writes_the_claimed_entries_of_the_timers_it_took(
        redis, hookwheel_factory):
    # Three timers of one partition due in an hour, in its index; the binary
    # that created them (and loaded the functions) is stopped, so only the
    # direct calls below touch them.
    hw = hookwheel_factory(redis)
    (a, b, c), p = same_partition_ids("fn-claim", 3)
    due = int(now_ms()) + 3_600_000
    for k, i in enumerate((a, b, c)):
        status, _, _ = hw.api.create({"id": i, "url": "http://127.0.0.1:9/x", "fire_at_ms": due + k})
        assert status == 201
    claim = function_name(redis, "claim")
    assert hw.stop(signal.SIGTERM, timeout=15) == 0
    index = f"hw:{{{p}}}:ix::scheduled"
    assert sorted(redis.cmd("ZRANGE", index, 0, -1)) == sorted([a, b, c])
    # The third becomes a record the functions cannot read (neither layout):
    # reading it raises, after the claim took the first two.
    redis.cmd("SET", f"hw:{{{p}}}:t:{c}", "not a timer record")
    tag = owner_tag("fn-claimer")
    with pytest.raises(Exception) as err:
        redis.cmd("FCALL", claim, 3, f"hw:{{{p}}}:nss", f"hw:{{{p}}}:cl:{tag}", f"hw:{{{p}}}:lc:{tag}",
                  due + 10, 10, tag, f"hw:{{{p}}}:t:", "0")
    assert "unreadable timer record" in str(err.value)
    # The two it took name the claimer as owner, so they must be in its
    # claimed zset at their due times (else no sweep would find them again),
    # and out of the index.
    for k, i in enumerate((a, b)):
        assert owner_of(redis, f"hw:{{{p}}}:t:{i}") == tag
        assert int(float(redis.cmd("ZSCORE", f"hw:{{{p}}}:cl:{tag}", i))) == due + k
        assert redis.cmd("ZSCORE", index, i) is None
    assert tag in redis.cmd("SMEMBERS", f"hw:{{{p}}}:holders")


def test_a_claim_of_timers_from_two_indexes_takes_them_soonest_first_and_moves_each_once(
        redis, hookwheel_factory):
    # Entries of two namespaces' indexes in one partition are merged by due
    # time (the sort that a single index does not need).
    hw = hookwheel_factory(redis)
    ids, p = same_partition_ids("fn-merge", 4)
    due = int(now_ms()) + 3_600_000
    for k, i in enumerate(ids):
        status, _, _ = hw.api.create({"id": i, "url": "http://127.0.0.1:9/x", "fire_at_ms": due + 10 * k})
        assert status == 201
    claim = function_name(redis, "claim")
    assert hw.stop(signal.SIGTERM, timeout=15) == 0
    # Move the second and fourth to another namespace's index, as a
    # namespaced timer's entry would be (the record is the same layout).
    other = f"hw:{{{p}}}:ix:ns2:scheduled"
    for i in (ids[1], ids[3]):
        score = redis.cmd("ZSCORE", f"hw:{{{p}}}:ix::scheduled", i)
        redis.cmd("ZREM", f"hw:{{{p}}}:ix::scheduled", i)
        redis.cmd("ZADD", other, score, i)
    redis.cmd("SADD", f"hw:{{{p}}}:nss", "ns2")
    tag = owner_tag("fn-merger")
    out = redis.cmd("FCALL", claim, 3, f"hw:{{{p}}}:nss", f"hw:{{{p}}}:cl:{tag}", f"hw:{{{p}}}:lc:{tag}",
                    due + 15, 3, tag, f"hw:{{{p}}}:t:", "0")
    n = out[0]
    taken = out[2 + n::2]  # (out[1]: more, when the call's time budget ran out)
    # The horizon (due + 15) takes the first two (one from each index); the
    # limit (3) is not what stops it.
    assert taken == [ids[0], ids[1]]
    assert redis.cmd("ZCARD", f"hw:{{{p}}}:cl:{tag}") == 2
    assert redis.cmd("ZCARD", other) == 1 and redis.cmd("ZCARD", f"hw:{{{p}}}:ix::scheduled") == 1
    # A wider horizon takes the rest, soonest first, across both indexes.
    out = redis.cmd("FCALL", claim, 3, f"hw:{{{p}}}:nss", f"hw:{{{p}}}:cl:{tag}", f"hw:{{{p}}}:lc:{tag}",
                    due + 100, 10, tag, f"hw:{{{p}}}:t:", "0")
    n = out[0]
    assert out[1] == 0 and out[2 + n::2] == [ids[2], ids[3]]
    scores = redis.cmd("ZRANGE", f"hw:{{{p}}}:cl:{tag}", 0, -1, "WITHSCORES")
    got = {scores[k]: int(float(scores[k + 1])) for k in range(0, len(scores), 2)}
    assert got == {i: due + 10 * k for k, i in enumerate(ids)}
    for i in ids:
        assert owner_of(redis, f"hw:{{{p}}}:t:{i}") == tag


def test_a_heartbeat_just_after_a_look_that_found_the_holder_silent_brings_the_next_look_forward(
        redis, hookwheel_factory):
    # A look (renew) stamped just past the ttl finds the holder silent: it does not renew and
    # looks again only when the key expires. A heartbeat stamped just inside the ttl (another
    # instance's clock, or a call that waited) that arrives after that look must still bring
    # the next look forward, or the key expires while its holder heartbeats.
    hw = hookwheel_factory(redis)
    lease = function_name(redis, "lease")
    assert hw.stop(signal.SIGTERM, timeout=15) == 0
    sched, held, meta = "hw:lease:schedule", "hw:lease:held", "hw:lease:meta:"
    t0, ttl = int(now_ms()), 3000
    got = redis.cmd("FCALL", lease, 5, "lk:fn-silent", "hw:lease:token:fn-silent", meta + "fn-silent", sched, held,
                    "acquire", "fn-silent", "holder-1", ttl, t0, "", "", "", meta)
    assert got[0] == 1, got
    # the look, 3.5 s after the last sign of life: silent
    redis.cmd("FCALL", lease, 2, sched, held, "renew", t0 + 3500, 100, "lk:", meta, 1000)
    assert float(redis.cmd("ZSCORE", sched, "fn-silent")) > t0 + 3500 + 1000, "the silent look renewed"
    # the heartbeat, stamped 2.999 s after the last sign of life, comes after it
    got = redis.cmd("FCALL", lease, 3, "lk:fn-silent", meta + "fn-silent", sched,
                    "heartbeat", "fn-silent", "holder-1", t0 + 2999, "", "hb")
    assert got[0] == 1, got
    assert float(redis.cmd("ZSCORE", sched, "fn-silent")) <= t0 + 2999, "the next look stays at the key's expiry"
    # that look renews the key and clears the mark
    redis.cmd("FCALL", lease, 2, sched, held, "renew", t0 + 3000, 100, "lk:", meta, 1000)
    assert redis.cmd("HGET", meta + "fn-silent", "silent") is None
    assert redis.cmd("PTTL", "lk:fn-silent") > ttl - 500


def test_a_firing_timer_no_job_holds_is_handed_back_only_while_in_the_attempt_it_was_listed_in(
        redis, hookwheel_factory):
    # A failover can lose the finish of an attempt: the new master shows the
    # timer firing, held by a live instance that dropped its job. held lists
    # the firing timers of an instance's past-due claims (token, attempt,
    # run); handback hands one back as a release would, but only while it is
    # still that attempt: not one begun again meanwhile, not another
    # instance's.
    hw = hookwheel_factory(redis)
    (a, b, c), p = same_partition_ids("fn-handback", 3)
    due = int(now_ms()) + 3_600_000
    for k, i in enumerate((a, b, c)):
        status, _, _ = hw.api.create({"id": i, "url": "http://127.0.0.1:9/x", "fire_at_ms": due + k})
        assert status == 201
    claim, begin, finish, held, handback = (function_name(redis, s)
                                            for s in ("claim", "begin", "finish", "held", "handback"))
    assert hw.stop(signal.SIGTERM, timeout=15) == 0
    me, other = owner_tag("fn-reconciler"), owner_tag("fn-other")
    prefix = f"hw:{{{p}}}:t:"
    key = {i: prefix + i for i in (a, b, c)}
    mine, others = f"hw:{{{p}}}:cl:{me}", f"hw:{{{p}}}:cl:{other}"
    # a and b are claimed and begun by this instance (jobs 11 and 12), c by another one (job 13).
    for tag, limit in ((me, 2), (other, 1)):
        redis.cmd("FCALL", claim, 3, f"hw:{{{p}}}:nss", f"hw:{{{p}}}:cl:{tag}", f"hw:{{{p}}}:lc:{tag}",
                  due + 10, limit, tag, prefix, "0")
    assert sorted(redis.cmd("ZRANGE", mine, 0, -1)) == sorted([a, b]) and redis.cmd("ZRANGE", others, 0, -1) == [c]
    assert redis.cmd("FCALL", begin, 2, key[a], key[b], me, 0, 0, 11, "0", due, 0, 12, "0", due + 1)[::3] == [1, 1]
    assert redis.cmd("FCALL", begin, 1, key[c], other, 0, 0, 13, "0", due + 2)[0] == 1
    # Only claims due by `until` are read; the rest of the call's limit is not what stops it.
    assert redis.cmd("FCALL", held, 1, mine, prefix, me, due - 1, 0, 10) == [0]
    listed = redis.cmd("FCALL", held, 1, mine, prefix, me, due + 10, 0, 10)
    assert listed == [0, a, 11, 1, 1, b, 12, 1, 1]
    # A listing that fills its limit says where to go on.
    assert redis.cmd("FCALL", held, 1, mine, prefix, me, due + 10, 0, 1) == [1, a, 11, 1, 1]
    assert redis.cmd("FCALL", held, 1, mine, prefix, me, due + 10, 1, 1) == [2, b, 12, 1, 1]
    # Meanwhile b's attempt ended (a retry this instance keeps) and its job began the next one.
    now = int(now_ms())
    kept = redis.cmd("FCALL", finish, 1, key[b], me, now, 60000, due + 100_000, 5, 0,
                     b, "retry", '{"status":500}', due + 5, "1", 0, "0", 0, -1)
    assert kept[0] == 1 and kept[3] == 1
    assert redis.cmd("FCALL", begin, 1, key[b], me, 0, 0, 12, "0", due + 5)[0] == 2
    lost = '{"error":"attempt interrupted: its finish was lost"}'
    out = redis.cmd("FCALL", handback, 3, key[a], key[b], key[c], me, now, lost, 60000, 5,
                    a, 11, 1, 1, b, 12, 1, 1, c, 13, 1, 1)
    assert out == [1, "retrying", 0, "", 0, ""]
    # a: back in its index for any sweep, at its due time (later than now), no owner, the lost
    # attempt in its history.
    assert redis.cmd("GETRANGE", key[a], 1, 1) == "r" and owner_of(redis, key[a]) == NO_OWNER
    assert redis.cmd("ZSCORE", mine, a) is None
    assert int(float(redis.cmd("ZSCORE", f"hw:{{{p}}}:ix::retrying", a))) == due
    assert redis.cmd("GET", f"hw:{{{p}}}:h:{a}").split("\t")[0] == lost
    # b (its second attempt runs) and c (another instance's) are left as they were.
    assert redis.cmd("FCALL", held, 1, mine, prefix, me, due + 10, 0, 10) == [0, b, 12, 2, 1]
    assert redis.cmd("FCALL", held, 1, others, prefix, other, due + 10, 0, 10) == [0, c, 13, 1, 1]
    assert owner_of(redis, key[c]) == other and redis.cmd("GETRANGE", key[c], 1, 1) == "f"
    # The same hand-back again finds a moved on: nothing is done twice.
    assert redis.cmd("FCALL", handback, 1, key[a], me, now, lost, 60000, 5, a, 11, 1, 1) == [0, ""]
    assert redis.cmd("ZCARD", f"hw:{{{p}}}:ix::retrying") == 1
