"""API bearer tokens and namespaces: with HOOKWHEEL_API_TOKENS_FILE every
endpoint but the probes needs a token, and a token's namespace sees only its
own timers (404 for the others', never 403)."""
import hashlib
import signal
from urllib.parse import quote

from conftest import now_ms, owner_tag, scaled, wait_until

TOKEN_A = "team-a-token-3c1e9b7d2f"
TOKEN_B = "team-b-token-8a4f0d6e1c"
TOKEN_B2 = "team-b-second-token-55e1"  # given to hookwheel only as its SHA-256


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def start(tmp_path, redis, hookwheel_factory):
    tokens = tmp_path / "tokens"
    tokens.write_text(
        "# namespace token\n"
        f"team-a {TOKEN_A}\n"
        f"team-b {TOKEN_B}\n"
        f"team-b sha256:{hashlib.sha256(TOKEN_B2.encode()).hexdigest()}  # rotated in\n")
    return hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})


def test_without_a_valid_token_every_endpoint_but_the_probes_answers_401(tmp_path, redis, receiver,
                                                                        hookwheel_factory):
    hw = start(tmp_path, redis, hookwheel_factory)
    spec = {"url": receiver.url("/x"), "delay_ms": 60000}
    calls = [("POST", "/timers", spec), ("GET", "/timers/t1", None), ("DELETE", "/timers/t1", None),
             ("POST", "/timers/t1/fire", None), ("POST", "/timers/t1/pause", None),
             ("POST", "/timers/t1/resume", None), ("POST", "/timers/t1/reschedule", {"delay_ms": 5})]
    for headers in (None, bearer("not-a-token-at-all-0000"), {"Authorization": f"Basic {TOKEN_A}"},
                    {"Authorization": "Bearer"}):
        for method, path, body in calls:
            status, h, problem = hw.request(method, path, json_body=body, headers=headers)
            assert status == 401, (method, path, headers, status, problem)
            assert h.get("WWW-Authenticate", "").startswith("Bearer"), h
            assert problem["status"] == 401, problem
    for probe in ("/healthz", "/readyz"):
        status, _, _ = hw.request("GET", probe)
        assert status == 200, probe
    assert '"auth":"tokens","tokens":3' in hw.log_tail(400)


def test_a_namespace_never_sees_another_namespaces_timers(tmp_path, redis, receiver, hookwheel_factory):
    hw = start(tmp_path, redis, hookwheel_factory)
    spec = {"id": "shared-id", "url": receiver.url("/ns"), "delay_ms": 60000}
    status, headers, a = hw.create(spec, headers=bearer(TOKEN_A))
    assert status == 201 and a["id"] == "shared-id", a
    assert headers["Location"] == "/timers/shared-id"
    # the same id in another namespace is another timer (ids are unique per namespace)
    status, _, b = hw.create(dict(spec, delay_ms=300), headers=bearer(TOKEN_B))
    assert status == 201 and b["id"] == "shared-id", b
    status, _, only_b = hw.create({"id": "only-b", "url": receiver.url("/ns-b"), "delay_ms": 60000},
                                  headers=bearer(TOKEN_B2))  # B's second token: same namespace
    assert status == 201, only_b
    for method, path, body in [("GET", "/timers/only-b", None), ("DELETE", "/timers/only-b", None),
                               ("POST", "/timers/only-b/reschedule", {"delay_ms": 5}),
                               ("POST", "/timers/only-b/fire", None), ("POST", "/timers/only-b/pause", None),
                               ("POST", "/timers/only-b/resume", None)]:
        status, _, problem = hw.request(method, path, json_body=body, headers=bearer(TOKEN_A))
        assert status == 404, (method, path, status, problem)
    status, _, got = hw.request("GET", "/timers/only-b", headers=bearer(TOKEN_B))
    assert status == 200 and got["state"] == "scheduled", got  # untouched by A's attempts
    # listings are per namespace too
    status, _, listing = hw.request("GET", "/timers?state=scheduled", headers=bearer(TOKEN_A))
    assert status == 200 and [t["id"] for t in listing["items"]] == ["shared-id"], listing
    status, _, listing = hw.request("GET", "/timers?state=scheduled", headers=bearer(TOKEN_B))
    got_ids = {t["id"] for t in listing["items"]}  # B's shared-id may have fired by now
    assert "only-b" in got_ids and got_ids <= {"only-b", "shared-id"}, listing
    status, _, listing = hw.request("GET", "/timers?state=scheduled")
    assert status == 401, listing
    # B's shared-id fires; A's does not; the receiver sees the id its owner chose
    (req,) = receiver.wait_for(1, path="/ns", timeout=scaled(5))
    assert req.headers["Hookwheel-Timer-Id"] == "shared-id"
    assert req.headers["webhook-id"] == "shared-id"
    status, _, got_a = hw.request("GET", "/timers/shared-id", headers=bearer(TOKEN_A))
    assert status == 200 and got_a["state"] == "scheduled" and got_a["fire_at_ms"] == a["fire_at_ms"], got_a
    got_b = None
    for _ in range(100):
        status, _, got_b = hw.request("GET", "/timers/shared-id", headers=bearer(TOKEN_B2))
        if got_b.get("state") == "delivered":
            break
    assert got_b["state"] == "delivered", got_b
    status, _, cancelled = hw.request("DELETE", "/timers/shared-id", headers=bearer(TOKEN_A))
    assert status == 200 and cancelled["state"] == "cancelled", cancelled
    assert hw.stop() == 0
    log = hw.log.read_text(errors="replace")
    for secret in (TOKEN_A, TOKEN_B, TOKEN_B2):
        assert secret not in log, "a token was logged"


def test_a_bad_tokens_file_stops_the_start_with_its_line(tmp_path, redis, hookwheel_factory):
    import subprocess
    from conftest import HOOKWHEEL_BIN
    tokens = tmp_path / "bad-tokens"
    tokens.write_text(f"team-a {TOKEN_A}\nteam/b short\n")
    proc = subprocess.run([HOOKWHEEL_BIN, "--redis-url", redis.url, "--listen", "127.0.0.1:0",
                           "--api-tokens-file", str(tokens)],
                          capture_output=True, text=True, timeout=scaled(20))
    assert proc.returncode == 2, proc
    assert "line 2" in proc.stderr and "namespace" in proc.stderr, proc.stderr
    assert TOKEN_A not in proc.stderr + proc.stdout


def test_a_token_given_to_two_namespaces_stops_the_start(tmp_path, redis):
    # the first namespace's line would win, and the second's holder would act in the first's
    import subprocess
    from conftest import HOOKWHEEL_BIN
    tokens = tmp_path / "shared-tokens"
    tokens.write_text(f"team-a {TOKEN_A}\n"
                      f"team-b {TOKEN_B}\n"
                      f"team-b sha256:{hashlib.sha256(TOKEN_A.encode()).hexdigest()}\n")
    proc = subprocess.run([HOOKWHEEL_BIN, "--redis-url", redis.url, "--listen", "127.0.0.1:0",
                           "--api-tokens-file", str(tokens)],
                          capture_output=True, text=True, timeout=scaled(20))
    assert proc.returncode == 2, proc
    assert "line 3" in proc.stderr and "another namespace" in proc.stderr, proc.stderr
    assert TOKEN_A not in proc.stderr + proc.stdout


def test_a_listing_that_steps_over_another_namespaces_held_timers_names_none_of_them(
        tmp_path, redis, receiver, hookwheel_factory):
    # All timers due within the window are held (in the instance's claimed set,
    # which every namespace shares); one partition puts them all in one set, and
    # limit=1 lets a page examine at most 10 entries, so pages stop among B's.
    tokens = tmp_path / "tokens"
    tokens.write_text(f"team-a {TOKEN_A}\nteam-b {TOKEN_B}\n")
    hw = hookwheel_factory(redis, args=["--window-ms", "600000", "--partitions", "1"],
                           env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    at = int(now_ms()) + 300000
    spec = {"url": receiver.url("/b")}
    b_timers = ([dict(spec, id=f"b-same-{i:02d}", fire_at_ms=at) for i in range(30)] +
                [dict(spec, id=f"b-apart-{i:02d}", fire_at_ms=at + 1000 + i) for i in range(30)])
    status, _, batch = hw.request("POST", "/timers/batch", json_body={"timers": b_timers}, headers=bearer(TOKEN_B))
    assert status == 200 and batch["created"] == 60, batch
    a_timers = [("a-1", at), ("zz", at), ("mid", at + 1015), ("later", at + 100000)]
    for tid, fire in a_timers:
        status, _, t = hw.create({"id": tid, "url": receiver.url("/a"), "fire_at_ms": fire}, headers=bearer(TOKEN_A))
        assert status == 201, t

    claimed = "hw:{0}:cl:" + owner_tag(hw.instance_id)
    wait_until(lambda: redis.cmd("ZCARD", claimed) == 64, scaled(10))
    seen, cursors, cursor = [], [], None
    for _ in range(40):  # 13 pages suffice: one per A timer, one per 10 of B's held ones
        path = "/timers?state=scheduled&limit=1" + (f"&cursor={quote(cursor)}" if cursor else "")
        status, _, page = hw.request("GET", path, headers=bearer(TOKEN_A))
        assert status == 200, page
        seen += [t["id"] for t in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        cursors.append(cursor)
    # every A timer once, in order, and the listing ends (it once went round
    # among B's 30 timers of one due time for ever)
    assert seen == [tid for tid, _ in a_timers], (seen, cursors)
    assert not [c for c in cursors if "b-" in c or str(at + 1000) in c], cursors


def test_an_open_listing_steps_over_a_namespaces_held_timers_to_its_own(tmp_path, redis, receiver,
                                                                        hookwheel_factory):
    # The way README gives to reach timers made while the API was open: start
    # without the tokens file. The namespaces' timers are then held beside the
    # open ones, whose ids may sort anywhere among theirs.
    tokens = tmp_path / "tokens"
    tokens.write_text(f"team-a {TOKEN_A}\n")
    args = ["--window-ms", "600000", "--partitions", "1"]
    hw = hookwheel_factory(redis, args=args, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    at = int(now_ms()) + 300000
    team_a = [{"id": f"b-{i:02d}", "url": receiver.url("/a"), "fire_at_ms": at} for i in range(30)]
    status, _, batch = hw.request("POST", "/timers/batch", json_body={"timers": team_a}, headers=bearer(TOKEN_A))
    assert status == 200 and batch["created"] == 30, batch
    assert hw.stop() == 0
    hw = hookwheel_factory(redis, args=args)
    own = [("a0", at), ("u1", at), ("later", at + 5000)]
    for tid, fire in own:
        status, _, t = hw.create({"id": tid, "url": receiver.url("/open"), "fire_at_ms": fire})
        assert status == 201, t
    claimed = "hw:{0}:cl:" + owner_tag(hw.instance_id)
    wait_until(lambda: redis.cmd("ZCARD", claimed) == 33, scaled(10))
    seen, cursors, cursor = [], [], None
    for _ in range(40):
        path = "/timers?state=scheduled&limit=1" + (f"&cursor={quote(cursor)}" if cursor else "")
        status, _, page = hw.request("GET", path)
        assert status == 200, page
        seen += [t["id"] for t in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        cursors.append(cursor)
    # it once went round on "<at>~b-09" for ever, never reaching u1 and later
    assert seen == [tid for tid, _ in own], (seen, cursors)
    assert not [c for c in cursors if "b-" in c], cursors


def test_sighup_reads_the_tokens_file_again(tmp_path, redis, receiver, hookwheel_factory):
    """Rotating a token needs no restart: SIGHUP reads the file again, and a
    file that no longer reads keeps the tokens in use."""
    hw = start(tmp_path, redis, hookwheel_factory)
    status, _, body = hw.create({"id": "kept-a", "url": receiver.url("/kept"), "delay_ms": 600000},
                                headers=bearer(TOKEN_A))
    assert status == 201, body
    new_a = "team-a-rotated-token-9d0c44e1"
    (tmp_path / "tokens").write_text(f"team-a {new_a}\nteam-b {TOKEN_B}\n")
    hw.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: hw.request("GET", "/timers/kept-a", headers=bearer(new_a))[0] == 200, scaled(10)), \
        hw.log_tail(20)
    assert hw.request("GET", "/timers/kept-a", headers=bearer(TOKEN_A))[0] == 401  # dropped from the file
    assert hw.request("GET", "/timers/kept-a", headers=bearer(TOKEN_B))[0] == 404  # another namespace, as before
    assert hw.request("GET", "/timers/kept-a", headers=bearer(TOKEN_B2))[0] == 401
    assert wait_until(lambda: '"msg":"SIGHUP: the tokens file was read again"' in hw.log_tail(50), scaled(5))
    assert '"tokens":2' in hw.log_tail(50)

    (tmp_path / "tokens").write_text(f"team-a {new_a}\nteam/b short\n")
    hw.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "the tokens in use stay" in hw.log_tail(50), scaled(10)), hw.log_tail(20)
    assert "line 2" in hw.log_tail(50)
    assert hw.alive()
    assert hw.request("GET", "/timers/kept-a", headers=bearer(new_a))[0] == 200
    assert hw.request("GET", "/timers/x", headers=bearer(TOKEN_B))[0] == 404  # team-b's token still holds
    log = hw.log_tail(400)
    assert new_a not in log and TOKEN_B not in log


def test_sighup_without_a_tokens_file_changes_nothing(hookwheel, receiver):
    """A SIGHUP (a closed terminal, an operator's reload) used to end the
    process at once, without handing its claims back."""
    assert hookwheel.create({"id": "after-hup", "url": receiver.url("/hup"), "delay_ms": 1500})[0] == 201
    hookwheel.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "SIGHUP: no file to read again" in hookwheel.log_tail(20), scaled(5)), \
        hookwheel.log_tail(20)
    assert hookwheel.alive()
    got = receiver.wait_for(1, timeout=scaled(10), path="/hup")
    assert [r.timer_id for r in got] == ["after-hup"]
    assert hookwheel.request("GET", "/readyz")[0] == 200
