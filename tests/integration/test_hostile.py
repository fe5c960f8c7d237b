"""Hostile targets and a Redis restart under load (DESIGN.md §1 and §6,
README "What the target receives", "Guarantees" and "Limits").

1. Hostile targets: raw TCP servers started here on 127.0.0.1 that accept and
   never answer, dribble their answer byte by byte, answer with an endless or
   a huge body, or redirect. Each timer must end in the documented state
   within its timeout, and none of them may hold up other deliveries: a
   stream of ordinary timers (50, one every 100 ms) to the normal receiver
   runs alongside and every one of them must arrive on time.
2. Redis restarted (SHUTDOWN, AOF flushed, started again on the same port and
   dir) while timers are being created: creates during the outage answer 503
   (or 429) with Retry-After and never 2xx, the same hookwheel process is
   ready again once Redis is back, and every acknowledged timer is delivered.
3. Redis stalls longer than --redis-timeout-ms: hookwheel gives up on the
   reply, yet Redis runs the command afterwards; no timer may be stranded.
   (Fails today: a hookwheel bug, described in the test's assertion.)

Real redis-server, real hookwheel binary, real sockets; nothing is mocked."""

import socket
import threading
import time
from collections import Counter

import pytest

from conftest import CLUSTER_MODE, Reply, RespClient, create_many, now_ms, scaled, wait_until

ROUNDING_MS = 1.0          # fire_at_ms is an integer, arrival times are floats
ON_TIME_MS = 200.0         # a stream timer must arrive within this of its fire_at_ms
STREAM_N = 50
STREAM_INTERVAL_MS = 100
MIB = 1 << 20
SNIPPET_BYTES = 256        # HOOKWHEEL_RESPONSE_SNIPPET_BYTES default

TERMINAL = ("delivered", "failed", "cancelled")


# --------------------------------------------------------------------------
# hostile servers


class Conn:
    """What a hostile server saw on one TCP connection."""

    def __init__(self, sock):
        self.sock = sock
        self.accepted = time.monotonic()
        self.requests = []        # [(monotonic, request line, {header: value})]
        self.sent = 0             # response bytes written
        self.ended = None         # monotonic time the handler stopped
        self.end_reason = None    # "peer closed", "completed", "deadline", "server stopped", ...
        self.buf = b""

    def timer_ids(self):
        return [h.get("hookwheel-timer-id") for _, _, h in self.requests]

    def __repr__(self):
        dur = (self.ended - self.accepted) if self.ended else None
        return (f"<conn requests={[(line, h.get('hookwheel-timer-id'), h.get('hookwheel-attempt')) for _, line, h in self.requests]} "
                f"sent={self.sent} end={self.end_reason!r} after={dur}>")


class PeerClosed(Exception):
    pass


class HostileServer:
    """A raw TCP server on 127.0.0.1:<free port>; behaviour(server, conn) runs
    in a thread per accepted connection. Records every connection and every
    request head it read."""

    def __init__(self, behaviour, name):
        self.behaviour = behaviour
        self.name = name
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(128)
        self.lsock.settimeout(0.1)
        self.port = self.lsock.getsockname()[1]
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.conns = []
        self.threads = []
        self.errors = []
        self.accept_thread = threading.Thread(target=self._accept_loop, daemon=True)
        self.accept_thread.start()

    def url(self, path="/"):
        return f"http://127.0.0.1:{self.port}{path}"

    def _accept_loop(self):
        while not self.stopping.is_set():
            try:
                s, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(0.1)
            c = Conn(s)
            with self.lock:
                self.conns.append(c)
            t = threading.Thread(target=self._run, args=(c,), daemon=True)
            self.threads.append(t)
            t.start()

    def _run(self, c):
        try:
            self.behaviour(self, c)
            if c.end_reason is None:
                c.end_reason = "completed"
        except PeerClosed:
            c.end_reason = "peer closed"
        except (BrokenPipeError, ConnectionResetError):
            c.end_reason = "peer closed"
        except Exception as e:  # reported by the test through .errors
            c.end_reason = f"error {e!r}"
            self.errors.append(repr(e))
        finally:
            c.ended = time.monotonic()
            try:
                c.sock.close()
            except OSError:
                pass

    # -- helpers for behaviours
    def recv_some(self, c):
        """Bytes from the peer, waiting while the server runs; raises
        PeerClosed at EOF."""
        while True:
            if self.stopping.is_set():
                raise PeerClosed("server stopped")
            try:
                data = c.sock.recv(65536)
            except socket.timeout:
                continue
            if not data:
                raise PeerClosed("EOF")
            return data

    def read_request(self, c):
        """Reads one request (head and Content-Length body) and records it."""
        while b"\r\n\r\n" not in c.buf:
            c.buf += self.recv_some(c)
        head, c.buf = c.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length") or 0)
        while len(c.buf) < n:
            c.buf += self.recv_some(c)
        c.buf = c.buf[n:]
        with self.lock:
            c.requests.append((time.monotonic(), lines[0], headers))
        return headers

    def send(self, c, data):
        """Sends all of data unless the server stops; counts what went out."""
        view = memoryview(data)
        while view:
            if self.stopping.is_set():
                raise PeerClosed("server stopped")
            try:
                n = c.sock.send(view)
            except socket.timeout:
                continue
            c.sent += n
            view = view[n:]

    def wait_peer_close(self, c, limit_s):
        """Reads (and discards) until the peer closes or limit_s pass."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and not self.stopping.is_set():
            try:
                data = c.sock.recv(65536)
            except socket.timeout:
                continue
            if not data:
                raise PeerClosed("EOF")
        c.end_reason = "deadline"

    # -- results
    def requests_of(self, timer_id):
        with self.lock:
            return [(c, line, h) for c in self.conns for (_, line, h) in c.requests
                    if h.get("hookwheel-timer-id") == timer_id]

    def conns_of(self, timer_id):
        with self.lock:
            return [c for c in self.conns if timer_id in c.timer_ids()]

    def close(self):
        self.stopping.set()
        try:
            self.lsock.close()
        except OSError:
            pass
        self.accept_thread.join(timeout=2)
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self.threads:
            t.join(timeout=2)


def silent(server, c):
    """Accepts, reads the request, never answers; waits for the peer to give up."""
    server.read_request(c)
    server.wait_peer_close(c, 60)


def dribbling(response, interval_s):
    """Answers each request with `response`, one byte every interval_s."""
    def behaviour(server, c):
        while True:
            server.read_request(c)
            for i in range(len(response)):
                server.send(c, response[i:i + 1])
                time.sleep(interval_s)
    return behaviour


def pattern(n):
    """n bytes of a recognisable ASCII pattern (a body whose prefix we know)."""
    unit = b"".join(b"%08d|" % i for i in range(1 + n // 9))
    return unit[:n]


BODY_BLOCK = pattern(64 * 1024)


def endless_body(seconds):
    """200 with a close-delimited body written for `seconds` (as fast as the
    peer reads it)."""
    def behaviour(server, c):
        server.read_request(c)
        server.send(c, b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            server.send(c, BODY_BLOCK)
        c.end_reason = "deadline"
    return behaviour


def huge_finite_body(total, fast, slow_chunk, slow_interval_s):
    """200 with Content-Length: total; the first `fast` bytes at once, the rest
    slowly (slow_chunk every slow_interval_s): a client that reads it all takes
    far longer than one that stops after 1 MiB."""
    def behaviour(server, c):
        server.read_request(c)
        server.send(c, b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % total)
        body_sent = 0
        while body_sent < fast:
            n = min(len(BODY_BLOCK), fast - body_sent)
            server.send(c, BODY_BLOCK[:n])
            body_sent += n
        while body_sent < total:
            time.sleep(slow_interval_s)
            n = min(slow_chunk, total - body_sent)
            server.send(c, BODY_BLOCK[:n])
            body_sent += n
        server.wait_peer_close(c, 5)
    return behaviour


def redirecting(location):
    """Answers every request 302 Found with Location: location (keep-alive)."""
    body = b"moved"
    answer = (b"HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Type: text/plain\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (location.encode(), len(body), body))

    def behaviour(server, c):
        while True:
            server.read_request(c)
            server.send(c, answer)
    return behaviour


# --------------------------------------------------------------------------
# the stream of ordinary timers that must stay on time


class Stream:
    """STREAM_N timers to the normal receiver, one every STREAM_INTERVAL_MS,
    the first at start_ms."""

    def __init__(self, hw, receiver, tag, start_ms):
        self.receiver = receiver
        self.path = f"/stream-{tag}"
        specs = [{"id": f"stream-{tag}-{i:02d}", "url": receiver.url(self.path),
                  "fire_at_ms": int(start_ms + i * STREAM_INTERVAL_MS)} for i in range(STREAM_N)]
        self.fire_at, errors = create_many(hw.api, specs, threads=4)
        assert not errors, f"creating the stream failed: {errors[:3]}"
        created_by = now_ms()
        assert created_by < start_ms, (
            f"creating the stream took too long: it ended {created_by - start_ms:.0f} ms after "
            f"the first due time")
        self.last_ms = max(self.fire_at.values())

    def check(self):
        """Waits for the stream; asserts every timer arrived once, never early
        and within ON_TIME_MS of its fire_at_ms. Returns the worst lateness."""
        ids = set(self.fire_at)
        timeout = max(0.0, (self.last_ms - now_ms()) / 1000.0) + scaled(5)
        self.receiver.wait_until(
            lambda reqs: {r.timer_id for r in reqs if r.path == self.path} >= ids, timeout)
        reqs = self.receiver.requests(self.path)
        counts = Counter(r.timer_id for r in reqs)
        missing = sorted(ids - set(counts))
        assert not missing, f"{len(missing)} stream timers never arrived: {missing[:10]}"
        dups = sorted(t for t, n in counts.items() if n > 1)
        assert not dups, f"stream timers arrived more than once: {dups[:10]}"
        lateness = {r.timer_id: r.wall_ms - self.fire_at[r.timer_id] for r in reqs}
        early = {t: round(v, 1) for t, v in lateness.items() if v < -ROUNDING_MS}
        assert not early, f"stream timers arrived early (ms): {early}"
        late = {t: round(v, 1) for t, v in sorted(lateness.items()) if v > ON_TIME_MS}
        worst = max(lateness.values())
        assert not late, (
            f"{len(late)} of {STREAM_N} stream timers were more than {ON_TIME_MS:.0f} ms late "
            f"while the hostile targets were being called (lateness ms: {late}); worst {worst:.1f} ms")
        return worst


def timer_state(hw, timer_id, timeout):
    """Waits for a terminal state; returns the timer."""
    timer = hw.wait_state(timer_id, TERMINAL, timeout=timeout)
    assert isinstance(timer, dict) and timer.get("state") in TERMINAL, (
        f"{timer_id} did not reach a final state within {timeout:.1f} s: {timer!r}")
    return timer


def stream_start(lead_s=1.0):
    return now_ms() + scaled(lead_s) * 1000.0


def spread(start_ms, k, every_ms):
    return int(start_ms + 250 + k * every_ms)


def create_spread(hw, server, prefix, n, start, every_ms, offset_ms=0, **spec):
    """Creates n timers <prefix>-<k> to server's /<prefix>/<k>, due every
    every_ms from start (+ offset_ms), with the extra spec members; asserts
    each got 201. Returns their ids."""
    ids = [f"{prefix}-{k}" for k in range(n)]
    for k, tid in enumerate(ids):
        status, _, body = hw.create({"id": tid, "url": server.url(f"/{prefix}/{k}"),
                                     "fire_at_ms": spread(start, k, every_ms) + offset_ms, **spec})
        assert status == 201, (tid, status, body)
    return ids


# --------------------------------------------------------------------------
# 1a. accepts and never answers


def test_a_target_that_never_answers_times_out_twice_and_fails_while_other_timers_stay_on_time(
        hookwheel, receiver):
    hw = hookwheel
    server = HostileServer(silent, "silent")
    try:
        start = stream_start()
        ids = create_spread(hw, server, "silent", 3, start, 1500, timeout_ms=500,
                            retry={"max_attempts": 2, "min_backoff_ms": 100, "max_backoff_ms": 200})
        stream = Stream(hw, receiver, "silent", start)
        worst = stream.check()
        for tid in ids:
            timer = timer_state(hw, tid, scaled(5))
            la = timer["last_attempt"]
            assert timer["state"] == "failed" and timer["attempts"] == 2, (
                f"{tid}: a target that never answers should fail after 2 attempts: {timer!r}")
            assert la and la["status"] is None, f"{tid}: no response arrived, status must be null: {la!r}"
            assert la["error"] and "timeout" in la["error"].lower(), (
                f"{tid}: last_attempt.error should mention the timeout: {la!r}")
            # each attempt ended at its timeout, not long after
            assert 450 <= la["duration_ms"] <= 500 + scaled(1000), f"{tid}: {la!r}"
            seen = server.requests_of(tid)
            attempts = sorted(h.get("hookwheel-attempt") for _, _, h in seen)
            assert attempts == ["1", "2"], (
                f"{tid}: the server should have seen attempts 1 and 2, saw {attempts}: {seen!r}")
            conns = server.conns_of(tid)
            assert len(conns) == 2, f"{tid}: expected 2 connections (one per attempt): {conns!r}"
            # hookwheel gave up on each connection: the server saw it close
            assert wait_until(lambda: all(c.ended for c in conns), scaled(3)), conns
            assert all(c.end_reason == "peer closed" for c in conns), conns
        assert not server.errors, server.errors
        print(f"never-answering target: worst stream lateness {worst:.1f} ms")
    finally:
        server.close()


# --------------------------------------------------------------------------
# 1b. answers byte by byte

DRIBBLE_RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Dribble: one-byte-at-a-time\r\n"
                    b"Content-Length: 7\r\n\r\ndribble")


def test_a_dribbled_answer_times_out_when_slow_and_delivers_when_fast_while_others_stay_on_time(
        hookwheel, receiver):
    hw = hookwheel
    slow = HostileServer(dribbling(DRIBBLE_RESPONSE, 0.050), "slow dribble")
    fast = HostileServer(dribbling(DRIBBLE_RESPONSE, 0.001), "fast dribble")
    try:
        start = stream_start()
        slow_ids = create_spread(hw, slow, "dribble-slow", 4, start, 1100, timeout_ms=300,
                                 retry={"max_attempts": 1})
        fast_ids = create_spread(hw, fast, "dribble-fast", 4, start, 1100, 500, timeout_ms=3000,
                                 retry={"max_attempts": 1})
        stream = Stream(hw, receiver, "dribble", start)
        worst = stream.check()
        for tid in slow_ids:
            timer = timer_state(hw, tid, scaled(5))
            la = timer["last_attempt"]
            assert timer["state"] == "failed" and timer["attempts"] == 1, (
                f"{tid}: an answer dribbled slower than timeout_ms 300 should fail the attempt: {timer!r}")
            assert la["error"] and "timeout" in la["error"].lower(), (
                f"{tid}: last_attempt.error should mention the timeout: {la!r}")
            assert la["status"] is None, f"{tid}: the status line never completed: {la!r}"
            assert la["duration_ms"] <= 300 + scaled(1000), f"{tid}: {la!r}"
            conns = slow.conns_of(tid)
            assert len(conns) == 1, conns
            assert wait_until(lambda: conns[0].ended, scaled(3)), (
                f"{tid}: hookwheel kept reading the dribble past its timeout: {conns!r}")
            assert conns[0].end_reason == "peer closed" and conns[0].sent < len(DRIBBLE_RESPONSE), (
                f"{tid}: the dribble should have been cut off by hookwheel: {conns!r}")
        for tid in fast_ids:
            timer = timer_state(hw, tid, scaled(5))
            la = timer["last_attempt"]
            assert timer["state"] == "delivered" and timer["attempts"] == 1, (
                f"{tid}: a dribbled answer that completes within timeout_ms should deliver: {timer!r}")
            assert la["status"] == 200 and la["error"] is None, la
            assert la["response_snippet"] == "dribble", la
            assert len(fast.requests_of(tid)) == 1, fast.requests_of(tid)
        assert not slow.errors and not fast.errors, (slow.errors, fast.errors)
        print(f"dribbling targets: worst stream lateness {worst:.1f} ms")
    finally:
        slow.close()
        fast.close()


# --------------------------------------------------------------------------
# 1c. endless and huge bodies


def kernel_tcp_buffers():
    """The most a TCP connection can hold in kernel buffers on this host: the
    receiver's largest receive buffer plus the sender's largest send buffer."""
    total = 0
    for name in ("tcp_rmem", "tcp_wmem"):
        try:
            with open(f"/proc/sys/net/ipv4/{name}") as f:
                total += int(f.read().split()[2])
        except (OSError, ValueError, IndexError):
            total += 64 * MIB
    return total + MIB


def assert_capped_delivery(tid, timer, server):
    la = timer["last_attempt"]
    assert timer["state"] == "delivered" and timer["attempts"] == 1, (
        f"{tid}: a 200 with an oversized body should be delivered (the transfer ends after "
        f"1 MiB, README Limits): {timer!r}")
    assert la["status"] == 200 and la["error"] is None, f"{tid}: {la!r}"
    snippet = la["response_snippet"]
    assert len(snippet) <= SNIPPET_BYTES, (
        f"{tid}: response_snippet is {len(snippet)} bytes, more than {SNIPPET_BYTES}")
    assert snippet.encode() == BODY_BLOCK[:SNIPPET_BYTES], (
        f"{tid}: response_snippet should be the first {SNIPPET_BYTES} bytes of the body: {snippet!r}")
    assert la["duration_ms"] < scaled(5) * 1000, (
        f"{tid}: the attempt should end soon after 1 MiB was read, it took {la['duration_ms']} ms")
    conns = server.conns_of(tid)
    assert len(conns) == 1, conns
    return conns[0]


def test_an_endless_or_huge_body_ends_the_attempt_after_one_mib_and_delivers_while_others_stay_on_time(
        hookwheel, receiver):
    hw = hookwheel
    endless = HostileServer(endless_body(30.0), "endless body")
    # 5 MiB announced; 2 MiB at once, then 64 KiB a second (reading it all
    # would take about 48 s, far past timeout_ms)
    huge = HostileServer(huge_finite_body(5 * MIB, 2 * MIB, 64 * 1024, 1.0), "huge body")
    try:
        start = stream_start()
        endless_ids = create_spread(hw, endless, "endless", 3, start, 1500, timeout_ms=20000,
                                    retry={"max_attempts": 1})
        huge_ids = create_spread(hw, huge, "huge", 3, start, 1500, 700, timeout_ms=20000,
                                 retry={"max_attempts": 1})
        stream = Stream(hw, receiver, "bodies", start)
        worst = stream.check()
        sent = []
        for tid in endless_ids:
            conn = assert_capped_delivery(tid, timer_state(hw, tid, scaled(8)), endless)
            assert wait_until(lambda: conn.ended, scaled(3)), (
                f"{tid}: hookwheel is still reading the endless body: {conn!r}")
            assert conn.end_reason == "peer closed", (
                f"{tid}: the endless body should have been cut off by hookwheel: {conn!r}")
            # hookwheel stops reading after 1 MiB; what else left the server
            # can only sit in the kernel's socket buffers
            assert MIB <= conn.sent <= MIB + kernel_tcp_buffers(), (
                f"{tid}: the server wrote {conn.sent} bytes before hookwheel closed the connection: "
                f"more than 1 MiB plus the kernel's socket buffers ({kernel_tcp_buffers()} bytes)")
            sent.append(conn.sent)
            assert conn.ended - conn.requests[0][0] < scaled(5), (
                f"{tid}: the endless transfer went on for {conn.ended - conn.requests[0][0]:.1f} s")
        for tid in huge_ids:
            conn = assert_capped_delivery(tid, timer_state(hw, tid, scaled(8)), huge)
            assert wait_until(lambda: conn.ended, scaled(8)), (
                f"{tid}: hookwheel is still reading the 5 MiB body: {conn!r}")
            assert conn.end_reason == "peer closed" and conn.sent < 5 * MIB, (
                f"{tid}: hookwheel should have closed the connection before the 5 MiB body "
                f"was complete: {conn!r}")
        assert not endless.errors and not huge.errors, (endless.errors, huge.errors)
        print(f"oversized bodies: worst stream lateness {worst:.1f} ms; endless bodies cut off after "
              f"{[round(n / MIB, 1) for n in sent]} MiB written")
    finally:
        endless.close()
        huge.close()


# --------------------------------------------------------------------------
# 1d. redirect


def test_a_302_to_the_receiver_is_not_followed_and_fails_the_timer_while_others_stay_on_time(
        hookwheel, receiver):
    hw = hookwheel
    server = HostileServer(redirecting(receiver.url("/redirected")), "redirect")
    try:
        start = stream_start()
        ids = create_spread(hw, server, "redirect", 4, start, 1100,
                            retry={"max_attempts": 3, "min_backoff_ms": 100, "max_backoff_ms": 200})
        stream = Stream(hw, receiver, "redirect", start)
        worst = stream.check()
        for tid in ids:
            timer = timer_state(hw, tid, scaled(5))
            la = timer["last_attempt"]
            assert timer["state"] == "failed" and timer["attempts"] == 1, (
                f"{tid}: a 3xx fails the timer at once, without a retry: {timer!r}")
            assert la["status"] == 302, f"{tid}: last_attempt.status should be 302: {la!r}"
            assert la["response_snippet"] == "moved", la
            seen = server.requests_of(tid)
            assert len(seen) == 1, f"{tid}: the redirecting target should see one request: {seen!r}"
        time.sleep(0.3)  # a followed redirect would be a request right after the 302
        followed = receiver.requests("/redirected") + [
            r for r in receiver.requests() if r.timer_id in ids]
        assert not followed, f"the redirect was followed to the receiver: {followed!r}"
        assert not server.errors, server.errors
        print(f"redirecting target: worst stream lateness {worst:.1f} ms")
    finally:
        server.close()


# --------------------------------------------------------------------------
# 2. Redis restarted under load


def redis_config(redis, name):
    reply = redis.cmd("CONFIG", "GET", name)
    return reply[1] if len(reply) == 2 else None


def stored_ids(redis):
    """Ids of every timer record in Redis (keys hw:{P}:t:<id>)."""
    return {k.split(":t:", 1)[1] for k in redis.keys("hw:*:t:*")}


def test_redis_restarted_under_load_refuses_creates_meanwhile_and_loses_no_acknowledged_timer(
        redis, receiver, hookwheel_factory):
    hw = hookwheel_factory(redis)
    pid = hw.proc.pid
    port, data_dir = redis.port, str(redis.dir.resolve())
    assert redis_config(redis, "appendonly") == "yes", "the redis fixture should run with AOF on"
    assert redis_config(redis, "appendfsync") == "everysec"
    url = receiver.url("/rr")
    results = []           # dicts: id, status, retry_after, sent, answered (ms), fire_at_ms
    lock = threading.Lock()
    stop = threading.Event()

    def creator(k):
        i = 0
        with hw.api.session() as s:
            while not stop.is_set():
                tid = f"rr-{k}-{i:05d}"
                delay = 1000 + (i * 397 + k * 211) % 2001       # 1-3 s ahead
                spec = {"id": tid, "url": url, "delay_ms": delay}
                i += 1
                sent = now_ms()
                try:
                    status, headers, body = s.create(spec)
                    rec = {"id": tid, "status": status, "retry_after": headers.get("Retry-After"),
                           "fire_at_ms": body.get("fire_at_ms") if isinstance(body, dict) else None,
                           "body": body if status >= 300 else None}
                except Exception as e:  # recorded; asserted on below
                    rec = {"id": tid, "status": f"exception {e!r}", "retry_after": None,
                           "fire_at_ms": None, "body": None}
                rec["sent"], rec["answered"] = sent, now_ms()
                with lock:
                    results.append(rec)
                time.sleep(0.008)

    workers = [threading.Thread(target=creator, args=(k,), daemon=True) for k in range(2)]
    for w in workers:
        w.start()
    try:
        time.sleep(2.0)                       # normal load first
        t_stop = now_ms()
        redis.stop()                          # SHUTDOWN NOSAVE: the AOF is flushed and fsynced
        t_down = now_ms()
        assert not redis.alive()
        saw_not_ready = wait_until(lambda: hw.request("GET", "/readyz")[0] == 503, 2.0, interval=0.05)
        time.sleep(max(0.0, 2.5 - (now_ms() - t_down) / 1000.0))
        t_up_begin = now_ms()
        redis.start(port=port)                # same port, same dir: the AOF is replayed
        t_up = now_ms()
        # the restarted Redis holds every timer acknowledged before the stop
        with lock:
            acked_before_stop = [r["id"] for r in results
                                 if r["answered"] < t_stop and r["status"] in (200, 201)]
        present = stored_ids(redis)
        ready = wait_until(lambda: hw.request("GET", "/readyz")[0] == 200, scaled(10), interval=0.05)
        t_ready = now_ms()
        time.sleep(2.0)                       # load after the restart
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=scaled(15))
    assert redis.port == port and str(redis.dir.resolve()) == data_dir
    assert redis_config(redis, "dir") == data_dir and redis_config(redis, "appendonly") == "yes"
    assert redis_config(redis, "appendfsync") == "everysec"
    assert saw_not_ready, "GET /readyz never answered 503 while Redis was down"
    assert ready, (f"GET /readyz did not answer 200 within {scaled(10):.0f} s of Redis coming back; "
                   f"hookwheel log:\n{hw.log_tail(30)}")
    assert hw.alive() and hw.proc.pid == pid, "hookwheel must recover without a restart"
    lost_at_restart = sorted(set(acked_before_stop) - present)
    assert not lost_at_restart, (
        f"{len(lost_at_restart)} timers acknowledged before the SHUTDOWN are not in the restarted "
        f"Redis: {lost_at_restart[:10]}")

    ok = [r for r in results if r["status"] in (200, 201)]
    refused = [r for r in results if r["status"] not in (200, 201)]
    odd = [r for r in refused if r["status"] not in (503, 429)]
    assert not odd, f"creates must answer 2xx, 503 or 429: {odd[:5]}"
    no_retry_after = [r for r in refused if not (r["retry_after"] or "").strip().isdigit()]
    assert not no_retry_after, f"503/429 without Retry-After: {no_retry_after[:5]}"
    during = [r for r in results if r["sent"] >= t_down and r["answered"] <= t_up_begin]
    assert len(during) >= 10, f"only {len(during)} creates fell inside the outage"
    acked_during = [r for r in during if r["status"] in (200, 201)]
    assert not acked_during, f"creates answered 2xx while Redis was down: {acked_during[:5]}"
    before = [r for r in results if r["answered"] < t_stop]
    after = [r for r in results if r["sent"] > t_ready]
    assert before and all(r["status"] in (200, 201) for r in before), (
        [r for r in before if r["status"] not in (200, 201)][:5])
    assert len(after) >= 20, f"only {len(after)} creates after Redis came back"
    refused_after = [r for r in after if r["status"] not in (200, 201)]
    assert not refused_after, (
        f"{len(refused_after)} creates refused after /readyz answered 200 again: {refused_after[:5]}")

    # every acknowledged timer is delivered, once, never early
    ids = {r["id"] for r in ok}
    fire_at = {r["id"]: r["fire_at_ms"] for r in ok}
    last_due = max(fire_at.values())
    receiver.wait_until(lambda reqs: {q.timer_id for q in reqs if q.path == "/rr"} >= ids,
                        max(0.0, (last_due - now_ms()) / 1000.0) + scaled(10))
    time.sleep(0.5)  # late duplicates
    reqs = receiver.requests("/rr")
    counts = Counter(q.timer_id for q in reqs)
    missing = sorted(ids - set(counts))
    if missing:
        states = {}
        for tid in missing[:10]:
            states[tid] = hw.get(tid)[2]
        raise AssertionError(
            f"{len(missing)} of {len(ids)} acknowledged timers were never delivered after the Redis "
            f"restart, e.g. {missing[:10]}; their stored state: {states}. A timer left 'firing', or "
            f"'scheduled' past its fire_at, is the lost-reply bug of "
            f"test_a_redis_stall_longer_than_the_redis_timeout_strands_no_timer: Redis ran a script "
            f"in the event-loop turn of its SHUTDOWN and its reply never reached hookwheel")
    dups = {t: [q.attempt for q in reqs if q.timer_id == t] for t, n in counts.items() if n > 1}
    assert not dups, (f"{len(dups)} timers arrived more than once (attempt numbers): "
                      f"{dict(list(dups.items())[:10])}")
    for q in reqs:
        if q.timer_id in fire_at:
            assert q.wall_ms >= fire_at[q.timer_id] - ROUNDING_MS, f"{q!r} arrived early"
    # timers due during the outage waited in memory and fired soon after Redis was back
    held = [q for q in reqs if q.timer_id in fire_at and t_down <= fire_at[q.timer_id] <= t_up]
    assert held, "no timer fell due during the outage: the test did not exercise it"
    too_late = [(q.timer_id, round(q.wall_ms - t_ready)) for q in held
                if q.wall_ms > t_ready + scaled(2.0) * 1000]
    assert not too_late, (f"timers due during the outage arrived more than {scaled(2.0):.0f} s after "
                          f"/readyz was 200 again (ms after ready): {too_late[:10]}")
    unknown = sorted(set(counts) - {r["id"] for r in results})
    assert not unknown, unknown[:10]
    refused_but_delivered = sorted(set(counts) & {r["id"] for r in refused})

    # GET shows every acknowledged timer delivered
    not_delivered = {}
    with hw.api.session() as s:
        for tid in sorted(ids):
            status, _, body = s.get(tid)
            if status != 200 or body.get("state") != "delivered":
                not_delivered[tid] = (status, body)
    assert not not_delivered, (f"{len(not_delivered)} delivered timers do not read back as delivered: "
                               f"{dict(list(not_delivered.items())[:5])}")
    log = hw.log.read_text(errors="replace")
    outage_logged = max(log.rfind("Redis connection lost"), log.rfind("Redis unreachable"))
    assert outage_logged >= 0 and "Redis connected" in log[outage_logged:], (
        "hookwheel should log the outage and the reconnect")
    print(f"creates: {len(ok)} acknowledged, {len(refused)} refused "
          f"({Counter(r['status'] for r in refused)}), {len(during)} inside the outage; "
          f"outage {(t_up - t_stop) / 1000:.2f} s, ready {(t_ready - t_up) / 1000:.2f} s after Redis; "
          f"{len(held)} timers due during the outage, latest "
          f"{max(q.wall_ms - t_ready for q in held):.0f} ms after ready; "
          f"refused but written anyway and delivered: {len(refused_but_delivered)}")


# --------------------------------------------------------------------------
# 3. Redis stalls past --redis-timeout-ms: a reply is lost after the command ran

# Keeps Redis busy (no other client is served) for ARGV[1] ms; writes nothing.
BUSY_SCRIPT = ("local s = redis.call('TIME') repeat local t = redis.call('TIME') "
               "until (t[1] - s[1]) * 1000000 + (t[2] - s[2]) > tonumber(ARGV[1]) * 1000 return 1")
STALL_MS = 1000


def stall_redis(redis, ms=STALL_MS):
    """Starts a busy script on its own connection; returns the thread."""
    def run():
        with RespClient(redis.port, timeout=10 + ms / 1000.0) as c:
            c.call("EVAL", BUSY_SCRIPT, 0, ms)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def sleep_until_ms(t_ms):
    left = (t_ms - now_ms()) / 1000.0
    if left > 0:
        time.sleep(left)


@pytest.mark.skipif(CLUSTER_MODE, reason="stalls one Redis (a busy script); a cluster's masters stall one by one")
def test_a_redis_stall_longer_than_the_redis_timeout_strands_no_timer(
        redis, receiver, hookwheel_factory):
    """Redis stalls (here: a busy script, in production a slow fsync, a big
    command, a paused VM) for longer than --redis-timeout-ms. hookwheel gives
    up on the reply and drops the connection, but Redis still runs the
    commands it already received once the stall ends. Whatever hookwheel had
    sent - a create, a begin-attempt, a finish - must not leave a timer that
    never fires. Window and lease are long so that hookwheel sends nothing
    else to Redis meanwhile (no sweep or lease renewal in the stall)."""
    hw = hookwheel_factory(redis, args=["--redis-timeout-ms", "300", "--window-ms", "60000",
                                        "--lease-ttl-ms", "60000"])
    url = receiver.url("/stall")
    t0 = now_ms() + scaled(1.0) * 1000
    # B: begin-attempt sent during the stall (timers due 100 ms into it)
    begin_ids = [f"stall-begin-{k}" for k in range(5)]
    for tid in begin_ids:
        status, _, body = hw.create({"id": tid, "url": url, "fire_at_ms": int(t0)})
        assert status == 201, (status, body)
    # C: the finish of a failed attempt (500, answered 400 ms late) sent
    # during the stall; the retry (100-200 ms later) is held in memory
    receiver.plan("/stall-retry", [Reply(500, delay_s=0.4), Reply(204)])
    status, _, body = hw.create({
        "id": "stall-retry", "url": receiver.url("/stall-retry"), "fire_at_ms": int(t0 + 2500),
        "retry": {"max_attempts": 3, "min_backoff_ms": 100, "max_backoff_ms": 200}})
    assert status == 201, (status, body)

    sleep_until_ms(t0 - 100)
    stall_redis(redis).join()                    # stall t0-100 .. t0+900
    sleep_until_ms(t0 + 2700)
    stall_redis(redis).join()                    # stall t0+2700 .. t0+3700
    # A: a create sent during the stall; the client retries it (same id, same
    # spec) after the stall, as a 503 with Retry-After asks it to
    sleep_until_ms(t0 + 5500)
    stall = stall_redis(redis)                   # stall t0+5500 .. t0+6500
    time.sleep(0.05)
    create_spec = {"id": "stall-create", "url": url, "fire_at_ms": int(t0 + 7500)}
    status, headers, body = hw.create(create_spec)
    assert status in (503, 429) and (headers.get("Retry-After") or "").strip().isdigit(), (
        f"a create during a Redis stall longer than the redis timeout: {status} {headers.items()} {body!r}")
    stall.join()
    retried = wait_until(lambda: hw.create(create_spec)[0] in (200, 201), scaled(5), interval=0.2)
    assert retried, "the create retried after the stall was not acknowledged"

    ids = begin_ids + ["stall-retry", "stall-create"]
    receiver.wait_until(lambda reqs: {r.timer_id for r in reqs if r.headers.get("Hookwheel-Attempt")
                                      and (r.timer_id != "stall-retry" or r.attempt == "2")} >= set(ids),
                        max(0.0, (t0 + 7500 - now_ms()) / 1000.0) + scaled(4))
    time.sleep(0.3)
    stranded = {}
    for tid in ids:
        timer = hw.get(tid)[2]
        if not isinstance(timer, dict) or timer.get("state") != "delivered":
            claimed_by = [k for k in redis.keys("hw:*:cl:*") if tid in redis.cmd("ZRANGE", k, 0, -1)]
            stranded[tid] = {"state": timer.get("state") if isinstance(timer, dict) else timer,
                             "attempts": timer.get("attempts") if isinstance(timer, dict) else None,
                             "fire_at_ms - now": (int(timer["fire_at_ms"] - now_ms())
                                                  if isinstance(timer, dict) else None),
                             "requests": [r.attempt for r in receiver.requests(timer_id=tid)],
                             "in claimed zset": claimed_by}
    assert not stranded, (
        "HOOKWHEEL BUG (lost Redis reply strands timers): Redis stalled "
        f"{STALL_MS} ms, longer than --redis-timeout-ms 300; hookwheel timed out, dropped the "
        "connection and treated the command as not executed, but Redis executed it when the stall "
        "ended. The re-sent begin then finds the timer 'firing' (begin.lua returns {0,'firing'}) and "
        "the job is dropped; the re-sent finish finds it no longer 'firing' and the job is dropped; "
        "a create that claimed the timer for this instance answered 503 and was never put in the "
        "wheel, so its idempotent retry answers 200 for a timer that never fires. These timers are "
        "claimed by the live instance (its lease is renewed), so no sweep or reaper picks them up "
        f"until it stops: {stranded}")
    dups = {t: n for t, n in Counter(r.timer_id for r in receiver.requests() if r.timer_id).items()
            if n > (2 if t == "stall-retry" else 1)}
    assert not dups, dups
