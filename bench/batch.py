#!/usr/bin/env python3
"""Batch creates and the Redis bytes of labels, measured on this machine.

  python3 bench/batch.py [--bin build/hookwheel] [--runs 3] [--timers 200000]
                         [--batch 1000] [--conns 4] [--labels 0] [--skip-lb]

Starts a redis-server (AOF everysec, as bench/run.sh does) and the hookwheel
binary on loopback ports, then:

  B  POSTs --timers timers in batches of --batch over --conns keep-alive
     connections (one thread each, bodies made before the clock starts) and
     reports accepted timers/s (every item must be 201), and the CPU time
     hookwheel and redis-server spent per timer meanwhile (/proc/<pid>/stat),
     Redis's also with the AOF rewrites the run started (their forked
     children's CPU, counted once the rewrite ends); a fresh Redis per run.
     With --labels N each timer carries N labels of 1,000 values each.
  LB for each of three label shapes, on a fresh Redis, creates 50,000 timers
     without labels and then 50,000 with: one label they all share
     (`customer: 42`), four shared labels, one label of 1,000 values (50
     timers each); due in an hour (a 200-byte body, 32-hex ids). Reports
     INFO memory used_memory per timer and per label from the differences.

Prints medians (and every run) as a Markdown table. Processes it starts, it
stops."""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_cmd(port, *args):
    out = subprocess.run(["redis-cli", "-p", str(port), *map(str, args)], capture_output=True, text=True, check=True)
    return out.stdout


def used_memory(port):
    """INFO memory used_memory once it is steady: Redis resizes its key table
    incrementally (both tables held meanwhile, finished by its cron), so a
    figure read right after a phase can include a table about to go."""
    def read():
        for line in redis_cmd(port, "info", "memory").splitlines():
            if line.startswith("used_memory:"):
                return int(line.split(":")[1])
        raise RuntimeError("no used_memory")
    last = read()
    for _ in range(30):
        time.sleep(0.2)
        now = read()
        if now == last:
            return now
        last = now
    return last


class Stack:
    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="hw-batch-")
        self.rport, self.hport = free_port(), free_port()
        self.redis = subprocess.Popen(["redis-server", "--port", str(self.rport), "--bind", "127.0.0.1",
                                       "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
                                       "--dir", self.dir], stdout=subprocess.DEVNULL)
        for _ in range(200):
            try:
                if redis_cmd(self.rport, "ping").strip() == "PONG":
                    break
            except subprocess.CalledProcessError:
                pass
            time.sleep(0.02)
        self.hw = subprocess.Popen([binary, "--listen", f"127.0.0.1:{self.hport}",
                                    "--redis-url", f"redis://127.0.0.1:{self.rport}", "--log-level", "warn",
                                    "--destination-allowlist", "127.0.0.1/32"],
                                   stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "hw.log"), "w"))
        for _ in range(500):
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.hport, timeout=1)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.02)
        else:
            raise RuntimeError("hookwheel did not become ready")

    def stop(self):
        for p in (self.hw, self.redis):
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def bodies(n, size, prefix, labels=None, base=None):
    base = base or int(time.time() * 1000) + 3_600_000
    out = []
    body = "x" * 200
    for i in range(0, n, size):
        items = []
        for k in range(i, min(n, i + size)):
            spec = {"id": uuid.uuid4().hex, "url": "http://127.0.0.1:9/hook", "fire_at_ms": base + k % 600_000,
                    "body": body}
            if labels:
                spec["labels"] = labels(k)
            items.append(spec)
        out.append(json.dumps({"timers": items}).encode())
    return out


def post_all(port, payloads, conns):
    errors = []

    def worker(part):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for p in part:
            c.request("POST", "/timers/batch", body=p, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            if r.status != 200:
                errors.append((r.status, data[:200]))
                continue
            res = json.loads(data)
            if res["created"] != len(res["items"]):
                errors.append(("items", res["failed"]))
        c.close()

    threads = [threading.Thread(target=worker, args=(payloads[k::conns],)) for k in range(conns)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - t0, errors


def cpu_ticks(pid, children=False):
    """utime + stime of a process (all its threads), in clock ticks; with
    children, also (as a second value) cutime + cstime, those of the
    children it has waited for: Redis's AOF rewrites, a forked child each,
    once it has reaped them."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    own = int(fields[11]) + int(fields[12])
    return (own, int(fields[13]) + int(fields[14])) if children else own


def rewriting(port):
    """1 while Redis's AOF rewrite child runs."""
    for line in redis_cmd(port, "info", "persistence").splitlines():
        if line.startswith("aof_rewrite_in_progress:"):
            return int(line.split(":")[1])
    return 0


def run_b(binary, timers, size, conns, labels=0):
    """Accepted timers/s, and hookwheel's and Redis's CPU µs per timer."""
    st = Stack(binary)
    try:
        keys = ("customer", "kind", "region", "tier", "team", "env", "app", "zone")[:labels]
        payloads = bodies(timers, size, "b",
                          labels=(lambda k: {key: f"{key}-{k % 1000}" for key in keys}) if labels else None)
        h0, (r0, c0) = cpu_ticks(st.hw.pid), cpu_ticks(st.redis.pid, True)
        secs, errors = post_all(st.hport, payloads, conns)
        h1, r1 = cpu_ticks(st.hw.pid), cpu_ticks(st.redis.pid)
        for _ in range(300):  # a rewrite the run started counts once Redis has reaped it
            if not rewriting(st.rport):
                break
            time.sleep(0.1)
        time.sleep(0.2)
        c1 = cpu_ticks(st.redis.pid, True)[1]  # (the children's only: Redis's own CPU ends at r1)
        if errors:
            raise RuntimeError(f"batch errors: {errors[:3]}")
        us = 1e6 / os.sysconf("SC_CLK_TCK") / timers
        return timers / secs, (h1 - h0) * us, (r1 - r0) * us, (r1 - r0 + c1 - c0) * us
    finally:
        st.stop()


def run_lb(binary):
    """Per label scenario, a fresh Redis: 50,000 timers without labels, then
    50,000 with; the cost of a label is the difference per timer (each phase
    grows Redis's key table alike, so its resizes cancel out)."""
    n = 50_000
    four = lambda k: {"customer": "43", "kind": "reminder", "region": "eu", "tier": "gold"}
    out = []
    for name, labels, count in (("one", lambda k: {"customer": "42"}, 1), ("four", four, 4),
                                ("many", lambda k: {"customer": f"{k % 1000:06d}"}, 1)):
        st = Stack(binary)
        try:
            m0 = used_memory(st.rport)
            post_all(st.hport, bodies(n, 1000, "n"), 2)
            m1 = used_memory(st.rport)
            post_all(st.hport, bodies(n, 1000, name, labels=labels), 2)
            m2 = used_memory(st.rport)
        finally:
            st.stop()
        plain = (m1 - m0) / n
        if not out:
            out.append(plain)
        out.append(((m2 - m1) / n - plain) / count)
    return tuple(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/hookwheel")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timers", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--labels", type=int, default=0, choices=range(0, 9),
                    help="B's timers each carry this many labels (of 1,000 values each)")
    ap.add_argument("--skip-lb", action="store_true", help="measure B only")
    a = ap.parse_args()
    bs = [run_b(a.bin, a.timers, a.batch, a.conns, a.labels) for _ in range(a.runs)]
    rates = [b[0] for b in bs]
    lbs = [] if a.skip_lb else [run_lb(a.bin) for _ in range(a.runs)]
    print(f"# bench/batch.py --timers {a.timers} --batch {a.batch} --conns {a.conns} --labels {a.labels}"
          f" ({a.runs} runs, {a.bin})\n")
    print("| figure | median | runs |\n| --- | ---: | --- |")
    print(f"| B: timers/s accepted in batches of {a.batch}{f', {a.labels} labels each' if a.labels else ''} | "
          f"{statistics.median(rates):,.0f} | "
          + ", ".join(f"{r:,.0f}" for r in rates) + " |")
    for i, who in ((1, "hookwheel"), (2, "redis-server"), (3, "redis-server with its AOF rewrites")):
        vals = [b[i] for b in bs]
        print(f"| B: {who} CPU µs per accepted timer | {statistics.median(vals):.1f} | "
              + ", ".join(f"{v:.1f}" for v in vals) + " |")
    for i, name in enumerate(("Redis bytes per pending timer, no labels (200-byte body)",
                              "Redis bytes per label per timer: one label shared by 50,000 timers",
                              "Redis bytes per label per timer: four labels shared by 50,000 timers",
                              "Redis bytes per label per timer: one label of 1,000 values, 50 timers each")):
        vals = [x[i] for x in lbs]
        if not vals:
            break
        print(f"| {name} | {statistics.median(vals):.0f} | " + ", ".join(f"{v:.0f}" for v in vals) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
