#!/bin/sh
# wheel_bench.sh - runs the wheel microbenchmark RUNS times (default 3) and
# prints, for each metric of its RESULT lines, the median and the min–max over
# the runs as a markdown table on stdout (the results page includes it as is).
#
# Usage: [RUNS=n] [WHEEL_BENCH=path] bench/wheel_bench.sh [wheel_bench args, e.g. --quick]
# The binary defaults to build/wheel_bench next to this folder; progress goes
# to stderr. The median of an even number of runs is the mean of the middle
# two. Exits non-zero if any run fails.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${WHEEL_BENCH:-$root/build/wheel_bench}
runs=${RUNS:-3}

case $runs in
'' | *[!0-9]* | 0)
    echo "wheel_bench.sh: RUNS must be a positive integer, not '$runs'" >&2
    exit 2
    ;;
esac
if [ ! -x "$bin" ]; then
    echo "wheel_bench.sh: $bin not found; build it first" >&2
    exit 2
fi

out=$(mktemp)
results=$(mktemp)
trap 'rm -f "$out" "$results"' EXIT

i=1
while [ "$i" -le "$runs" ]; do
    echo "wheel_bench.sh: run $i/$runs: $bin $*" >&2
    if ! "$bin" "$@" >"$out"; then
        echo "wheel_bench.sh: run $i failed; its output:" >&2
        cat "$out" >&2
        exit 1
    fi
    grep '^RESULT ' "$out" >>"$results" || true
    i=$((i + 1))
done

# One row per "<workload> <key>", in the order of first appearance. Values
# keep the most decimals any run printed for that metric (one more for the
# median of an even count).
awk -v runs="$runs" '
function decimals(v) { return index(v, ".") ? length(v) - index(v, ".") : 0 }
function fmt(x, d) { return sprintf("%." d "f", x) }
{
    for (f = 3; f <= NF; f++) {
        eq = index($f, "=")
        if (eq == 0)
            continue
        m = $2 " " substr($f, 1, eq - 1)
        v = substr($f, eq + 1)
        if (!(m in n)) {
            order[++rows] = m
            n[m] = 0
            dec[m] = 0
        }
        val[m, ++n[m]] = v + 0
        if (decimals(v) > dec[m])
            dec[m] = decimals(v)
    }
}
END {
    if (rows == 0) {
        print "wheel_bench.sh: no RESULT lines" > "/dev/stderr"
        exit 1
    }
    printf "| Metric | Median (%d runs) | Min–max |\n", runs
    print "|---|---:|---:|"
    for (r = 1; r <= rows; r++) {
        m = order[r]
        k = n[m]
        for (a = 1; a <= k; a++)
            s[a] = val[m, a]
        for (a = 2; a <= k; a++) {
            x = s[a]
            for (b = a - 1; b >= 1 && s[b] > x; b--)
                s[b + 1] = s[b]
            s[b + 1] = x
        }
        med = k % 2 ? s[(k + 1) / 2] : (s[k / 2] + s[k / 2 + 1]) / 2
        d = dec[m] + (k % 2 == 0) # a mean of two may need one more decimal
        note = k == runs ? "" : " (" k " of " runs " runs)"
        printf "| %s | %s | %s–%s%s |\n", m, fmt(med, d), fmt(s[1], dec[m]), fmt(s[k], dec[m]), note
    }
}' "$results"
