"""docker/nginx.conf under test: the real nginx binary runs the very file that
docker/docker-compose.yml mounts, with only its upstream address and listen
port replaced by loopback ones (the two lines marked "test:upstream" and
"test:listen"), in front of two real hookwheel instances sharing one real
Redis. No Docker engine is needed.

nginx runs as in the image (master and worker, `daemon off`), with its pid,
temp paths and error log in the test's tmp dir; the file's access log goes to
/dev/stdout, which the test points at a file. Started and stopped by pid."""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import pytest

from conftest import free_port, owner_tag, scaled, stop_process, tail, wait_until
from contract import assert_matches_contract

ROOT = Path(__file__).resolve().parents[2]
NGINX_CONF = ROOT / "docker" / "nginx.conf"
NGINX_BIN = os.environ.get("NGINX_BIN") or shutil.which("nginx") or "/usr/sbin/nginx"
LEASE = ["--lease-ttl-ms", "1500"]
# info, the default level operators run with: what the tests find in the logs
# there is what an operator sees.
INFO = ["--log-level", "info"]

UPSTREAM_LINE = re.compile(r"^(?P<indent>\s*)server\s+\S+(?P<params>(\s+[^;#\s]+)*)\s*;\s*# test:upstream\s*$",
                           re.M)
LISTEN_LINE = re.compile(r"^(?P<indent>\s*)listen\s+[^;#]+;\s*# test:listen\s*$", re.M)


def render_conf(text, upstream_ports, listen_port):
    """docker/nginx.conf's text with the marked upstream server line repeated
    once per loopback port (its parameters kept but `resolve`) and the marked listen line
    on 127.0.0.1:listen_port. Nothing else changes."""
    assert len(UPSTREAM_LINE.findall(text)) == 1, "docker/nginx.conf: one `# test:upstream` line"
    assert len(LISTEN_LINE.findall(text)) == 1, "docker/nginx.conf: one `# test:listen` line"

    # `resolve` needs nginx 1.27.3 or later and a name: the loopback addresses
    # here are literal, and Debian's nginx is older.
    params = lambda m: re.sub(r"\s+resolve\b", "", m["params"])

    def servers(m):
        return "\n".join(f"{m['indent']}server 127.0.0.1:{p}{params(m)};" for p in upstream_ports)
    text = UPSTREAM_LINE.sub(servers, text)
    return LISTEN_LINE.sub(lambda m: f"{m['indent']}listen 127.0.0.1:{listen_port};", text)


class Nginx:
    """The real nginx with docker/nginx.conf, in its own directory."""

    def __init__(self, directory, upstream_ports):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.upstream_ports = list(upstream_ports)
        self.port = None
        self.proc = None
        self.access_log = self.dir / "access.log"
        self.error_log = self.dir / "error.log"

    def _write_conf(self):
        site = self.dir / "hookwheel.conf"
        site.write_text(render_conf(NGINX_CONF.read_text(), self.upstream_ports, self.port))
        temp = "\n".join(f"    {name}_temp_path {self.dir / name};"
                         for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        # As root the workers would become "nobody", which cannot enter the
        # test's tmp dir: keep them as the user running the test.
        user = "user root;\n" if os.geteuid() == 0 else ""
        main = self.dir / "nginx.conf"
        main.write_text(
            f"{user}worker_processes 1;\ndaemon off;\nmaster_process on;\n"
            f"pid {self.dir / 'nginx.pid'};\nerror_log {self.error_log} info;\n"
            f"events {{ worker_connections 512; }}\n"
            f"http {{\n{temp}\n    include {site};\n}}\n")
        return main

    def start(self, timeout=10.0):
        for _ in range(3):
            self.port = free_port()
            main = self._write_conf()
            with open(self.access_log, "ab") as out, open(self.dir / "stderr.log", "ab") as err:
                self.proc = subprocess.Popen(
                    [NGINX_BIN, "-p", str(self.dir), "-c", str(main), "-e", str(self.error_log)],
                    stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=str(self.dir))
            if wait_until(self._listening, timeout, interval=0.02):
                return self
            stop_process(self.proc, timeout=5)
            if "Address already in use" not in tail(self.error_log, 20):
                break
        pytest.fail(f"nginx did not start; error log:\n{tail(self.error_log)}", pytrace=False)

    def _listening(self):
        if self.proc.poll() is not None:
            return True  # exited: start() sees it below
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self):
        if self.proc is not None:
            stop_process(self.proc, signal.SIGTERM, timeout=10)

    def upstreams_used(self):
        return {addr.strip() for e in self.log_entries() for addr in e["upstream_addr"].split(",")
                if addr.strip() not in ("", "-")}

    def log_entries(self):
        """The access log, one dict per request."""
        out = []
        for line in self.access_log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line still being written
        return out


@pytest.fixture
def nginx_factory(tmp_path):
    started = []

    def start(upstream_ports):
        n = Nginx(tmp_path / f"nginx-{len(started) + 1}", upstream_ports)
        started.append(n)
        n.start()
        assert n.proc.poll() is None, f"nginx exited at start:\n{tail(n.error_log)}"
        return n

    try:
        yield start
    finally:
        for n in started:
            n.stop()


def request(port, method, path, body=None, headers=None, source="127.0.0.1", timeout=None):
    """One request on a fresh connection from the given source address:
    (status, headers, parsed JSON or bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout or scaled(10),
                                      source_address=(source, 0))
    hdrs = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    try:
        try:
            conn.request(method, path, body=body, headers=hdrs)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered (413) before the whole body was sent
        resp = conn.getresponse()
        data = resp.read()
        ctype = (resp.headers.get("Content-Type") or "").split(";")[0]
        parsed = json.loads(data) if data and ctype.endswith("json") else data
        return resp.status, resp.headers, parsed
    finally:
        conn.close()


def logged_request_ids(*hookwheels):
    ids = set()
    for hw in hookwheels:
        for line in hw.log.read_text(errors="replace").splitlines():
            if line.startswith("{") and '"request_id"' in line:
                try:
                    ids.add(json.loads(line)["request_id"])
                except ValueError:
                    pass  # a line still being written
    return ids


def stack(redis, hookwheel_factory, nginx_factory, args=()):
    a = hookwheel_factory(redis, args=[*INFO, *args])
    b = hookwheel_factory(redis, args=[*INFO, *args])
    return a, b, nginx_factory([a.port, b.port])


# --------------------------------------------------------------------------


def test_the_file_under_test_is_docker_nginx_conf_with_only_addresses_and_port_changed():
    original = NGINX_CONF.read_text().splitlines()
    rendered = render_conf(NGINX_CONF.read_text(), [1111, 2222], 3333).splitlines()
    changed_from = [line for line in original if line not in rendered]
    added = [line for line in rendered if line not in original]
    assert len(changed_from) == 2 and all("# test:" in line for line in changed_from), changed_from
    assert [re.sub(r"\s+", " ", line.strip()) for line in added] == [
        "server 127.0.0.1:1111 max_fails=1 fail_timeout=5s;",
        "server 127.0.0.1:2222 max_fails=1 fail_timeout=5s;",
        "listen 127.0.0.1:3333;"], added
    # and docker-compose.yml mounts that file
    compose = (ROOT / "docker" / "docker-compose.yml").read_text()
    assert "./nginx.conf:/etc/nginx/conf.d/default.conf:ro" in compose


def test_create_get_and_cancel_through_nginx_reach_both_instances_and_request_ids_are_logged(
        redis, receiver, hookwheel_factory, nginx_factory):
    a, b, nginx = stack(redis, hookwheel_factory, nginx_factory)
    ids = [f"via-nginx-{i}" for i in range(8)]
    for tid in ids:
        status, headers, body = request(nginx.port, "POST", "/timers",
                                        {"id": tid, "url": receiver.url("/n"), "delay_ms": 300})
        assert status == 201, body
        assert_matches_contract("POST", "/timers", status, headers, body)
        assert headers["Location"] == f"/timers/{tid}"
    keep = {"id": "via-nginx-cancel", "url": receiver.url("/never"), "delay_ms": 60000}
    assert request(nginx.port, "POST", "/timers", keep)[0] == 201
    status, headers, body = request(nginx.port, "DELETE", "/timers/via-nginx-cancel")
    assert status == 200 and body["state"] == "cancelled", body
    assert_matches_contract("DELETE", "/timers/{id}", status, headers, body)

    got = receiver.wait_for(len(ids), path="/n", timeout=scaled(10))
    assert sorted(r.timer_id for r in got) == sorted(ids), got
    for tid in ids:
        status, headers, body = request(nginx.port, "GET", f"/timers/{tid}")
        assert status == 200, body
        assert_matches_contract("GET", "/timers/{id}", status, headers, body)
    # round robin: both instances answered (nginx writes its log line just
    # after the answer, so wait for it)
    both = {f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"}
    assert wait_until(lambda: both <= nginx.upstreams_used(), timeout=5), nginx.upstreams_used()

    # The client's X-Request-Id goes to hookwheel, back to the client and into
    # both logs; hookwheel logs a failed request at info, the default level.
    rid = f"test-{uuid.uuid4()}"
    status, headers, body = request(nginx.port, "GET", "/timers/no-such-timer",
                                    headers={"X-Request-Id": rid})
    assert status == 404, body
    assert_matches_contract("GET", "/timers/{id}", status, headers, body)
    assert headers["X-Request-Id"] == rid
    assert wait_until(lambda: rid in logged_request_ids(a, b), timeout=scaled(5)), (
        f"request id {rid} not in hookwheel's logs:\n{a.log_tail(5)}\n{b.log_tail(5)}")
    assert wait_until(lambda: rid in {e["request_id"] for e in nginx.log_entries()}, timeout=5)
    # Without one (or with a malformed one) nginx makes its own.
    for given in (None, "bad id with spaces", "x" * 200):
        hdrs = {"X-Request-Id": given} if given else {}
        status, headers, _ = request(nginx.port, "GET", "/timers/no-such-timer", headers=hdrs)
        assert status == 404
        made = headers["X-Request-Id"]
        assert re.fullmatch(r"[0-9a-f]{32}", made), made
        assert wait_until(lambda: made in logged_request_ids(a, b), timeout=scaled(5)), made

    # /metrics is not on the public port, whatever the spelling
    for path in ("/metrics", "/metrics/", "/metrics?x=1", "//metrics", "/%6detrics"):
        status, headers, body = request(nginx.port, "GET", path)
        assert status == 404 and headers["Content-Type"] == "application/problem+json", (path, body)
    assert not [e for e in nginx.log_entries()
                if "metrics" in e["uri"] and e["upstream_addr"] not in ("", "-")]


def test_a_burst_of_creates_over_the_rate_gets_json_429_from_nginx_per_client_address(
        redis, hookwheel_factory, nginx_factory):
    a, b, nginx = stack(redis, hookwheel_factory, nginx_factory)
    statuses = Counter()
    limited = []
    lock = threading.Lock()
    stop = threading.Event()
    deadline = time.monotonic() + scaled(20)

    def burst():
        conn = http.client.HTTPConnection("127.0.0.1", nginx.port, timeout=scaled(10))
        try:
            for _ in range(1000):
                if stop.is_set() or time.monotonic() > deadline:
                    return
                # An invalid spec: hookwheel answers 400 at once, writing nothing.
                conn.request("POST", "/timers", body=b"{}", headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                with lock:
                    statuses[resp.status] += 1
                    if resp.status == 429:
                        limited.append((resp.status, resp.headers, json.loads(data)))
                        if len(limited) >= 50:
                            stop.set()
        finally:
            conn.close()

    workers = [threading.Thread(target=burst) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert limited, f"no 429 in {sum(statuses.values())} creates: {dict(statuses)}"
    assert set(statuses) == {400, 429}, dict(statuses)
    for status, headers, body in limited[:10]:
        assert_matches_contract("POST", "/timers", status, headers, body)
        assert headers["Retry-After"] == "1" and re.fullmatch(r"[0-9a-f]{32}", headers["X-Request-Id"])
    # nginx answered them itself
    logged = wait_until(lambda: [e for e in nginx.log_entries() if e["status"] == 429], timeout=5)
    assert logged and all(e["upstream_addr"] in ("", "-") for e in logged), logged[:3]
    # while this address is limited: reads pass, and another address may create
    status, _, body = request(nginx.port, "GET", "/timers/none")
    assert status == 404, body
    status, _, body = request(nginx.port, "POST", "/timers", {}, source="127.0.0.2")
    assert status == 400, body
    print(f"burst: {dict(statuses)}")


def test_a_body_over_64_kib_gets_413_from_nginx_and_one_at_the_limit_passes(
        redis, receiver, hookwheel_factory, nginx_factory):
    a, b, nginx = stack(redis, hookwheel_factory, nginx_factory)
    spec = json.dumps({"id": "at-limit", "url": receiver.url("/big"), "delay_ms": 60000}).encode()
    at_limit = spec[:-1] + b" " * (65536 - len(spec)) + b"}"
    assert len(at_limit) == 65536
    status, _, body = request(nginx.port, "POST", "/timers", at_limit,
                              headers={"Content-Type": "application/json"})
    assert status == 201, body

    rid = f"big-{uuid.uuid4()}"
    over = at_limit[:-1] + b" }"
    status, headers, body = request(nginx.port, "POST", "/timers", over,
                                    headers={"Content-Type": "application/json", "X-Request-Id": rid})
    assert status == 413, body
    assert_matches_contract("POST", "/timers", status, headers, body)
    assert body["detail"] == "the request body is larger than 65536 bytes", body
    assert headers["X-Request-Id"] == rid
    entry = wait_until(lambda: [e for e in nginx.log_entries() if e["request_id"] == rid], timeout=5)
    assert entry and entry[0]["upstream_addr"] in ("", "-"), entry  # never passed on
    assert rid not in logged_request_ids(a, b)


def raw_exchange(port, data, timeout=None):
    """Sends data as is on a fresh connection and reads until nginx closes
    it: (status, headers as a lower-cased dict, body bytes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout or scaled(10)) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def test_requests_nginx_refuses_itself_get_problem_documents_not_html(
        redis, hookwheel_factory, nginx_factory):
    a, b, nginx = stack(redis, hookwheel_factory, nginx_factory)
    post = b"POST /timers HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    cases = [
        ("no Host", b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n", 400, "Bad Request"),
        ("request line", b"GARBAGE\r\n\r\n", 400, "Bad Request"),
        ("percent-encoding", b"GET /timers/%zz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 400,
         "Bad Request"),
        ("header line", b"GET /healthz HTTP/1.1\r\nHost: x\r\nno colon\r\nConnection: close\r\n\r\n", 400,
         "Bad Request"),
        ("Content-Length", post + b"Content-Length: 12x\r\n\r\n", 400, "Bad Request"),
        ("chunk", post + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "Bad Request"),
        ("Content-Length and chunked", post + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         400, "Bad Request"),
        ("TRACE", b"TRACE /timers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405, "Method Not Allowed"),
        ("long target", b"GET /timers/" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 414,
         "URI Too Long"),
        ("long header", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 9000 + b"\r\nConnection: close\r\n\r\n",
         431, "Request Header Fields Too Large"),
        ("gzip body", post + b"Transfer-Encoding: gzip\r\n\r\n", 501, "Not Implemented"),
        ("HTTP/2.0 in text", b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505, "HTTP Version Not Supported"),
    ]
    for what, data, want, title in cases:
        status, headers, body = raw_exchange(nginx.port, data)
        assert status == want, (what, status, body[:200])
        assert headers.get("content-type") == "application/problem+json", (what, headers, body[:200])
        doc = json.loads(body)
        assert doc["status"] == want and doc["title"] == title and doc["type"] == "about:blank", (what, doc)
        assert doc["detail"], (what, doc)
        assert re.fullmatch(r"[0-9a-f]{32}", headers.get("x-request-id", "")), (what, headers)
    # a HEAD gets the same status and type, without a body
    status, headers, body = raw_exchange(nginx.port, b"HEAD /timers/%zz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 400 and headers["content-type"] == "application/problem+json" and body == b"", (headers, body)
    # nginx answered all of them itself; the error locations are not reachable
    assert not [e for e in nginx.log_entries() if e["upstream_addr"] not in ("", "-")], nginx.log_entries()[:3]
    status, headers, body = request(nginx.port, "GET", "/.errors/400")
    assert status == 404 and headers["Content-Type"] == "application/problem+json", body
    # and what reaches hookwheel still gets hookwheel's own answer
    status, headers, body = request(nginx.port, "PUT", "/timers", b"")
    assert status == 405 and headers["Allow"] == "POST, GET, HEAD", (headers, body)


def test_a_batch_of_a_megabyte_passes_nginx_and_one_over_4_mib_gets_413(
        redis, receiver, hookwheel_factory, nginx_factory):
    a, b, nginx = stack(redis, hookwheel_factory, nginx_factory)
    pad = "p" * 1000
    specs = [{"id": f"nb-{i}", "url": receiver.url("/nb"), "delay_ms": 60000, "body": pad} for i in range(1000)]
    raw = json.dumps({"timers": specs}).encode()
    assert len(raw) > 1 << 20
    status, _, body = request(nginx.port, "POST", "/timers/batch", raw, headers={"Content-Type": "application/json"})
    assert status == 200 and body["created"] == 1000, body if status != 200 else body["failed"]
    raw = json.dumps({"timers": specs[:1], "pad": "x" * (4 << 20)}).encode()
    status, headers, body = request(nginx.port, "POST", "/timers/batch", raw,
                                    headers={"Content-Type": "application/json"})
    assert status == 413, body
    assert_matches_contract("POST", "/timers/batch", status, headers, body)
    # the detail names the cap of this path, not the 64 KiB of the others
    assert body["detail"] == "the request body is larger than 4194304 bytes", body


def test_answers_written_as_the_client_takes_them_pass_nginx_whole(
        redis, receiver, hookwheel_factory, nginx_factory):
    # GET /timers, /queues and /stats stream their answers (chunked) from
    # the instance; nginx passes them on whole, to a client of either HTTP
    # version.
    a, b, nginx = stack(redis, hookwheel_factory, nginx_factory)
    pad = "q" * 2000
    specs = [{"id": f"st-{i:03d}", "url": receiver.url("/st"), "delay_ms": 600_000 + i, "body": pad,
              "queue": f"q{i % 50}"} for i in range(300)]
    status, _, body = request(nginx.port, "POST", "/timers/batch", {"timers": specs})
    assert status == 200 and body["created"] == 300, body
    got, cursor = [], None
    while True:
        status, _, page = request(nginx.port, "GET", "/timers?state=scheduled&limit=1000" +
                                  (f"&cursor={quote(cursor)}" if cursor else ""))
        assert status == 200, page
        got += [t["id"] for t in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert got == [s["id"] for s in specs], got
    status, _, body = request(nginx.port, "GET", "/queues")
    assert status == 200 and sorted(q["name"] for q in body["queues"]) == sorted(f"q{i}" for i in range(50)), body
    assert all(q["timers"]["scheduled"] == 6 for q in body["queues"]), body
    status, _, body = request(nginx.port, "GET", "/stats?minutes=2")
    assert status == 200 and len(body["minutes"]) == 2, body
    status, headers, data = raw_exchange(nginx.port, b"GET /queues HTTP/1.0\r\nHost: x\r\n\r\n")
    assert status == 200 and "chunked" not in headers.get("transfer-encoding", ""), headers
    assert len(json.loads(data)["queues"]) == 50, data[:300]


def test_with_one_instance_killed_requests_through_nginx_succeed_once_and_its_timers_fire(
        redis, receiver, hookwheel_factory, nginx_factory):
    a, b, nginx = stack(redis, hookwheel_factory, nginx_factory, args=LEASE)
    n = 40
    ids = [f"kill-{i:02d}" for i in range(n)]
    for i, tid in enumerate(ids):
        status, _, body = request(nginx.port, "POST", "/timers",
                                  {"id": tid, "url": receiver.url("/k"), "delay_ms": 2500 + 25 * i})
        assert status == 201, body
    held_by_a = redis.keys(f"hw:*:cl:{owner_tag(a.instance_id)}")
    assert held_by_a, "instance a holds no claims: nothing to take over"
    assert a.kill9() == -9
    dead = f"127.0.0.1:{a.port}"

    # reads: a request nginx sent to the dead instance goes to the other one
    for tid in ids:
        status, headers, body = request(nginx.port, "GET", f"/timers/{tid}")
        assert status == 200, (tid, body)
        assert_matches_contract("GET", "/timers/{id}", status, headers, body)
    retried = wait_until(lambda: [e for e in nginx.log_entries()
                                  if dead in e["upstream_addr"] and e["status"] == 200], timeout=5)
    assert retried, "no GET was retried from the killed instance to the live one"
    # creates: each answered 201 (a create sent twice would answer 200 the
    # second time) and fired exactly once
    after = [f"after-{i:02d}" for i in range(10)]
    for tid in after:
        status, _, body = request(nginx.port, "POST", "/timers",
                                  {"id": tid, "url": receiver.url("/k"), "delay_ms": 300})
        assert status == 201, (tid, body)

    everything = set(ids) | set(after)

    def all_arrived(reqs):
        return {r.timer_id for r in reqs if r.path == "/k"} >= everything
    receiver.wait_until(all_arrived, timeout=scaled(20))
    time.sleep(0.3)  # late duplicates
    counts = Counter(r.timer_id for r in receiver.requests("/k"))
    missing = sorted(everything - set(counts))
    assert not missing, f"{len(missing)} timers never fired, e.g. {missing[:5]}"
    assert max(counts.values()) == 1, {t: c for t, c in counts.items() if c > 1}
    log = b.log.read_text(errors="replace")
    assert "took over the claims of a lapsed instance" in log and a.instance_id in log


class ClosingUpstream:
    """An upstream that reads a request and closes the connection without an
    answer, as an instance dying mid-request would. Records what it got."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.seen = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, body = data.split(b"\r\n\r\n", 1)
            m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            while m and len(body) < int(m.group(1)):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                body += chunk
            method, target = head.split(b" ", 2)[:2]
            self.seen.append((method.decode(), target.decode(), body))

    def close(self):
        self.sock.close()


def test_a_post_that_reached_an_instance_is_never_sent_to_another_but_reads_are(
        redis, receiver, hookwheel_factory, nginx_factory):
    live = hookwheel_factory(redis, args=INFO)
    status, _, body = live.create({"id": "read-me", "url": receiver.url("/r"), "delay_ms": 60000})
    assert status == 201, body
    dying = ClosingUpstream()
    try:
        # GET and DELETE (idempotent): the one that met the dying upstream is
        # retried on the live one, so every answer is a success.
        nginx = nginx_factory([dying.port, live.port])
        for _ in range(4):
            status, _, body = request(nginx.port, "GET", "/timers/read-me")
            assert status == 200, body
        assert [s[0] for s in dying.seen] == ["GET"], dying.seen
        nginx.stop()

        # POST: nginx must not send a create that reached an instance to
        # another one; the client gets 502, and the create was not stored.
        dying.seen.clear()
        nginx = nginx_factory([dying.port, live.port])
        answers = {}
        for i in range(4):
            tid = f"post-{i}"
            answers[tid] = request(nginx.port, "POST", "/timers",
                                   {"id": tid, "url": receiver.url("/p"), "delay_ms": 60000})
            if dying.seen:
                break
        assert len(dying.seen) == 1 and dying.seen[0][0] == "POST", dying.seen
        lost = json.loads(dying.seen[0][2])["id"]
        status, headers, body = answers[lost]
        assert status == 502, body
        assert headers["Content-Type"] == "application/problem+json", headers
        assert live.get(lost)[0] == 404, "the create that met the dying upstream was sent again"
        for tid, (status, _, body) in answers.items():
            if tid != lost:
                assert status == 201, (tid, body)
    finally:
        dying.close()


def test_the_dashboard_passes_through_nginx_with_its_redirect_etag_and_security_headers(
        redis, hookwheel_factory, nginx_factory):
    hw = hookwheel_factory(redis, args=INFO)
    nginx = nginx_factory([hw.port])
    status, headers, _ = request(nginx.port, "GET", "/ui")
    assert status == 308 and headers["Location"] == "/ui/", (status, dict(headers))
    status, headers, page = request(nginx.port, "GET", "/ui/")
    assert status == 200 and page == (ROOT / "ui" / "index.html").read_bytes(), status
    assert headers["Content-Security-Policy"].startswith("default-src 'self'"), dict(headers)
    assert headers["X-Content-Type-Options"] == "nosniff"
    status, headers, body = request(nginx.port, "GET", "/ui/app.js")
    assert status == 200 and headers["Content-Type"] == "text/javascript; charset=utf-8", status
    status, again, body = request(nginx.port, "GET", "/ui/app.js",
                                  headers={"If-None-Match": headers["ETag"]})
    assert status == 304 and again["ETag"] == headers["ETag"] and not body, status


def test_a_bearer_token_passes_nginx_unchanged_and_two_authorization_headers_get_401(
        tmp_path, redis, receiver, hookwheel_factory, nginx_factory):
    token_a, token_b = "team-a-token-6d2f0c9e1b", "team-b-token-0a7e3f5c8d"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"team-a {token_a}\nteam-b {token_b}\n")
    hw = hookwheel_factory(redis, args=INFO, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    nginx = nginx_factory([hw.port])
    status, _, created = request(nginx.port, "POST", "/timers",
                                 {"id": "a-only", "url": receiver.url("/a"), "delay_ms": 600000},
                                 headers={"Authorization": f"Bearer {token_a}"})
    assert status == 201, created

    def get(port, values):
        # http.client's dict of headers holds a name once: put each line itself
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=scaled(10))
        try:
            conn.putrequest("GET", "/timers/a-only")
            for v in values:
                conn.putheader("Authorization", v)
            conn.endheaders()
            resp = conn.getresponse()
            resp.read()
            return resp.status, resp.headers
        finally:
            conn.close()

    for port in (hw.port, nginx.port):
        assert get(port, [f"Bearer {token_a}"])[0] == 200, port
        assert get(port, [f"Bearer {token_b}"])[0] == 404, port
        # Authorization holds one credential; of two, a proxy in front may have
        # checked, or added, another one than the first, so neither counts
        for values in ([f"Bearer {token_a}", "Bearer not-a-token-of-anyone"],
                       [f"Bearer {token_a}", f"Bearer {token_b}"],
                       [f"Bearer {token_b}", f"Bearer {token_a}"]):
            status, headers = get(port, values)
            if port == nginx.port and status == 400:
                continue  # nginx itself refuses a second Authorization line
            assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer"), (port, values, status)
    assert hw.stop() == 0
    assert token_a not in hw.log.read_text(errors="replace")
