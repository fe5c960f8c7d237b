#!/usr/bin/env python3
"""list_cost.py - what a page of GET /timers costs Redis: Redis's own time per page (INFO
commandstats: usec of FCALL and FCALL_RO), its calls and the page's wall time, for each limit.

For each binary and run (binaries alternate: A, B, A, B, ...) a fresh redis-server (127.0.0.1,
no persistence, temp dir), the binary, and N timers of the listed state laid out by the
benchmark's load generator (a 300-byte body): `scheduled` one hour ahead (created within about a
second, so their due times interleave across partitions), `delivered` due at one instant and
delivered to the benchmark's receiver (a due burst finishes partition by partition, so the
partitions' entries come in clumps: the hard case for a merge that asks each partition for a
share). Then PAGES pages of each limit are walked from the start, following next_cursor. Every
process is started here, on 127.0.0.1, and stopped by pid.

Usage: python3 bench/list_cost.py [--bin PATH ...] [--n N] [--pages P] [--runs R]
                                  [--limits 10,100,1000] [--states scheduled,delivered]
  --bin: a hookwheel binary (repeat it for an A/B, e.g. one built in a git worktree of the base;
  default build/hookwheel). Prints one line per run and limit, then the medians."""
import argparse
import json
import pathlib
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *map(str, args)], capture_output=True, text=True,
                          check=True).stdout


def fcall_stats(port):
    calls = usec = 0
    for line in cli(port, "INFO", "commandstats").splitlines():
        if line.startswith(("cmdstat_fcall:", "cmdstat_fcall_ro:")):
            kv = dict(x.split("=") for x in line.split(":", 1)[1].split(","))
            calls += int(kv["calls"])
            usec += int(kv["usec"])
    return calls, usec


def wait_for(pred, secs, what):
    deadline = time.time() + secs
    while not pred():
        if time.time() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def http_ok(url):
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
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


def one_run(binary, state, n, pages, limits):
    d = tempfile.mkdtemp(prefix="hw-list-cost.")
    rport, hport, sport = free_port(), free_port(), free_port()
    procs = []
    try:
        procs.append(subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                                       "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL))
        wait_for(lambda: subprocess.run(["redis-cli", "-p", str(rport), "PING"], capture_output=True).returncode == 0,
                 10, "redis-server")
        hw = subprocess.Popen([binary, f"--listen=127.0.0.1:{hport}", f"--redis-url=redis://127.0.0.1:{rport}",
                               "--log-level=warn", "--max-inflight", "1024", "--queue-parallelism", "1024",
                               "--destination-allowlist", "127.0.0.0/8"],
                              stdout=subprocess.DEVNULL, stderr=open(f"{d}/hookwheel.log", "w"))
        procs.append(hw)
        base = f"http://127.0.0.1:{hport}"
        wait_for(lambda: http_ok(base + "/healthz"), 20, "hookwheel")
        loadgen = [str(ROOT / "build/bench/loadgen"), "--url", base + "/timers", "--sink-url",
                   f"http://127.0.0.1:{sport}/hook", "--rate", "0", "--count", str(n), "--body-bytes", "300",
                   "--connections", "32", "--run-id", f"lc{int(time.time() * 1000) % 100000}"]
        if state == "delivered":
            sink = subprocess.Popen([str(ROOT / "build/bench/sink"), "--port", str(sport), "--expect", str(n),
                                     "--exit-when-done"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(sink)
            time.sleep(0.2)
            subprocess.run(loadgen + ["--at-ms", str(int(time.time() * 1000) + 3000 + n // 5)],
                           capture_output=True, check=True)
            sink.wait(120 + n // 1000)
        else:
            subprocess.run(loadgen + ["--delay-ms", "3600000"], capture_output=True, check=True)
        time.sleep(1)
        out = {}
        for limit in limits:
            c0, u0 = fcall_stats(rport)
            cursor, sizes, t0 = None, [], time.time()
            for _ in range(pages):
                q = f"/timers?state={state}&limit={limit}" + (f"&cursor={urllib.parse.quote(cursor)}" if cursor else "")
                with urllib.request.urlopen(base + q, timeout=30) as r:
                    body = json.load(r)
                sizes.append(len(body["items"]))
                cursor = body["next_cursor"]
                if not cursor:
                    break
            wall = (time.time() - t0) * 1000 / len(sizes)
            c1, u1 = fcall_stats(rport)
            out[limit] = ((u1 - u0) / len(sizes), (c1 - c0) / len(sizes), wall, len(sizes), min(sizes))
        return out
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--pages", type=int, default=20)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--limits", default="10,100,1000")
    ap.add_argument("--states", default="scheduled,delivered")
    a = ap.parse_args()
    bins = a.bin or [str(ROOT / "build/hookwheel")]
    limits = [int(x) for x in a.limits.split(",")]
    res = {}
    for state in a.states.split(","):
        for run in range(1, a.runs + 1):
            for b in bins:
                for limit, (us, calls, wall, npages, smallest) in one_run(b, state, a.n, a.pages, limits).items():
                    res.setdefault((state, b, limit), []).append((us, calls, wall))
                    print(f"run {run} {state} limit={limit} {b}: redis {us:.0f} us/page, {calls:.1f} calls/page, "
                          f"{wall:.1f} ms/page ({npages} pages, smallest {smallest})", flush=True)
    print(f"medians (n={a.n}, {a.pages} pages of each limit, {a.runs} runs):")
    for (state, b, limit), v in res.items():
        print(f"  {state} limit={limit} {b}: redis {statistics.median(x[0] for x in v):.0f} us/page, "
              f"{statistics.median(x[1] for x in v):.1f} calls/page, {statistics.median(x[2] for x in v):.1f} ms/page")


if __name__ == "__main__":
    main()
