"""Integration test harness for hookwheel: real components only.

- RedisServer: a real redis-server on a free loopback port, AOF on, data in the
  test's tmp_path; commands over a tiny RESP client (no redis-py).
- Receiver: a real HTTP server (ThreadingHTTPServer, HTTP/1.1 keep-alive) in the
  test process that records every request and answers with programmable
  per-path responses.
- Hookwheel: the real binary from $HOOKWHEEL_BIN, started on a free port against
  the test's Redis, waited for until GET /readyz answers 200.
- Api / ApiSession: small http.client wrappers for the hookwheel API.

Every process started here is stopped by pid in fixture teardown, also when the
test fails. Everything listens on 127.0.0.1 only.
"""

import http.client
import http.server
import json
import os
import random
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# The test run's own HOOKWHEEL_* variables (the Makefile's), read here and then
# taken out of this process's environment, so that no hookwheel a test starts
# inherits them (hookwheel warns about HOOKWHEEL_* variables that are no
# setting, and a test's own settings are given to each process explicitly).
HARNESS = {k: os.environ.pop(k) for k in ("HOOKWHEEL_BIN", "HOOKWHEEL_TEST_SLOW", "HOOKWHEEL_TEST_REDIS",
                                          "HOOKWHEEL_SKIPPED_FILE", "HOOKWHEEL_SHARD", "HOOKWHEEL_ONLY_FILE",
                                          "HOOKWHEEL_TEST_SEED") if k in os.environ}
HOOKWHEEL_BIN = HARNESS.get("HOOKWHEEL_BIN") or str(REPO_ROOT / "build" / "hookwheel")
REDIS_SERVER = os.environ.get("REDIS_SERVER_BIN", "redis-server")


def _is_sanitizer_build(path):
    """True when the binary was built with ASan/UBSan/TSan (slower)."""
    if HARNESS.get("HOOKWHEEL_TEST_SLOW"):
        return HARNESS["HOOKWHEEL_TEST_SLOW"] not in ("0", "")
    if "sanitize" in path:
        return True
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return b"__asan_init" in data or b"__ubsan_handle" in data or b"__tsan_init" in data


SLOW = _is_sanitizer_build(HOOKWHEEL_BIN)
# Multiplier for generous waits (never for the bounds a check states itself).
TIME_SCALE = 2.0 if SLOW else 1.0
READY_TIMEOUT = 30.0 if SLOW else 15.0


def scaled(seconds):
    return seconds * TIME_SCALE


def partition(key_id, partitions=16):
    """The partition of a timer's key id (persistence/keys.c keys_partition:
    32-bit FNV-1a modulo the partitions)."""
    h = 2166136261
    for b in key_id.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h % partitions


def resp(*args):
    """One command in Redis's protocol, for `redis-cli --pipe` (bytes pass as they are)."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def owner_tag(instance_id):
    """The tag an instance's claims are kept under in Redis (hw:{P}:cl:<tag>):
    16 hex digits of the 64-bit FNV-1a of its id (persistence/keys.c)."""
    h = 14695981039346656037
    for b in instance_id.encode():
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h or 1:016x}"


def now_ms():
    return time.time() * 1000.0


# --------------------------------------------------------------------------
# small helpers


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ephemeral_low():
    """The lowest port the kernel hands out to outgoing connections."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_cluster_port():
    """A free port P whose cluster bus port P + 10000 (Redis Cluster's) is
    free too. Both lie below the kernel's ephemeral range, so no outgoing
    connection of a test (a curl, a hiredis link) can take the bus port
    between this check and the node's bind, nor while a node is down and
    restarted on its port."""
    hi = min(_ephemeral_low(), 65536) - 10000  # P + 10000 < the ephemeral range
    lo = max(1024, hi - 12000)
    rng = random.SystemRandom()
    while True:
        p = rng.randrange(lo, hi)
        try:
            for q in (p, p + 10000):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("127.0.0.1", q))
        except OSError:
            continue
        return p


def wait_until(fn, timeout, interval=0.02):
    """Calls fn() until it returns a truthy value or timeout seconds pass.
    Returns the last value fn() returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def make_bgsave_fail(redis):
    """Makes Redis refuse writes with MISCONF, as after an RDB save that
    failed on a full disk: a save point, and a BGSAVE whose child is killed."""
    redis.cmd("CONFIG", "SET", "save", "3600 1")
    redis.cmd("CONFIG", "SET", "rdb-key-save-delay", "1000000")
    redis.cmd("SET", "hw-test-key-to-save", "1")
    redis.cmd("BGSAVE")
    children = f"/proc/{redis.proc.pid}/task/{redis.proc.pid}/children"
    assert wait_until(lambda: open(children).read().split(), 5)
    os.kill(int(open(children).read().split()[0]), signal.SIGKILL)
    assert wait_until(lambda: "rdb_last_bgsave_status:err" in redis.cmd("INFO", "persistence"), 5)


def let_bgsave_succeed(redis):
    redis.cmd("CONFIG", "SET", "rdb-key-save-delay", "0")
    redis.cmd("BGSAVE")
    assert wait_until(lambda: "rdb_last_bgsave_status:ok" in redis.cmd("INFO", "persistence"), 10)
    redis.cmd("CONFIG", "SET", "save", "")


def stop_process(proc, sig=signal.SIGTERM, timeout=10.0):
    """Signals proc by pid, waits; kills it on timeout. Returns the exit code
    (negative signal number when it died of a signal)."""
    if proc.poll() is not None:
        return proc.returncode
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=10)


def rss_kib(pid):
    """The resident memory of process pid, KiB (0 once it is gone)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    """utime + stime of process pid (every thread), in seconds (fields 14
    and 15 of /proc/<pid>/stat, stat(5))."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def most_in_a_window(times_ms, width_ms=1000):
    """The most events (times in ms) in any window of width_ms."""
    times = sorted(times_ms)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] >= width_ms:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def assert_created(status, headers, timer):
    """The checks every 201 from POST /timers passes; returns the timer."""
    assert status == 201, f"expected 201, got {status}: {timer!r}"
    assert isinstance(timer, dict), timer
    assert headers.get("Location") == f"/timers/{timer['id']}", (headers.get("Location"), timer)
    assert isinstance(timer.get("fire_at_ms"), int), timer
    return timer


def tail(path, lines=60):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    text = data.decode("utf-8", "replace").splitlines()
    return "\n".join(text[-lines:])


def media_type(value):
    """'application/json; charset=utf-8' -> 'application/json'."""
    if value is None:
        return None
    return value.split(";", 1)[0].strip().lower()


# --------------------------------------------------------------------------
# Redis


class RedisError(Exception):
    pass


class RespClient:
    """A tiny RESP2 client over a socket (enough for tests)."""

    def __init__(self, port, host="127.0.0.1", timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, str):
                a = a.encode()
            elif isinstance(a, (int, float)):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("redis closed the connection")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read_reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read_reply() for _ in range(n)]
        raise RedisError(f"unexpected RESP line {line!r}")

    def call(self, *args):
        self.sock.sendall(self.encode(args))
        reply = self.read_reply()
        if isinstance(reply, RedisError):
            raise reply
        return reply


def _decode(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


class RedisServer:
    """A real redis-server on 127.0.0.1:<free port> with AOF on, in dir."""

    def __init__(self, directory, extra_args=(), env=None):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.extra_args = list(extra_args)
        self.env = env  # variables added to this environment (None: this one)
        self.port = None
        self.proc = None
        self.log = self.dir / "redis.log"
        self._logf = None

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def start(self, port=None, timeout=10.0):
        """Starts redis-server (on port, or on a free port, retried on a
        collision) and waits until it answers PING."""
        attempts = 1 if port is not None else 3
        last = None
        for _ in range(attempts):
            p = port if port is not None else free_port()
            if self._start_once(p, timeout):
                self.port = p
                return self
            last = tail(self.log, 20)
        raise RuntimeError(f"redis-server did not come up; log tail:\n{last}")

    def _start_once(self, port, timeout):
        self._logf = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1",
             "--dir", str(self.dir), "--appendonly", "yes",
             "--appendfsync", "everysec", "--save", "", "--daemonize", "no", *self.extra_args],
            stdout=self._logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=str(self.dir), env={**os.environ, **self.env} if self.env else None)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._logf.close()
                return False
            try:
                with RespClient(port, timeout=1.0) as c:
                    if c.call("PING") == "PONG":
                        return True
            except (OSError, RedisError):
                pass
            time.sleep(0.02)
        stop_process(self.proc, timeout=5)
        self._logf.close()
        return False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=10.0):
        """SHUTDOWN NOSAVE (AOF is still flushed), then terminate/kill by pid."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            refused = False
            try:
                with RespClient(self.port, timeout=2.0) as c:
                    c.sock.sendall(c.encode(["SHUTDOWN", "NOSAVE"]))
                    try:
                        # An answer means it refused (NOAUTH under an ACL):
                        # SIGTERM below does the same shutdown at once.
                        refused = isinstance(c.read_reply(), RedisError)
                    except (OSError, ConnectionError):
                        pass  # the server closes the connection: expected
            except OSError:
                pass
            if not refused:
                try:
                    self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    pass
        code = stop_process(self.proc, timeout=timeout)
        if self._logf:
            self._logf.close()
        return code

    def restart(self, timeout=10.0):
        """Starts it again on the same port and dir (AOF is replayed)."""
        port = self.port
        if self.alive():
            self.stop()
        return self.start(port=port, timeout=timeout)

    def port_for(self, key):
        """The port that serves key (ClusterRedis answers its slot's master)."""
        return self.port

    def cmd(self, *args):
        """One command over a fresh connection; bytes replies decoded to str."""
        with RespClient(self.port) as c:
            return _decode(c.call(*args))

    # the name the brief uses
    redis_cmd = cmd

    def cli(self, *args):
        """redis-cli -p PORT --raw ARGS... -> stdout (str)."""
        out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(self.port), "--raw", *args],
                             capture_output=True, timeout=10, check=True)
        return out.stdout.decode("utf-8", "replace")

    def keys(self, pattern="*"):
        """All keys matching pattern (SCAN, like redis-cli --scan)."""
        found = set()
        with RespClient(self.port) as c:
            cursor = b"0"
            while True:
                cursor, batch = c.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
                found.update(_decode(batch))
                if cursor == b"0":
                    break
        return found


# --------------------------------------------------------------------------
# Receiver


class Headers:
    """Request headers in arrival order, case-insensitive access."""

    def __init__(self, items):
        self._items = list(items)

    def get_all(self, name):
        n = name.lower()
        return [v for k, v in self._items if k.lower() == n]

    def get(self, name, default=None):
        values = self.get_all(name)
        return values[0] if values else default

    def __getitem__(self, name):
        values = self.get_all(name)
        if not values:
            raise KeyError(name)
        return values[0]

    def __contains__(self, name):
        return bool(self.get_all(name))

    def items(self):
        return list(self._items)

    def names(self):
        return [k for k, _ in self._items]

    def __repr__(self):
        return f"Headers({self._items!r})"


class Recorded:
    """One request the receiver saw."""

    __slots__ = ("wall", "mono", "method", "target", "path", "query", "headers", "body", "conn",
                 "done_mono")

    def __init__(self, wall, mono, method, target, headers, body, conn):
        self.wall = wall        # time.time() at arrival (request line read)
        self.mono = mono        # time.monotonic() at arrival
        self.method = method
        self.target = target    # path + query exactly as sent
        parts = urlsplit(target)
        self.path = parts.path
        self.query = parts.query
        self.headers = headers
        self.body = body
        self.conn = conn        # id of the TCP connection it came on
        self.done_mono = None   # time.monotonic() as the answer starts to go out: the
                                # sender cannot have seen the end of the run before it

    @property
    def wall_ms(self):
        return self.wall * 1000.0

    @property
    def timer_id(self):
        return self.headers.get("Hookwheel-Timer-Id")

    @property
    def attempt(self):
        return self.headers.get("Hookwheel-Attempt")

    def __repr__(self):
        return (f"<{self.method} {self.target} timer={self.timer_id} attempt={self.attempt} "
                f"at={self.wall:.3f}>")


class Reply:
    """A programmed answer. body bytes/str; headers dict; delay_s before answering."""

    def __init__(self, status=204, headers=None, body=b"", delay_s=0.0):
        self.status = status
        self.headers = dict(headers or {})
        self.body = body.encode() if isinstance(body, str) else body
        self.delay_s = delay_s


def _as_reply(r):
    if isinstance(r, Reply):
        return r
    if isinstance(r, int):
        return Reply(r)
    if isinstance(r, tuple):
        return Reply(*r)
    raise TypeError(f"cannot use {r!r} as a reply")


class _ReceiverHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # hookwheel may open many connections at once
    allow_reuse_address = True


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "receiver/1"
    sys_version = ""
    timeout = 60  # idle keep-alive connections are dropped after this
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stalls on small answers

    def setup(self):
        super().setup()
        self.receiver = self.server.receiver
        self.receiver._track(self.connection, True)
        self._arrival = None

    def finish(self):
        try:
            super().finish()
        finally:
            self.receiver._track(self.connection, False)

    def log_message(self, *args):
        pass

    def parse_request(self):
        # the request line has just been read: this is the arrival time
        self._arrival = (time.time(), time.monotonic())
        return super().parse_request()

    def _read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks = []
            while True:
                size_line = self.rfile.readline()
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # trailers up to the empty line
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _handle(self):
        wall, mono = self._arrival or (time.time(), time.monotonic())
        body = self._read_body()
        rec = Recorded(wall, mono, self.command, self.path, Headers(self.headers.items()), body,
                       id(self.connection))
        reply = self.receiver._record(rec)
        try:
            if reply.delay_s:
                time.sleep(reply.delay_s)
            rec.done_mono = time.monotonic()
            self.send_response(reply.status)
            for k, v in reply.headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            if self.command != "HEAD" and reply.body:
                self.wfile.write(reply.body)
            self.wfile.flush()
        finally:
            self.receiver._done(rec)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _handle


class Receiver:
    """A real HTTP server on 127.0.0.1:0 recording every request.

    receiver.plan("/flaky", [500, 500, 204]) answers the next three requests to
    /flaky with those statuses, then the path's default (204 unless changed
    with receiver.default(path, reply)). Entries may be ints, Reply objects or
    (status, headers, body) tuples."""

    def __init__(self):
        self._lock = threading.Condition()
        self._requests = []
        self._plans = {}
        self._defaults = {}
        self._conns = set()
        self._active = {}      # path -> requests being answered now
        self._max_active = {}  # path -> the most answered at once
        self._server = _ReceiverHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.receiver = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def url(self, path="/"):
        return f"http://127.0.0.1:{self.port}{path}"

    def plan(self, path, replies):
        with self._lock:
            self._plans.setdefault(path, []).extend(_as_reply(r) for r in replies)

    def default(self, path, reply):
        with self._lock:
            self._defaults[path] = _as_reply(reply)

    def _track(self, conn, add):
        with self._lock:
            (self._conns.add if add else self._conns.discard)(conn)

    def _record(self, rec):
        with self._lock:
            self._active[rec.path] = self._active.get(rec.path, 0) + 1
            self._max_active[rec.path] = max(self._max_active.get(rec.path, 0), self._active[rec.path])
            self._requests.append(rec)
            plan = self._plans.get(rec.path)
            reply = plan.pop(0) if plan else self._defaults.get(rec.path, Reply(204))
            self._lock.notify_all()
            return reply

    def _done(self, rec):
        with self._lock:
            self._active[rec.path] -= 1
            if rec.done_mono is None:  # no answer went out
                rec.done_mono = time.monotonic()
            self._lock.notify_all()

    def max_concurrent(self, path):
        """The most requests to path that were being answered at once."""
        with self._lock:
            return self._max_active.get(path, 0)

    def requests(self, path=None, timer_id=None):
        with self._lock:
            return [r for r in self._requests
                    if (path is None or r.path == path)
                    and (timer_id is None or r.timer_id == timer_id)]

    def wait_until(self, predicate, timeout):
        """Waits until predicate(list of all requests) is truthy; returns its
        last value."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                value = predicate(list(self._requests))
                left = deadline - time.monotonic()
                if value or left <= 0:
                    return value
                self._lock.wait(min(left, 0.1))

    def wait_for(self, count, timeout, path=None):
        """Waits until at least count requests (to path, if given) arrived;
        returns the matching requests (possibly fewer on timeout)."""
        def enough(reqs):
            sel = [r for r in reqs if path is None or r.path == path]
            return sel if len(sel) >= count else None
        got = self.wait_until(enough, timeout)
        return got if got is not None else self.requests(path)

    def close(self):
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


# --------------------------------------------------------------------------
# hookwheel API clients


def _parse_body(headers, data):
    ct = media_type(headers.get("Content-Type"))
    if data and ct and (ct.endswith("/json") or ct.endswith("+json")):
        try:
            return json.loads(data)
        except ValueError:
            return data
    return data


def _encode_request(json_body, raw_body, headers):
    hdrs = dict(headers or {})
    body = None
    if json_body is not None:
        body = json.dumps(json_body).encode()
        if not any(k.lower() == "content-type" for k in hdrs):
            hdrs["Content-Type"] = "application/json"
    elif raw_body is not None:
        body = raw_body.encode() if isinstance(raw_body, str) else raw_body
    return body, hdrs


class Api:
    """request(method, path, json_body=None, raw_body=None, headers=None)
    -> (status, headers, parsed JSON body or raw bytes); one connection per
    request."""

    def __init__(self, port, host="127.0.0.1", timeout=None):
        self.host = host
        self.port = port
        self.timeout = timeout or scaled(10.0)

    def request(self, method, path, json_body=None, raw_body=None, headers=None, timeout=None):
        body, hdrs = _encode_request(json_body, raw_body, headers)
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)
        try:
            try:
                conn.request(method, path, body=body, headers=hdrs)
            except (BrokenPipeError, ConnectionResetError):
                # the server may answer (413) and close before reading it all
                pass
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.headers, _parse_body(resp.headers, data)
        finally:
            conn.close()

    def session(self):
        return ApiSession(self.port, self.host, self.timeout)

    # conveniences
    def create(self, spec, headers=None):
        return self.request("POST", "/timers", json_body=spec, headers=headers)

    def get(self, timer_id):
        return self.request("GET", f"/timers/{timer_id}")

    def cancel(self, timer_id):
        return self.request("DELETE", f"/timers/{timer_id}")

    def wait_state(self, timer_id, states, timeout):
        """Polls GET /timers/<id> until its state is one of states; returns the
        last timer body seen (the caller asserts on it)."""
        states = (states,) if isinstance(states, str) else tuple(states)
        last = {}

        def check():
            status, _, body = self.get(timer_id)
            last["body"] = body if status == 200 else {"http_status": status, "body": body}
            return status == 200 and isinstance(body, dict) and body.get("state") in states
        wait_until(check, timeout, interval=0.05)
        return last.get("body")


class ApiSession(Api):
    """Like Api but over one keep-alive connection (not thread-safe: one per
    thread). Reconnects once when the server closed an idle connection; use
    explicit timer ids when creating so such a retry stays idempotent."""

    def __init__(self, port, host="127.0.0.1", timeout=None):
        super().__init__(port, host, timeout)
        self.conn = None

    def request(self, method, path, json_body=None, raw_body=None, headers=None, timeout=None):
        body, hdrs = _encode_request(json_body, raw_body, headers)
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port,
                                                       timeout=timeout or self.timeout)
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
                resp = self.conn.getresponse()
                data = resp.read()
                if resp.will_close:
                    self.close()
                return resp.status, resp.headers, _parse_body(resp.headers, data)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    http.client.CannotSendRequest, http.client.BadStatusLine):
                self.close()
                if attempt == 2:
                    raise

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --------------------------------------------------------------------------
# hookwheel process

_instance_counter = [0]


def unique_instance_id():
    _instance_counter[0] += 1
    return f"it-{os.getpid()}-{_instance_counter[0]}-{uuid.uuid4().hex[:6]}"


class Hookwheel:
    """One hookwheel process. start() waits for GET /readyz == 200."""

    def __init__(self, tmp_path, redis_url, instance_id=None, args=(), env=None,
                 binary=None, name=None):
        self.binary = binary or HOOKWHEEL_BIN
        self.redis_url = redis_url
        self.instance_id = instance_id or unique_instance_id()
        self.extra_args = list(args)
        self.listen_host = "127.0.0.1"  # --listen <listen_host>:<port>
        self.extra_env = dict(env or {})
        self.tmp_path = Path(tmp_path)
        self.name = name or self.instance_id
        self.log = self.tmp_path / f"hookwheel-{self.name}.log"
        self.port = None
        self.proc = None
        self.api = None
        self.exit_code = None

    # -- lifecycle
    def start(self, ready_timeout=READY_TIMEOUT):
        if not os.path.isfile(self.binary) or not os.access(self.binary, os.X_OK):
            pytest.fail(f"hookwheel binary not found or not executable: {self.binary} "
                        f"(set HOOKWHEEL_BIN, e.g. build it with `make`)", pytrace=False)
        for attempt in range(3):
            self.port = free_port()
            self._spawn()
            outcome = self._wait_ready(ready_timeout)
            if outcome == "ready":
                outcome = self._ready_was_mine()
            if outcome == "ready":
                return self
            if outcome == "died" and attempt < 2 and "in use" in tail(self.log, 20).lower():
                continue  # port collision: pick another port
            break
        code = self.proc.poll()
        log = tail(self.log)
        if code is None:
            stop_process(self.proc, signal.SIGKILL, timeout=5)
            pytest.fail(f"hookwheel not ready within {ready_timeout:.0f} s "
                        f"(GET /readyz never answered 200); log tail:\n{log}", pytrace=False)
        pytest.fail(f"hookwheel exited with code {code} during start-up; log tail:\n{log}",
                    pytrace=False)

    def _spawn(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKWHEEL_")}
        # the targets of these tests are on loopback: exempt it from the SSRF policy
        env["HOOKWHEEL_DESTINATION_ALLOWLIST"] = "127.0.0.0/8"
        env["HOOKWHEEL_DATA_DIR"] = str(self.tmp_path / f"data-{self.name}")
        env.update(self.extra_env)
        argv = [self.binary, "--listen", f"{self.listen_host}:{self.port}"]
        if self.redis_url:
            argv += ["--redis-url", self.redis_url]
        argv += ["--instance-id", self.instance_id, "--log-level", "debug", *self.extra_args]
        self.argv = argv
        with open(self.log, "ab") as logf:
            logf.write(f"### {' '.join(argv)}\n".encode())
            logf.flush()
            self.proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, cwd=str(self.tmp_path))
        self.api = Api(self.port)
        self.exit_code = None

    def _ready_was_mine(self):
        """A port picked free may be taken by a process of a test running
        beside before this one binds it: the 200 came from that one, and
        this one dies of "address in use". Ready only once this process
        wrote its start-up line (right after it listens)."""
        def settled():
            return self.proc.poll() is not None or '"msg":"hookwheel started"' in tail(self.log, 200)
        wait_until(settled, scaled(10))
        return "ready" if self.proc.poll() is None else "died"

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return "died"
            try:
                status, _, _ = self.api.request("GET", "/readyz", timeout=2.0)
                if status == 200:
                    return "ready"
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.03)
        return "timeout"

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=None):
        """Sends sig by pid and waits (SIGKILL after timeout). Returns the exit
        code (negative: killed by that signal)."""
        if self.proc is None:
            return None
        self.exit_code = stop_process(self.proc, sig, timeout or scaled(30.0))
        return self.exit_code

    def kill9(self):
        return self.stop(signal.SIGKILL, timeout=10.0)

    def log_tail(self, lines=60):
        return tail(self.log, lines)

    # -- API shortcuts
    def request(self, *args, **kwargs):
        return self.api.request(*args, **kwargs)

    def create(self, spec, headers=None):
        return self.api.create(spec, headers)

    def get(self, timer_id):
        return self.api.get(timer_id)

    def cancel(self, timer_id):
        return self.api.cancel(timer_id)

    def wait_state(self, timer_id, states, timeout):
        return self.api.wait_state(timer_id, states, timeout)


# --------------------------------------------------------------------------
# fixtures


def redis_alive(url):
    """1 when the Redis at redis://127.0.0.1:<port> answers PING."""
    try:
        with RespClient(int(str(url).rsplit(":", 1)[1])) as c:
            return c.call("PING") in ("PONG", b"PONG")
    except (OSError, ValueError, IndexError, RedisError):
        return False


SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer")


def invalid_log_lines(log_path):
    """The log lines that look like a JSON record but are not one (strict:
    UTF-8, then JSON), at most three: a log reader must be able to take
    every line hookwheel writes, whatever a request or Redis put in it."""
    bad = []
    try:
        data = Path(log_path).read_bytes()
    except OSError:
        return bad
    for raw in data.split(b"\n"):
        if not raw.startswith(b"{"):
            continue
        try:
            json.loads(raw.decode("utf-8"))
        except ValueError:  # (UnicodeDecodeError is one)
            bad.append(raw[:300])
            if len(bad) == 3:
                break
    return bad


def sanitizer_report(log_path):
    """The lines of a sanitizer report in a process log, or "" when clean."""
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return ""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if any(m in line for m in SANITIZER_MARKERS):
            return "\n".join(lines[i:i + 40])
    return ""


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Attaches the tail of every hookwheel log to a failed test's report."""
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and rep.when in ("setup", "call"):
        for hw in getattr(item, "_hookwheels", []):
            if hw.log.exists():
                rep.sections.append((f"hookwheel {hw.name} log tail ({hw.log})",
                                     hw.log_tail(80)))


# HOOKWHEEL_TEST_REDIS=cluster runs the tests against one real Redis Cluster
# (3 masters, 3 replicas, started once; every master flushed before each
# test) instead of a Redis per test: the audit that no call of hookwheel is
# cross-slot (make integration-cluster). A test that stops, restarts or
# reconfigures its Redis is about one Redis and is skipped there (and run on
# one Redis right after).
CLUSTER_MODE = HARNESS.get("HOOKWHEEL_TEST_REDIS") == "cluster"
# On a cluster, watchdog leases need a hash-tagged prefix; hookwheel's own
# lease keys then carry the tag too (README, "Redis Cluster").
LEASE_PREFIX = "lease:{l}:" if CLUSTER_MODE else "lease:"
HW_LEASE = "hw:{l}:lease:" if CLUSTER_MODE else "hw:lease:"


# The audit runs the whole suite on the cluster and then, on one Redis, the
# tests the cluster skipped (make integration-cluster): the first pass lists
# them in HOOKWHEEL_SKIPPED_FILE, the second runs only the ones listed in
# HOOKWHEEL_ONLY_FILE. Node ids are relative to the directory pytest runs in.
def pytest_runtest_logreport(report):
    path = HARNESS.get("HOOKWHEEL_SKIPPED_FILE")
    if path and report.skipped and report.when in ("setup", "call"):
        with open(path, "a") as f:
            f.write(report.nodeid + "\n")


# HOOKWHEEL_SHARD=k/n runs the k-th of n parts of the suite, whole files
# each, so that make integration runs the plain suite as parallel pytest
# processes (most of a test's time is spent waiting for timers to fall due).
# Files are dealt out by their measured time (shard_seconds.json: seconds a
# file took in make test's plain pass, and in its sanitizer Cluster pass
# with the file's one-Redis remainder, which each part runs right after),
# the longest first; a file not measured counts 2 s a test.
with open(Path(__file__).with_name("shard_seconds.json")) as _f:
    SHARD_SECONDS = json.load(_f)


def _shard_files(items, k, n):
    tests = {}
    for item in items:
        name = os.path.basename(str(item.fspath))
        tests[name] = tests.get(name, 0) + 1
    measured = SHARD_SECONDS["cluster" if CLUSTER_MODE else "plain"]

    def cost(name):
        return measured.get(name, 2 * tests[name])
    load = [0.0] * n
    mine = set()
    for name in sorted(tests, key=lambda f: (-cost(f), f)):
        i = load.index(min(load))
        load[i] += cost(name)
        if i == k - 1:
            mine.add(name)
    return mine


def _deselect(config, items, keep):
    config.hook.pytest_deselected(items=[i for i in items if not keep(i)])
    items[:] = [i for i in items if keep(i)]


def pytest_collection_modifyitems(config, items):
    path = HARNESS.get("HOOKWHEEL_ONLY_FILE")
    if path:  # first, so that a shard deals out the tests that run
        with open(path) as f:
            wanted = set(f.read().split("\n"))
        _deselect(config, items, lambda i: i.nodeid in wanted)
    shard = HARNESS.get("HOOKWHEEL_SHARD")
    if shard:
        k, n = (int(x) for x in shard.split("/"))
        mine = _shard_files(items, k, n)
        _deselect(config, items, lambda i: os.path.basename(str(i.fspath)) in mine)


class ClusterRedis:
    """What tests use of a RedisServer, on a RedisCluster (cluster.py):
    the URL, key commands routed to their slot's master, keys over every
    master. Anything about one server skips the test."""

    KEYLESS_ALL = {"FLUSHALL", "FLUSHDB"}

    def __init__(self, cluster):
        self.cluster = cluster

    @property
    def url(self):
        return self.cluster.url

    @property
    def port(self):
        return self.cluster.masters()[0].port

    def cmd(self, *args):
        name = str(args[0]).upper()
        if name in self.KEYLESS_ALL:
            return [m.cmd(*args) for m in self.cluster.masters()][-1]
        if name == "DBSIZE":
            return sum(int(m.cmd("DBSIZE")) for m in self.cluster.masters())
        if len(args) < 2 or name in ("INFO", "CONFIG", "SCAN", "KEYS", "DEBUG", "FUNCTION", "SHUTDOWN"):
            pytest.skip(f"needs one Redis: {name}")
        return self.cluster.cmd(*args)

    redis_cmd = cmd

    def keys(self, pattern="*"):
        return self.cluster.keys(pattern)

    def port_for(self, key):
        """The port of the master that serves key."""
        return self.cluster.port_for(key)

    def alive(self):
        return True

    def __getattr__(self, name):  # stop, restart, start, dir, log, cli, proc ...
        if name.startswith("__"):
            raise AttributeError(name)
        pytest.skip(f"needs one Redis: RedisServer.{name}")


@pytest.fixture(scope="session")
def _cluster(tmp_path_factory):
    from cluster import running_cluster
    yield from running_cluster(tmp_path_factory.mktemp("cluster"))


@pytest.fixture
def redis(request, tmp_path):
    if CLUSTER_MODE:
        cluster = request.getfixturevalue("_cluster")
        for m in cluster.masters():
            m.cmd("FLUSHALL")
        before = cluster.crossslot_errors()
        yield ClusterRedis(cluster)
        assert cluster.crossslot_errors() == before, "a call of hookwheel touched keys of several slots"
        return
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_cmd(redis):
    return redis.cmd


@pytest.fixture
def receiver():
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def spawn_while_redis_is_down(request, tmp_path, redis_url, **kwargs):
    """A Hookwheel started while its Redis is down: spawned, not started (it
    cannot be ready without Redis), once it answers /healthz. The
    hookwheel_factory's teardown (the test must use that fixture) stops and
    checks it."""
    hw = Hookwheel(tmp_path, redis_url, **kwargs)
    hw.port = free_port()
    request.node._hookwheels.append(hw)
    hw._spawn()

    def up():
        try:
            return hw.request("GET", "/healthz", timeout=1.0)[0] == 200
        except OSError:
            return False

    assert wait_until(up, scaled(10), interval=0.1), hw.log_tail()
    return hw


@pytest.fixture
def hookwheel_factory(tmp_path, request):
    """start(redis=None|RedisServer|url, args=(), env=None, instance_id=None)
    -> a ready Hookwheel. Every process is stopped in teardown."""
    started = []
    request.node._hookwheels = started

    def start(redis=None, args=(), env=None, instance_id=None, binary=None):
        url = redis.url if isinstance(redis, (RedisServer, ClusterRedis)) else redis
        if CLUSTER_MODE and "--lease-prefix" not in args:
            args = [*args, "--lease-prefix", LEASE_PREFIX]
        hw = Hookwheel(tmp_path, url, instance_id=instance_id, args=args, env=env,
                       binary=binary, name=f"{len(started) + 1}")
        started.append(hw)
        return hw.start()

    try:
        yield start
    finally:
        problems = []
        for hw in started:
            if hw.alive():
                code = hw.stop(signal.SIGTERM, timeout=scaled(15.0))
                if code != 0:
                    # The last lines say why (a panic, an abort message); the
                    # report section with the whole tail may be cut off by CI.
                    problems.append(f"hookwheel {hw.name} exited with {code} on SIGTERM; "
                                    f"log tail:\n{hw.log_tail(25)}")
                elif redis_alive(hw.redis_url) and "could not hand claims back" in hw.log_tail(200):
                    problems.append(f"hookwheel {hw.name} did not hand its claims back on SIGTERM")
            report = sanitizer_report(hw.log)
            if report:
                problems.append(f"hookwheel {hw.name} sanitizer report:\n{report}")
            bad = invalid_log_lines(hw.log)
            if bad:
                problems.append(f"hookwheel {hw.name} wrote log lines that are not JSON: {bad}")
        assert not problems, "\n".join(problems)


@pytest.fixture
def hookwheel(redis, hookwheel_factory):  # redis first: it is torn down last
    return hookwheel_factory(redis)


@pytest.fixture
def api(hookwheel):
    return hookwheel.api


def create_many(api, specs, threads=8):
    """Creates every spec (each with an explicit "id") over `threads`
    keep-alive connections. Returns ({id: fire_at_ms}, [errors]); a 200 is a
    create retried after a dropped keep-alive connection."""
    fire_at, errors = {}, []
    lock = threading.Lock()

    def worker(k):
        try:
            with api.session() as s:
                for spec in specs[k::threads]:
                    status, _, body = s.create(spec)
                    with lock:
                        if status in (200, 201) and isinstance(body, dict):
                            fire_at[spec["id"]] = body["fire_at_ms"]
                        else:
                            errors.append((spec["id"], status, body))
        except Exception as e:  # reported to the caller
            with lock:
                errors.append((k, "exception", repr(e)))

    workers = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return fire_at, errors
