"""Hostile clients of the API must not take hookwheel down for everyone
(README "Configuration" and "Limits").

1. Idle connections and file descriptors: under an open-file limit of 1,024
   (systemd's default soft limit) the API's connection cap is filled with idle
   connections, and every due timer must still be delivered: hookwheel raises
   its soft limit to the hard one and refuses to start (exit 2, one line
   naming HOOKWHEEL_MAX_CONNECTIONS) when its connections and the descriptors
   reserved for Redis and attempts cannot fit.
2. Slowloris: 2,000 connections that dribble header lines must not keep a
   create from being answered (the request head has a deadline; a per-address
   cap also helps when the attacker has one address), and a request whose
   client gave up while it waited (in the listen backlog, or on a kept-alive
   connection) creates no timer.
3. Ambiguous framing: two Content-Length headers, Content-Length beside
   Transfer-Encoding, or a header with whitespace before its colon, are
   answered 400 and the connection is closed.

Real redis-server, real hookwheel binary, real sockets; nothing is mocked."""

import contextlib
import http.client
import json
import resource
import selectors
import socket
import subprocess
import threading
import time

import pytest

from conftest import HOOKWHEEL_BIN, Api, Hookwheel, scaled, wait_until

DUE_TIMERS = 20


# --------------------------------------------------------------------------
# helpers


@contextlib.contextmanager
def nofile_limit(soft, hard):
    """Makes every subprocess.Popen inside the block start with RLIMIT_NOFILE
    (soft, hard); the test process's own limit is not touched."""
    real = subprocess.Popen

    def popen(*args, **kwargs):
        kwargs["preexec_fn"] = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        return real(*args, **kwargs)

    subprocess.Popen = popen
    try:
        yield
    finally:
        subprocess.Popen = real


@pytest.fixture
def start_hw(tmp_path, request, redis):
    """start(args, nofile=None) -> a ready Hookwheel; stopped in teardown."""
    started = []
    request.node._hookwheels = started

    def start(args=(), nofile=None):
        hw = Hookwheel(tmp_path, redis.url, args=args, name=f"{len(started) + 1}")
        started.append(hw)
        if nofile:
            with nofile_limit(*nofile):
                return hw.start()
        return hw.start()

    try:
        yield start
    finally:
        codes = [(hw.name, hw.stop()) for hw in started if hw.alive()]
        assert all(code == 0 for _, code in codes), codes


def idle_connections(port, n, source="127.0.0.1"):
    """n TCP connections to the API that send nothing. Connections beyond the
    API's cap wait in the listen backlog (connect succeeds all the same)."""
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((source, 0))
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        socks.append(s)
    return socks


def close_all(socks):
    for s in socks:
        with contextlib.suppress(OSError):
            s.close()


def create_due_timers(api, receiver, prefix, delay_ms):
    ids = []
    for i in range(DUE_TIMERS):
        status, _, body = api.create({"id": f"{prefix}-{i}", "url": receiver.url("/due"), "delay_ms": delay_ms,
                                      "retry": {"max_attempts": 1}})
        assert status == 201, (status, body)
        ids.append(body["id"])
    return ids


def raw_exchange(port, data, timeout=5.0, source="127.0.0.1"):
    """Sends data on a new connection; returns (status, headers, body bytes,
    closed) where closed says the server closed the connection after its
    answer."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(timeout)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise AssertionError(f"connection closed before an answer: {buf!r}")
            buf += chunk
        head, body = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        while len(body) < n:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
        closed = False
        s.settimeout(1.0)
        try:
            closed = s.recv(1) == b""
        except socket.timeout:
            closed = False
        except ConnectionResetError:
            closed = True
        return status, headers, body, closed
    finally:
        s.close()


# --------------------------------------------------------------------------
# 1. idle connections must not starve deliveries of descriptors


@pytest.mark.parametrize("soft,hard,args", [
    # systemd's default: soft 1,024, a larger hard limit; default settings.
    (1024, 4096, []),
    # a hard limit of 1,024 and a max-connections that fits under it
    (1024, 1024, ["--max-inflight", "16", "--max-connections", "700"]),
], ids=["soft-1024", "hard-1024"])
def test_a_full_connection_cap_of_idle_clients_does_not_starve_deliveries(start_hw, receiver, soft, hard, args):
    # Idle connections stay for the whole test: their deadline is far off.
    hw = start_hw(["--request-head-timeout-ms", "120000", "--connection-timeout-s", "120", *args],
                  nofile=(soft, hard))
    cap = int(args[args.index("--max-connections") + 1]) if "--max-connections" in args else 1024
    ids = create_due_timers(hw.api, receiver, "fd", delay_ms=3000)
    socks = idle_connections(hw.port, cap + 80)
    try:
        got = receiver.wait_for(DUE_TIMERS, timeout=scaled(15.0), path="/due")
        delivered = {r.timer_id for r in got}
        assert delivered == set(ids), (
            f"{len(delivered)} of {DUE_TIMERS} due timers delivered while {cap + 80} idle connections "
            f"filled the API (limit {soft}:{hard}); log:\n{hw.log_tail(20)}")
    finally:
        close_all(socks)
    for tid in ids:
        assert hw.wait_state(tid, ["delivered"], timeout=scaled(10.0))["state"] == "delivered"


def test_a_max_connections_that_cannot_fit_stops_start_up_with_exit_2(tmp_path):
    with nofile_limit(1024, 1024):
        r = subprocess.run([HOOKWHEEL_BIN, "--listen", "127.0.0.1:0", "--redis-url", "redis://127.0.0.1:1",
                            "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert "HOOKWHEEL_MAX_CONNECTIONS" in lines[0] and "1024" in lines[0], lines[0]
    assert "at most" in lines[0], lines[0]


# --------------------------------------------------------------------------
# 2. slowloris


class Slowloris:
    """n connections from `source` that each send a request line, then one
    header line every `interval` seconds, and never finish their head. A
    connection the server closes is opened again (when reconnect is set), as
    a real attacker would. Bounded: stops after `limit_s` seconds."""

    def __init__(self, port, n, interval=0.5, reconnect=True, limit_s=30.0, source="127.0.0.1"):
        self.port, self.n, self.interval = port, n, interval
        self.reconnect, self.limit_s, self.source = reconnect, limit_s, source
        self.sel = selectors.DefaultSelector()
        self.stop_ev = threading.Event()
        self.closed_by_server = 0
        self.opened = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((self.source, 0))
        s.settimeout(5)
        s.connect(("127.0.0.1", self.port))
        s.setblocking(False)
        s.send(b"POST /timers HTTP/1.1\r\nHost: hookwheel\r\n")
        self.sel.register(s, selectors.EVENT_READ)
        self.opened += 1

    def start(self):
        for _ in range(self.n):
            self._open()
        self.thread.start()
        return self

    def _run(self):
        end = time.monotonic() + self.limit_s
        next_send = time.monotonic() + self.interval
        while not self.stop_ev.is_set() and time.monotonic() < end:
            for key, _ in self.sel.select(timeout=0.05):
                s = key.fileobj
                try:
                    data = s.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:  # closed by the server
                    self.sel.unregister(s)
                    s.close()
                    self.closed_by_server += 1
                    if self.reconnect and not self.stop_ev.is_set():
                        with contextlib.suppress(OSError):
                            self._open()
            if time.monotonic() >= next_send:
                next_send += self.interval
                for key in list(self.sel.get_map().values()):
                    with contextlib.suppress(OSError):
                        key.fileobj.send(b"X-Dribble: x\r\n")

    def stop(self):
        self.stop_ev.set()
        if self.thread.is_alive():
            self.thread.join(timeout=10)
        for key in list(self.sel.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()
        self.sel.close()


def timed_create(port, receiver, timer_id, timeout, source="127.0.0.1"):
    body = json.dumps({"id": timer_id, "url": receiver.url("/x"), "delay_ms": 600000}).encode()
    req = (b"POST /timers HTTP/1.1\r\nHost: hookwheel\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body)) + body
    t0 = time.monotonic()
    try:
        status, _, answer, _ = raw_exchange(port, req, timeout=timeout, source=source)
    except (socket.timeout, TimeoutError):
        return None, time.monotonic() - t0, b"(no answer)"
    return status, time.monotonic() - t0, answer


def test_a_create_is_answered_while_2000_slowloris_connections_dribble_headers(start_hw, receiver):
    # The head deadline alone (no per-address cap): every dribbling connection
    # is closed a second after it started, so the create waits at most about
    # that long behind them in the listen backlog.
    hw = start_hw(["--request-head-timeout-ms", "1000"])
    attack = Slowloris(hw.port, 2000).start()
    try:
        time.sleep(0.5)
        status, took, answer = timed_create(hw.port, receiver, "slow-1", timeout=5.0)
    finally:
        attack.stop()
    assert status == 201 and took < 5.0, (status, round(took, 2), answer[:200])
    assert attack.closed_by_server > 0, "the server closed none of the dribbling connections"
    assert "request was not in by its deadline" in hw.log.read_text(errors="replace")


def test_a_per_address_cap_keeps_room_for_other_clients(start_hw, receiver):
    # The head deadline is far off here: the per-address cap alone must keep
    # the attacker (127.0.0.1) from filling the connection limit, so a client
    # from another address (127.0.0.2) is answered at once.
    hw = start_hw(["--request-head-timeout-ms", "120000", "--max-connections-per-ip", "64"])
    attack = Slowloris(hw.port, 2000, reconnect=False).start()
    try:
        time.sleep(0.5)
        status, took, answer = timed_create(hw.port, receiver, "slow-2", timeout=5.0, source="127.0.0.2")
    finally:
        attack.stop()
    assert status == 201 and took < 5.0, (status, round(took, 2), answer[:200])


def create_bytes(receiver, timer_id):
    body = json.dumps({"id": timer_id, "url": receiver.url("/x"), "delay_ms": 600000}).encode()
    return (b"POST /timers HTTP/1.1\r\nHost: hookwheel\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


def read_head(sock):
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        assert chunk, answer
        answer += chunk
    return answer


def test_a_request_whose_client_left_while_it_waited_creates_no_timer(start_hw, receiver):
    hw = start_hw(["--api-threads", "1", "--max-connections", "4", "--request-head-timeout-ms", "120000"])
    fill = idle_connections(hw.port, 4)  # the cap is full: new connections wait in the backlog
    try:
        gone = socket.create_connection(("127.0.0.1", hw.port), timeout=5)
        gone.sendall(create_bytes(receiver, "left-early"))
        gone.close()  # the client gives up before the server read its request
        stays = socket.create_connection(("127.0.0.1", hw.port), timeout=10)
        stays.sendall(create_bytes(receiver, "stayed"))
        time.sleep(0.3)
    finally:
        close_all(fill)  # room again: both queued connections are accepted
    try:
        answer = read_head(stays)
        assert answer.startswith(b"HTTP/1.1 201"), answer[:200]
    finally:
        stays.close()
    api = Api(hw.port)
    assert api.get("stayed")[0] == 200
    status, _, body = api.get("left-early")
    assert status == 404, f"a request whose client had left created a timer: {status} {body}"


def test_a_later_request_on_a_kept_alive_connection_whose_client_left_creates_no_timer(start_hw, receiver):
    # A connection's later requests are checked too when they come a while
    # after its previous answer (they may have waited in the socket's buffer).
    hw = start_hw([])
    s = socket.create_connection(("127.0.0.1", hw.port), timeout=10)
    try:
        s.sendall(create_bytes(receiver, "kept-first"))
        answer = read_head(s)
        assert answer.startswith(b"HTTP/1.1 201"), answer[:200]
        time.sleep(0.3)
        # The request and the end of the client's side in one segment: the
        # server reads the request with the connection already closed.
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        s.sendall(create_bytes(receiver, "kept-left"))
        s.shutdown(socket.SHUT_WR)
        s.settimeout(5)
        rest = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(4096):
                rest += chunk
    finally:
        s.close()
    api = Api(hw.port)
    assert api.get("kept-first")[0] == 200
    status, _, body = api.get("kept-left")
    assert status == 404, f"a request whose client had left created a timer: {status} {body} (answer {rest[:100]!r})"
    assert rest == b"", f"an answer went to a client that had left: {rest[:200]!r}"


# --------------------------------------------------------------------------
# 3. ambiguous framing


def framed_create(timer_id, receiver, extra_headers):
    body = json.dumps({"id": timer_id, "url": receiver.url("/x"), "delay_ms": 600000}).encode()
    head = b"POST /timers HTTP/1.1\r\nHost: hookwheel\r\nContent-Type: application/json\r\n"
    return head + extra_headers(len(body)) + b"\r\n" + body


@pytest.mark.parametrize("name,headers", [
    ("two-lengths", lambda n: b"Content-Length: %d\r\nContent-Length: %d\r\n" % (n, n + 5)),
    ("same-length-twice", lambda n: b"Content-Length: %d\r\nContent-Length: %d\r\n" % (n, n)),
    ("length-and-chunked", lambda n: b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % n),
], ids=lambda v: v if isinstance(v, str) else "")
def test_ambiguous_request_framing_is_refused_with_400_and_close(start_hw, receiver, name, headers):
    hw = start_hw()
    timer_id = f"framing-{name}"
    status, hdrs, body, closed = raw_exchange(hw.port, framed_create(timer_id, receiver, headers))
    assert status == 400, (status, body[:300])
    assert hdrs.get("content-type", "").startswith("application/problem+json"), hdrs
    problem = json.loads(body)
    assert problem["status"] == 400 and "Content-Length" in problem["detail"], problem
    assert closed, "the connection stayed open after a request whose body's end is unknown"
    assert hw.api.get(timer_id)[0] == 404


@pytest.mark.parametrize("name,headers", [
    # The length frames 4 bytes less than the body: the rest would be read
    # as the next request. A proxy that took the spaced name for the
    # chunked coding would have framed it otherwise.
    ("spaced-transfer-encoding",
     lambda n: b"Transfer-Encoding : chunked\r\nContent-Length: %d\r\n" % (n - 4)),
    ("spaced-content-length", lambda n: b"Content-Length : %d\r\n" % n),
    ("tab-before-colon", lambda n: b"Content-Length: %d\r\nX-Other\t: 1\r\n" % n),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_header_with_whitespace_before_its_colon_is_refused_with_400_and_close(start_hw, receiver, name,
                                                                                   headers):
    hw = start_hw()
    timer_id = f"framing-{name}"
    status, hdrs, body, closed = raw_exchange(hw.port, framed_create(timer_id, receiver, headers))
    assert status == 400, (status, body[:300])
    assert hdrs.get("content-type", "").startswith("application/problem+json"), hdrs
    problem = json.loads(body)
    assert problem["status"] == 400 and "whitespace before its colon" in problem["detail"], problem
    assert closed, "the connection stayed open after a request whose framing is in doubt"
    assert hw.api.get(timer_id)[0] == 404


def test_a_request_target_in_absolute_form_is_routed_by_its_path(start_hw, receiver):
    # RFC 9112 §3.2.2: a server must accept "http://host/path" as well as "/path"
    hw = start_hw()
    body = json.dumps({"id": "absolute", "url": receiver.url("/x"), "delay_ms": 600000}).encode()
    status, _, answer, _ = raw_exchange(hw.port, (
        b"POST http://127.0.0.1:%d/timers HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (hw.port, len(body))) + body)
    assert status == 201, answer[:300]
    for target in (b"http://127.0.0.1:%d/timers/absolute" % hw.port, b"HTTPS://other.example/timers/absolute"):
        request = b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        status, _, answer, _ = raw_exchange(hw.port, request)
        assert status == 200 and json.loads(answer)["id"] == "absolute", (target, status, answer[:300])
    status, _, answer, _ = raw_exchange(hw.port, b"GET http://x?state=scheduled HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 404 and json.loads(answer)["detail"] == "no such resource", answer


def test_a_request_head_over_16_kib_is_refused_by_libmicrohttpd_as_documented(start_hw):
    # README "Limits" and openapi.yaml "Errors": the one refusal that is not
    # a problem document, as libmicrohttpd gives it before hookwheel runs
    hw = start_hw()
    fits = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 15000 + b"\r\nConnection: close\r\n\r\n"
    status, _, body, _ = raw_exchange(hw.port, fits)
    assert status == 200 and json.loads(body) == {"status": "ok"}, body
    for data, want in ((b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n", 431),
                       (b"GET /healthz?pad=" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414)):
        status, headers, body, closed = raw_exchange(hw.port, data)
        assert status == want and closed, (status, headers, body[:200])
        assert not headers.get("content-type", "").startswith("application/problem+json"), headers
    assert hw.api.get("nothing")[0] == 404


def read_answers(port, data, count, timeout=5.0):
    """Sends data (pipelined requests) on one connection and reads up to
    count answers: their statuses, and whether the server closed the
    connection after them."""
    statuses = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        while len(statuses) < count:
            while b"\r\n\r\n" not in buf:
                chunk = s.recv(65536)
                if not chunk:
                    return statuses, True
                buf += chunk
            head, buf = buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            statuses.append(int(lines[0].split()[1]))
            length = next((int(v) for k, _, v in (line.partition(":") for line in lines[1:])
                           if k.strip().lower() == "content-length"), 0)
            while len(buf) < length and statuses[-1] != 204:
                chunk = s.recv(65536)
                if not chunk:
                    return statuses, True
                buf += chunk
            buf = buf[length:]
    return statuses, False


def test_requests_pipelined_behind_a_refusal_are_all_answered_on_one_connection(start_hw):
    hw = start_hw()
    host = b"Host: x\r\n"
    requests = [
        (b"GET /nope HTTP/1.1\r\n" + host + b"\r\n", 404),
        (b"PUT /timers HTTP/1.1\r\n" + host + b"Content-Length: 3\r\n\r\nabc", 405),
        (b"GET /timers/%zz HTTP/1.1\r\n" + host + b"\r\n", 400),
        (b"POST /timers HTTP/1.1\r\n" + host + b"Content-Type: text/plain\r\nContent-Length: 5\r\n\r\nabcde", 415),
        (b"POST /timers HTTP/1.1\r\n" + host + b"Content-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"3\r\nabc\r\n0\r\n\r\n", 415),
        (b"GET /healthz HTTP/1.1\r\n" + host + b"\r\n", 200),
    ]
    statuses, closed = read_answers(hw.port, b"".join(r for r, _ in requests), len(requests))
    assert statuses == [want for _, want in requests] and not closed, statuses
    # a refused body sent whole before reading still gets its answer
    conn = http.client.HTTPConnection("127.0.0.1", hw.port, timeout=scaled(10))
    try:
        conn.request("POST", "/timers", body=b"x" * 1_000_000, headers={"Content-Type": "text/plain"})
        resp = conn.getresponse()
        assert resp.status == 415 and json.loads(resp.read())["status"] == 415
    finally:
        conn.close()
