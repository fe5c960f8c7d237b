#!/usr/bin/env python3
"""hostile_reads.py - how late one namespace's timers start while another namespace reads
what its many queues have: their delivery figures (GET /stats) or their settings and counts
(GET /queues), and what those reads cost.

For each binary and run (binaries alternate: A, B, A, B, ...) a fresh redis-server (127.0.0.1,
no persistence, temp dir) and the binary with two API tokens (namespaces a and b). Namespace a
gets QUEUES queues:
- --read stats: its per-minute figures written straight into Redis, as QUEUES queues'
  deliveries would have left them (persistence/stats.h: <queue>/d, /a, /l<bucket>, /fa, /f: five
  fields per queue and minute) for the last MINUTES minutes and the next one; a read is
  GET /stats?minutes=MINUTES;
- --read queues: one timer in each of QUEUES queues, due in an hour (POST /timers/batch); a read
  is GET /queues;
- --read timers: the same timers; a read is a page of
  GET /timers?state=scheduled&limit=1000, each reader
  walking the pages from the first, again and again;
- --read batch: no setup; a "read" is a POST /timers/batch of 1,000 timers due in an hour
  (a's creates in bulk rather than its reads).
Then READERS clients of namespace a read back to back (HOOKWHEEL_MAX_EXPENSIVE_PER_NAMESPACE is
4 by default) while namespace b creates a timer every 20 ms, due 300 ms later, TIMERS in all,
and a receiver here notes when each arrives. Lateness is arrival - due. With --readers 0 the
same without reads. Every process is started here, on 127.0.0.1, and stopped by pid.

Usage: python3 bench/hostile_reads.py [--bin PATH ...] [--read stats|queues|timers|batch] [--runs R]
                                      [--queues Q] [--minutes M] [--readers K] [--timers N]
  --bin: a hookwheel binary (repeat it for an A/B, e.g. one built in a git worktree of the base;
  default build/hookwheel). Prints one line per run, then the medians."""
import argparse
import http.client
import http.server
import json
import pathlib
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOKEN_A, TOKEN_B = "bench-token-a-0123456789", "bench-token-b-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resp(*args):
    parts = [str(a).encode() for a in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def wait_for(pred, secs, what):
    deadline = time.time() + secs
    while not pred():
        if time.time() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def healthy(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        c.request("GET", "/healthz")
        return c.getresponse().status == 200
    except OSError:
        return False


def stop(p, secs=20):
    if p and p.poll() is None:
        p.terminate()
        try:
            p.wait(secs)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def one_run(binary, a):
    d = tempfile.mkdtemp(prefix="hw-stats-reads.")
    rport, hport = free_port(), free_port()
    procs, arrivals = [], {}

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            arrivals[body["i"]] = time.time() * 1000 - body["due"]
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        procs.append(subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                                       "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL))
        wait_for(lambda: subprocess.run(["redis-cli", "-p", str(rport), "PING"], capture_output=True).returncode == 0,
                 10, "redis-server")
        with open(f"{d}/tokens", "w") as f:
            f.write(f"a {TOKEN_A}\nb {TOKEN_B}\n")
        procs.append(subprocess.Popen([binary, f"--listen=127.0.0.1:{hport}", f"--redis-url=redis://127.0.0.1:{rport}",
                                       "--log-level=warn", "--destination-allowlist", "127.0.0.0/8",
                                       f"--api-tokens-file={d}/tokens"],
                                      stdout=subprocess.DEVNULL, stderr=open(f"{d}/hookwheel.log", "w")))
        wait_for(lambda: healthy(hport), 20, "hookwheel")
        if a.read == "stats":
            minute = int(time.time() * 1000) // 60000
            cmds = b"".join(resp("HSET", f"hw:stats:{{ns:a}}:{m}", f"q{i:05d}/d", i % 7, f"q{i:05d}/a", 3,
                                 f"q{i:05d}/l{i % 20}", 1, f"q{i:05d}/fa", 2, f"q{i:05d}/f", i % 3)
                            for m in range(minute - a.minutes + 1, minute + 2) for i in range(a.queues))
            subprocess.run(["redis-cli", "-p", str(rport), "--pipe"], input=cmds, capture_output=True, check=True)
            path = f"/stats?minutes={a.minutes}"
        elif a.read == "batch":
            path = "/timers/batch"
            batch = json.dumps({"timers": [{"url": "http://127.0.0.1:9/a", "delay_ms": 3600000} for _ in range(1000)]})
        else:
            c = http.client.HTTPConnection("127.0.0.1", hport, timeout=120)
            for k in range(0, a.queues, 1000):
                timers = [{"url": "http://127.0.0.1:9/a", "delay_ms": 3600000, "queue": f"q{i:05d}"}
                          for i in range(k, min(a.queues, k + 1000))]
                c.request("POST", "/timers/batch", body=json.dumps({"timers": timers}),
                          headers={"Authorization": f"Bearer {TOKEN_A}", "Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                if r.status != 200:
                    raise RuntimeError(f"batch create answered {r.status}")
            path = "/queues" if a.read == "queues" else "/timers?state=scheduled&limit=1000"
        stopping, reads = threading.Event(), []

        def reader():
            c = http.client.HTTPConnection("127.0.0.1", hport, timeout=120)
            cursor = None
            while not stopping.is_set():
                t0 = time.monotonic()
                if a.read == "batch":
                    c.request("POST", path, body=batch,
                              headers={"Authorization": f"Bearer {TOKEN_A}", "Content-Type": "application/json"})
                else:
                    c.request("GET", path + (f"&cursor={urllib.parse.quote(cursor)}" if cursor else ""),
                              headers={"Authorization": f"Bearer {TOKEN_A}"})
                r = c.getresponse()
                text = r.read()
                reads.append((r.status, (time.monotonic() - t0) * 1000))
                if a.read == "timers" and r.status == 200:
                    cursor = json.loads(text).get("next_cursor")

        threads = [threading.Thread(target=reader) for _ in range(a.readers)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        c = http.client.HTTPConnection("127.0.0.1", hport, timeout=60)
        creates = []
        url = f"http://127.0.0.1:{receiver.server_address[1]}/b"
        for i in range(a.timers):
            due = int(time.time() * 1000) + 300
            t0 = time.monotonic()
            c.request("POST", "/timers", body=json.dumps({"url": url, "fire_at_ms": due, "json": {"i": i, "due": due}}),
                      headers={"Authorization": f"Bearer {TOKEN_B}", "Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            if r.status != 201:
                raise RuntimeError(f"create answered {r.status}")
            creates.append((time.monotonic() - t0) * 1000)
            time.sleep(0.02)
        wait_for(lambda: len(arrivals) == a.timers, 60, "namespace b's timers")
        stopping.set()
        for t in threads:
            t.join()
        late = list(arrivals.values())
        ok = [ms for status, ms in reads if status == 200]
        return {"late_p50": quantile(late, 0.5), "late_p99": quantile(late, 0.99), "late_max": max(late),
                "create_p99": quantile(creates, 0.99), "reads": len(ok), "refused": len(reads) - len(ok),
                "read_ms": statistics.median(ok) if ok else 0.0}
    finally:
        receiver.shutdown()
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append")
    ap.add_argument("--read", choices=("stats", "queues", "timers", "batch"), default="stats")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--queues", type=int, default=20000)
    ap.add_argument("--minutes", type=int, default=5)
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--timers", type=int, default=150)
    a = ap.parse_args()
    bins = a.bin or [str(ROOT / "build/hookwheel")]
    res = {}
    for run in range(1, a.runs + 1):
        for b in bins:
            r = one_run(b, a)
            res.setdefault(b, []).append(r)
            print(f"run {run} {b}: b's lateness p50 {r['late_p50']:.1f} p99 {r['late_p99']:.1f} max {r['late_max']:.1f} ms, "
                  f"b's create p99 {r['create_p99']:.1f} ms; a's reads {r['reads']} (refused {r['refused']}), "
                  f"median {r['read_ms']:.0f} ms", flush=True)
    what = (f"GET /stats, {a.minutes} minutes" if a.read == "stats" else
            "POST /timers/batch" if a.read == "batch" else f"GET /{a.read}")
    print(f"medians ({what}, {a.queues} queues, {a.readers} readers, {a.timers} timers, {a.runs} runs):")
    for b, v in res.items():
        print(f"  {b}: " + ", ".join(f"{k} {statistics.median(x[k] for x in v):.1f}" for k in v[0]))


if __name__ == "__main__":
    main()
