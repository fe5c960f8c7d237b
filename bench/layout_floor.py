#!/usr/bin/env python3
"""layout_floor.py - what Redis's own encodings charge for the pieces a timer could be stored in.

Starts a scratch redis-server (127.0.0.1, no persistence, temp dir), and for each
candidate shape writes N entries of it (16 partitions, random 32-hex-digit ids, due
times spread over an hour) and reads INFO memory's used_memory before and after:
bytes per entry, allocator size classes and per-key overhead included. It measures
encodings, not hookwheel: the figures bound what any layout of a pending or finished
timer can cost with Redis's default encoding settings (hash- and zset-max-listpack-*).

Usage: python3 bench/layout_floor.py [--n N] [--record-bytes B]
  --record-bytes: a record's length (the M workload's 200-byte body makes 328)."""
import argparse
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def pipe(port, cmds):
    subprocess.run(["redis-cli", "-p", str(port), "--pipe"], input=b"".join(resp(*c) for c in cmds),
                   capture_output=True, check=True)


def used(port):
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "memory"], capture_output=True, text=True,
                         check=True).stdout
    return int(next(line.split(":")[1] for line in out.splitlines() if line.startswith("used_memory:")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--record-bytes", type=int, default=328)
    a = ap.parse_args()
    n, rb = a.n, a.record_bytes
    ids = [os.urandom(16).hex() for _ in range(n)]
    due = [1795746288018 + random.randint(0, 3600000) for _ in range(n)]
    att = b'{"at":1795746288018,"attempt":1,"duration_ms":1.234,"status":200,"instance":"host-1234"}'
    shapes = [
        ("record: a string key of its own", lambda i: ["SET", f"hw:{{{i % 16}}}:t:{ids[i]}", b"x" * rb]),
        ("record 16 bytes shorter", lambda i: ["SET", f"hw:{{{i % 16}}}:t:{ids[i]}", b"x" * (rb - 16)]),
        ("record in a hash of 64 per partition, 16-byte field",
         lambda i: ["HSET", f"hw:{{{i % 16}}}:r:{(i // 16) % 64}", bytes.fromhex(ids[i]), b"x" * rb]),
        ("waiting entry: one zset per partition (skiplist)",
         lambda i: ["ZADD", f"hw:{{{i % 16}}}:ix::scheduled", due[i], ids[i]]),
        ("waiting entry: zsets of 100 (listpack)",
         lambda i: ["ZADD", f"hw:{{{i % 16}}}:w:{(i // 16) // 100}", due[i], ids[i]]),
        ("waiting entry: zsets of 100, 16-byte member",
         lambda i: ["ZADD", f"hw:{{{i % 16}}}:w:{(i // 16) // 100}", due[i], bytes.fromhex(ids[i])]),
        ("finished record with expiry", lambda i: ["SET", f"hw:{{{i % 16}}}:t:{ids[i]}", b"x" * rb, "PX", 604800000]),
        ("finished history key with expiry",
         lambda i: ["SET", f"hw:{{{i % 16}}}:h:{ids[i]}", att, "PX", 604800000]),
        ("finished record holding its history, with expiry",
         lambda i: ["SET", f"hw:{{{i % 16}}}:t:{ids[i]}", b"x" * (rb + 1 + len(att)), "PX", 604800000]),
    ]
    d = tempfile.mkdtemp(prefix="layout-floor-")
    port = free_port()
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        print(f"{n} entries each, record {rb} bytes; Redis bytes per entry:")
        for name, make in shapes:
            subprocess.run(["redis-cli", "-p", str(port), "FLUSHALL"], capture_output=True, check=True)
            m0 = used(port)
            pipe(port, [make(i) for i in range(n)])
            print(f"  {name}: {(used(port) - m0) / n:.0f}")
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
