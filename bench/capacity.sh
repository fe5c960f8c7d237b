#!/usr/bin/env bash
# capacity.sh - the steady rate one instance sustains on this machine, with
# creates and deliveries overlapping as in production: for each rate of
# RATES (timers/s), a fresh redis-server (AOF everysec) and hookwheel take
# creates at that rate for SECS s from the load generator (open loop, 128
# keep-alive connections), each timer due DELAY_MS after its create, and the
# receiver times every delivery against its due time. Per rate the report
# gives the create rate achieved, create p99, lateness p50/p99/p99.9/max,
# early and lost, and the CPU of hookwheel, Redis, the load generator and
# the receiver (% of one core, over the run). The capacity is the highest
# rate that every run achieved (≥ 98 % of it) with lateness p99 ≤ P99_MS,
# nothing early and nothing lost. On a shared box the load generator and
# the receiver take their share of the cores too (see their columns).
#
# Usage: bash bench/capacity.sh
#        RATES="4000 6000 8000 10000 12000 14000" SECS=30 RUNS=1 DELAY_MS=2000 P99_MS=10
#        BUILD=build (the binary measured), HW_EXTRA (extra hookwheel flags),
#        REDIS_EXTRA (extra redis-server flags, e.g. "--auto-aof-rewrite-min-size 1gb")
# Writes bench/results/<date>-capacity.md (-run2... when the day has one).
# Every process is started here, on 127.0.0.1, recorded by pid and stopped
# by pid on exit, also on failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
RATES=${RATES:-4000 6000 8000 10000 12000 14000} SECS=${SECS:-30} RUNS=${RUNS:-1}
DELAY_MS=${DELAY_MS:-2000} P99_MS=${P99_MS:-10} BUILD=${BUILD:-build}
HW=$PWD/$BUILD/hookwheel SINK=$PWD/$BUILD/bench/sink LOADGEN=$PWD/$BUILD/bench/loadgen
HW_FLAGS=(--log-level warn --max-inflight 1024 --queue-parallelism 1024 --destination-allowlist 127.0.0.0/8
          ${HW_EXTRA:-})
WORK=$(mktemp -d /tmp/hookwheel-capacity.XXXXXX)
PIDS=()
DATE=$(date +%F)
OUT=bench/results/$DATE-capacity.md
k=2
while [[ -e $OUT ]]; do OUT=bench/results/$DATE-capacity-run$k.md; k=$((k + 1)); done

LOG_NAME=capacity
. bench/lib.sh

now_ns() { date +%s%N; }

# run_rate RATE RUN: one measurement; prints one "C ..." line.
run_rate() {
    local rate=$1 run=$2 d=$WORK/c-$1-$2 n rport hport sport rpid hpid spid i h0 h1 r0 r1 t0 t1 lg sk secs
    n=$((rate * SECS))
    mkdir -p "$d"
    rport=$(free_port)
    redis-server --bind 127.0.0.1 --port "$rport" --dir "$d" --appendonly yes --appendfsync everysec \
        --save "" --daemonize no --logfile "$d/redis.log" ${REDIS_EXTRA:-} >/dev/null 2>&1 &
    rpid=$!
    PIDS+=("$rpid")
    for ((i = 0; i < 200; i++)); do
        [[ $(redis-cli -p "$rport" ping 2>/dev/null) == PONG ]] && break
        sleep 0.05
    done
    hport=$(free_port)
    "$HW" --listen "127.0.0.1:$hport" --redis-url "redis://127.0.0.1:$rport" --instance-id "capacity-$rate-$run" \
        "${HW_FLAGS[@]}" >>"$d/hw.log" 2>&1 &
    hpid=$!
    PIDS+=("$hpid")
    for ((i = 0; i < 300; i++)); do
        [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hport/readyz") == 200 ]] && break
        sleep 0.05
    done
    ((i < 300)) || { log "hookwheel not ready"; tail -5 "$d/hw.log" >&2; return 1; }
    sport=$(free_port)
    "$SINK" --port "$sport" --expect "$n" --exit-when-done --timeout-s $((SECS + DELAY_MS / 1000 + 120)) \
        >"$d/sink.out" 2>&1 &
    spid=$!
    PIDS+=("$spid")
    sleep 0.2
    h0=$(ticks "$hpid") r0=$(ticks "$rpid") t0=$(now_ns)
    "$LOADGEN" --url "http://127.0.0.1:$hport/timers" --sink-url "http://127.0.0.1:$sport/hook" --rate "$rate" \
        --count "$n" --delay-ms "$DELAY_MS" --body-bytes 100 --connections 128 --run-id "c$rate-$run" \
        >"$d/lg.out" 2>&1 || { log "loadgen failed"; cat "$d/lg.out" >&2; return 1; }
    wait "$spid" || true
    h1=$(ticks "$hpid") r1=$(ticks "$rpid") t1=$(now_ns)
    lg=$(grep '^LOADGEN ' "$d/lg.out") sk=$(grep '^SINK ' "$d/sink.out") || { log "no LOADGEN/SINK line"; return 1; }
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (b - a) / 1e9 }')
    pct() { awk -v t="$1" -v hz="$(getconf CLK_TCK)" -v s="$secs" 'BEGIN { printf "%.0f", t / hz / s * 100 }'; }
    ms_pct() { awk -v m="$1" -v s="$secs" 'BEGIN { printf "%.0f", m / 10 / s }'; }
    echo "C rate=$rate run=$run achieved=$(kv "$lg" rate) ok=$(kv "$lg" ok) create_p99_ms=$(kv "$lg" p99_ms)" \
        "p50_ms=$(kv "$sk" p50_ms) p99_ms=$(kv "$sk" p99_ms) p999_ms=$(kv "$sk" p999_ms) max_ms=$(kv "$sk" max_ms)" \
        "early=$(kv "$sk" early) lost=$(($(kv "$lg" ok) - $(kv "$sk" unique)))" \
        "cpu_hookwheel=$(pct $((h1 - h0))) cpu_redis=$(pct $((r1 - r0)))" \
        "cpu_loadgen=$(ms_pct "$(kv "$lg" cpu_ms)") cpu_sink=$(ms_pct "$(kv "$sk" cpu_ms)") secs=$secs"
    stop_all
}

make -s "$BUILD/hookwheel" "$BUILD/bench/sink" "$BUILD/bench/loadgen" >/dev/null
RAW=$WORK/raw.txt
for ((run = 1; run <= RUNS; run++)); do
    for rate in $RATES; do
        log "run $run: $rate timers/s for $SECS s"
        run_rate "$rate" "$run" >>"$RAW"
        tail -1 "$RAW" >&2
    done
done

fig() { grep "^C rate=$1 " "$RAW" | tr ' ' '\n' | sed -n "s/^$2=//p" | median; }
# holds RATE: 1 when every run of RATE achieved it with p99 <= P99_MS, nothing early or lost
holds() {
    grep "^C rate=$1 " "$RAW" | awk -v r="$1" -v lim="$P99_MS" '
        { for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
          if (f["achieved"] < 0.98 * r || f["p99_ms"] > lim || f["early"] != 0 || f["lost"] != 0) bad = 1 }
        END { print (NR > 0 && !bad) ? 1 : 0 }'
}
{
    echo "# Capacity: steady creates and deliveries, $(date +%F)"
    echo
    echo "\`RATES=\"$RATES\" SECS=$SECS RUNS=$RUNS DELAY_MS=$DELAY_MS P99_MS=$P99_MS bash bench/capacity.sh\` on"
    echo "$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')); build"
    echo "$(git log -1 --format='%h %s' | cut -c1-120)${HW_EXTRA:+, hookwheel flags: $HW_EXTRA}${REDIS_EXTRA:+, redis-server flags: $REDIS_EXTRA}."
    echo "Medians of $RUNS run(s) per rate. Each timer is due $DELAY_MS ms after its create; lateness is the"
    echo "receiver's arrival time minus the due time. CPU is % of one core over the run (the machine has"
    echo "$(($(nproc) * 100))); the load generator and the receiver run on the same cores."
    echo
    echo "| timers/s asked | achieved | create p99, ms | lateness p50, ms | p99, ms | p99.9, ms | max, ms | early | lost | hookwheel % | Redis % | load generator % | receiver % | holds |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    cap=0
    for rate in $RATES; do
        h=$(holds "$rate")
        ((h == 1 && rate > cap)) && cap=$rate
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$rate" \
            "$(fig "$rate" achieved)" "$(fig "$rate" create_p99_ms)" "$(fig "$rate" p50_ms)" "$(fig "$rate" p99_ms)" \
            "$(fig "$rate" p999_ms)" "$(fig "$rate" max_ms)" "$(fig "$rate" early)" "$(fig "$rate" lost)" \
            "$(fig "$rate" cpu_hookwheel)" "$(fig "$rate" cpu_redis)" "$(fig "$rate" cpu_loadgen)" \
            "$(fig "$rate" cpu_sink)" "$( ((h == 1)) && echo yes || echo no)"
    done
    echo
    if ((cap > 0)); then
        echo "Capacity: **$cap timers/s** (the highest rate asked that held: lateness p99 ≤ $P99_MS ms, nothing"
        echo "early or lost, ≥ 98 % of the rate achieved, in every run)."
    else
        echo "Capacity: none of the rates asked held (lateness p99 ≤ $P99_MS ms, nothing early or lost)."
    fi
    echo
    echo "<details><summary>Every run</summary>"
    echo
    echo '```'
    cat "$RAW"
    echo '```'
    echo "</details>"
} >"$OUT"
log "wrote $OUT"
