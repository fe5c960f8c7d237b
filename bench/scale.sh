#!/usr/bin/env bash
# scale.sh - R (creates/s) and D (deliveries/s of timers due at one instant)
# on one Redis against a Redis Cluster of MASTERS masters (no replicas), all
# on this machine, alternating the modes in every run; writes
# bench/results/<date>-scale.md (-run2... when the day has one).
# MODES picks them (default "one cluster"): one, cluster, replica (a master
# and one replica, nothing waits for it) and replica-ack (the same with
# --redis-min-replicas-ack 1: every batch of acknowledged writes ends with
# WAIT 1, so replica against replica-ack is the cost of WAIT).
#
# Usage: bash bench/scale.sh          RUNS=3 MASTERS=3 D_N=20000 R_DUR=5 MODES="one cluster"
# Both modes run the same binary with --partitions 64 (so the cluster's
# masters each get partitions) and AOF everysec on every Redis; the load
# generator, receiver and wrk are bench/'s, as in run.sh. Every process is
# started here, on 127.0.0.1, recorded by pid and stopped by pid on exit.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=${RUNS:-3} MASTERS=${MASTERS:-3} D_N=${D_N:-20000} R_DUR=${R_DUR:-5} MODES=${MODES:-one cluster}
BUILD=${BUILD:-build}
HW=$PWD/$BUILD/hookwheel SINK=$PWD/$BUILD/bench/sink LOADGEN=$PWD/$BUILD/bench/loadgen
HW_FLAGS=(--log-level warn --max-inflight 1024 --queue-parallelism 1024 --destination-allowlist 127.0.0.0/8
          --partitions 64)
WORK=$(mktemp -d /tmp/hookwheel-scale.XXXXXX)
PIDS=()
DATE=$(date +%F)
OUT=bench/results/$DATE-scale.md
k=2
while [[ -e $OUT ]]; do OUT=bench/results/$DATE-scale-run$k.md; k=$((k + 1)); done

LOG_NAME=scale
. bench/lib.sh

# a free port P with P + 10000 (the cluster bus port) free too
cluster_port() {
    python3 -c '
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p > 55535: continue
    b = socket.socket()
    try: b.bind(("127.0.0.1", p + 10000))
    except OSError: continue
    finally: b.close()
    print(p); break'
}

# redis_node DIR [cluster]: starts one redis-server; sets NODE_PORT; its pid goes to PIDS and RPIDS.
RPIDS=()
redis_node() {
    local dir=$1 port i
    mkdir -p "$dir"
    if [[ -n ${2:-} ]]; then port=$(cluster_port); else port=$(free_port); fi
    redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --appendonly yes --appendfsync everysec \
        --save "" --daemonize no --logfile "$dir/redis.log" ${2:+--cluster-enabled yes --cluster-config-file nodes.conf} \
        >/dev/null 2>&1 &
    PIDS+=($!) RPIDS+=($!)
    NODE_PORT=$port
    for ((i = 0; i < 200; i++)); do
        [[ $(redis-cli -p "$port" ping 2>/dev/null) == PONG ]] && return 0
        sleep 0.05
    done
    log "redis-server did not start"
    return 1
}

# start_redis MODE DIR: sets URL (and RPIDS).
start_redis() {
    local mode=$1 dir=$2 ports=() i
    RPIDS=()
    if [[ $mode == one ]]; then
        redis_node "$dir/one"
        URL=redis://127.0.0.1:$NODE_PORT
        return 0
    fi
    if [[ $mode == replica* ]]; then
        redis_node "$dir/master"
        URL=redis://127.0.0.1:$NODE_PORT
        local master=$NODE_PORT
        redis_node "$dir/replica"
        redis-cli -p "$NODE_PORT" replicaof 127.0.0.1 "$master" >/dev/null
        for ((i = 0; i < 200; i++)); do
            redis-cli -p "$NODE_PORT" info replication | grep -q master_link_status:up && return 0
            sleep 0.05
        done
        log "the replica did not sync"
        return 1
    fi
    for ((i = 0; i < MASTERS; i++)); do
        redis_node "$dir/n$i" cluster
        ports+=("$NODE_PORT")
    done
    redis-cli --cluster create $(printf '127.0.0.1:%s ' "${ports[@]}") --cluster-yes >"$dir/create.log" 2>&1
    for ((i = 0; i < 200; i++)); do
        redis-cli -p "${ports[0]}" cluster info | grep -q cluster_state:ok && break
        sleep 0.05
    done
    URL=redis+cluster://$(printf '127.0.0.1:%s,' "${ports[@]}" | sed 's/,$//')
}

start_hw() {
    HPORT=$(free_port)
    local ack=()
    [[ $1 == *-replica-ack-* ]] && ack=(--redis-min-replicas-ack 1)
    "$HW" --listen "127.0.0.1:$HPORT" --redis-url "$URL" --instance-id "scale-$1" "${HW_FLAGS[@]}" "${ack[@]}" \
        >>"$WORK/$1.hw.log" 2>&1 &
    HPID=$!
    PIDS+=("$HPID")
    local i
    for ((i = 0; i < 300; i++)); do
        [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HPORT/readyz") == 200 ]] && return 0
        sleep 0.05
    done
    log "hookwheel not ready"
    tail -5 "$WORK/$1.hw.log" >&2
    return 1
}

redis_ticks() { local s=0 p; for p in "${RPIDS[@]}"; do s=$((s + $(ticks "$p"))); done; echo "$s"; }

run_r() {
    local mode=$1 run=$2 d=$WORK/r-$1-$2 line r0 r1
    start_redis "$mode" "$d"
    start_hw "r-$mode-$run"
    r0=$(redis_ticks)
    wrk -t2 -c64 -d"${R_DUR}s" -s bench/register.lua "http://127.0.0.1:$HPORT/timers" -- "s$run$mode" \
        "http://127.0.0.1:9/never" >"$d.wrk" 2>&1
    r1=$(redis_ticks)
    line=$(grep '^WRK ' "$d.wrk")
    echo "R mode=$mode run=$run rps=$(kv "$line" rps) non2xx=$(kv "$line" non2xx) p99_ms=$(kv "$line" p99_ms)" \
        "redis_cpu_pct=$(((r1 - r0) * 100 / $(getconf CLK_TCK) / R_DUR))"
    stop_all
}

run_d() {
    local mode=$1 run=$2 d=$WORK/d-$1-$2 t lead sk first last n
    start_redis "$mode" "$d"
    start_hw "d-$mode-$run"
    lead=$((3000 + D_N / 5))
    t=$(($(now_ms) + lead))
    SPORT=$(free_port)
    "$SINK" --port "$SPORT" --expect "$D_N" --exit-when-done --timeout-s 120 >"$d.sink" 2>&1 &
    local spid=$!
    PIDS+=("$spid")
    sleep 0.2
    "$LOADGEN" --url "http://127.0.0.1:$HPORT/timers" --sink-url "http://127.0.0.1:$SPORT/hook" --rate 0 \
        --count "$D_N" --at-ms "$t" --body-bytes 100 --connections 32 --run-id "d$run$mode" >"$d.lg" 2>&1
    wait "$spid" || true
    sk=$(grep '^SINK ' "$d.sink")
    first=$(kv "$sk" first_us) last=$(kv "$sk" last_us) n=$(kv "$sk" unique)
    echo "D mode=$mode run=$run delivered=$n deliveries_per_s=$(awk -v n="$n" -v l="$last" -v t="$t" \
        'BEGIN { s = (l - t * 1000) / 1e6; printf "%.0f", (s > 0 ? n / s : 0) }')" \
        "first_ms=$(awk -v f="$first" -v t="$t" 'BEGIN { printf "%.1f", (f - t * 1000) / 1e3 }')"
    stop_all
}

make -s "$BUILD/hookwheel" "$BUILD/bench/sink" "$BUILD/bench/loadgen" >/dev/null
RAW=$WORK/raw.txt
for ((run = 1; run <= RUNS; run++)); do
    for mode in $MODES; do
        log "run $run: $mode"
        run_r "$mode" "$run" >>"$RAW"
        tail -1 "$RAW" >&2
        run_d "$mode" "$run" >>"$RAW"
        tail -1 "$RAW" >&2
    done
done

fig() { grep "^$1 mode=$2 " "$RAW" | tr ' ' '\n' | sed -n "s/^$3=//p" | median; }
{
    read -r -a modes <<<"$MODES"
    echo "# R and D: ${modes[*]} (cluster: $MASTERS masters), $(date +%F)"
    echo
    echo "\`RUNS=$RUNS MASTERS=$MASTERS D_N=$D_N R_DUR=$R_DUR MODES=\"$MODES\" bash bench/scale.sh\` on $(nproc) cores; build"
    echo "$(git log -1 --format='%h %s')."
    echo "Medians of $RUNS runs, modes alternating; every Redis AOF everysec; hookwheel --partitions 64."
    echo "The ratio column is the last mode against the first."
    echo
    printf '| figure |'; printf ' %s |' "${modes[@]}"; printf ' %s / %s |\n' "${modes[-1]}" "${modes[0]}"
    printf '| --- |'; for m in "${modes[@]}"; do printf ' ---: |'; done; printf ' ---: |\n'
    for f in "R rps" "R redis_cpu_pct" "R p99_ms" "D deliveries_per_s" "D first_ms"; do
        set -- $f
        printf '| %s %s |' "$1" "$2"
        for m in "${modes[@]}"; do printf ' %s |' "$(fig "$1" "$m" "$2")"; done
        a=$(fig "$1" "${modes[0]}" "$2") b=$(fig "$1" "${modes[-1]}" "$2")
        echo " $(awk -v a="$a" -v b="$b" 'BEGIN { printf (a > 0 ? "%.2f" : "-"), b / a }') |"
    done
    echo
    echo '```'
    cat "$RAW"
    echo '```'
} >"$OUT"
log "wrote $OUT"
cat "$OUT"
