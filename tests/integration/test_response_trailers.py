"""Response trailers: curl caps the headers before the body, not trailers,
and keeps every line it reads until the transfer ends. A target that sends
trailers without end is cut off after 1 MiB, like an endless body, instead
of growing the process for the whole timeout."""

import socket
import threading
import time

from conftest import rss_kib, scaled

LOOPBACK = {"HOOKWHEEL_DESTINATION_ALLOWLIST": "127.0.0.0/8"}
MIB = 1 << 20


class EndlessTrailers:
    """Answers 200 with a one-byte chunked body, then trailers until the peer
    closes or 30 s pass; counts what it wrote."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.sent = 0
        self.closed_at = None
        self.started_at = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.started_at = time.monotonic()
                line = b"X-Trailer: " + b"t" * 1000 + b"\r\n"
                try:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n")
                    while not self.stop.is_set() and time.monotonic() - self.started_at < 30:
                        conn.sendall(line * 64)
                        self.sent += len(line) * 64
                except OSError:
                    pass
                self.closed_at = time.monotonic()
            return

    def close(self):
        self.stop.set()
        self.sock.close()
        self.thread.join(timeout=5)


def test_endless_trailers_end_the_attempt_after_one_mib_with_the_status(redis, hookwheel_factory):
    hw = hookwheel_factory(redis, env=LOOPBACK)
    server = EndlessTrailers()
    try:
        before = rss_kib(hw.proc.pid)
        status, _, timer = hw.create({"url": f"http://127.0.0.1:{server.port}/trailers", "delay_ms": 0,
                                      "timeout_ms": 20000, "retry": {"max_attempts": 1}})
        assert status == 201, timer
        done = hw.wait_state(timer["id"], ("delivered", "failed"), timeout=scaled(8))
        assert done.get("state") == "delivered", done
        assert done["last_attempt"]["status"] == 200, done
        assert done["last_attempt"]["response_snippet"] == "a", done
        assert done["last_attempt"]["duration_ms"] < 5000, done
        # hookwheel stopped reading after 1 MiB: the server's writes fail
        # once the kernel's socket buffers are full.
        assert server.closed_at is not None and server.closed_at - server.started_at < scaled(5), \
            "the trailers were still being read"
        assert server.sent < 16 * MIB, server.sent
        assert rss_kib(hw.proc.pid) - before < 64 * 1024
    finally:
        server.close()


class HugeHeaders:
    """Answers each request with its status line, then more headers than curl
    keeps: /many about 400 KB of short lines, /line one line of 150 KB."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.answered = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                path = data.split(b" ", 2)[1] if data.count(b" ") >= 2 else b""
                status = b"404 Not Found" if path.startswith(b"/404") else b"200 OK"
                if path.endswith(b"/line"):
                    head = b"X-Big: " + b"v" * (150 << 10) + b"\r\n"
                else:
                    head = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 50) for i in range(7000))
                try:
                    conn.sendall(b"HTTP/1.1 " + status + b"\r\n" + head + b"Content-Length: 2\r\n\r\nok")
                except OSError:
                    pass
                self.answered += 1

    def close(self):
        self.stop.set()
        self.sock.close()
        self.thread.join(timeout=5)


def test_headers_past_curls_own_limits_end_the_attempt_with_the_status(redis, hookwheel_factory):
    """curl ends a transfer whose headers before the body pass its limits
    (300 KB in all, 100 KB in one line) with an error, after the status
    line: the attempt keeps that status, as when the 1 MiB cap ends it, and
    is not retried as a failed connection."""
    hw = hookwheel_factory(redis, env=LOOPBACK)
    server = HugeHeaders()
    try:
        want = {"/200/many": ("delivered", 200), "/200/line": ("delivered", 200),
                "/404/many": ("failed", 404), "/404/line": ("failed", 404)}
        ids = {}
        for path in want:
            status, _, timer = hw.create({"url": f"http://127.0.0.1:{server.port}{path}", "delay_ms": 0,
                                          "retry": {"max_attempts": 3, "min_backoff_ms": 50,
                                                    "max_backoff_ms": 100}})
            assert status == 201, timer
            ids[path] = timer["id"]
        for path, (state, code) in want.items():
            done = hw.wait_state(ids[path], ("delivered", "failed"), timeout=scaled(10))
            assert (done.get("state"), done["last_attempt"]["status"], done["attempts"]) == (state, code, 1), \
                (path, done)
    finally:
        server.close()
