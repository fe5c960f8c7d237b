#!/usr/bin/env python3
"""script_cost.py - Redis time per timer of the create, claim, begin and finish functions
(and of create_batch).

Starts a scratch redis-server (127.0.0.1, AOF everysec, temp dir), loads
persistence/lua's scripts as the service does (one function library: the prelude, then
each script as a function),
creates N timers with the create function (the D workload's spec: a 100-byte
json pad and a retry policy; the record laid out as persistence/timers.c
does), claims them as the sweep does (--claim-batch a call), then begins and
finishes ("delivered") them in
batches of --batch timers of one partition, as the engine does, pipelined; then
creates N more with create_batch, --create-batch a call (no labels; a plain
call as the service makes one, or with --general each item on its own),
and reads Redis's own time for each phase from INFO commandstats (usec of
FCALL / N). This is the functions' cost alone: protocol parsing, replies and
AOF writes come on top.

Usage: python3 bench/script_cost.py [--lua DIR] [--n N] [--runs R] [--batch B] [--claim-batch C] [--create-batch K]
                                   [--general]
Prints one line per run and the medians."""
import argparse
import json
import pathlib
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from conftest import RespClient, free_port  # noqa: E402


def fcall_usec(c):
    st = c.call("INFO", "commandstats")
    st = st.decode() if isinstance(st, bytes) else st
    line = [x for x in st.splitlines() if x.startswith("cmdstat_fcall:")][0]
    return int(line.split("usec=")[1].split(",")[0])


TAG = "0123456789abcdef"  # the bench instance's owner tag (16 hex digits)


NO_OWNER = "0" * 16


def record(fire_ms, now, spec, rid="0123456789abcdef", owner=NO_OWNER):
    """A new timer's record as persistence/timers.c lays it out (_record.lua):
    not held by any instance, so the claim sweep finds it in its index."""
    head = struct.pack("<BBH", 178, ord("s"), 0) + fire_ms.to_bytes(6, "little") + owner.encode() + bytes(25)
    tail = now.to_bytes(6, "little") + bytes([len(rid)]) + rid.encode()
    tail += b"f" + fire_ms.to_bytes(6, "little") + bytes(6) + bytes([0])
    return head + tail + spec.encode()


def one_run(lua, n, batch, claim_batch, create_batch, general):
    pre = (lua / "_record.lua").read_text()
    d = tempfile.mkdtemp(prefix="hw-script-cost.")
    port = free_port()
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "yes", "--appendfsync", "everysec", "--dir", d],
                         stdout=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while True:
            try:
                c = RespClient(port)
                c.call("PING")
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        # one function library, as persistence/store.c makes it
        reset = "batch_reset()\n" if "function batch_reset" in pre else ""  # (a prelude before it has none)
        lib = "#!lua name=hwbench\n" + pre + "".join(
            f"redis.register_function('hwbench_{name}', function(KEYS, ARGV)\n{reset}"
            f"{(lua / f'{name}.lua').read_text()}end)\n"
            for name in ("create", "claim", "begin", "finish", "create_batch"))
        c.call("FUNCTION", "LOAD", "REPLACE", lib)
        sha = {name: f"hwbench_{name}" for name in ("create", "claim", "begin", "finish", "create_batch")}

        def pipeline(cmds, k=500):
            out = []
            for i in range(0, len(cmds), k):
                part = cmds[i:i + k]
                c.sock.sendall(b"".join(RespClient.encode([a if isinstance(a, bytes) else str(a) for a in cmd])
                                        for cmd in part))
                out += [c.read_reply() for _ in part]
            return out

        P = 7
        tk = lambda i: f"hw:{{{P}}}:t:b-{i:06d}"  # noqa: E731
        now = int(time.time() * 1000)
        spec = json.dumps({"json": {"seq": 1, "due_ms": now, "pad": "x" * 100}, "url": "http://127.0.0.1:9/hook",
                           "retry": {"max_attempts": 3, "min_backoff_ms": 100, "max_backoff_ms": 1000}},
                          separators=(",", ":"))
        c.call("CONFIG", "RESETSTAT")
        r = pipeline([["FCALL", sha["create"], 1, tk(i), f"b-{i:06d}", record(now + 1000, now, spec)]
                      for i in range(n)])
        assert all(x == [1] for x in r), r[:3]
        create = fcall_usec(c) / n
        c.call("CONFIG", "RESETSTAT")
        # a layout whose batch calls take a time budget (claim: ARGV 8, begin:
        # ARGV 2, finish: ARGV 6, "0": none) and whose claim answers more at 2
        budget = "budget_start" in (lua / "begin.lua").read_text()
        bud = ["0"] if budget else []
        claimed = 0
        while claimed < n:  # the sweep's calls, --claim-batch timers each
            r = c.call("FCALL", sha["claim"], 3, f"hw:{{{P}}}:nss", f"hw:{{{P}}}:cl:{TAG}", f"hw:{{{P}}}:lc:{TAG}",
                       now + 5000, claim_batch, TAG, f"hw:{{{P}}}:t:", "0", *(["0", "", "0"] if budget else []))
            got = (len(r) - (2 if budget else 1) - r[0]) // 2
            assert got > 0, r[:3]
            claimed += got
        claim = fcall_usec(c) / n
        groups = [range(i, min(i + batch, n)) for i in range(0, n, batch)]
        c.call("CONFIG", "RESETSTAT")
        r = pipeline([["FCALL", sha["begin"], len(g), *[tk(i) for i in g], TAG, *bud,
                       *[a for i in g for a in (0, i + 1, 0, 2 ** 53)]] for g in groups], k=50)
        assert all(x[0::3] == [1] * len(g) for x, g in zip(r, groups)), r[:3]
        begin = fcall_usec(c) / n
        c.call("CONFIG", "RESETSTAT")
        last = ('{"at":"2026-11-21T19:00:00.000Z","duration_ms":1,"status":204,"error":null,'
                '"response_snippet":"","instance":"bench-instance"}')
        r = pipeline([["FCALL", sha["finish"], len(g), *[tk(i) for i in g], TAG, now, 604800000, now + 5000, 10, *bud,
                       *[a for i in g for a in (f"b-{i:06d}", "delivered", last, 0, 1, 0, 0, 0, -1)]]
                      for g in groups], k=50)
        assert all(x[0::5] == [1] * len(g) for x, g in zip(r, groups)), r[:3]
        finish = fcall_usec(c) / n
        c.call("CONFIG", "RESETSTAT")
        calls = []
        for g in range(0, n, create_batch):
            ids = [f"cb-{i:06d}" for i in range(g, min(g + create_batch, n))]
            if general:  # each item with its label count (the layout of a call with labels)
                head = ["0"]
                args = [a for k, i in enumerate(ids) for a in (i, record(now + 3_600_000 + g + k, now, spec), 0)]
            else:  # a plain call, as persistence/timers.c sends one without labels: none held at once
                head = ["P0", "", "/sdefault", len(ids), TAG]
                args = [a for k, i in enumerate(ids)
                        for a in (i, record(now + 3_600_000 + g + k, now, spec), now + 3_600_000 + g + k)]
            calls.append(["FCALL", sha["create_batch"], len(ids), *[f"hw:{{{P}}}:t:{i}" for i in ids], *head, *args])
        r = pipeline(calls, k=10)
        assert all(x[0::2] == [1] * (len(x) // 2) if general else x == [call[2]]
                   for x, call in zip(r, calls)), r[0][:4]
        batch_create = fcall_usec(c) / n
        c.close()
        return create, claim, begin, finish, batch_create
    finally:
        p.terminate()
        p.wait(timeout=10)
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lua", default=str(ROOT / "persistence" / "lua"))
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64, help="timers per begin and finish call (the engine: up to 256)")
    ap.add_argument("--claim-batch", type=int, default=64, help="timers per claim call (hookwheel's --claim-batch default)")
    ap.add_argument("--create-batch", type=int, default=128,
                    help="timers per create_batch call (the service: up to 128)")
    ap.add_argument("--general", action="store_true",
                    help="create_batch's layout for items with labels (each item on its own) instead of a plain call")
    a = ap.parse_args()
    got = []
    for k in range(a.runs):
        got.append(one_run(pathlib.Path(a.lua), a.n, a.batch, a.claim_batch, a.create_batch, a.general))
        print("run %d: create %.2f us, claim %.2f us, begin %.2f us, finish %.2f us, create_batch %.2f us"
              " per timer" % (k + 1, *got[-1]))
    print("median: create %.2f us, claim %.2f us, begin %.2f us, finish %.2f us, create_batch %.2f us per timer"
          " (n=%d, batch=%d, claim batch=%d, create batch=%d)"
          % (*(statistics.median(x[i] for x in got) for i in range(5)), a.n, a.batch, a.claim_batch,
             a.create_batch))


if __name__ == "__main__":
    main()
