"""on_success / on_failure callbacks: a timer that ends delivered or failed
makes a callback timer, in the same Redis call, that POSTs a signed report.
Real redis-server, the real binary, a real receiver."""
import json
import time
from datetime import datetime
from urllib.parse import quote

from conftest import Reply, scaled, wait_until
from contract import assert_matches_contract
from test_signing import OLD, verify


def test_on_failure_fires_once_with_a_signed_report_and_is_a_timer_itself(redis, receiver, hookwheel_factory):
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_SIGNING_SECRET": OLD})
    receiver.default("/target", Reply(500, body=b"broken"))
    status, _, t = hw.api.create({"id": "cb-fail", "url": receiver.url("/target"), "delay_ms": 50,
                                  "retry": {"max_attempts": 2, "min_backoff_ms": 50, "max_backoff_ms": 100},
                                  "on_failure": receiver.url("/failed"), "on_success": receiver.url("/ok"),
                                  "queue": "cbq"})
    assert status == 201 and t["on_failure"] == receiver.url("/failed"), t
    receiver.wait_for(1, timeout=scaled(20), path="/failed")
    time.sleep(1.0)
    got = receiver.requests("/failed")
    assert len(got) == 1 and receiver.requests("/ok") == []
    assert len(receiver.requests("/target")) == 2
    r = got[0]
    assert verify(OLD, r.headers, r.body), "the report is signed like any delivery"
    report = json.loads(r.body)
    assert report["event"] == "timer.failed" and report["id"] == "cb-fail" and report["state"] == "failed"
    assert report["attempts"] == 2 and report["runs"] == 1
    assert report["last_attempt"]["status"] == 500
    assert report["finished_at_ms"] >= report["created_at_ms"]
    # the callback is a timer: visible, delivered, in the parent's queue
    status, _, parent = hw.api.get("cb-fail")
    cid = f"cb-fail#on_failure.{parent['version']}"
    status, hdrs, cb = hw.api.get(quote(cid))
    assert_matches_contract("GET", "/timers/{id}", status, hdrs, cb)
    assert status == 200 and cb["state"] == "delivered" and cb["queue"] == "cbq", cb
    assert cb["url"] == receiver.url("/failed") and cb["json"] == report


def test_on_success_fires_for_a_delivered_timer_and_not_for_a_cancelled_one(hookwheel, receiver):
    api = hookwheel.api
    status, _, _ = api.create({"id": "cb-ok", "url": receiver.url("/t"), "delay_ms": 50,
                               "on_success": receiver.url("/ok"), "on_failure": receiver.url("/failed")})
    assert status == 201
    status, _, _ = api.create({"id": "cb-cancel", "url": receiver.url("/t"), "delay_ms": 60_000,
                               "on_success": receiver.url("/ok"), "on_failure": receiver.url("/failed")})
    assert api.cancel("cb-cancel")[0] == 200
    receiver.wait_for(1, timeout=scaled(20), path="/ok")
    time.sleep(1.0)
    oks = receiver.requests("/ok")
    assert len(oks) == 1 and json.loads(oks[0].body)["id"] == "cb-ok"
    assert json.loads(oks[0].body)["last_attempt"]["status"] == 204
    assert receiver.requests("/failed") == []


def test_callback_urls_follow_the_destination_rules(hookwheel, receiver):
    for field in ("on_success", "on_failure"):
        for bad in ("ftp://example.com/", 17, "http://user:pw@example.com/"):
            status, _, body = hookwheel.api.create({"url": receiver.url("/t"), "delay_ms": 1000, field: bad})
            assert status == 400 and body["field"] == field, (field, bad, body)
    status, _, body = hookwheel.api.request("GET", "/timers/x%23on_failure.notanumber")
    assert status == 404


def test_on_failure_survives_a_kill_between_the_failure_and_the_callback(redis, receiver, hookwheel_factory):
    # The callback timer is written with the failure and goes in the parent's
    # queue, paused while the parent's attempt runs: it cannot start before
    # the kill, and the next instance sends it once the queue resumes.
    a = hookwheel_factory(redis, args=["--lease-ttl-ms", "2000"])
    receiver.default("/target", Reply(500, delay_s=2.0))
    status, _, _ = a.api.create({"id": "cb-kill", "url": receiver.url("/target"), "delay_ms": 50, "queue": "cbq",
                                 "retry": {"max_attempts": 1}, "on_failure": receiver.url("/failed")})
    assert status == 201
    assert receiver.wait_for(1, timeout=scaled(10), path="/target")
    assert a.api.request("PUT", "/queues/cbq", json_body={"paused": True})[0] == 200
    assert a.api.wait_state("cb-kill", "failed", timeout=scaled(20))["state"] == "failed"
    assert wait_until(lambda: a.api.get(quote("cb-kill#on_failure.0"))[0] == 200, timeout=scaled(5))
    time.sleep(0.5)  # a sweep soon after the failure claims the callback; the paused queue holds it
    assert receiver.requests("/failed") == []
    a.kill9()
    b = hookwheel_factory(redis)
    assert b.api.request("PUT", "/queues/cbq", json_body={"paused": False})[0] == 200
    receiver.wait_for(1, timeout=scaled(30), path="/failed")
    time.sleep(1.5)
    assert len(receiver.requests("/failed")) == 1
    assert json.loads(receiver.requests("/failed")[0].body)["id"] == "cb-kill"
    assert wait_until(lambda: b.api.get(quote("cb-kill#on_failure.0"))[2].get("state") == "delivered",
                      timeout=scaled(10))


def test_a_callback_starts_soon_after_its_timer_ends_whatever_the_claim_window(redis, receiver, hookwheel_factory):
    # The callback timer is due now and held by no instance: it waited for
    # the next sweep, up to half the claim window (300 s here).
    hw = hookwheel_factory(redis, args=["--window-ms", "600000"])
    receiver.default("/ok", Reply(204))
    receiver.default("/done", Reply(204))
    assert hw.api.create({"id": "cb-soon", "url": receiver.url("/ok"), "delay_ms": 10,
                          "on_success": receiver.url("/done")})[0] == 201
    got = receiver.wait_for(1, timeout=scaled(5), path="/done")
    assert got and json.loads(got[0].body)["id"] == "cb-soon", got


def test_an_id_used_again_after_a_purge_gets_its_own_failure_callback(hookwheel, receiver):
    """The callback id is <id>#on_failure.<version>, and a new timer of an id
    starts at version 0 again. An earlier timer's callback kept under that id
    (delivered and kept for the retention, or still being sent) made the new
    timer's callback silently not happen."""
    receiver.default("/again-target", Reply(500))
    receiver.default("/cb-done", Reply(204))
    receiver.default("/cb-slow", Reply(204, delay_s=5.0))
    receiver.default("/cb-new", Reply(204))

    def fail_once(tid, callback):
        status, _, body = hookwheel.create({"id": tid, "url": receiver.url("/again-target"), "delay_ms": 10,
                                            "timeout_ms": 8000, "retry": {"max_attempts": 1},
                                            "on_failure": receiver.url(callback)})
        assert status == 201, body
        return body

    def created_ms(timer):
        return round(datetime.fromisoformat(timer["created_at"].replace("Z", "+00:00")).timestamp() * 1000)

    def purge():
        status, _, body = hookwheel.request("POST", "/dead-letters/purge")
        assert status == 200, body

    # the earlier callback was delivered: it is dropped and the new one takes its id
    fail_once("again-1", "/cb-done")
    assert receiver.wait_for(1, path="/cb-done", timeout=scaled(5))
    hookwheel.wait_state(quote("again-1#on_failure.0"), "delivered", timeout=scaled(3))
    purge()
    second = fail_once("again-1", "/cb-new")
    got = receiver.wait_for(1, path="/cb-new", timeout=scaled(5))
    assert len(got) == 1, "the second timer's failure was never reported"
    assert json.loads(got[0].body)["created_at_ms"] == created_ms(second)
    status, _, cb = hookwheel.get(quote("again-1#on_failure.0"))
    assert status == 200 and cb["url"] == receiver.url("/cb-new"), cb

    # the earlier callback is still being sent: both reports go, the new one under the next version
    fail_once("again-2", "/cb-slow")
    assert receiver.wait_for(1, path="/cb-slow", timeout=scaled(5))
    purge()
    second = fail_once("again-2", "/cb-new")
    got = receiver.wait_for(2, path="/cb-new", timeout=scaled(4))
    assert len(got) == 2, "the second timer's failure was never reported"
    assert json.loads(got[1].body)["id"] == "again-2"
    assert json.loads(got[1].body)["created_at_ms"] == created_ms(second)
    status, _, parent = hookwheel.get("again-2")
    assert status == 200 and parent["state"] == "failed" and parent["version"] == 1, parent
    status, _, cb = hookwheel.get(quote("again-2#on_failure.1"))
    assert status == 200 and cb["url"] == receiver.url("/cb-new"), cb
    status, _, old = hookwheel.get(quote("again-2#on_failure.0"))
    assert status == 200 and old["url"] == receiver.url("/cb-slow"), old
    hookwheel.wait_state(quote("again-2#on_failure.0"), "delivered", timeout=scaled(8))


def test_a_report_whose_response_snippet_holds_a_nul_byte_is_sent_and_readable(hookwheel, receiver):
    # A target's answer may be binary (gzip, protobuf): its NUL bytes are kept
    # in last_attempt.response_snippet as \u0000, and the callback's report
    # carries that record, so the callback timer must still be read and sent.
    receiver.default("/bin", Reply(500, body=b"a\x00b"))
    receiver.default("/bin-ok", Reply(200, body=b"\x1f\x8b\x08\x00gz"))
    api = hookwheel.api
    assert api.create({"id": "cb-nul", "url": receiver.url("/bin"), "delay_ms": 0, "retry": {"max_attempts": 1},
                       "on_failure": receiver.url("/failed")})[0] == 201
    assert api.create({"id": "cb-nul-ok", "url": receiver.url("/bin-ok"), "delay_ms": 0,
                       "on_success": receiver.url("/ok")})[0] == 201
    receiver.wait_for(1, timeout=scaled(10), path="/failed")
    receiver.wait_for(1, timeout=scaled(10), path="/ok")
    (failed,) = receiver.requests("/failed")
    (ok,) = receiver.requests("/ok")
    assert json.loads(failed.body)["last_attempt"]["response_snippet"] == "a\x00b"
    assert json.loads(ok.body)["last_attempt"]["response_snippet"] == "\x1f?\x08\x00gz"
    cb = api.wait_state(quote("cb-nul#on_failure.0"), ("delivered",), timeout=scaled(10))
    assert cb.get("state") == "delivered", cb
    assert cb["json"]["last_attempt"]["response_snippet"] == "a\x00b"
