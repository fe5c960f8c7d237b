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
