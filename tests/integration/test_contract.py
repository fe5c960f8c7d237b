"""Contract tests: every answer of the real hookwheel, success and error, is
what openapi.yaml documents for its path, method and status (status, headers,
content type, body schema), checked with jsonschema's Draft202012Validator
through contract.py. Drift between the code and openapi.yaml fails here, and
the last tests prove that the check bites. Real redis-server, real binary."""

import copy
import http.client
import json
import re
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from conftest import free_port, media_type, scaled, wait_until
from contract import Contract, assert_matches_contract, load_openapi

ROOT = Path(__file__).resolve().parents[2]


def check(api, method, path, template, **kwargs):
    """Sends the request and checks the answer against the contract; returns
    (status, headers, body)."""
    status, headers, body = api.request(method, path, **kwargs)
    assert_matches_contract(method, template, status, headers, body)
    return status, headers, body


def json_post(api, body, content_type="application/json"):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return check(api, "POST", "/timers", "/timers", raw_body=raw,
                 headers={"Content-Type": content_type})


def chunked_post(port, chunks):
    """POST /timers with a chunked body (no Content-Length)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=scaled(10))
    try:
        try:
            conn.request("POST", "/timers", body=iter(chunks), encode_chunked=True,
                         headers={"Content-Type": "application/json"})
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered (413) before all was sent
        resp = conn.getresponse()
        data = resp.read()
        body = json.loads(data) if data else data
        return resp.status, resp.headers, body
    finally:
        conn.close()


# --------------------------------------------------------------------------
# the timer endpoints


def test_create_answers_201_200_400_405_409_413_and_415_as_documented(hookwheel, receiver):
    api = hookwheel.api
    spec = {"id": "contract-1", "url": receiver.url("/c1"), "method": "PUT",
            "headers": {"X-A": "1"}, "json": {"k": [1, 2, None]}, "delay_ms": 600000,
            "timeout_ms": 5000, "retry": {"max_attempts": 3, "min_backoff_ms": 100,
                                          "max_backoff_ms": 1000}, "queue": "contracts"}
    status, headers, body = json_post(api, spec)
    assert status == 201, body
    status, _, body = json_post(api, spec)
    assert status == 200, body
    status, _, body = json_post(api, dict(spec, json={"k": "other"}))
    assert status == 409 and body.get("state") == "scheduled", body
    # body instead of json, fire_at / fire_at_ms instead of delay_ms, no id
    tomorrow = datetime.now(timezone.utc) + timedelta(days=1)
    for variant in ({"url": receiver.url("/c1b"), "body": "text",
                     "fire_at": tomorrow.strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")},
                    {"url": receiver.url("/c1c"), "fire_at_ms": int(time.time() * 1000) + 600000}):
        status, _, body = json_post(api, variant)
        assert status == 201, body

    bad = [b"{", b"[]", b"{}", json.dumps({"url": receiver.url("/x")}).encode(),
           json.dumps({"url": "ftp://example.org/", "delay_ms": 1}).encode(),
           json.dumps({"url": receiver.url("/x"), "delay_ms": 1, "nope": 1}).encode(),
           json.dumps({"url": receiver.url("/x"), "delay_ms": 1,
                       "retry": {"max_attempts": 0}}).encode(),
           json.dumps({"url": receiver.url("/x"), "delay_ms": 1,
                       "headers": {"Host": "a"}}).encode()]
    for raw in bad:
        status, _, body = json_post(api, raw)
        assert status == 400, (raw, body)

    status, _, body = json_post(api, spec, content_type="text/plain")
    assert status == 415, body
    status, _, body = json_post(api, b"{" + b" " * 70000 + b"}")
    assert status == 413, body
    status, headers, body = chunked_post(hookwheel.port, [b"{"] + [b" " * 8192] * 10 + [b"}"])
    assert_matches_contract("POST", "/timers", status, headers, body)
    assert status == 413, body

    for method in ("PUT", "PATCH"):  # methods /timers will never have
        status, headers, body = check(api, method, "/timers", "/timers")
        assert status == 405, (method, body)
        assert "POST" in headers.get("Allow", ""), headers


def test_get_and_cancel_answer_200_400_404_405_and_409_as_documented(hookwheel, receiver):
    api = hookwheel.api
    receiver.default("/retry", 500)
    specs = {
        "c-scheduled": {"url": receiver.url("/later"), "delay_ms": 600000, "body": "b"},
        "c-delivered": {"url": receiver.url("/ok"), "delay_ms": 0, "json": [1, "two"]},
        "c-failed": {"url": f"http://127.0.0.1:{free_port()}/down", "delay_ms": 0,
                     "retry": {"max_attempts": 1}},
        "c-retrying": {"url": receiver.url("/retry"), "delay_ms": 0,
                       "retry": {"max_attempts": 3, "min_backoff_ms": 600000,
                                 "max_backoff_ms": 600000}},
    }
    for tid, spec in specs.items():
        status, _, body = json_post(api, dict(spec, id=tid))
        assert status == 201, body
    wanted = {"c-scheduled": "scheduled", "c-delivered": "delivered", "c-failed": "failed",
              "c-retrying": "retrying"}
    for tid, state in wanted.items():
        got = api.wait_state(tid, state, timeout=scaled(10))
        assert got.get("state") == state, got
        status, _, body = check(api, "GET", f"/timers/{tid}", "/timers/{id}")
        assert status == 200 and body["state"] == state, body
        if state != "scheduled":
            assert isinstance(body["last_attempt"], dict), body

    for tid in ("c-delivered", "c-failed"):
        status, _, body = check(api, "DELETE", f"/timers/{tid}", "/timers/{id}")
        assert status == 409 and body["state"] == wanted[tid], body
    for tid in ("c-scheduled", "c-retrying"):
        status, _, body = check(api, "DELETE", f"/timers/{tid}", "/timers/{id}")
        assert status == 200 and body["state"] == "cancelled", body
        status, _, body = check(api, "DELETE", f"/timers/{tid}", "/timers/{id}")
        assert status == 200, body  # again: still cancelled

    for method in ("GET", "DELETE"):
        for path in ("/timers/no-such-timer", "/timers/a%2Fb", "/timers/" + "x" * 200):
            status, _, body = check(api, method, path, "/timers/{id}")
            assert status == 404, (method, path, body)
        status, _, body = check(api, method, "/timers/%zz", "/timers/{id}")
        assert status == 400, body
    for method in ("PUT", "PATCH"):
        status, headers, body = check(api, method, "/timers/c-scheduled", "/timers/{id}")
        assert status == 405, (method, body)
        assert set(re.split(r"\s*,\s*", headers["Allow"])) >= {"GET", "DELETE"}, headers


def test_queue_patch_answers_200_400_404_405_409_and_415_as_documented(redis, hookwheel_factory):
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_MAX_QUEUES": "1"})
    api, template = hw.api, "/queues/{name}"

    def patch(path, raw, content_type="application/json"):
        return check(api, "PATCH", path, template, raw_body=raw, headers={"Content-Type": content_type})

    status, _, body = patch("/queues/c-q", json.dumps({"paused": True}).encode())
    assert status == 200 and body["paused"] is True and "timers" in body, body  # stored its first controls
    status, _, body = patch("/queues/c-q", json.dumps({"parallelism": 2, "scope": "deployment"}).encode())
    assert status == 200 and (body["paused"], body["parallelism"]) == (True, 2), body
    for raw in (b"{}", b"[]", b"{", json.dumps({"paused": 1}).encode(), json.dumps({"speed": 1}).encode()):
        status, _, body = patch("/queues/c-q", raw)
        assert status == 400, (raw, body)
    status, _, body = patch("/queues/c-q", b'{"paused": true}', "text/plain")
    assert status == 415, body
    status, _, body = patch("/queues/bad%20name", b'{"paused": true}')
    assert status == 404, body
    status, _, body = patch("/queues/c-other", b'{"paused": true}')  # HOOKWHEEL_MAX_QUEUES=1
    assert status == 409, body
    status, headers, body = check(api, "POST", "/queues/c-q", template)
    assert status == 405 and "PATCH" in re.split(r"\s*,\s*", headers["Allow"]), headers


def test_health_and_readiness_answer_as_documented(hookwheel):
    api = hookwheel.api
    for path, want in (("/healthz", {"status": "ok"}), ("/readyz", {"status": "ready"})):
        status, _, body = check(api, "GET", path, path)
        assert status == 200 and body == want, body
        status, _, body = check(api, "GET", path + "?x=%zz", path)
        assert status == 400, body
        for method in ("POST", "DELETE"):
            status, _, body = check(api, method, path, path)
            assert status == 405, body


def test_stats_and_the_lease_listing_answer_200_400_and_405_as_documented(hookwheel, receiver):
    api = hookwheel.api
    status, _, t = json_post(api, {"url": receiver.url("/st"), "delay_ms": 50})
    assert status == 201, t
    assert wait_until(lambda: sum(m["delivered"] for m in api.request("GET", "/stats?minutes=2")[2]["minutes"]),
                      timeout=scaled(10), interval=0.1)
    status, _, body = check(api, "GET", "/stats?minutes=2", "/stats")
    assert status == 200 and len(body["minutes"]) == 2, body
    assert any(m["lateness_ms"]["p50"] is not None for m in body["minutes"]), body
    status, _, body = check(api, "GET", "/stats", "/stats")
    assert status == 200 and len(body["minutes"]) == 60
    status, _, body = check(api, "GET", "/stats?minutes=61", "/stats")
    assert status == 400 and body["field"] == "minutes", body
    for k in ("l-2", "l-1", "l-3"):
        status, _, body = api.request("POST", "/leases", json_body={"key": k, "owner": "o", "ttl_ms": 30000})
        assert status == 201, body
    status, _, body = check(api, "GET", "/leases?limit=2", "/leases")
    assert status == 200 and [x["key"] for x in body["leases"]] == ["l-1", "l-2"], body
    status, _, body = check(api, "GET", f"/leases?limit=2&cursor={body['next_cursor']}", "/leases")
    assert status == 200 and [x["key"] for x in body["leases"]] == ["l-3"] and body["next_cursor"] is None, body
    for q, field in (("limit=0", "limit"), ("cursor=a%20b", "cursor")):
        status, _, body = check(api, "GET", f"/leases?{q}", "/leases")
        assert status == 400 and body["field"] == field, body
    for path in ("/stats", "/leases"):
        status, _, body = check(api, "DELETE", path, path)
        assert status == 405, body


def test_an_unknown_path_answers_the_documented_not_found_problem(hookwheel):
    status, headers, body = hookwheel.request("GET", "/no/such/path")
    assert status == 404, body
    # No path of the document matches, so check against its NotFound answer.
    doc = load_openapi()
    doc["paths"]["/no/such/path"] = {"get": {"responses": {
        "404": {"$ref": "#/components/responses/NotFound"}}}}
    assert_matches_contract("GET", "/no/such/path", status, headers, body, contract=Contract(doc))


def test_with_redis_down_every_endpoint_answers_the_documented_503(hookwheel, redis, receiver):
    api = hookwheel.api
    status, _, body = json_post(api, {"id": "c-down", "url": receiver.url("/d"), "delay_ms": 600000})
    assert status == 201, body
    redis.stop()
    assert wait_until(lambda: api.request("GET", "/readyz")[0] == 503, timeout=scaled(10),
                      interval=0.05), "readyz never answered 503"
    status, _, body = check(api, "GET", "/readyz", "/readyz")
    assert status == 503, body
    status, _, body = json_post(api, {"url": receiver.url("/d"), "delay_ms": 1000})
    assert status == 503, body
    for method in ("GET", "DELETE"):
        status, _, body = check(api, method, "/timers/c-down", "/timers/{id}")
        assert status == 503, (method, body)
    for path in ("/stats", "/leases"):
        status, _, body = check(api, "GET", path, path)
        assert status == 503, (path, body)
    status, _, body = check(api, "GET", "/healthz", "/healthz")
    assert status == 200, body


def test_past_the_write_queue_cap_the_429_answers_are_as_documented(redis, hookwheel_factory,
                                                                    receiver):
    hw = hookwheel_factory(redis, args=["--max-queued-writes", "1"])
    url = receiver.url("/bp")
    seen, problems = {}, []
    lock = threading.Lock()
    stop = threading.Event()

    def flood(k):
        with hw.api.session() as s:
            for i in range(400):
                if stop.is_set():
                    return
                if i % 4 == 3:
                    method, path, template, kw = "GET", f"/timers/bp-{k}-{i - 1}", "/timers/{id}", {}
                else:
                    method, path, template = "POST", "/timers", "/timers"
                    kw = {"json_body": {"id": f"bp-{k}-{i}", "url": url, "delay_ms": 600000}}
                status, headers, body = s.request(method, path, **kw)
                try:
                    assert_matches_contract(method, template, status, headers, body)
                except AssertionError as e:
                    with lock:
                        problems.append(str(e))
                with lock:
                    seen[(method, status)] = seen.get((method, status), 0) + 1
                    if seen.get(("POST", 429), 0) >= 20:
                        stop.set()

    workers = [threading.Thread(target=flood, args=(k,)) for k in range(16)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not problems, f"{len(problems)} answers broke the contract, e.g.:\n{problems[0]}"
    assert seen.get(("POST", 429), 0) > 0, f"no create was refused: {seen}"


# --------------------------------------------------------------------------
# the document and the route table name the same operations


def routes_in_code():
    text = (ROOT / "api" / "routes.c").read_text()
    return sorted(set(re.findall(r'\{\s*"([A-Z]+)"\s*,\s*"(/[^"]*)"', text)))


def test_every_route_in_the_code_is_documented_and_every_documented_operation_is_routed():
    documented = sorted(Contract().operations())
    code = routes_in_code()
    assert code, "no routes found in api/routes.c"
    assert code == documented, (
        f"only in api/routes.c: {sorted(set(code) - set(documented))}; "
        f"only in openapi.yaml: {sorted(set(documented) - set(code))}")


def test_every_documented_operation_answers_a_probe_as_documented(hookwheel):
    """Each operation, called with a made-up id and an empty JSON object,
    answers something its documentation lists (usually 400 or 404)."""
    for method, template in Contract().operations():
        path = re.sub(r"\{[^}]+\}", "probe-id", template)
        kwargs = {}
        if method in ("POST", "PUT", "PATCH"):
            kwargs = {"raw_body": b"{}", "headers": {"Content-Type": "application/json"}}
        check(hookwheel.api, method, path, template, **kwargs)


# --------------------------------------------------------------------------
# the check bites


def drifted(change):
    """A Contract of a copy of openapi.yaml changed by change(doc)."""
    doc = load_openapi()
    change(doc)
    return Contract(doc)


def rename_timer_member(doc, old, new):
    timer = doc["components"]["schemas"]["Timer"]
    timer["properties"][new] = timer["properties"].pop(old)
    timer["required"] = [new if r == old else r for r in timer["required"]]


def test_a_contract_that_drifted_from_the_code_fails_the_check(hookwheel, receiver, redis):
    api = hookwheel.api
    created = api.create({"id": "drift", "url": receiver.url("/d"), "delay_ms": 600000})
    got = api.get("drift")
    missing = api.get("no-such-timer")
    assert_matches_contract("POST", "/timers", *created)
    assert_matches_contract("GET", "/timers/{id}", *got)
    assert_matches_contract("GET", "/timers/{id}", *missing)

    def fails(contract, method, template, answer, needle):
        with pytest.raises(AssertionError) as info:
            assert_matches_contract(method, template, *answer, contract=contract)
        assert needle in str(info.value), str(info.value)

    # a response member renamed in the schema (the code still sends fire_at_ms)
    fails(drifted(lambda d: rename_timer_member(d, "fire_at_ms", "fire_at_msec")),
          "GET", "/timers/{id}", got, "fire_at_msec")
    # a member the code sends that the schema does not name (strict check)
    def drop_created_at(d):
        timer = d["components"]["schemas"]["Timer"]
        del timer["properties"]["created_at"]
        timer["required"].remove("created_at")
    fails(drifted(drop_created_at), "POST", "/timers", created, "created_at")
    # a member of the wrong type
    fails(drifted(lambda d: d["components"]["schemas"]["Timer"]["properties"]["attempts"]
                  .update(type="string")), "GET", "/timers/{id}", got, "attempts")
    # a state the enum does not list
    fails(drifted(lambda d: d["components"]["schemas"]["TimerState"]["enum"].remove("scheduled")),
          "GET", "/timers/{id}", got, "scheduled")
    # an undocumented status, and another media type
    fails(drifted(lambda d: d["paths"]["/timers"]["post"]["responses"].pop("201")),
          "POST", "/timers", created, "does not document")
    def json_not_found(d):
        content = d["components"]["responses"]["NotFound"]["content"]
        content["application/json"] = content.pop("application/problem+json")
    fails(drifted(json_not_found), "GET", "/timers/{id}", missing, "Content-Type")
    # a required header the answer lacks
    def location_on_get(d):
        d["paths"]["/timers/{id}"]["get"]["responses"]["200"]["headers"] = {
            "Location": {"$ref": "#/components/headers/Location"}}
    fails(drifted(location_on_get), "GET", "/timers/{id}", got, "Location")

    # The same with a 503: Retry-After is required, and its schema is checked.
    redis.stop()
    assert wait_until(lambda: api.request("GET", "/readyz")[0] == 503, timeout=scaled(10),
                      interval=0.05)
    down = api.get("drift")
    assert down[0] == 503 and "a read changes nothing" in down[2]["detail"], down
    assert_matches_contract("GET", "/timers/{id}", *down)
    no_header = (down[0], {k: v for k, v in down[1].items() if k.lower() != "retry-after"}, down[2])
    fails(Contract(), "GET", "/timers/{id}", no_header, "Retry-After")
    bad_header = (down[0], dict(no_header[1], **{"Retry-After": "soon"}), down[2])
    fails(Contract(), "GET", "/timers/{id}", bad_header, "Retry-After")
