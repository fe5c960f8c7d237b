"""Redis over TLS (rediss://), as managed Redis services offer it: a real
redis-server with a TLS port only (--port 0), certificates made here with the
openssl command, the real binary and a real receiver. Every process started
here is stopped by pid."""
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from cluster import RedisCluster
from conftest import (CLUSTER_MODE, SLOW, HOOKWHEEL_BIN, REDIS_SERVER, Hookwheel, RespClient, free_port,
                      sanitizer_report, scaled, stop_process, tail, wait_until)

pytestmark = pytest.mark.skipif(CLUSTER_MODE, reason="starts its own Redis")


# --------------------------------------------------------------------------
# certificates


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _make_ca(d, name):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN={name}", "-days", "2",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def _make_leaf(d, name, ca, san):
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    (d / f"{name}.ext").write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1 and localhost, a client
    certificate, a server certificate for another host name only, and a
    server certificate of another CA."""
    d = tmp_path_factory.mktemp("pki")
    _make_ca(d, "ca")
    _make_ca(d, "rogue-ca")
    _make_leaf(d, "server", "ca", "IP:127.0.0.1,DNS:localhost")
    _make_leaf(d, "client", "ca", None)
    _make_leaf(d, "elsewhere", "ca", "DNS:elsewhere.example")
    _make_leaf(d, "rogue", "rogue-ca", "IP:127.0.0.1,DNS:localhost")
    return SimpleNamespace(dir=d, **{n.replace("-", "_").replace(".", "_"): str(d / n) for n in (
        "ca.crt", "rogue-ca.crt", "server.crt", "server.key", "client.crt", "client.key",
        "elsewhere.crt", "elsewhere.key", "rogue.crt", "rogue.key")})


# --------------------------------------------------------------------------
# a redis-server with a TLS port only


class TlsRedis:
    """redis-server on 127.0.0.1 with only a TLS port (AOF on, data in dir);
    cert names the server certificate's files (pki attribute prefix). With
    sentinel_of=(name, port): a Redis Sentinel monitoring that master over
    TLS instead."""

    def __init__(self, directory, pki, cert="server", auth_clients=False, sentinel_of=None):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pki = pki
        self.cert = cert
        self.auth_clients = auth_clients
        self.sentinel_of = sentinel_of
        self.port = None
        self.proc = None
        self.log = self.dir / "redis.log"

    def args(self):
        p = self.pki
        tls = ["--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1",
               "--tls-cert-file", getattr(p, f"{self.cert}_crt"), "--tls-key-file", getattr(p, f"{self.cert}_key"),
               "--tls-ca-cert-file", p.ca_crt, "--tls-auth-clients", "yes" if self.auth_clients else "no"]
        if self.sentinel_of:
            conf = self.dir / "sentinel.conf"
            if not conf.exists():  # the sentinel rewrites it
                name, port = self.sentinel_of
                conf.write_text(f"dir {self.dir}\nsentinel monitor {name} 127.0.0.1 {port} 1\n")
            return [REDIS_SERVER, str(conf), "--sentinel", *tls, "--tls-replication", "yes"]
        return [REDIS_SERVER, *tls, "--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", "everysec",
                "--save", "", "--daemonize", "no", "--enable-debug-command", "local"]

    def start(self, port=None, timeout=10.0):
        self.port = port or free_port()
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(self.args(), stdout=logf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=str(self.dir))
        if not wait_until(lambda: self.proc.poll() is not None or self.ping(), timeout) or not self.alive():
            self.stop()
            raise RuntimeError(f"TLS redis-server did not come up:\n{tail(self.log, 20)}")
        return self

    def connect(self, timeout=1.0):
        """A TLS socket to it, with the client certificate."""
        p = self.pki
        ctx = ssl.create_default_context(cafile=p.rogue_ca_crt if self.cert == "rogue" else p.ca_crt)
        ctx.check_hostname = False
        ctx.load_cert_chain(p.client_crt, p.client_key)
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            return ctx.wrap_socket(raw)
        except OSError:
            raw.close()
            raise

    def ping(self):
        try:
            with self.connect() as s:
                s.sendall(RespClient.encode(["PING"]))
                return s.recv(64) == b"+PONG\r\n"
        except OSError:
            return False

    def call(self, *args):
        """One command over a fresh TLS connection: the first line of its
        reply (enough for +OK)."""
        with self.connect() as s:
            s.sendall(RespClient.encode(list(args)))
            return s.recv(4096).split(b"\r\n")[0].decode()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM by pid: Redis writes its AOF out and exits."""
        if self.proc is not None:
            stop_process(self.proc, signal.SIGTERM, timeout=10.0)


@pytest.fixture
def tls_redis(tmp_path, pki):
    """start(**TlsRedis options) -> a started TlsRedis; all stopped at the end."""
    started = []

    def start(**kw):
        r = TlsRedis(tmp_path / f"redis{len(started)}", pki, **kw)
        started.append(r)
        return r.start()

    try:
        yield start
    finally:
        for r in started:
            r.stop()


@pytest.fixture
def tls_cluster(tmp_path, pki):
    """Three masters with TLS ports and TLS cluster links."""
    c = RedisCluster(tmp_path / "cluster", masters=3, replicas=0,
                     tls={"cert": pki.server_crt, "key": pki.server_key, "ca": pki.ca_crt})
    try:
        yield c.start()
    finally:
        c.stop()


def ca_args(pki):
    return ["--redis-tls-ca-file", pki.ca_crt]


def client_args(pki):
    return ["--redis-tls-cert-file", pki.client_crt, "--redis-tls-key-file", pki.client_key]


def _status(hw, path):
    try:
        return hw.request("GET", path)[0]
    except OSError:
        return None


def assert_unready_saying(tmp_path, url, args, *why):
    """A hookwheel that cannot complete its TLS connection stays alive and
    unready, refuses creates with 503, and its log says why."""
    hw = Hookwheel(tmp_path, url, args=args, name=f"unready-{free_port()}")
    hw.port = free_port()
    hw._spawn()  # not start(): it would wait for a readiness that must not come
    try:
        assert wait_until(lambda: all(w in hw.log_tail(400) for w in why), scaled(10)), hw.log_tail(40)
        assert wait_until(lambda: _status(hw, "/readyz") == 503, scaled(5))
        status, _, _ = hw.create({"id": "nope", "url": "http://127.0.0.1:9/x", "delay_ms": 100})
        assert status == 503
        time.sleep(0.5)  # it keeps retrying without dying
        assert hw.alive(), "a TLS failure is waited out like an unreachable Redis, not fatal"
    finally:
        assert hw.stop() == 0, hw.log_tail(25)
        assert not sanitizer_report(hw.log), sanitizer_report(hw.log)


# --------------------------------------------------------------------------
# tests


def test_a_rediss_url_with_the_ca_file_creates_and_delivers(tls_redis, pki, hookwheel_factory, receiver):
    r = tls_redis()
    hw = hookwheel_factory(f"rediss://localhost:{r.port}", args=ca_args(pki))  # SNI and a DNS name
    status, _, body = hw.create({"id": "tls-1", "url": receiver.url("/tls"), "delay_ms": 200})
    assert status == 201, body
    assert receiver.wait_for(1, scaled(10), path="/tls")
    assert hw.wait_state("tls-1", ("delivered",), scaled(5))["state"] == "delivered"


def test_an_acl_user_and_a_database_from_a_rediss_url_are_used_over_tls(
        tls_redis, pki, hookwheel_factory, receiver):
    r = tls_redis()
    assert r.call("ACL", "SETUSER", "hookwheel", "on", ">s3cret", "~*", "&*", "+@all") == "+OK"
    assert r.call("ACL", "SETUSER", "default", "off") == "+OK"  # the handshake's PING now gets NOAUTH
    hw = hookwheel_factory(f"rediss://hookwheel:s3cret@127.0.0.1:{r.port}/3", args=ca_args(pki))
    status, _, body = hw.create({"id": "acl-tls-1", "url": receiver.url("/acl"), "delay_ms": 200})
    assert status == 201, body
    assert receiver.wait_for(1, scaled(10), path="/acl")  # AUTH and SELECT 3 went over TLS


def test_mutual_tls_works_with_the_client_certificate_and_without_it_stays_unready_saying_why(
        tls_redis, pki, hookwheel_factory, receiver, tmp_path):
    r = tls_redis(auth_clients=True)
    url = f"rediss://127.0.0.1:{r.port}"
    hw = hookwheel_factory(url, args=ca_args(pki) + client_args(pki))
    status, _, body = hw.create({"id": "mtls-1", "url": receiver.url("/mtls"), "delay_ms": 200})
    assert status == 201, body
    assert receiver.wait_for(1, scaled(10), path="/mtls")
    assert hw.wait_state("mtls-1", ("delivered",), scaled(5))["state"] == "delivered"
    assert_unready_saying(tmp_path, url, ca_args(pki), "Redis TLS handshake failed",
                          "the server asks for a client certificate (mutual TLS) and none is set")


def test_a_server_certificate_of_another_ca_keeps_the_instance_unready_and_says_why(tls_redis, pki, tmp_path):
    r = tls_redis(cert="rogue")
    assert_unready_saying(tmp_path, f"rediss://127.0.0.1:{r.port}", ca_args(pki), "Redis TLS handshake failed",
                          f"127.0.0.1:{r.port}", "certificate verify failed: unable to get local issuer certificate")


def test_a_certificate_for_another_host_is_refused_unless_the_host_check_is_off(
        tls_redis, pki, hookwheel_factory, receiver, tmp_path):
    r = tls_redis(cert="elsewhere")
    url = f"rediss://127.0.0.1:{r.port}"
    assert_unready_saying(tmp_path, url, ca_args(pki), "certificate verify failed: IP address mismatch")
    hw = hookwheel_factory(url, args=ca_args(pki) + ["--redis-tls-verify-host", "0"])
    status, _, body = hw.create({"id": "nohost-1", "url": receiver.url("/nohost"), "delay_ms": 100})
    assert status == 201, body
    assert receiver.wait_for(1, scaled(10), path="/nohost")


def _start_up_error(args, url="rediss://127.0.0.1:1"):
    r = subprocess.run([HOOKWHEEL_BIN, "--listen", f"127.0.0.1:{free_port()}", "--redis-url", url, *args],
                       capture_output=True, text=True, timeout=30)
    return r.returncode, [line for line in r.stderr.splitlines() if line.startswith("hookwheel: ")]


def test_bad_tls_settings_stop_start_up_with_exit_2_and_one_line_naming_the_setting(pki, tmp_path):
    code, lines = _start_up_error(["--redis-tls-cert-file", pki.client_crt])
    assert code == 2 and len(lines) == 1 and "HOOKWHEEL_REDIS_TLS_CERT_FILE" in lines[0], lines
    assert "HOOKWHEEL_REDIS_TLS_KEY_FILE" in lines[0]  # what is missing
    code, lines = _start_up_error(["--redis-tls-key-file", pki.client_key])
    assert code == 2 and len(lines) == 1 and "invalid HOOKWHEEL_REDIS_TLS_KEY_FILE" in lines[0], lines
    missing = str(tmp_path / "no-such-ca.pem")
    code, lines = _start_up_error(["--redis-tls-ca-file", missing])
    assert code == 2 and len(lines) == 1 and "HOOKWHEEL_REDIS_TLS_CA_FILE" in lines[0] and missing in lines[0], lines
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    code, lines = _start_up_error(["--redis-tls-ca-file", str(garbage)])
    assert code == 2 and len(lines) == 1 and "HOOKWHEEL_REDIS_TLS_CA_FILE" in lines[0], lines
    # a key that is not the certificate's
    code, lines = _start_up_error(ca_args(pki) + ["--redis-tls-cert-file", pki.client_crt,
                                                  "--redis-tls-key-file", pki.server_key])
    assert code == 2 and len(lines) == 1 and "HOOKWHEEL_REDIS_TLS_KEY_FILE" in lines[0], lines


def test_a_restarted_tls_redis_is_reconnected_and_delivery_goes_on(tls_redis, pki, hookwheel_factory, receiver):
    r = tls_redis()
    hw = hookwheel_factory(f"rediss://127.0.0.1:{r.port}", args=ca_args(pki))
    status, _, body = hw.create({"id": "before", "url": receiver.url("/restart"), "delay_ms": 4000})
    assert status == 201, body
    r.stop()
    assert wait_until(lambda: _status(hw, "/readyz") == 503, scaled(10)), hw.log_tail(20)
    r.start(port=r.port)  # the same port and data dir: the AOF brings the timer back
    assert wait_until(lambda: _status(hw, "/readyz") == 200, scaled(15)), hw.log_tail(20)
    status, _, body = hw.create({"id": "after", "url": receiver.url("/restart"), "delay_ms": 100})
    assert status == 201, body
    assert receiver.wait_for(2, scaled(15), path="/restart")
    assert {q.timer_id for q in receiver.requests("/restart")} == {"before", "after"}
    assert hw.wait_state("before", ("delivered",), scaled(5))["state"] == "delivered"
    assert "Redis connection lost" in hw.log_tail(400) or "Redis unreachable" in hw.log_tail(400)


def test_a_reply_larger_than_one_tls_read_is_read_whole(tls_redis, pki, hookwheel_factory, receiver):
    r = tls_redis()
    hw = hookwheel_factory(f"rediss://127.0.0.1:{r.port}", args=ca_args(pki) + ["--max-body-bytes", "262144"])
    text = "".join(chr(ord("a") + i % 26) for i in range(100_000))  # 100 KB: several TLS records and reads
    status, _, body = hw.create({"id": "big", "url": receiver.url("/big"), "method": "POST", "body": text,
                                 "delay_ms": 1500})
    assert status == 201, body
    status, _, timer = hw.get("big")
    assert status == 200 and timer["body"] == text
    filler = "x" * 2000  # a listing of many timers: each partition's reply holds some 40 KB
    for k in range(300):
        spec = {"id": f"many-{k:03d}", "url": receiver.url("/many"), "method": "POST", "body": filler,
                "delay_ms": 600000}
        assert hw.create(spec)[0] == 201
    status, _, page = hw.request("GET", "/timers?state=scheduled&limit=1000")
    assert status == 200, page
    assert {t["id"] for t in page["items"]} == {f"many-{k:03d}" for k in range(300)} | {"big"}
    assert receiver.wait_for(1, scaled(10), path="/big")
    assert receiver.requests("/big")[0].body == text.encode()


def test_a_tls_read_that_times_out_drops_the_connection_and_it_is_made_again(
        tls_redis, pki, hookwheel_factory, receiver):
    r = tls_redis()
    hw = hookwheel_factory(f"rediss://127.0.0.1:{r.port}", args=ca_args(pki) + ["--redis-timeout-ms", "300"])
    with r.connect(timeout=5.0) as s:
        s.sendall(RespClient.encode(["DEBUG", "SLEEP", "1.5"]))  # Redis answers nobody meanwhile
        time.sleep(0.1)
        status, _, _ = hw.create({"id": "slow", "url": receiver.url("/slow"), "delay_ms": 100})
        assert status == 503
        assert s.recv(64) == b"+OK\r\n"
    assert "TLS: timed out" in hw.log_tail(200), hw.log_tail(20)
    assert wait_until(lambda: hw.create({"id": "fast", "url": receiver.url("/slow"), "delay_ms": 100})[0] == 201,
                      scaled(10))
    assert receiver.wait_for(1, scaled(10), path="/slow")
    assert hw.alive()


@pytest.mark.skipif(SLOW, reason="runs once, on the plain build: the TLS code is the single rediss tests' ")
def test_a_tls_sentinel_names_the_master_and_both_are_reached_over_tls(tls_redis, pki, hookwheel_factory, receiver):
    m = tls_redis()
    s = tls_redis(sentinel_of=("hwtls", m.port))
    hw = hookwheel_factory(f"rediss+sentinel://127.0.0.1:{s.port}/hwtls", args=ca_args(pki))
    status, _, body = hw.create({"id": "sentinel-1", "url": receiver.url("/sentinel"), "delay_ms": 100})
    assert status == 201, body
    assert receiver.wait_for(1, scaled(10), path="/sentinel")
    assert f"127.0.0.1:{m.port}" in hw.log_tail(200)


@pytest.mark.skipif(SLOW, reason="runs once, on the plain build: the TLS code is the single rediss tests' ")
def test_a_tls_cluster_serves_every_master_and_delivers(tls_cluster, pki, hookwheel_factory, receiver):
    hw = hookwheel_factory(tls_cluster.tls_url, args=ca_args(pki) + ["--partitions", "64"])
    ids = [f"cl-{i:03d}" for i in range(60)]
    for tid in ids:
        status, _, body = hw.create({"id": tid, "url": receiver.url("/cluster"), "delay_ms": 500})
        assert status == 201, body
    assert receiver.wait_for(len(ids), scaled(15), path="/cluster")
    assert {q.timer_id for q in receiver.requests("/cluster")} == set(ids)
    assert all(m.keys("hw:*") for m in tls_cluster.masters()), "every master holds some partitions"
    assert tls_cluster.crossslot_errors() == 0
