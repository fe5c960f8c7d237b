"""The destination policy (SSRF protection): internal addresses are refused
when a timer is created (IP literals in any spelling, localhost) and, for
host names, when the attempt connects, so a name that resolves to a
forbidden address fails the timer at once and the target sees nothing."""

import os
import socket

import pytest

from conftest import free_port, scaled

# Not 127.0.0.0/8: the receivers of these tests must be out of reach.
ONLY_TEN = {"HOOKWHEEL_DESTINATION_ALLOWLIST": "10.0.0.0/8"}

FORBIDDEN_HOSTS = [
    "127.0.0.1", "0.0.0.0", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
    "[::1]", "[fd00::1]", "[::ffff:127.0.0.1]", "2130706433", "0x7f.1", "0177.0.0.1", "127.1",
    "localhost", "LOCALHOST", "app.localhost",
]


def test_forbidden_literals_are_refused_at_creation_with_field_url(redis, hookwheel_factory):
    hw = hookwheel_factory(redis, env=ONLY_TEN)
    for host in FORBIDDEN_HOSTS:
        status, _, body = hw.create({"url": f"http://{host}:9/x", "delay_ms": 1000})
        assert status == 400, (host, body)
        assert body.get("field") == "url", (host, body)
        assert "is not allowed" in body.get("detail", ""), (host, body)
        assert "HOOKWHEEL_DESTINATION_ALLOWLIST" in body["detail"], (host, body)
    status, _, body = hw.create({"url": "http://127.0.0.1:9/x", "delay_ms": 1000})
    assert "destination 127.0.0.1 is not allowed (loopback)" in body["detail"], body
    # The allowlist opens its range: 10.1.2.3 is private but allowed here.
    status, _, body = hw.create({"url": "http://10.1.2.3:9/x", "delay_ms": 600000})
    assert status == 201, body


def test_localhost_to_a_live_receiver_is_refused_and_never_called(redis, receiver, hookwheel_factory):
    hw = hookwheel_factory(redis, env=ONLY_TEN)
    status, _, body = hw.create({"url": f"http://localhost:{receiver.port}/ssrf", "delay_ms": 0})
    assert status == 400 and body.get("field") == "url", body
    assert receiver.requests() == []


def _loopback_name():
    """A host name (not localhost) that resolves only to loopback addresses:
    this machine's own name usually does, through /etc/hosts."""
    name = socket.gethostname()
    try:
        addrs = {ai[4][0] for ai in socket.getaddrinfo(name, 80, proto=socket.IPPROTO_TCP)}
    except OSError:
        return None
    if not addrs or not all(a.startswith("127.") or a == "::1" for a in addrs):
        return None
    return name


def test_a_name_that_resolves_to_loopback_fails_at_connect_time_without_retry(
        redis, receiver, hookwheel_factory):
    name = _loopback_name()
    if name is None or name.lower() == "localhost" or name.lower().endswith(".localhost"):
        pytest.skip("this machine's host name does not resolve to loopback only")
    hw = hookwheel_factory(redis, env=ONLY_TEN)
    status, _, timer = hw.create({
        "url": f"http://{name}:{receiver.port}/rebind", "delay_ms": 0,
        "retry": {"max_attempts": 5, "min_backoff_ms": 50, "max_backoff_ms": 100}})
    assert status == 201, timer
    done = hw.wait_state(timer["id"], ("delivered", "failed"), timeout=scaled(10))
    assert done.get("state") == "failed", done
    assert done["attempts"] == 1, done
    error = done["last_attempt"]["error"]
    assert error.startswith("destination ") and error.endswith(" is not allowed (policy)"), done
    assert receiver.requests() == []


def test_a_name_with_a_forbidden_and_an_allowed_address_that_refuses_is_retried_as_a_failed_connection(
        redis, hookwheel_factory, tmp_path):
    """The name resolves (through a hosts file of this test's own) to a
    private address the policy refuses and to an allowed one where nothing
    listens. The allowed address was tried and failed as any target may, so
    the attempt is a failed connection, retried; only a name whose every
    address is refused fails at once as refused by the policy."""
    hosts = tmp_path / "hosts"
    hosts.write_text("10.1.2.3 dual.example\n127.0.0.1 dual.example\n10.1.2.3 private.example\n"
                     "10.1.2.4 private.example\n")
    env = {"HOOKWHEEL_DESTINATION_ALLOWLIST": "127.0.0.0/8", "LD_PRELOAD": "libnss_wrapper.so",
           "NSS_WRAPPER_HOSTS": str(hosts),
           # nss_wrapper loads before the sanitizers' runtime in a sanitizer build
           "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}
    hw = hookwheel_factory(redis, env=env)
    status, _, timer = hw.create({
        "url": f"http://dual.example:{free_port()}/dual", "delay_ms": 0,
        "retry": {"max_attempts": 3, "min_backoff_ms": 50, "max_backoff_ms": 100}})
    assert status == 201, timer
    done = hw.wait_state(timer["id"], ("delivered", "failed"), timeout=scaled(10))
    assert done.get("state") == "failed", done
    assert done["attempts"] == 3, done
    error = done["last_attempt"]["error"]
    assert "10.1.2.3" in error and "not allowed, not tried" in error, done
    assert not error.endswith("is not allowed (policy)"), done

    # Every address refused: refused by the policy, no retry.
    status, _, timer = hw.create({
        "url": f"http://private.example:{free_port()}/dual", "delay_ms": 0,
        "retry": {"max_attempts": 3, "min_backoff_ms": 50, "max_backoff_ms": 100}})
    assert status == 201, timer
    done = hw.wait_state(timer["id"], ("delivered", "failed"), timeout=scaled(10))
    assert done.get("state") == "failed" and done["attempts"] == 1, done
    assert done["last_attempt"]["error"].endswith("is not allowed (policy)"), done


def test_a_name_on_the_allowlist_is_called(redis, receiver, hookwheel_factory):
    name = _loopback_name()
    if name is None:
        pytest.skip("this machine's host name does not resolve to loopback only")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_DESTINATION_ALLOWLIST": f"10.0.0.0/8,{name}"})
    status, _, timer = hw.create({"url": f"http://{name}:{receiver.port}/named", "delay_ms": 0})
    assert status == 201, timer
    (r,) = receiver.wait_for(1, timeout=scaled(5), path="/named")
    assert r.method == "POST"


def test_an_invalid_allowlist_stops_start_up_with_exit_2(tmp_path):
    import subprocess

    from conftest import HOOKWHEEL_BIN
    r = subprocess.run([HOOKWHEEL_BIN, "--destination-allowlist", "10.0.0.0/33"],
                       capture_output=True, text=True, cwd=str(tmp_path), timeout=10)
    assert r.returncode == 2
    assert "invalid HOOKWHEEL_DESTINATION_ALLOWLIST" in r.stderr


def test_an_https_target_whose_certificate_does_not_verify_is_never_sent_the_request(
        redis, hookwheel_factory, tmp_path):
    """Certificates of https targets are verified against the system's CAs: a
    self-signed one (for the very address called) fails the attempt as a
    failed connection, retried, and the request is never sent."""
    import http.server
    import ssl
    import subprocess
    import threading

    key, crt = tmp_path / "key.pem", tmp_path / "crt.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(crt), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    called = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            called.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(crt), str(key))
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        hw = hookwheel_factory(redis, env={"HOOKWHEEL_DESTINATION_ALLOWLIST": "127.0.0.0/8"})
        status, _, timer = hw.create({
            "url": f"https://127.0.0.1:{server.server_address[1]}/tls", "delay_ms": 0,
            "retry": {"max_attempts": 2, "min_backoff_ms": 50, "max_backoff_ms": 100}})
        assert status == 201, timer
        done = hw.wait_state(timer["id"], ("delivered", "failed"), timeout=scaled(10))
        assert done.get("state") == "failed" and done["attempts"] == 2, done
        assert "certificate" in done["last_attempt"]["error"], done
        assert called == []
    finally:
        server.shutdown()
        server.server_close()
