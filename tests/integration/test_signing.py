"""Standard Webhooks signatures: every delivery carries webhook-signature,
verifiable with the configured secret (two during a rotation), and the
secrets never show in logs or answers."""

import base64
import hashlib
import hmac
import json
import signal
from collections import Counter

from conftest import scaled, wait_until

OLD = "whsec_" + base64.b64encode(b"old-secret-key-0123456789").decode()
NEW = "whsec_" + base64.b64encode(b"new-secret-key-9876543210").decode()


def verify(secret, headers, body):
    """A receiver's check: one of the v1 signatures matches. True/False."""
    key = base64.b64decode(secret[len("whsec_"):])
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    sigs = [s.split(",", 1)[1] for s in headers["webhook-signature"].split(" ") if s.startswith("v1,")]
    return any(hmac.compare_digest(expected, s) for s in sigs)


def test_deliveries_verify_with_either_secret_during_a_rotation_and_tampering_fails(
        redis, receiver, hookwheel_factory):
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_SIGNING_SECRET": f"{OLD},{NEW}"})
    bodies = {"sig-body": {"body": "héllo\nworld"}, "sig-json": {"json": {"a": [1, 2]}},
              "sig-empty": {"method": "DELETE"}}
    for tid, extra in bodies.items():
        status, _, body = hw.create({"id": tid, "url": receiver.url("/sig"), "delay_ms": 100, **extra})
        assert status == 201, body
    reqs = receiver.wait_for(3, timeout=scaled(10), path="/sig")
    assert len(reqs) == 3
    for r in reqs:
        assert len(r.headers["webhook-signature"].split(" ")) == 2, r.headers["webhook-signature"]
        assert verify(OLD, r.headers, r.body), r
        assert verify(NEW, r.headers, r.body), r
        assert not verify(OLD, r.headers, r.body + b"x")
        assert not verify("whsec_" + base64.b64encode(b"some-other-key-000000").decode(), r.headers, r.body)
    status, _, timer = hw.get("sig-body")
    assert status == 200
    assert OLD[6:] not in str(timer) and NEW[6:] not in str(timer)
    assert hw.stop() == 0
    log = hw.log.read_text(errors="replace")
    for secret in (OLD, NEW, OLD[6:], NEW[6:]):
        assert secret not in log


def test_a_head_timer_with_a_body_is_signed_over_the_empty_body_it_sends(redis, receiver, hookwheel_factory):
    """A HEAD request carries no body, so the signature covers none: signed
    over the timer's body, no receiver could verify it."""
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_SIGNING_SECRET": OLD})
    for tid, extra in {"head-body": {"body": "abc"}, "head-json": {"json": {"a": 1}}}.items():
        status, _, body = hw.create({"id": tid, "url": receiver.url("/head"), "delay_ms": 50, "method": "HEAD",
                                     **extra})
        assert status == 201, body
    reqs = receiver.wait_for(2, timeout=scaled(10), path="/head")
    assert len(reqs) == 2, reqs
    for r in reqs:
        assert r.method == "HEAD" and r.body == b"", r
        assert verify(OLD, r.headers, b""), r


def test_without_a_secret_requests_are_unsigned(hookwheel, receiver):
    status, _, body = hookwheel.create({"id": "unsigned", "url": receiver.url("/u"), "delay_ms": 50})
    assert status == 201, body
    (r,) = receiver.wait_for(1, timeout=scaled(5), path="/u")
    assert "webhook-signature" not in r.headers


def test_a_namespace_with_a_secret_of_its_own_signs_with_it(tmp_path, redis, receiver, hookwheel_factory):
    own = "whsec_" + base64.b64encode(b"team-a-own-secret-key-000").decode()
    tokens = tmp_path / "tokens"
    tokens.write_text("team-a token-of-team-a-000000\nteam-b token-of-team-b-000000\n")
    secrets = tmp_path / "namespace-secrets"
    secrets.write_text(f"# namespace secrets\nteam-a {own}\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens),
                                       "HOOKWHEEL_NAMESPACE_SECRETS_FILE": str(secrets),
                                       "HOOKWHEEL_SIGNING_SECRET": OLD})
    for team in ("a", "b"):
        status, _, body = hw.create({"id": f"ns-{team}", "url": receiver.url(f"/ns-{team}"), "delay_ms": 50},
                                    headers={"Authorization": f"Bearer token-of-team-{team}-000000"})
        assert status == 201, body
    (a,) = receiver.wait_for(1, timeout=scaled(5), path="/ns-a")
    (b,) = receiver.wait_for(1, timeout=scaled(5), path="/ns-b")
    assert verify(own, a.headers, a.body) and not verify(OLD, a.headers, a.body)
    assert verify(OLD, b.headers, b.body) and not verify(own, b.headers, b.body)
    assert hw.stop() == 0
    log = hw.log.read_text(errors="replace")
    assert own not in log and own[6:] not in log


def test_a_namespace_secrets_line_with_a_second_field_stops_the_start(tmp_path, redis):
    # "whsec_old, whsec_new": the new secret after the space was dropped unseen,
    # and receivers verifying with it refused every request of the namespace
    import subprocess
    from conftest import HOOKWHEEL_BIN
    own = "whsec_" + base64.b64encode(b"team-a-own-secret-key-000").decode()
    tokens = tmp_path / "tokens"
    tokens.write_text("team-a token-of-team-a-000000\n")
    secrets = tmp_path / "namespace-secrets"
    secrets.write_text(f"team-b {OLD}  # a comment may follow\nteam-a {own}, {NEW}\n")
    proc = subprocess.run([HOOKWHEEL_BIN, "--redis-url", redis.url, "--listen", "127.0.0.1:0",
                           "--api-tokens-file", str(tokens), "--namespace-secrets-file", str(secrets)],
                          capture_output=True, text=True, timeout=scaled(20))
    assert proc.returncode == 2, proc
    assert "line 2: expected" in proc.stderr, proc.stderr
    for secret in (own, NEW, own[6:], NEW[6:]):
        assert secret not in proc.stderr + proc.stdout


def test_a_namespace_secrets_line_that_can_sign_nothing_is_refused_or_warned_about(tmp_path, redis,
                                                                                    hookwheel_factory):
    # a misspelt namespace's line signed nothing, and the namespace meant went
    # on with HOOKWHEEL_SIGNING_SECRET, without a word
    import subprocess
    from conftest import HOOKWHEEL_BIN
    own = "whsec_" + base64.b64encode(b"team-a-own-secret-key-000").decode()
    tokens = tmp_path / "tokens"
    tokens.write_text("team-a token-of-team-a-000000\nteam-b token-of-team-b-000000\n")
    secrets = tmp_path / "namespace-secrets"
    secrets.write_text(f"team-b {NEW}\ntaem-a {own}\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens),
                                       "HOOKWHEEL_NAMESPACE_SECRETS_FILE": str(secrets),
                                       "HOOKWHEEL_SIGNING_SECRET": OLD})
    assert hw.stop() == 0  # the warning is written right after the start-up line
    warnings = [json.loads(line) for line in hw.log.read_text(errors="replace").splitlines()
                if "no API token belongs to" in line]
    assert [(w["level"], w["namespace"]) for w in warnings] == [("warn", "taem-a")], warnings
    # a name no namespace can have stops the start
    secrets.write_text(f"team/a {own}\n")
    proc = subprocess.run([HOOKWHEEL_BIN, "--redis-url", redis.url, "--listen", "127.0.0.1:0",
                           "--api-tokens-file", str(tokens), "--namespace-secrets-file", str(secrets)],
                          capture_output=True, text=True, timeout=scaled(20))
    assert proc.returncode == 2, proc
    assert "line 1: namespace must match" in proc.stderr, proc.stderr
    assert own not in proc.stderr and own[6:] not in proc.stderr


def test_sighup_reads_the_namespace_secrets_file_again(tmp_path, redis, receiver, hookwheel_factory):
    """Rotating a namespace's secret needs no restart: SIGHUP reads the file
    again (two secrets during the rotation, then the new one alone), and a
    file that no longer reads keeps the secrets in use."""
    first = "whsec_" + base64.b64encode(b"team-a-first-secret-key-0").decode()
    second = "whsec_" + base64.b64encode(b"team-a-second-secret-key0").decode()
    tokens = tmp_path / "tokens"
    tokens.write_text("team-a token-of-team-a-000000\n")
    secrets = tmp_path / "namespace-secrets"
    secrets.write_text(f"team-a {first}\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens),
                                       "HOOKWHEEL_NAMESPACE_SECRETS_FILE": str(secrets)})
    auth = {"Authorization": "Bearer token-of-team-a-000000"}

    def delivered(tid):
        assert hw.create({"id": tid, "url": receiver.url(f"/{tid}"), "delay_ms": 0}, headers=auth)[0] == 201
        (got,) = receiver.wait_for(1, timeout=scaled(5), path=f"/{tid}")
        return got

    def sighup_then(text):
        hw.proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: hw.log.read_text(errors="replace").count(text) == sighup_then.seen[text] + 1,
                          scaled(10)), hw.log_tail(20)
        sighup_then.seen[text] += 1
    sighup_then.seen = Counter()

    r = delivered("before")
    assert verify(first, r.headers, r.body) and not verify(second, r.headers, r.body)
    secrets.write_text(f"team-a {first},{second}\n")
    sighup_then("the namespace secrets file was read again")
    r = delivered("during")
    assert verify(first, r.headers, r.body) and verify(second, r.headers, r.body)
    secrets.write_text(f"team-a {second}\n")
    sighup_then("the namespace secrets file was read again")
    r = delivered("after")
    assert verify(second, r.headers, r.body) and not verify(first, r.headers, r.body)
    secrets.write_text(f"team-a {second}, {first}\n")  # a second field: does not read
    sighup_then("the secrets in use stay")
    assert "line 1" in hw.log_tail(20)
    r = delivered("kept")
    assert verify(second, r.headers, r.body) and not verify(first, r.headers, r.body)
    assert hw.alive()
    log = hw.log.read_text(errors="replace")
    for secret in (first, second, first[6:], second[6:]):
        assert secret not in log
