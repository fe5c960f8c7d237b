"""Integration tests of W3C Trace Context across a timer's delay: the
traceparent (and tracestate) of the request that creates a timer is kept with
it, and every attempt sends the same trace id and flags under a span id of
its own. A real redis-server, the real hookwheel binary and a real HTTP
receiver."""

import http.client
import json
import re

from conftest import assert_created, scaled

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
TRACESTATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
SENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")

FAST_RETRY = {"max_attempts": 5, "min_backoff_ms": 100, "max_backoff_ms": 200}


def create_with(hw, spec, headers):
    """POST /timers with request headers given as (name, value) pairs, so a
    name may come more than once."""
    body = json.dumps(spec).encode()
    conn = http.client.HTTPConnection("127.0.0.1", hw.port, timeout=scaled(10))
    try:
        conn.putrequest("POST", "/timers")
        for name, value in [("Content-Type", "application/json"),
                            ("Content-Length", str(len(body))), *headers]:
            conn.putheader(name, value)
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, resp.headers, json.loads(resp.read())
    finally:
        conn.close()


def sent_traceparent(req):
    """The traceparent an attempt sent, split: (trace id, span id, flags)."""
    values = req.headers.get_all("traceparent")
    assert len(values) == 1, f"{req!r}: traceparent {values!r}"
    m = SENT.match(values[0])
    assert m, f"{req!r}: traceparent {values[0]!r} is not a version-00 traceparent"
    return m.groups()


def delivered(hw, timer_id):
    done = hw.wait_state(timer_id, ("delivered", "failed"), timeout=scaled(10))
    assert done.get("state") == "delivered", done
    return done


def test_every_attempt_sends_the_creators_trace_id_and_flags_under_a_span_id_of_its_own(
        hookwheel, receiver):
    receiver.plan("/traced", [500, 204])  # the first attempt fails: two attempts
    timer = assert_created(*hookwheel.create(
        {"url": receiver.url("/traced"), "delay_ms": 0, "retry": FAST_RETRY},
        headers={"traceparent": TRACEPARENT, "tracestate": TRACESTATE}))
    assert timer["trace_id"] == TRACE_ID, timer
    done = delivered(hookwheel, timer["id"])
    assert done["attempts"] == 2 and done["trace_id"] == TRACE_ID, done

    reqs = receiver.requests("/traced")
    assert [r.attempt for r in reqs] == ["1", "2"], reqs
    sent = [sent_traceparent(r) for r in reqs]
    assert [s[0] for s in sent] == [TRACE_ID, TRACE_ID], sent
    assert [s[2] for s in sent] == ["01", "01"], sent
    spans = [s[1] for s in sent]
    assert spans[0] != spans[1], f"both attempts sent span id {spans[0]}"
    assert PARENT_ID not in spans and "0" * 16 not in spans, spans
    assert [r.headers.get_all("tracestate") for r in reqs] == [[TRACESTATE]] * 2, reqs


def test_a_timer_claimed_from_redis_later_sends_the_trace_context_it_was_created_with(
        redis, receiver, hookwheel_factory):
    # Due beyond the claim window: the engine gets it from a sweep, which
    # reads the trace context back from Redis (not from the create's memory).
    hw = hookwheel_factory(redis, args=("--window-ms", "200"))
    timer = assert_created(*hw.create(
        {"url": receiver.url("/later"), "delay_ms": 1200},
        headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-00", "tracestate": TRACESTATE,
                 "X-Request-Id": "create-later-1"}))
    delivered(hw, timer["id"])
    (req,) = receiver.requests("/later")
    assert sent_traceparent(req)[0::2] == (TRACE_ID, "00"), req.headers
    assert req.headers.get_all("tracestate") == [TRACESTATE], req.headers
    # the request id read back with it is the bare id, in the engine's lines
    lines = [json.loads(x) for x in hw.log.read_text().splitlines() if x.startswith("{")]
    attempt_lines = [x for x in lines if x.get("timer") == timer["id"] and x.get("msg") == "attempt started"]
    assert attempt_lines, hw.log_tail(40)
    assert {x.get("request_id") for x in attempt_lines} == {"create-later-1"}, attempt_lines


def test_a_timer_created_without_traceparent_sends_none(hookwheel, receiver):
    # a tracestate alone means nothing (W3C): it is not kept either
    timer = assert_created(*hookwheel.create(
        {"url": receiver.url("/plain"), "delay_ms": 0}, headers={"tracestate": TRACESTATE}))
    assert "trace_id" not in timer, timer
    done = delivered(hookwheel, timer["id"])
    assert "trace_id" not in done, done
    (req,) = receiver.requests("/plain")
    assert "traceparent" not in req.headers and "tracestate" not in req.headers, req.headers


def test_an_invalid_traceparent_is_ignored_and_the_timer_created_and_delivered_without_one(
        hookwheel, receiver):
    invalid = [
        f"00-{TRACE_ID.upper()}-{PARENT_ID}-01",       # upper-case hex
        f"00-{'0' * 32}-{PARENT_ID}-01",               # all-zero trace id
        f"00-{TRACE_ID}-{'0' * 16}-01",                # all-zero parent id
        f"ff-{TRACE_ID}-{PARENT_ID}-01",               # version ff
        f"00-{TRACE_ID}-{PARENT_ID}-01-extra",         # version 00 has nothing more
        f"00-{TRACE_ID}-{PARENT_ID}",                  # cut short
        "not a traceparent",
    ]
    ids = []
    for i, value in enumerate(invalid):
        timer = assert_created(*hookwheel.create(
            {"url": receiver.url(f"/invalid/{i}"), "delay_ms": 0},
            headers={"traceparent": value, "tracestate": TRACESTATE}))
        assert "trace_id" not in timer, (value, timer)
        ids.append(timer["id"])
    for i, timer_id in enumerate(ids):
        delivered(hookwheel, timer_id)
        (req,) = receiver.requests(f"/invalid/{i}")
        assert "traceparent" not in req.headers, (invalid[i], req.headers)
        assert "tracestate" not in req.headers, (invalid[i], req.headers)


def test_a_later_version_is_read_as_version_00_and_a_traceparent_sent_twice_is_ignored(
        hookwheel, receiver):
    status, headers, timer = create_with(hookwheel, {"url": receiver.url("/v1"), "delay_ms": 0},
                                         [("traceparent", f"01-{TRACE_ID}-{PARENT_ID}-01-future")])
    timer = assert_created(status, headers, timer)
    assert timer["trace_id"] == TRACE_ID, timer
    status, headers, twice = create_with(hookwheel, {"url": receiver.url("/twice"), "delay_ms": 0},
                                         [("traceparent", TRACEPARENT), ("traceparent", TRACEPARENT)])
    twice = assert_created(status, headers, twice)
    assert "trace_id" not in twice, twice
    delivered(hookwheel, timer["id"])
    delivered(hookwheel, twice["id"])
    (req,) = receiver.requests("/v1")
    assert sent_traceparent(req)[0::2] == (TRACE_ID, "01"), req.headers
    (req,) = receiver.requests("/twice")
    assert "traceparent" not in req.headers, req.headers


def test_several_tracestate_headers_are_joined_and_kept_up_to_whole_members_that_fit(
        hookwheel, receiver):
    long_member = "k" + "x" * 60 + "=1"
    status, headers, timer = create_with(
        hookwheel, {"url": receiver.url("/state"), "delay_ms": 0},
        [("traceparent", TRACEPARENT), ("tracestate", "a=1, b=2"), ("tracestate", "c=3"),
         ("tracestate", long_member), ("tracestate", "d=4")])
    timer = assert_created(status, headers, timer)
    delivered(hookwheel, timer["id"])
    (req,) = receiver.requests("/state")
    # 70 bytes are kept: the long member does not fit, so it and what follows go
    assert req.headers.get_all("tracestate") == ["a=1,b=2,c=3"], req.headers


def test_an_idempotent_repeat_with_another_traceparent_answers_200_and_keeps_the_first(
        hookwheel, receiver):
    spec = {"id": "trace-idem", "url": receiver.url("/idem"), "delay_ms": 1000}
    first = assert_created(*hookwheel.create(spec, headers={"traceparent": TRACEPARENT}))
    other = f"00-{'1' * 32}-{'2' * 16}-00"
    status, _, again = hookwheel.create(spec, headers={"traceparent": other})
    assert status == 200, (status, again)
    assert again["id"] == "trace-idem" and again["trace_id"] == TRACE_ID, again
    status, _, plain = hookwheel.create(spec)  # and without one
    assert status == 200 and plain["trace_id"] == TRACE_ID, (status, plain)
    delivered(hookwheel, first["id"])
    (req,) = receiver.requests("/idem")
    assert sent_traceparent(req)[0::2] == (TRACE_ID, "01"), req.headers


def test_a_traceparent_in_the_timers_own_headers_wins(hookwheel, receiver):
    own = f"00-{'a' * 32}-{'b' * 16}-01"
    timer = assert_created(*hookwheel.create(
        {"url": receiver.url("/own"), "delay_ms": 0, "headers": {"traceparent": own}},
        headers={"traceparent": TRACEPARENT, "tracestate": TRACESTATE}))
    delivered(hookwheel, timer["id"])
    (req,) = receiver.requests("/own")
    assert req.headers.get_all("traceparent") == [own], req.headers
    assert "tracestate" not in req.headers, req.headers
