"""Logs: one JSON object per line, and every line about a timer names the
timer, its queue, its attempt and the request that created it, whichever way
the timer reached the engine (held at create, claimed by a sweep, held again
by a control). At info level no body and no secret header value is logged."""
import json
import socket
import re

from conftest import Hookwheel, scaled, wait_until

TIMER_LINES = {"timer created", "attempt started", "attempt finished", "outcome recorded",
               "attempt not started", "timer controlled"}


def records(hw):
    out = []
    for line in hw.log.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue  # sanitizer or libmicrohttpd text
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # the line being written right now
    return out


def about(hw, key_id):
    return [r for r in records(hw) if r.get("timer") == key_id]


def test_every_line_about_a_timer_names_its_queue_attempt_and_creating_request(
        redis, receiver, hookwheel_factory):
    # a 1 s window: "near" is held by the instance at create, "far" is only
    # claimed later by a sweep, from Redis
    hw = hookwheel_factory(redis, args=["--window-ms", "1000"])
    receiver.plan("/logs-retry", [500])
    cases = {
        "near": ({"url": receiver.url("/logs"), "delay_ms": 100, "queue": "mail"}, "req-near.1:a/b+c=d@e"),
        "far": ({"url": receiver.url("/logs"), "delay_ms": 2500}, "req-far"),
        "retried": ({"url": receiver.url("/logs-retry"), "delay_ms": 100,
                     "retry": {"max_attempts": 3, "min_backoff_ms": 100, "max_backoff_ms": 100}}, "req-retried"),
        "made": ({"url": receiver.url("/logs"), "delay_ms": 100}, None),
        "malformed": ({"url": receiver.url("/logs"), "delay_ms": 100}, "bad id with spaces"),
    }
    for tid, (spec, rid) in cases.items():
        status, _, body = hw.api.create({"id": tid, **spec},
                                        headers={"X-Request-Id": rid} if rid else None)
        assert status == 201, body
    got = receiver.wait_for(6, timeout=scaled(10))
    assert len(got) == 6, got

    def recorded_all():
        recs = records(hw)
        done = {r["timer"] for r in recs if r.get("msg") == "outcome recorded"}
        return {"near", "far", "made", "malformed"} <= done and sum(
            1 for r in recs if r.get("msg") == "outcome recorded" and r["timer"] == "retried") == 2
    assert wait_until(recorded_all, timeout=scaled(5)), hw.log_tail(30)

    made_ids = set()
    for tid, (spec, rid) in cases.items():
        lines = about(hw, tid)
        msgs = [r["msg"] for r in lines]
        assert "timer created" in msgs and "attempt started" in msgs and "outcome recorded" in msgs, msgs
        for r in lines:
            assert r["msg"] in TIMER_LINES, r
            assert r["queue"] == spec.get("queue", "default"), r
            assert isinstance(r["attempt"], int), r
        created = [r for r in lines if r["msg"] == "timer created"]
        assert len(created) == 1 and created[0]["attempt"] == 0
        ids = {r["request_id"] for r in lines}
        assert len(ids) == 1, (tid, ids)  # the same id on every line
        (got,) = ids
        if rid and " " not in rid:
            assert got == rid, (tid, got)
        else:  # none given, or not a sane token: the server made one
            assert re.fullmatch(r"[0-9a-f]{16}", got), got
            made_ids.add(got)
        # the attempt on the lines of an attempt is that attempt's number
        started = [r["attempt"] for r in lines if r["msg"] == "attempt started"]
        finished = [r["attempt"] for r in lines if r["msg"] == "attempt finished"]
        expected = [1, 2] if tid == "retried" else [1]
        assert started == expected and finished == expected, (tid, started, finished)
    assert len(made_ids) == 2, made_ids  # a new id per request
    # the request that made "far" was logged with that id too
    http = [r for r in records(hw) if r.get("msg") == "http request" and r.get("request_id") == "req-far"]
    assert http and http[0]["method"] == "POST" and http[0]["status"] == 201, http


def test_a_control_names_the_creating_request_and_its_own(redis, receiver, hookwheel_factory):
    hw = hookwheel_factory(redis)
    spec = {"id": "ctl", "url": receiver.url("/ctl"), "delay_ms": 60_000, "repeat": {"every_ms": 60_000}}
    assert hw.api.create(spec, headers={"X-Request-Id": "maker-1"})[0] == 201
    status, _, body = hw.api.request("POST", "/timers/ctl/fire", headers={"X-Request-Id": "firer-2"})
    assert status == 200, body
    assert len(receiver.wait_for(1, path="/ctl", timeout=scaled(5))) == 1
    assert wait_until(lambda: any(r["msg"] == "outcome recorded" for r in about(hw, "ctl")), timeout=scaled(5))
    lines = about(hw, "ctl")
    ctl = [r for r in lines if r["msg"] == "timer controlled"]
    assert len(ctl) == 1, lines
    assert ctl[0]["op"] == "fire" and ctl[0]["by_request_id"] == "firer-2", ctl
    assert {r["request_id"] for r in lines} == {"maker-1"}, lines
    assert [r["attempt"] for r in lines if r["msg"] == "attempt started"] == [1]


def test_at_info_level_no_body_and_no_header_value_is_logged(redis, receiver, hookwheel_factory):
    hw = hookwheel_factory(redis, args=["--log-level", "info"])
    receiver.default("/gone", 404)  # a failure: its attempt is logged at info
    body_marker, header_marker = "body-marker-7f3a", "header-marker-91c2"
    spec = {"id": "quiet", "url": receiver.url("/gone"), "delay_ms": 50, "body": body_marker,
            "headers": {"X-Api-Key": header_marker}}
    assert hw.api.create(spec, headers={"X-Request-Id": "quiet-req"})[0] == 201
    assert wait_until(lambda: any(r["msg"] == "attempt finished" for r in about(hw, "quiet")),
                      timeout=scaled(5)), hw.log_tail(10)
    (line,) = [r for r in about(hw, "quiet") if r["msg"] == "attempt finished"]
    assert line["level"] == "info" and line["status"] == 404 and line["request_id"] == "quiet-req", line
    assert line["queue"] == "default" and line["attempt"] == 1
    text = hw.log.read_text(errors="replace")
    assert body_marker not in text and header_marker not in text
    assert not [r for r in records(hw) if r.get("level") == "debug"]


def test_a_request_path_that_is_not_utf8_still_gives_a_utf8_json_line(redis, hookwheel_factory):
    hw = hookwheel_factory(redis)
    # raw bytes in the request target: libmicrohttpd passes them on as they are
    paths = [b'/x\xff\xfe"\\q', b'/' + b'a' * 300 + "\u00e9".encode() * 200, b'/y\xc3']
    for path in paths:
        with socket.create_connection(("127.0.0.1", hw.port), timeout=scaled(5)) as s:
            s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert s.recv(64).startswith(b"HTTP/1.1 404")

    def lines():
        return [l for l in hw.log.read_bytes().split(b"\n") if b'"msg":"http request"' in l and b'"status":404' in l]
    assert wait_until(lambda: len(lines()) == len(paths), timeout=scaled(5)), hw.log_tail(10)
    # strict: the bytes must be UTF-8. The lines come in the order the
    # requests ended, which need not be the order they were sent in.
    got = sorted((json.loads(l.decode("utf-8"))["path"] for l in lines()), key=lambda p: p[1])
    assert got[1] == '/x\ufffd\ufffd"\\q'
    assert got[0].startswith("/" + "a" * 300 + "\u00e9") and set(got[0][301:]) == {"\u00e9"}
    assert got[2] == "/y\ufffd"


def test_a_misspelt_setting_in_the_environment_is_named_in_a_warning(redis, hookwheel_factory):
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_MAX_INFLIGT": "5", "HOOKWHEEL_MAX_INFLIGHT": "7",
                                       "HOOKWHEEL_URL": "http://127.0.0.1:1", "HOOKWHEEL_lower": "x"})
    warned = [r.get("variable") for r in records(hw)
              if r.get("level") == "warn" and r.get("msg", "").startswith("an environment variable that is no setting")]
    assert sorted(warned) == ["HOOKWHEEL_ followed by other characters than A-Z, 0-9 and _",
                              "HOOKWHEEL_MAX_INFLIGT"], warned
    assert hw.api.request("GET", "/readyz")[0] == 200  # a warning, not a refusal


def test_an_open_api_on_localhost_is_not_warned_about_as_open_to_anyone(
        tmp_path, request, redis, hookwheel_factory):
    # localhost:port binds 127.0.0.1 (README, Configuration): only this
    # machine reaches it, as with 127.0.0.1:port, so no warning.
    hw = Hookwheel(tmp_path, redis.url, name="localhost")
    hw.listen_host = "localhost"
    request.node._hookwheels.append(hw)  # stopped and checked by the factory's teardown
    hw.start()
    started = [r for r in records(hw) if r.get("msg") == "hookwheel started"]
    assert started and started[0]["listen"] == f"localhost:{hw.port}"
    assert not [r for r in records(hw) if "open to anyone" in r.get("msg", "")]
