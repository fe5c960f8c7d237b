"""Writes shard_seconds.json, the seconds each integration test file took,
by which conftest.py deals the files out to the parallel parts.

    PYTEST_ADDOPTS="--durations=0 --durations-min=0.05" make test
    python3 tests/integration/shard_seconds.py . > tests/integration/shard_seconds.json

"plain" sums the plain pass (build/integration-part-*.log); "cluster" the
sanitizer pass on a Redis Cluster (build/sanitize/integration-cluster-K.log)
with each file's one-Redis remainder (integration-cluster-only-K.log), which
the same part runs right after. Setup, call and teardown all count."""
import glob
import json
import re
import sys

LINE = re.compile(r"^\s*([0-9.]+)s (call|setup|teardown)\s+(?:tests/integration/)?(test_[a-z0-9_]+\.py)::")


def seconds(paths):
    out = {}
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                m = LINE.match(line)
                if m:
                    out[m.group(3)] = out.get(m.group(3), 0.0) + float(m.group(1))
    return {name: round(s, 1) for name, s in sorted(out.items())}


def main(root):
    plain = seconds(glob.glob(f"{root}/build/integration-part-*.log"))
    cluster = seconds(glob.glob(f"{root}/build/sanitize/integration-cluster-[0-9]*.log")
                      + glob.glob(f"{root}/build/sanitize/integration-cluster-only-*.log"))
    for name in set(plain) | set(cluster):  # measured in one pass, under 0.05 s a test in the other
        plain.setdefault(name, 0.0)
        cluster.setdefault(name, 0.0)
    json.dump({"plain": dict(sorted(plain.items())), "cluster": dict(sorted(cluster.items()))}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
