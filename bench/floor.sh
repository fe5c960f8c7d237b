#!/usr/bin/env bash
# floor.sh - what the benchmark harness costs by itself: the load generator
# posting its timers' JSON straight to the receiver, with no hookwheel and no
# Redis between them, at each rate of RATES (requests/s, 0: as fast as it
# goes), COUNT requests a run over CONNS keep-alive connections. Per rate it
# prints the requests/s achieved and the CPU a request costs the load
# generator and the receiver (their own getrusage figures) and the whole
# machine (/proc/stat, so the kernel's share of both is in it). /proc/stat is
# tick-sampled and can read below the two processes' own sum (bench/run.sh's
# others() says the same): take the larger of the two as the harness's cost.
#
# This is the part of every L, L20, D and capacity figure that is not
# hookwheel's: a timer costs the harness about one request of this table
# (the load generator's half of its create, the receiver's half of its
# delivery), so at L20's 20,000 timers/s what hookwheel and Redis have is
# the 2 cores less 20,000 times a request's figure at that rate.
#
# Usage: bash bench/floor.sh
#        RATES="5000 20000 0" COUNT=200000 CONNS=128 RUNS=1 BUILD=build
# Prints a markdown table on stdout. Every process is started here, on
# 127.0.0.1, recorded by pid and stopped by pid on exit, also on failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
RATES=${RATES:-5000 20000 0} COUNT=${COUNT:-200000} CONNS=${CONNS:-128} RUNS=${RUNS:-1} BUILD=${BUILD:-build}
SINK=$PWD/$BUILD/bench/sink LOADGEN=$PWD/$BUILD/bench/loadgen
WORK=$(mktemp -d /tmp/hookwheel-floor.XXXXXX)
PIDS=()
LOG_NAME=floor
. bench/lib.sh
[[ -x $SINK && -x $LOADGEN ]] || { log "build the bench tools first: make bench-tools"; exit 1; }

# busy: the machine's busy clock ticks so far, all CPUs (user, nice, system, irq, softirq, steal).
busy() { awk 'NR == 1 { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
HZ=$(getconf CLK_TCK)

echo "| rate asked, req/s | achieved, req/s | load generator µs/req | receiver µs/req | machine µs/req | machine % of one core |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
for rate in $RATES; do
    for ((run = 1; run <= RUNS; run++)); do
        port=$(free_port)
        "$SINK" --port "$port" --expect "$COUNT" --exit-when-done --timeout-s $((COUNT / 1000 + 60)) \
            >"$WORK/sink" 2>&1 &
        spid=$!
        PIDS+=("$spid")
        sleep 0.3
        b0=$(busy) t0=$(date +%s%N)
        "$LOADGEN" --url "http://127.0.0.1:$port/timers" --sink-url "http://127.0.0.1:$port/hook" \
            --rate "$rate" --count "$COUNT" --delay-ms 0 --body-bytes 100 --connections "$CONNS" \
            --run-id floor >"$WORK/lg" 2>&1 || { log "loadgen failed"; cat "$WORK/lg" >&2; exit 1; }
        b1=$(busy) t1=$(date +%s%N)
        for ((i = 0; i < 100; i++)); do # it exits once every request arrived
            kill -0 "$spid" 2>/dev/null || break
            sleep 0.1
        done
        kill "$spid" 2>/dev/null || true
        wait "$spid" 2>/dev/null || true
        PIDS=() # gone: the exit trap must not signal its pid, which may be another process's by then
        lg=$(grep '^LOADGEN ' "$WORK/lg") sk=$(grep '^SINK ' "$WORK/sink") ||
            { log "missing LOADGEN/SINK line"; exit 1; }
        awk -v rate="$rate" -v ok="$(kv "$lg" ok)" -v lc="$(kv "$lg" cpu_ms)" -v sc="$(kv "$sk" cpu_ms)" \
            -v db=$((b1 - b0)) -v hz="$HZ" -v ns=$((t1 - t0)) 'BEGIN {
            s = ns / 1e9
            printf "| %s | %.0f | %.1f | %.1f | %.1f | %.0f |\n", (rate == 0 ? "as fast as it goes" : rate),
                ok / s, lc * 1000 / ok, sc * 1000 / ok, db / hz * 1e6 / ok, db / hz / s * 100 }'
    done
done
