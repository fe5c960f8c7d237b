#!/usr/bin/env python3
"""label_ops.py - the time of reads by label on this machine: one page of a listing by
label (GET /timers?state=scheduled&label=...&limit=100: each partition's first waiting
timers, each looked up in the label's index) and a selector dry run (POST /timers/cancel
with dry_run, every page), over 50,000 timers of one label of 1,000 values (50
timers each, ids of 32 hex digits, so their entries are in the shared buckets).

Usage: python3 bench/label_ops.py [--bin build/hookwheel] [--runs 3] [--ops 200]
Prints, per run, ms per listing and per dry run (medians over --ops labels), and
the medians of the runs."""
import argparse
import http.client
import json
import statistics
import sys
import time

sys.path.insert(0, __import__("os").path.dirname(__file__))
from batch import Stack, bodies, post_all  # noqa: E402


def request(c, method, path, body=None):
    c.request(method, path, body=json.dumps(body).encode() if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"{method} {path}: {r.status} {data[:200]}")
    return json.loads(data)


def one_run(binary, ops):
    st = Stack(binary)
    try:
        post_all(st.hport, bodies(50_000, 1000, "l", labels=lambda k: {"customer": f"{k % 1000:06d}"}), 2)
        c = http.client.HTTPConnection("127.0.0.1", st.hport, timeout=60)
        lists, walks = [], []
        for k in range(ops):
            label = f"customer:{(k * 7) % 1000:06d}"
            t0 = time.monotonic()
            request(c, "GET", f"/timers?state=scheduled&label={label}&limit=100")  # one page: filters
            lists.append((time.monotonic() - t0) * 1000)  # the partitions' first entries by the label
            t0, n, cursor = time.monotonic(), 0, None
            while True:
                body = {"labels": {"customer": label.split(":")[1]}, "dry_run": True}
                if cursor:
                    body["cursor"] = cursor
                page = request(c, "POST", "/timers/cancel", body)
                n += page["matched"]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            walks.append((time.monotonic() - t0) * 1000)
            assert n == 50, n
        c.close()
        return statistics.median(lists), statistics.median(walks)
    finally:
        st.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/hookwheel")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ops", type=int, default=200)
    a = ap.parse_args()
    res = []
    for r in range(a.runs):
        res.append(one_run(a.bin, a.ops))
        print(f"run {r + 1}: listing {res[-1][0]:.2f} ms, dry run {res[-1][1]:.2f} ms")
    print(f"median: listing {statistics.median(x[0] for x in res):.2f} ms, "
          f"dry run {statistics.median(x[1] for x in res):.2f} ms ({a.runs} runs, {a.ops} labels, {a.bin})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
