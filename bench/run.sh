#!/usr/bin/env bash
# run.sh - hookwheel's benchmark suite: registration (R), lateness (L at
# 5,000 timers/s, L20 at 20,000 timers/s), drain (D) and memory/scale (M)
# against a real Redis, the real binary and a real receiver, all on this
# machine; writes bench/results/<date>.md and bench/results/<date>-lateness.png
# (<date>-run2.md and so on when the day already has a run of the same kind).
#
# Usage: bash bench/run.sh            3 runs per workload (RUNS=n to change)
#        QUICK=1 bash bench/run.sh    1 run each, shorter (~2-3 min); writes
#                                     <date>-quick.md and <date>-quick-lateness.png
#        BASE=<git ref> bash bench/run.sh
#                                     A/B: also builds <ref> in a temporary git
#                                     worktree and, for every workload and run,
#                                     runs the base binary, then the current one
#                                     (base, current, base, current, ...); the
#                                     report gives both and current/base.
#                                     Writes <date>-ab.md (or -quick-ab, ...).
# Environment: RUNS, QUICK, BASE, REDIS_FSYNC (the Redis's appendfsync,
# default everysec; always: every write fsynced before Redis answers, as the
# embedded Redis's default), KEEP=1 (keep the work directory with all
# logs), BUILD (default build), ONLY (workloads to run, default
# "R L L20 D M W"; W is the wheel microbenchmark, current tree only; rows of
# workloads not run say "not run"), HW_EXTRA (extra hookwheel flags, e.g.
# "--window-ms 5000", given to both binaries; shown in the report),
# D_QUEUE (a JSON body PUT to /queues/default before D's creates, e.g.
# '{"parallelism":512}' to drain through a queue whose limits hold for the
# deployment, so through permits; shown in the report),
# QUIET_WAIT_S (default 60: before each run, wait up to this long for the
# machine to be idle, since other work on a shared box skews figures),
# NOISE_MAX (default 30: a run during which other processes used more than
# this % of one core is discarded and repeated, at most twice).
#
# Every workload run gets a fresh redis-server (AOF everysec, loopback, temp
# dir) and a fresh hookwheel, so runs do not affect each other (and a base
# with another Redis layout starts from an empty Redis too). Everything
# listens on 127.0.0.1 only. Every process this script starts is recorded by
# pid and stopped by pid on exit (trap), also on failure; every wait is
# bounded; the base worktree is removed on exit. The service binaries are
# copied once at start, so a rebuild by someone else during the run does not
# change what is measured. The load generator and receiver are always those
# of the current tree: they are the harness, the same for both binaries.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
    RUNS=${RUNS:-1} R_DUR=5 L_SECS=5 D_N=20000 M_N=100000 SUFFIX=-quick
else
    RUNS=${RUNS:-3} R_DUR=10 L_SECS=10 D_N=100000 M_N=1000000 SUFFIX=
fi
L_RATE=5000 L_DELAY=2000 R_CONNS=64 M_IDLE_S=10
L20_RATE=20000 L20_SECS=$L_SECS L20_CONNS=128
ONLY=" $(echo ${ONLY:-R L L20 D M W}) " # words, one space apart
if [[ $ONLY != " R L L20 D M W " ]]; then # a partial run is named apart from a full one
    SUFFIX+="-only-$(tr -cd 'A-Z0-9' <<<"$ONLY")"
fi
[[ -z ${HW_EXTRA:-} ]] || SUFFIX+="-custom" # nor does a run with non-default flags
[[ -z ${D_QUEUE:-} ]] || SUFFIX+="-dqueue"  # nor one through a configured queue
REDIS_FSYNC=${REDIS_FSYNC:-everysec}
[[ $REDIS_FSYNC == everysec ]] || SUFFIX+="-fsync-$REDIS_FSYNC" # nor one with another AOF fsync
BASE=${BASE:-}
[[ -z $BASE ]] || SUFFIX+="-ab" # nor does an A/B run
HW_FLAGS=(--log-level warn --max-inflight 1024 --queue-parallelism 1024 --destination-allowlist 127.0.0.0/8 ${HW_EXTRA:-})
QUIET_WAIT_S=${QUIET_WAIT_S:-60}
NOISE_MAX=${NOISE_MAX:-30}
NCPU=$(nproc)
HZ=$(getconf CLK_TCK)
DATE=$(date +%F)
RESULTS=bench/results
# No run overwrites an earlier one of the same day and kind: a second one
# becomes <date>...-run2, then -run3, and so on.
if [[ -e $RESULTS/$DATE$SUFFIX.md ]]; then
    k=2
    while [[ -e $RESULTS/$DATE$SUFFIX-run$k.md ]]; do k=$((k + 1)); done
    SUFFIX+="-run$k"
fi
MD=$RESULTS/$DATE$SUFFIX.md
PNG=$RESULTS/$DATE$SUFFIX-lateness.png
RAWOUT=$RESULTS/$DATE$SUFFIX-raw.txt
WORK=$(mktemp -d /tmp/hookwheel-bench.XXXXXX)
RAW=$WORK/raw.txt
PIDS=()
BASE_WT=""    # the base's temporary git worktree, once added
VARIANT=cur   # which binary the running workload measures: cur or base

log() { printf '[bench %s] %s\n' "$(date +%T)" "$*" >&2; }

# ---- processes -----------------------------------------------------------

alive() { kill -0 "$1" 2>/dev/null; }

# stop_pid PID [SECONDS]: SIGTERM, wait up to SECONDS (default 15), then SIGKILL.
stop_pid() {
    local pid=$1 secs=${2:-15} i
    alive "$pid" || { wait "$pid" 2>/dev/null || true; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < secs * 20; i++)); do
        alive "$pid" || break
        sleep 0.05
    done
    if alive "$pid"; then
        log "pid $pid did not stop in ${secs}s; SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$? pid
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do
        stop_pid "$pid" 10
    done
    for pid in "${PIDS[@]}"; do
        alive "$pid" && log "WARNING: pid $pid still running"
    done
    if pgrep -af "$WORK/|$ROOT/$BUILD/bench/" >&2; then
        log "WARNING: the processes above (started by this run) are still running"
    fi
    if [[ -n $BASE_WT ]]; then
        git -C "$ROOT" worktree remove --force "$BASE_WT" 2>/dev/null ||
            { log "WARNING: could not remove the worktree $BASE_WT"; rm -rf "$BASE_WT"; }
    fi
    if [[ ${KEEP:-0} == 1 || $rc != 0 ]]; then
        log "work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_pid PID SECONDS: waits for a child to exit on its own; 1 if it did not.
wait_pid() {
    local pid=$1 secs=$2 i
    for ((i = 0; i < secs * 20; i++)); do
        alive "$pid" || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.05
    done
    return 1
}

# wait_quiet: until the machine is idle (< 15% of one core busy over 0.5 s),
# QUIET_WAIT_S at most; prints the busy % it last saw.
wait_quiet() {
    local deadline=$((SECONDS + QUIET_WAIT_S)) busy t0 i0 t1 i1 u n s i w q sq st
    while :; do
        read -r _ u n s i w q sq st _ </proc/stat
        t0=$((u + n + s + i + w + q + sq + st)) i0=$((i + w))
        sleep 0.5
        read -r _ u n s i w q sq st _ </proc/stat
        t1=$((u + n + s + i + w + q + sq + st)) i1=$((i + w))
        busy=$(((t1 - t0 - (i1 - i0)) * 100 * NCPU / (t1 - t0 > 0 ? t1 - t0 : 1)))
        ((busy < 15 || SECONDS >= deadline)) && break
    done
    ((busy < 15)) || log "machine still ${busy}% busy after ${QUIET_WAIT_S}s; running anyway"
    echo "$busy"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

now_us() { local t=${EPOCHREALTIME//[.,]/}; echo $((10#$t)); }
now_ms() { echo $(($(now_us) / 1000)); }

# start_redis DIR: sets RPORT, RPID.
start_redis() {
    local dir=$1 i
    rm -rf "$dir" # a repeated run starts from an empty Redis too
    mkdir -p "$dir"
    RPORT=$(free_port)
    redis-server --bind 127.0.0.1 --port "$RPORT" --dir "$dir" --appendonly yes \
        --appendfsync "$REDIS_FSYNC" --save "" --daemonize no --logfile "$dir/redis.log" >/dev/null 2>&1 &
    RPID=$!
    PIDS+=("$RPID")
    for ((i = 0; i < 200; i++)); do
        [[ $(redis-cli -p "$RPORT" ping 2>/dev/null) == PONG ]] && return 0
        alive "$RPID" || break
        sleep 0.05
    done
    log "redis-server did not start; see $dir/redis.log"
    return 1
}

# wait_ready PORT PID: until GET /readyz answers 200 (15 s at most).
wait_ready() {
    local port=$1 pid=$2 i
    for ((i = 0; i < 300; i++)); do
        [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" 2>/dev/null) == 200 ]] &&
            return 0
        alive "$pid" || break
        sleep 0.05
    done
    log "hookwheel on port $port is not ready"
    return 1
}

# start_hookwheel NAME [PORT]: sets HPORT, HPID; logs to $WORK/NAME.hw.log.
# The exec time (EPOCHREALTIME) goes to $WORK/NAME.exec.
start_hookwheel() {
    local name=$1
    HPORT=${2:-$(free_port)}
    (
        now_us >"$WORK/$name.exec"
        exec "$HW" --listen "127.0.0.1:$HPORT" --redis-url "redis://127.0.0.1:$RPORT" \
            --instance-id "bench-$name" "${HW_FLAGS[@]}" >>"$WORK/$name.hw.log" 2>&1
    ) &
    HPID=$!
    PIDS+=("$HPID")
}

# start_sink NAME EXPECT TIMEOUT_S [CSV]: sets SPORT, SPID; summary in $WORK/NAME.sink.
start_sink() {
    local name=$1 expect=$2 timeout=$3 csv=${4:-}
    SPORT=$(free_port)
    "$SINK" --port "$SPORT" --expect "$expect" --exit-when-done --timeout-s "$timeout" \
        ${csv:+--csv "$csv"} >"$WORK/$name.sink" 2>&1 &
    SPID=$!
    PIDS+=("$SPID")
    sleep 0.2
    alive "$SPID" || { log "sink did not start"; cat "$WORK/$name.sink" >&2; return 1; }
}

# ---- measurements ----------------------------------------------------------

# kv LINE KEY: the value of KEY=value in a line of key=value words.
kv() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | awk 'NR <= 1'; }

proc_ticks() {
    local line rest
    read -r line <"/proc/$1/stat" || return 1
    rest=${line##*) }
    set -- $rest
    echo $((${12} + ${13}))
}

# cpu_snap FILE NAME=PID...: utime+stime of each process and of each
# hookwheel thread, and the machine's total and idle jiffies.
cpu_snap() {
    local out=$1 kvp name pid t comm ticks u n s i w q sq st
    shift
    {
        echo "time $(now_us)"
        read -r _ u n s i w q sq st _ </proc/stat
        echo "machine:total $((u + n + s + i + w + q + sq + st))"
        echo "machine:idle $((i + w))"
        for kvp in "$@"; do
            name=${kvp%%=*} pid=${kvp#*=}
            echo "ours:$pid"
            ticks=$(proc_ticks "$pid" 2>/dev/null) || continue # exited: no line
            echo "proc:$name $ticks"
            [[ $name == hookwheel ]] || continue
            for t in /proc/"$pid"/task/*; do
                read -r comm <"$t/comm" 2>/dev/null || comm='?'
                ticks=$(proc_ticks "$pid/task/${t##*/}" 2>/dev/null) || continue
                echo "thread:${t##*/}:${comm// /_} $ticks"
            done
        done
        echo "ours:$$"
        # every process, for the CPU of those this script did not start
        # (a process may exit between the glob and the read: not an error)
        { cat /proc/[0-9]*/stat 2>/dev/null || true; } |
            awk '{ p = $1; sub(/.*\) /, ""); split($0, f, " "); print "pid:" p, f[12] + f[13] }'
    } >"$out"
}

# cpu_diff A B: one line of cpu_<name>=% of one core, machine=% of one core
# (of NCPU*100), and the four busiest hookwheel threads.
cpu_diff() {
    awk -v hz="$HZ" -v ncpu="$NCPU" '
        FNR == NR { a[$1] = $2; next }
        { b[$1] = $2 }
        END {
            secs = (b["time"] - a["time"]) / 1e6
            dt = b["machine:total"] - a["machine:total"]
            di = b["machine:idle"] - a["machine:idle"]
            printf "secs=%.2f machine_pct=%.0f", secs, (dt > 0 ? (dt - di) / dt * ncpu * 100 : 0)
            for (k in b) if (k ~ /^proc:/ && (k in a))
                printf " cpu_%s=%.0f", substr(k, 6), (b[k] - a[k]) / hz / secs * 100
            n = 0
            for (k in b) if (k ~ /^thread:/ && (k in a)) { n++; tk[n] = k; tv[n] = (b[k] - a[k]) / hz / secs * 100 }
            for (x = 1; x <= n; x++) for (y = x + 1; y <= n; y++) if (tv[y] > tv[x]) {
                t = tv[x]; tv[x] = tv[y]; tv[y] = t; t = tk[x]; tk[x] = tk[y]; tk[y] = t }
            for (k in b) if (k ~ /^pid:/) {
                q = substr(k, 5)
                if (("ours:" q) in a || ("ours:" q) in b) continue
                o += b[k] - ((k in a) ? a[k] : 0)
            }
            printf " others_proc_pct=%.0f", o / hz / secs * 100
            printf " hw_threads="
            for (x = 1; x <= n && x <= 4; x++) {
                split(tk[x], p, ":")
                printf "%s%s/%s:%.0f%%", (x > 1 ? "," : ""), p[3], p[2], tv[x]
            }
            printf "\n"
        }' "$1" "$2"
}

# others CPULINE [PCT...]: CPU used by processes this run did not start, the
# larger of two estimates: the machine's busy % minus every cpu_<name>= of
# CPULINE and the given extra %s (catches processes that exited meanwhile,
# but /proc/stat is tick-sampled and reads low for bursty loads), and
# others_proc_pct (the sum over the other processes alive at the end).
others() {
    awk -v l="$1" -v x="${*:2}" 'BEGIN {
        n = split(l, w, " ")
        for (i = 1; i <= n; i++) {
            split(w[i], f, "=")
            if (f[1] == "machine_pct") m = f[2]
            else if (f[1] == "others_proc_pct") op = f[2]
            else if (f[1] ~ /^cpu_/) s += f[2]
        }
        k = split(x, e, " ")
        for (i = 1; i <= k; i++) s += e[i]
        printf "%.0f", (m - s > op ? m - s : op) }'
}

# pct_of CPU_MS SECS: CPU milliseconds as % of one core over SECS.
pct_of() { awk -v c="$1" -v s="$2" 'BEGIN { printf "%.0f", (s > 0 ? c / 10 / s : 0) }'; }

# top_snap FILE DELAY: in the background, after DELAY s, the second frame of
# `top -b -n 2 -d 0.5` (the first frame's %CPU is not over a real interval).
top_snap() {
    (sleep "$2"; top -b -n 2 -d 0.5 -w 200 2>/dev/null | awk '/^top -/ { n++ } n == 2 && ++k <= 22' >"$1") &
    PIDS+=("$!")
}

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
redis_used() { redis-cli -p "$RPORT" info memory | tr -d '\r' | sed -n 's/^used_memory://p'; }

# result WORDS...: one RESULT line; the first word names the workload (R,
# CPU_R, ...), tagged @base while the base binary is measured.
result() {
    local line="$*"
    [[ $VARIANT == cur ]] || line="${line%% *}@$VARIANT ${line#* }"
    echo "RESULT $line" | tee -a "$RAW" >&2
}

# redis_cost: "usec cpu_us fn_usec" of the run's Redis so far: usec summed
# over every cmdstat_* line of INFO commandstats, used_cpu_sys +
# used_cpu_user, and the usec of the script calls alone (FCALL, FCALL_RO,
# EVALSHA, EVAL: each counts the commands it calls once, inside it).
redis_cost() {
    { redis-cli -p "$RPORT" info commandstats; redis-cli -p "$RPORT" info cpu; } | tr -d '\r' |
        awk -F'[:,=]' '/^cmdstat_/ { for (i = 2; i < NF; i++) if ($i == "usec") u += $(i + 1) }
            /^cmdstat_(fcall|fcall_ro|evalsha|eval):/ { for (i = 2; i < NF; i++) if ($i == "usec") f += $(i + 1) }
            /^used_cpu_(sys|user):/ { c += $2 * 1e6 }
            END { printf "%.0f %.0f %.0f\n", u, c, f }'
}

# redis_calls: calls summed over every cmdstat_* line of INFO commandstats.
redis_calls() {
    redis-cli -p "$RPORT" info commandstats | tr -d '\r' |
        awk -F'[:,=]' '/^cmdstat_/ { for (i = 2; i < NF; i++) if ($i == "calls") n += $(i + 1) }
            END { printf "%.0f\n", n }'
}

# redis_settle SECS: until Redis's command count grows by at most 100 in
# 0.5 s (hookwheel wrote the outcomes of the last deliveries), SECS at most.
# An idle hookwheel makes ~40 in 0.5 s (nested calls of its functions
# included); a drain makes thousands.
redis_settle() {
    local deadline=$((SECONDS + $1)) a b
    b=$(redis_calls)
    while ((SECONDS < deadline)); do
        sleep 0.5
        a=$b b=$(redis_calls)
        ((b - a <= 100)) && return 0
    done
    log "Redis still busy after $1 s"
}

# ---- workloads ---------------------------------------------------------------

# R: wrk POSTs timers with unique ids for R_DUR s; every 2xx must be in Redis.
run_r() {
    local quiet
    quiet=$(wait_quiet)
    local run=$1 d line wpid n2xx scan zsum p
    d=$WORK/r$run
    start_redis "$d"
    start_hookwheel "r$run"
    wait_ready "$HPORT" "$HPID"
    CMD_R="wrk -t2 -c$R_CONNS -d${R_DUR}s --latency -s bench/register.lua http://127.0.0.1:$HPORT/timers -- r$run http://127.0.0.1:9/never"
    wrk -t2 -c"$R_CONNS" -d"${R_DUR}s" --latency -s bench/register.lua \
        "http://127.0.0.1:$HPORT/timers" -- "r$run" "http://127.0.0.1:9/never" >"$d.wrk" 2>&1 &
    wpid=$!
    PIDS+=("$wpid")
    top_snap "$d.top" $((R_DUR / 2))
    sleep 0.5 # sample from 0.5 s after wrk's start to 0.5 s before its end
    cpu_snap "$d.cpu0" hookwheel="$HPID" redis="$RPID" wrk="$wpid"
    sleep $((R_DUR - 1))
    cpu_snap "$d.cpu1" hookwheel="$HPID" redis="$RPID" wrk="$wpid"
    wait_pid "$wpid" 60 || { log "wrk did not finish"; return 1; }
    line=$(grep '^WRK ' "$d.wrk") || { log "no WRK line"; cat "$d.wrk" >&2; return 1; }
    sleep 2 # creates in flight when wrk stopped may still be written
    n2xx=$(($(kv "$line" requests) - $(kv "$line" non2xx)))
    scan=$(redis-cli -p "$RPORT" --scan --pattern 'hw:*:t:*' | sort -u | wc -l)
    zsum=0
    for p in $(seq 0 15); do
        zsum=$((zsum + $(redis-cli -p "$RPORT" zcard "hw:{$p}:ix::scheduled"))) # waiting, held by nobody
    done
    result "R run=$run rps=$(kv "$line" rps) p50_ms=$(kv "$line" p50_ms) p99_ms=$(kv "$line" p99_ms)" \
        "max_ms=$(kv "$line" max_ms) requests=$(kv "$line" requests) non2xx=$(kv "$line" non2xx)" \
        "sockerr=$(($(kv "$line" errors_connect) + $(kv "$line" errors_read) + $(kv "$line" errors_write) + $(kv "$line" errors_timeout)))" \
        "wrk_2xx=$n2xx redis_timers=$scan due_zcard_sum=$zsum missing=$((n2xx > scan ? n2xx - scan : 0))" \
        "extra=$((scan - n2xx)) busy_before=$quiet"
    result "R run=$run bad=$(($(kv "$line" non2xx) + $(kv "$line" errors_connect) + $(kv "$line" errors_read) + $(kv "$line" errors_write) + $(kv "$line" errors_timeout)))"
    line=$(cpu_diff "$d.cpu0" "$d.cpu1")
    result "CPU_R run=$run $line others_pct=$(others "$line")"
    stop_pid "$HPID" 20
    stop_pid "$RPID"
}

# run_lat W NAME RATE SECS CONNS RUN: RATE timers/s for SECS s, each due
# L_DELAY ms after its create, body 100 bytes; lateness at the receiver.
# Files are $WORK/NAME<RUN>.*; the command goes to CMD_<W>.
run_lat() {
    local quiet
    quiet=$(wait_quiet)
    local w=$1 name=$2$6 rate=$3 secs=$4 conns=$5 run=$6 d n lg sk line lgp skp
    d=$WORK/$name n=$((rate * secs))
    start_redis "$d"
    start_hookwheel "$name"
    wait_ready "$HPORT" "$HPID"
    start_sink "$name" "$n" $((secs + L_DELAY / 1000 + 30)) "$d.csv"
    printf -v "CMD_$w" '%s' "loadgen --url http://127.0.0.1:$HPORT/timers --sink-url http://127.0.0.1:$SPORT/hook --rate $rate --count $n --delay-ms $L_DELAY --body-bytes 100 --connections $conns --run-id $name"
    cpu_snap "$d.cpu0" hookwheel="$HPID" redis="$RPID"
    "$LOADGEN" --url "http://127.0.0.1:$HPORT/timers" --sink-url "http://127.0.0.1:$SPORT/hook" \
        --rate "$rate" --count "$n" --delay-ms "$L_DELAY" --body-bytes 100 --connections "$conns" \
        --run-id "$name" >"$d.lg" 2>&1 || { log "loadgen failed"; cat "$d.lg" >&2; return 1; }
    wait_pid "$SPID" $((L_DELAY / 1000 + 35)) || { log "sink did not exit"; stop_pid "$SPID"; }
    cpu_snap "$d.cpu1" hookwheel="$HPID" redis="$RPID"
    lg=$(grep '^LOADGEN ' "$d.lg") sk=$(grep '^SINK ' "$WORK/$name.sink") ||
        { log "missing LOADGEN/SINK line"; return 1; }
    result "$w run=$run create_rate=$(kv "$lg" rate) create_ok=$(kv "$lg" ok) create_non2xx=$(kv "$lg" non2xx)" \
        "create_errors=$(kv "$lg" errors) create_p99_ms=$(kv "$lg" p99_ms) p50_ms=$(kv "$sk" p50_ms)" \
        "p99_ms=$(kv "$sk" p99_ms) p999_ms=$(kv "$sk" p999_ms) max_ms=$(kv "$sk" max_ms) early=$(kv "$sk" early)" \
        "lost=$(($(kv "$lg" ok) - $(kv "$sk" unique))) dupes=$(kv "$sk" dupes) unique=$(kv "$sk" unique)" \
        "busy_before=$quiet create_codes=$(kv "$lg" codes)"
    line=$(cpu_diff "$d.cpu0" "$d.cpu1")
    secs=$(kv "$line" secs)
    lgp=$(pct_of "$(kv "$lg" cpu_ms)" "$secs") skp=$(pct_of "$(kv "$sk" cpu_ms)" "$secs")
    result "CPU_$w run=$run $line cpu_loadgen=$lgp cpu_sink=$skp others_pct=$(others "$line" "$lgp" "$skp")"
    # what a timer cost at this steady rate, its create and its delivery together
    result "$w run=$run $(awk -v h="$(kv "$line" cpu_hookwheel)" -v r="$(kv "$line" cpu_redis)" -v s="$secs" \
        -v n="$(kv "$sk" unique)" 'BEGIN { n = n > 0 ? n : 1
        printf "hw_us_per_timer=%.1f redis_us_per_timer=%.1f", h / 100 * s * 1e6 / n, r / 100 * s * 1e6 / n }')"
    stop_pid "$HPID" 20
    stop_pid "$RPID"
}

# L: L_RATE timers/s for L_SECS s, each due L_DELAY ms after its create.
run_l() { run_lat L l "$L_RATE" "$L_SECS" 32 "$1"; }

# L20: L20_RATE timers/s for L20_SECS s, the same way.
run_l20() { run_lat L20 l20_ "$L20_RATE" "$L20_SECS" "$L20_CONNS" "$1"; }

# slow_calls PORT: from SLOWLOG GET of the calls over 1 ms (read as RESP:
# their arguments may be binary), "redis_calls_over_1ms=N
# redis_longest_call_ms=X redis_longest_call=NAME" (NAME: the function of an
# FCALL, else the command).
slow_calls() {
    python3 - "$1" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
f = s.makefile("rb")
s.sendall(b"*3\r\n$7\r\nSLOWLOG\r\n$3\r\nGET\r\n$2\r\n-1\r\n")
def read():
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"*":
        return [read() for _ in range(int(rest))]
    if kind == b"$":
        return None if int(rest) < 0 else f.read(int(rest) + 2)[:-2]
    return int(rest) if kind == b":" else rest
log = read()
def name(e):
    a = e[3]
    if a[0].upper() == b"FCALL" and len(a) > 1:
        return a[1].decode(errors="replace").rsplit("_", 1)[-1]
    return a[0].decode(errors="replace").upper()
top = max(log, key=lambda e: e[2], default=None)
def keys(e):  # an FCALL's number of keys (a batch's timers), else 0
    a = e[3]
    try:
        return int(a[2]) if a[0].upper() == b"FCALL" else 0
    except (IndexError, ValueError):
        return 0
by = {}
for e in log:
    by.setdefault(name(e), []).append(e)
print(f"redis_calls_over_1ms={len(log)} redis_longest_call_ms={top[2] / 1000 if top else 0:.3f} "
      f"redis_longest_call={name(top) if top else '-'} redis_longest_call_keys={keys(top) if top else 0} "
      "redis_slow_by_call=" + (",".join(f"{k}:{len(v)}:{max(keys(e) for e in v)}" for k, v in sorted(by.items())) or "-"))
PY
}

# D: D_N timers all due at one instant T; deliveries/s from T to the last
# one, the first delivery's lateness after T, and Redis's cost per delivered
# timer: INFO commandstats usec and INFO cpu from all creates acknowledged to
# the drain done (Redis settled), divided by the timers delivered.
run_d() {
    local quiet
    quiet=$(wait_quiet)
    local run=$1 d lead t lg sk wait_s first last line skp cost0 cost1 n mem0 mem1 slow
    d=$WORK/d$run
    start_redis "$d"
    start_hookwheel "d$run"
    wait_ready "$HPORT" "$HPID"
    if [[ -n ${D_QUEUE:-} ]]; then
        curl -fsS -X PUT -H 'Content-Type: application/json' -d "$D_QUEUE" \
            "http://127.0.0.1:$HPORT/queues/default" >/dev/null || { log "PUT /queues/default failed"; return 1; }
        sleep 1.2 # every instance applies queue settings within a second
    fi
    lead=$((3000 + D_N / 5)) # ms: 3 s plus creates at >= 5,000/s
    t=$(($(now_ms) + lead))
    start_sink "d$run" "$D_N" $((lead / 1000 + 180)) "$WORK/d$run.csv"
    mem0=$(redis_used)
    CMD_D="loadgen --url http://127.0.0.1:$HPORT/timers --sink-url http://127.0.0.1:$SPORT/hook --rate 0 --count $D_N --at-ms <now+${lead}ms> --body-bytes 100 --connections 32 --run-id d$run"
    "$LOADGEN" --url "http://127.0.0.1:$HPORT/timers" --sink-url "http://127.0.0.1:$SPORT/hook" \
        --rate 0 --count "$D_N" --at-ms "$t" --body-bytes 100 --connections 32 \
        --run-id "d$run" >"$d.lg" 2>&1 || { log "loadgen failed"; cat "$d.lg" >&2; return 1; }
    cost0=$(redis_cost)
    redis-cli -p "$RPORT" info commandstats | tr -d '\r' >"$d.cs0"
    # every command of the drain that held Redis over 1 ms (SLOWLOG: only
    # those pay for being logged, so the figures above stay as they were)
    redis-cli -p "$RPORT" config set slowlog-max-len 100000 >/dev/null
    redis-cli -p "$RPORT" config set slowlog-log-slower-than 1000 >/dev/null
    redis-cli -p "$RPORT" slowlog reset >/dev/null
    lg=$(grep '^LOADGEN ' "$d.lg")
    wait_s=$(((t - $(now_ms)) / 1000))
    ((wait_s > 0)) && sleep "$wait_s"
    while (($(now_ms) < t)); do sleep 0.01; done
    cpu_snap "$d.cpu0" hookwheel="$HPID" redis="$RPID"
    top_snap "$d.top" 0
    wait_pid "$SPID" 180 || { log "sink did not exit"; }
    cpu_snap "$d.cpu1" hookwheel="$HPID" redis="$RPID"
    alive "$SPID" && stop_pid "$SPID"
    redis_settle 15
    cost1=$(redis_cost)
    mem1=$(redis_used) # the delivered timers, kept for the retention (records, histories, index entries)
    redis-cli -p "$RPORT" info commandstats | tr -d '\r' >"$d.cs1"
    slow=$(slow_calls "$RPORT") || slow=""
    sk=$(grep '^SINK ' "$WORK/d$run.sink") || { log "no SINK line"; return 1; }
    first=$(kv "$sk" first_us) last=$(kv "$sk" last_us) n=$(kv "$sk" unique)
    result "D run=$run deliveries_per_s=$(awk -v n="$(kv "$sk" unique)" -v l="$last" -v t="$t" \
        'BEGIN { s = (l - t * 1000) / 1e6; printf "%.0f", (s > 0 ? n / s : 0) }')" \
        "drain_s=$(awk -v l="$last" -v t="$t" 'BEGIN { printf "%.3f", (l - t * 1000) / 1e6 }')" \
        "first_ms=$(awk -v f="$first" -v t="$t" 'BEGIN { printf "%.3f", (f - t * 1000) / 1e3 }')" \
        "p50_ms=$(kv "$sk" p50_ms) p99_ms=$(kv "$sk" p99_ms) early=$(kv "$sk" early)" \
        "lost=$(($(kv "$lg" ok) - $(kv "$sk" unique))) dupes=$(kv "$sk" dupes)" \
        "create_rate=$(kv "$lg" rate) create_ok=$(kv "$lg" ok) created_before_t=$(($(kv "$lg" last_done_ms) < t))" \
        "first_to_last_per_s=$(awk -v n="$(kv "$sk" unique)" -v f="$first" -v l="$last" \
            'BEGIN { s = (l - f) / 1e6; printf "%.0f", (s > 0 ? n / s : 0) }')" \
        "busy_before=$quiet create_codes=$(kv "$lg" codes)"
    result "D run=$run $(awk -v a="$cost0" -v b="$cost1" -v n="$n" 'BEGIN {
        split(a, x, " "); split(b, y, " ")
        printf "redis_cmd_us_per_timer=%.2f redis_cpu_us_per_timer=%.2f redis_fn_us_per_timer=%.2f redis_cmd_usec=%.0f redis_cpu_us=%.0f delivered=%d",
            (n > 0 ? (y[1] - x[1]) / n : -1), (n > 0 ? (y[2] - x[2]) / n : -1), (n > 0 ? (y[3] - x[3]) / n : -1),
            y[1] - x[1], y[2] - x[2], n }')" \
        "retained_bytes_per_timer=$(((mem1 - mem0) / (n > 0 ? n : 1)))" \
        "$slow"
    line=$(cpu_diff "$d.cpu0" "$d.cpu1")
    skp=$(pct_of "$(kv "$sk" cpu_ms)" "$(kv "$line" secs)")
    result "CPU_D run=$run $line cpu_sink=$skp others_pct=$(others "$line" "$skp")"
    # deliveries per 0.5 s after T, for the report
    tail -n +2 "$WORK/d$run.csv" | awk -F, -v t="$t" '
        { b = int(($3 - t * 1000) / 500000); b = b < 0 ? 0 : b; c[b]++; m = b > m ? b : m }
        END { for (i = 0; i <= m; i++) printf "%s%d", (i ? ", " : ""), c[i] + 0; printf "\n" }' \
        >"$WORK/d$run.timeline"
    stop_pid "$HPID" 20
    stop_pid "$RPID"
}

# M: M_N timers pending 1 h ahead: Redis bytes each, hookwheel RSS before and
# after, idle CPU, and time from exec to the first delivery after a restart.
run_m() {
    local quiet
    quiet=$(wait_quiet)
    local run=$1 d mem0 mem1 rss0 rss1 lg c0 c1 r0 r1 t0 due exec_us sk port ok secs
    d=$WORK/m$run
    start_redis "$d"
    start_hookwheel "m$run"
    port=$HPORT
    wait_ready "$HPORT" "$HPID"
    start_sink "m$run" 1 $((M_N / 2000 + 240))
    sleep 1
    mem0=$(redis_used) rss0=$(rss_kb "$HPID")
    CMD_M="loadgen --url http://127.0.0.1:$HPORT/timers --sink-url http://127.0.0.1:$SPORT/m --rate 0 --count $M_N --delay-ms 3600000 --body-bytes 200 --plain 1 --connections 32 --run-id m$run"
    "$LOADGEN" --url "http://127.0.0.1:$HPORT/timers" --sink-url "http://127.0.0.1:$SPORT/m" \
        --rate 0 --count "$M_N" --delay-ms 3600000 --body-bytes 200 --plain 1 --connections 32 \
        --run-id "m$run" >"$d.lg" 2>&1 || { log "loadgen failed"; cat "$d.lg" >&2; return 1; }
    lg=$(grep '^LOADGEN ' "$d.lg")
    ok=$(kv "$lg" ok)
    ((ok > 0)) || ok=1
    sleep 2
    mem1=$(redis_used) rss1=$(rss_kb "$HPID")
    c0=$(proc_ticks "$HPID") r0=$(proc_ticks "$RPID") t0=$(now_us)
    sleep "$M_IDLE_S"
    c1=$(proc_ticks "$HPID") r1=$(proc_ticks "$RPID")
    secs=$(awk -v a="$t0" -v b="$(now_us)" 'BEGIN { print (b - a) / 1e6 }')
    # One timer due while hookwheel is down: create it, stop hookwheel, let
    # it fall due, start hookwheel again and time exec -> arrival at the sink.
    due=$(($(now_ms) + 2500))
    curl -s -o /dev/null -X POST "http://127.0.0.1:$HPORT/timers" -H 'Content-Type: application/json' \
        -d "{\"id\":\"m$run-probe\",\"url\":\"http://127.0.0.1:$SPORT/probe\",\"fire_at_ms\":$due,\"json\":{\"seq\":0,\"due_ms\":$due}}"
    stop_pid "$HPID" 30
    while (($(now_ms) < due + 500)); do sleep 0.05; done
    start_hookwheel "m$run" "$port"
    CMD_M2="restart: hookwheel ${HW_FLAGS[*]} with one timer overdue, time exec -> first arrival at the sink"
    wait_pid "$SPID" 60 || { log "probe not delivered within 60 s"; stop_pid "$SPID"; }
    exec_us=$(<"$WORK/m$run.exec")
    sk=$(grep '^SINK ' "$WORK/m$run.sink") || sk="SINK first_us=0 unique=0"
    result "M run=$run redis_bytes_per_timer=$(((mem1 - mem0) / ok)) created=$(kv "$lg" ok)" \
        "create_rate=$(kv "$lg" rate) create_non2xx=$(kv "$lg" non2xx) rss_before_mib=$(awk -v k="$rss0" 'BEGIN { printf "%.1f", k / 1024 }')" \
        "rss_after_mib=$(awk -v k="$rss1" 'BEGIN { printf "%.1f", k / 1024 }') rss_growth_mib=$(awk -v a="$rss0" -v b="$rss1" 'BEGIN { printf "%.1f", (b - a) / 1024 }')" \
        "idle_cpu_pct=$(awk -v c=$((c1 - c0)) -v hz="$HZ" -v s="$secs" 'BEGIN { printf "%.2f", c / hz / s * 100 }')" \
        "redis_idle_cpu_pct=$(awk -v c=$((r1 - r0)) -v hz="$HZ" -v s="$secs" 'BEGIN { printf "%.2f", c / hz / s * 100 }')" \
        "first_delivery_ms=$(awk -v f="$(kv "$sk" first_us)" -v e="$exec_us" 'BEGIN { printf "%.1f", (f > 0 ? (f - e) / 1000 : -1) }')" \
        "probe_received=$(kv "$sk" received) busy_before=$quiet create_codes=$(kv "$lg" codes)"
    stop_pid "$HPID" 20
    stop_pid "$RPID" 30
}

# ---- report ------------------------------------------------------------------

# vals W KEY: the values of KEY in the RESULT lines of workload W, one a line.
vals() { awk -v w="$1" -v k="$2" '$2 == w { for (i = 3; i <= NF; i++) if (index($i, k "=") == 1) print substr($i, length(k) + 2) }' "$RAW"; }

# stat W KEY: "median min max" (median of an even count: mean of the middle two).
stat() {
    vals "$1" "$2" | sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan nan nan"; exit }
        m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        print m, v[1], v[NR] }'
}

# row LABEL W KEY DECIMALS TARGET_TEXT OP LIMIT [all]: a table row; "met?"
# compares the median (or, with "all", every run) with LIMIT using OP. OP
# x>= and x<= compare current/base (of the medians) with LIMIT; without BASE
# such a row shows the figure and no verdict. With BASE the row also has the
# base's median and min–max and current/base.
row() {
    local label=$1 w=$2 key=$3 dec=$4 ttext=$5 op=$6 limit=$7 mode=${8:-median} med lo hi bmed blo bhi met
    read -r med lo hi < <(stat "$w" "$key")
    read -r bmed blo bhi < <(stat "$w@base" "$key")
    if [[ $op == x* && -z $BASE ]]; then
        op=- ttext+=" (needs BASE)"
    fi
    if [[ $med == nan ]]; then
        if [[ -n $BASE ]]; then
            printf '| %s | not run | | | | | %s | |\n' "$label" "$ttext"
        else
            printf '| %s | not run | | %s | |\n' "$label" "$ttext"
        fi
        return 0
    fi
    if [[ $op == - ]]; then
        met=""
    else
        met=$(awk -v m="$med" -v lo="$lo" -v hi="$hi" -v b="$bmed" -v op="$op" -v l="$limit" -v mode="$mode" 'BEGIN {
            if (op ~ /^x/) {
                if (b == "nan" || b == 0) { print "no base"; exit }
                r = m / b
                ok = op == "x>=" ? r >= l : r <= l
            } else if (mode == "all")
                ok = op == "<=" ? hi <= l : op == ">=" ? lo >= l : op == "<" ? hi < l : lo == l && hi == l
            else
                ok = op == "<=" ? m <= l : op == ">=" ? m >= l : op == "<" ? m < l : m == l
            print ok ? "met" : "**not met**" }')
    fi
    awk -v l="$label" -v m="$med" -v lo="$lo" -v hi="$hi" -v d="$dec" -v t="$ttext" -v met="$met" \
        -v ab="${BASE:+1}" -v bm="$bmed" -v blo="$blo" -v bhi="$bhi" 'BEGIN {
        f = "%." d "f"
        printf "| %s | " f " | " f "–" f " |", l, m, lo, hi
        if (ab) {
            if (bm == "nan") printf " not run | | |"
            else {
                printf " " f " | " f "–" f " |", bm, blo, bhi
                if (bm != 0) printf " %.2f× |", m / bm
                else printf " — |"
            }
        }
        printf " %s | %s |\n", t, met }'
}

# cpu_row W LABEL NAME...: medians of the CPU samples of W; NAME... are the
# load generator / receiver processes to list.
cpu_row() {
    local w=$1 label=$2 n med rest=""
    shift 2
    [[ $(stat "$w" machine_pct) == nan* ]] && return 0
    for n in "$@"; do
        med=$(stat "$w" "cpu_$n" | awk '{ print $1 }')
        rest+="${rest:+, }$n $med"
    done
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$label" \
        "$(stat "$w" machine_pct | awk '{ print $1 }')" "$(stat "$w" cpu_hookwheel | awk '{ print $1 }')" \
        "$(stat "$w" cpu_redis | awk '{ print $1 }')" "$rest" \
        "$(stat "$w" others_pct | awk '{ print $1 }')" "$(vals "$w" hw_threads | awk 'NR <= 1')"
}

# A note on what saturates, from the CPU samples of workload W.
saturation_note() {
    local w=$1 name=$2 other=$3 mach hw rd ot top
    mach=$(stat "$w" machine_pct | awk '{ print $1 }')
    ot=$(stat "$w" "cpu_$other" | awk '{ print $1 }')
    hw=$(stat "$w" cpu_hookwheel | awk '{ print $1 }')
    rd=$(stat "$w" cpu_redis | awk '{ print $1 }')
    top=$(vals "$w" hw_threads | awk 'NR == 1' | cut -d, -f1)
    awk -v n="$name" -v m="$mach" -v hw="$hw" -v rd="$rd" -v c="$NCPU" -v top="$top" -v o="$other" -v ot="$ot" 'BEGIN {
        cap = c * 100
        printf "- %s: the machine was %d%% busy of %d%% (%d cores); hookwheel %d%%, redis-server %d%%, %s %d%%. ", n, m, cap, c, hw, rd, o, ot
        split(top, p, ":"); tp = p[2] + 0
        if (m >= 0.85 * cap) printf "The CPUs are (nearly) saturated: on this box the workload is CPU-bound, so the rate is bounded by the CPU cost per timer summed over all processes. "
        else printf "The CPUs have headroom, so the limit is elsewhere (a single thread, a round trip, or a cap). "
        if (tp >= 75) printf "The busiest hookwheel thread (%s) is near one full core (>= 75%%): a single-thread bottleneck. ", top
        if (rd >= 75) printf "redis-server (single-threaded) is near one full core (>= 75%%). "
        printf "\n" }'
}

# noise_list PREFIX KEY W...: "W: v1,v2; ..." of KEY in the lines PREFIX<W>.
noise_list() {
    local pre=$1 key=$2 w v out=""
    shift 2
    for w in "$@"; do
        v=$(vals "$pre$w" "$key" | paste -sd, -)
        [[ -z $v ]] || out+="${out:+; }${w%@base}: $v"
    done
    echo "$out"
}

# d_per_run: D's per-run figures (current and base, in the order they ran).
d_per_run() {
    grep -q '^RESULT D\(@base\)\? ' "$RAW" || return 0
    echo "D per run (the first delivery after T must be ≤ 50 ms in every run; Redis µs from all creates"
    echo "acknowledged to the drain done, divided by the timers delivered; the command µs sum INFO"
    echo "commandstats over every command, so a command a Redis function calls counts inside the"
    echo "FCALL and again on its own line; the function µs sum the FCALLs alone, each with the commands it"
    echo "called, once):"
    echo
    echo "| Binary | Run | Deliveries/s | First delivery after T, ms | Redis command µs per timer | Redis function µs per timer | Redis CPU µs per timer | Delivered |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|"
    awk '$1 == "RESULT" && ($2 == "D" || $2 == "D@base") {
            for (i = 3; i <= NF; i++) { split($i, f, "="); v[$2 " " $3, f[1]] = f[2] }
            if (!(($2 " " $3) in seen)) { seen[$2 " " $3] = 1; order[++n] = $2 " " $3 }
        }
        END {
            for (k = 1; k <= n; k++) {
                split(order[k], p, " ")
                r = substr(p[2], 5)
                sub(/-base$/, "", r)
                printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", (p[1] == "D" ? "current" : "base"),
                    r, v[order[k], "deliveries_per_s"], v[order[k], "first_ms"],
                    v[order[k], "redis_cmd_us_per_timer"], v[order[k], "redis_fn_us_per_timer"],
                    v[order[k], "redis_cpu_us_per_timer"],
                    v[order[k], "delivered"]
            }
        }' "$RAW"
    echo
    echo "Worst first delivery after T: current $(stat D first_ms | awk '{ print $3 }') ms${BASE:+, base $(stat D@base first_ms | awk '{ print $3 }') ms}."
    echo
}

write_report() {
    local mdtmp=$WORK/report.md
    {
        echo "# hookwheel benchmark — $DATE${SUFFIX:+ ($SUFFIX)}"
        echo
        echo "Generated by \`$([[ $QUICK == 1 ]] && echo 'QUICK=1 ')${BASE:+BASE=$BASE }bash bench/run.sh\` ($RUNS run(s) per workload)."
        echo "Every figure: median over the runs, and min–max. \"met?\" compares the median with the"
        echo "target, except the zero-count targets (early, lost, missing) and the first delivery of D,"
        echo "which every run must meet."
        if [[ -n $BASE ]]; then
            echo
            echo "A/B: for every workload and run, the base binary ($BASE) ran first, then the current one,"
            echo "alternately, with the same load generator and receiver (the current tree's), each run on a"
            echo "fresh redis-server. Targets written \"× base\" compare current/base of the medians; \"met?\""
            echo "judges the current binary. The wheel microbenchmark (W) measures the current tree only."
            echo "R's \"missing\"/\"extra\" rows count keys of the current Redis layout, so for a base"
            echo "with another layout their base column means nothing."
        fi
        echo
        echo "## Machine"
        echo
        echo "- nproc: $NCPU; CPU: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | awk 'NR <= 1'); kernel: $(uname -r)"
        echo "- $(redis-server --version | cut -d' ' -f1-3); $(curl --version | awk 'NR == 1' | cut -d' ' -f1-2); libmicrohttpd $(pkg-config --modversion libmicrohttpd); $(wrk -v 2>&1 | awk 'NR == 1' | cut -d' ' -f1-2); gnuplot $(gnuplot --version | cut -d' ' -f2)"
        echo "- hookwheel binary: sha256 ${HW_SHA:0:16}… (copied at start; built from the working tree at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' with uncommitted changes'))"
        if [[ -n $BASE ]]; then
            echo "- base binary: \`$BASE\` = $BASE_DESC, sha256 ${BASE_SHA:0:16}… (built in a temporary git worktree)"
        fi
        echo "- load before the run (1/5/15 min): $LOAD0; busiest other processes at start:"
        echo
        echo '```'
        echo "$OTHERS"
        echo '```'
        echo
        echo "Everything runs on this one machine: load generator, Redis, hookwheel and receiver share"
        echo "the $NCPU cores (and whatever else runs there; see above)."
        echo
        echo "## Results"
        echo
        if [[ -n $BASE ]]; then
            echo "| Metric | Median | Min–max | Base median | Base min–max | Current/base | Target | Met? |"
            echo "|---|---:|---:|---:|---:|---:|---|---|"
        else
            echo "| Metric | Median | Min–max | Target | Met? |"
            echo "|---|---:|---:|---|---|"
        fi
        row "R registration, timers/s" R rps 0 "≥ 1.5× base" "x>=" 1.5
        row "R create latency p99, ms" R p99_ms 2 "≤ 10" "<=" 10
        row "R create latency p50, ms" R p50_ms 2 "—" - 0
        row "R non-2xx answers + socket errors" R bad 0 "0" "==" 0 all
        row "R 2xx missing from Redis" R missing 0 "0" "==" 0 all
        row "R timers in Redis − 2xx (creates in flight at wrk's stop)" R extra 0 "0…$R_CONNS" "<=" "$R_CONNS" all
        row "L creates answered 2xx" L create_ok 0 "$((L_RATE * L_SECS))" "==" $((L_RATE * L_SECS)) all
        row "L create rate achieved, timers/s" L create_rate 0 "$L_RATE" - 0
        row "L lateness p50, ms" L p50_ms 3 "—" - 0
        row "L lateness p99, ms" L p99_ms 3 "≤ 3" "<=" 3
        row "L lateness p99.9, ms" L p999_ms 3 "≤ 20" "<=" 20
        row "L lateness max, ms" L max_ms 3 "—" - 0
        row "L early" L early 0 "0" "==" 0 all
        row "L lost (2xx creates − distinct deliveries)" L lost 0 "0" "==" 0 all
        row "L duplicate deliveries" L dupes 0 "—" - 0
        row "L hookwheel CPU µs per timer (its create and delivery)" L hw_us_per_timer 1 "—" - 0
        row "L Redis CPU µs per timer" L redis_us_per_timer 1 "—" - 0
        row "L20 creates answered 2xx" L20 create_ok 0 "$((L20_RATE * L20_SECS))" "==" $((L20_RATE * L20_SECS)) all
        row "L20 create rate achieved, timers/s" L20 create_rate 0 "$L20_RATE" - 0
        row "L20 create latency p99, ms" L20 create_p99_ms 3 "—" - 0
        row "L20 lateness p50, ms" L20 p50_ms 3 "—" - 0
        row "L20 lateness p99, ms" L20 p99_ms 3 "≤ 10" "<=" 10
        row "L20 lateness p99.9, ms" L20 p999_ms 3 "—" - 0
        row "L20 lateness max, ms" L20 max_ms 3 "—" - 0
        row "L20 early" L20 early 0 "0" "==" 0 all
        row "L20 lost (2xx creates − distinct deliveries)" L20 lost 0 "0" "==" 0 all
        row "L20 duplicate deliveries" L20 dupes 0 "—" - 0
        row "L20 hookwheel CPU µs per timer (its create and delivery)" L20 hw_us_per_timer 1 "—" - 0
        row "L20 Redis CPU µs per timer" L20 redis_us_per_timer 1 "—" - 0
        row "D creates answered 2xx" D create_ok 0 "$D_N" "==" "$D_N" all
        row "D deliveries/s (T → last delivery)" D deliveries_per_s 0 "≥ 2.5× base" "x>=" 2.5
        row "D deliveries/s (first → last delivery)" D first_to_last_per_s 0 "—" - 0
        row "D drain time, s" D drain_s 3 "—" - 0
        row "D first delivery after T, ms (max = worst run)" D first_ms 3 "≤ 50 in every run" "<=" 50 all
        row "D Redis command µs per delivered timer (Σ cmdstat usec)" D redis_cmd_us_per_timer 2 "≤ 1/3 of base" "x<=" 0.3333
        row "D Redis CPU µs per delivered timer (used_cpu_sys+user)" D redis_cpu_us_per_timer 2 "≤ 1/3 of base" "x<=" 0.3333
        row "D Redis function µs per delivered timer (FCALL usec: claim, begin, finish and what they call)" D redis_fn_us_per_timer 2 "≤ 1/3 of base" "x<=" 0.3333
        row "D Redis bytes per delivered timer kept for the retention (D's spec)" D retained_bytes_per_timer 0 "—" - 0
        row "D Redis calls over 1 ms (SLOWLOG), last create → drain done" D redis_calls_over_1ms 0 "—" - 0
        row "D longest Redis call, last create → drain done, ms" D redis_longest_call_ms 2 "~1" - 0
        row "D lost" D lost 0 "0" "==" 0 all
        row "D early" D early 0 "0" "==" 0 all
        row "D all created before T (1 = yes)" D created_before_t 0 "1" "==" 1 all
        row "M creates answered 2xx" M created 0 "$M_N" "==" "$M_N" all
        row "M Redis bytes per pending timer (200-byte body)" M redis_bytes_per_timer 0 "≤ 350" "<=" 350
        row "M hookwheel RSS before creating, MiB" M rss_before_mib 1 "—" - 0
        row "M hookwheel RSS with $M_N pending, MiB" M rss_after_mib 1 "—" - 0
        row "M RSS growth, MiB (independent of far-future timers)" M rss_growth_mib 1 "≤ 10" "<=" 10
        row "M start-up → first delivery with $M_N pending, ms" M first_delivery_ms 1 "< 1000" "<" 1000
        row "M hookwheel CPU while nothing is due, % of one core" M idle_cpu_pct 2 "~0 (≤ 1)" "<=" 1
        row "M redis-server CPU meanwhile, % of one core" M redis_idle_cpu_pct 2 "—" - 0
        row "M create rate for the $M_N timers, timers/s" M create_rate 0 "—" - 0
        echo
        if [[ $(stat L20 create_rate) != nan* ]]; then
            echo "L20 is open loop: create n goes out at start + n/$L20_RATE s, or once one of $L20_CONNS keep-alive"
            echo "connections (each waiting for its answer) is free. The load generator alone sustains $L20_RATE creates/s"
            echo "on this box (~13 µs of CPU per create); an achieved rate below it means the answers came too"
            echo "slowly for $L20_CONNS connections (see \"L20 create latency\" and the CPU table), and each timer"
            echo "is then due 2 s after its actual send."
            echo
        fi
        d_per_run
        echo "## What saturates"
        echo
        echo "CPU over each run's measuring window, as % of one core (the machine has $((NCPU * 100))%), medians"
        echo "over the runs: R from 0.5 s after wrk's start to 0.5 s before its end, L from the loadgen's"
        echo "start to the last delivery, D from T to the last delivery. \"other processes\": CPU of"
        echo "processes this run did not start (noise from whatever else runs on the box), the larger of"
        echo "machine busy − ours and the sum over the other processes alive at the window's end. hookwheel"
        echo "threads: comm/tid:% of the busiest four; only the HTTP workers are named (MHD-worker), the"
        echo "other threads are all called hookwheel."
        echo
        echo "| Workload | machine | hookwheel | redis-server | load generator / receiver | other processes | busiest hookwheel threads (run 1) |"
        echo "|---|---:|---:|---:|---|---:|---|"
        for v in "" @base; do
            [[ -z $v || -n $BASE ]] || continue
            cpu_row "CPU_R$v" "R${v:+ (base)}" wrk
            cpu_row "CPU_L$v" "L${v:+ (base)} (loadgen start → last delivery)" loadgen sink
            cpu_row "CPU_L20$v" "L20${v:+ (base)} (loadgen start → last delivery)" loadgen sink
            cpu_row "CPU_D$v" "D${v:+ (base)} (receiver answers 204)" sink
        done
        echo
        [[ $(stat CPU_R machine_pct) == nan* ]] || saturation_note CPU_R R wrk
        [[ $(stat CPU_D machine_pct) == nan* ]] || saturation_note CPU_D D sink
        echo
        echo "Noise from other work on this machine, per run (% of one core): CPU of processes this run did"
        echo "not start, during the measuring window — $(noise_list CPU_ others_pct R L L20 D)."
        echo "Machine busy just before each run (after waiting up to ${QUIET_WAIT_S}s for < 15%) —"
        echo "$(noise_list "" busy_before R L L20 D M). Runs with tens of % here were disturbed; CPU"
        echo "times are sampled per tick, so values within ±20 of 0 mean \"no noise\"."
        [[ -z $BASE ]] || echo "Base runs, in the same order: $(noise_list CPU_ others_pct R@base L@base L20@base D@base)."
        if [[ -s $WORK/discarded.txt ]]; then
            echo
            echo "Runs discarded and repeated because other processes used more than ${NOISE_MAX}% of one core"
            echo "during them: $(grep -c '^DISCARDED CPU_' "$WORK/discarded.txt"). Their lines:"
            echo
            echo '```'
            cat "$WORK/discarded.txt"
            echo '```'
        fi
        if [[ -s $WORK/d1.timeline ]]; then
            echo
            echo "D run 1, deliveries per 0.5 s after T: $(cat "$WORK/d1.timeline")."
        fi
        echo
        for f in "$WORK"/r1.top "$WORK"/d1.top; do
            [[ -s $f ]] || continue
            echo "<details><summary>top -b during ${f##*/} (second frame of top -b -n 2 -d 0.5)</summary>"
            echo
            echo '```'
            cat "$f"
            echo '```'
            echo "</details>"
            echo
        done
        echo "## Lateness (L)"
        echo
        [[ -s $WORK/lat1.txt ]] && echo "![lateness]($(basename "$PNG"))" || echo "(L not run)"
        echo
        echo "Complementary CDF of arrival at the receiver − due time, one curve per run, both axes log"
        echo "(x linear if any timer came early). Where a curve crosses the dotted 10^-2 / 10^-3 lines is"
        echo "its p99 / p99.9; the dashed lines are the targets."
        echo
        if [[ -n $WHEEL_MD ]]; then
            echo "## Wheel alone (W1–W4)"
            echo
            echo "\`bench/wheel_bench.sh\` (build/wheel_bench, single-threaded, same machine):"
            echo
            echo "$WHEEL_MD"
            echo
        fi
        echo "## Commands"
        echo
        echo "Each run: fresh \`redis-server --bind 127.0.0.1 --port <free> --dir <tmp> --appendonly yes"
        echo "--appendfsync $REDIS_FSYNC --save \"\"\` and fresh \`hookwheel --listen 127.0.0.1:<free> --redis-url"
        echo "redis://127.0.0.1:<port> --instance-id bench-<run> ${HW_FLAGS[*]}\`; receiver"
        echo "\`build/bench/sink --port <free> --expect N --exit-when-done\` (2 MHD epoll threads, 204)."
        [[ -z ${D_QUEUE:-} ]] || echo "D: before the creates, PUT /queues/default $D_QUEUE (timers drain through that queue)."
        echo
        echo '```'
        echo "R: ${CMD_R:-not run}"
        echo "   then: redis-cli --scan --pattern 'hw:*:t:*' | sort -u | wc -l  (and sum of ZCARD hw:{0..15}:ix::scheduled)"
        echo "L: ${CMD_L:-not run}"
        echo "L20: ${CMD_L20:-not run}"
        echo "D: ${CMD_D:-not run}"
        echo "   then INFO commandstats (usec summed over cmdstat_*) and INFO cpu (used_cpu_sys+used_cpu_user) after the last"
        echo "   create's answer and again after the drain (the receiver had all, Redis settled: ≤ 100 commands in 0.5 s)"
        echo "   INFO memory used_memory before the creates and after the drain: the bytes each delivered timer keeps for the retention"
        echo "   SLOWLOG (slowlog-log-slower-than 1000, set after the last create's answer) after the drain: the calls that held Redis over 1 ms (the raw D lines: redis_slow_by_call=<function or command>:<calls over 1 ms>:<most timers one carried>)"
        echo "M: ${CMD_M:-not run}"
        echo "   then INFO memory used_memory and /proc/<pid>/status VmRSS before/after, /proc/<pid>/stat utime+stime over ${M_IDLE_S}s,"
        echo "   ${CMD_M2:-not run}"
        echo '```'
        echo
        echo "Raw RESULT lines: [$(basename "$RAWOUT")]($(basename "$RAWOUT"))."
    } >"$mdtmp"
    mv "$mdtmp" "$MD"
}

plot_lateness() {
    local csvs=() f i=0 plots=() minlat maxlat run
    for ((run = 1; run <= RUNS; run++)); do # the current binary's L runs
        f=$WORK/l$run.csv
        [[ -s $f ]] || continue
        i=$((i + 1))
        tail -n +2 "$f" | awk -F, '{ printf "%.3f\n", ($3 - $2 * 1000) / 1000 }' | sort -g >"$WORK/lat$i.txt"
        [[ -s $WORK/lat$i.txt ]] || { rm -f "$WORK/lat$i.txt"; i=$((i - 1)); continue; }
        awk -v n="$(wc -l <"$WORK/lat$i.txt")" '{ print $1, (n - NR + 1) / n }' "$WORK/lat$i.txt" >"$WORK/ccdf$i.txt"
        csvs+=("$WORK/ccdf$i.txt")
        plots+=("'$WORK/ccdf$i.txt' using 1:2 with lines lw 2 title 'run $i'")
    done
    ((i > 0)) || { log "no L data to plot"; return 0; }
    minlat=$(awk 'NR == 1 || $1 < m { m = $1 } END { print m }' "$WORK"/lat*.txt)
    maxlat=$(awk 'NR == 1 || $1 > m { m = $1 } END { print m }' "$WORK"/lat*.txt)
    {
        echo "set terminal pngcairo size 1000,620 font 'sans,11'"
        echo "set output '$PNG'"
        echo "set title 'hookwheel lateness (arrival at receiver − due time), $L_RATE timers/s for $L_SECS s, delay $L_DELAY ms'"
        echo "set xlabel 'lateness, ms'"
        echo "set ylabel 'fraction of timers at least this late'"
        echo "set logscale y"
        # log x unless some timer came early (lateness <= 0); always show 30 ms
        awk -v m="$minlat" -v x="$maxlat" 'BEGIN {
            if (m > 0) print "set logscale x"
            printf "set xrange [%s:%g]\n", (m > 0 ? "*" : m), (x * 1.2 > 30 ? x * 1.2 : 30) }'
        echo "set format y '10^{%L}'"
        echo "set grid xtics ytics mxtics mytics"
        echo "set key bottom left box opaque"
        echo "set arrow from 3, graph 0 to 3, graph 1 nohead dt 2 lc rgb 'red'"
        echo "set label 'p99 target 3 ms' at 3, graph 0.95 right offset -0.5,0 tc rgb 'red'"
        echo "set arrow from 20, graph 0 to 20, graph 1 nohead dt 2 lc rgb 'dark-red'"
        echo "set label 'p99.9 target 20 ms' at 20, graph 0.88 right offset -0.5,0 tc rgb 'dark-red'"
        echo "set arrow from graph 0, first 0.01 to graph 1, first 0.01 nohead dt 3 lc rgb 'gray40'"
        echo "set arrow from graph 0, first 0.001 to graph 1, first 0.001 nohead dt 3 lc rgb 'gray40'"
        local IFS=,
        echo "plot ${plots[*]}"
    } >"$WORK/lateness.gp"
    gnuplot "$WORK/lateness.gp" || log "gnuplot failed; see $WORK/lateness.gp"
}

wheel_section() {
    WHEEL_MD=""
    [[ -f bench/wheel_bench.sh && -f bench/wheel_bench.c ]] || return 0
    log "wheel alone: building build/wheel_bench and running bench/wheel_bench.sh"
    if ! cc -std=gnu11 -O2 -D_GNU_SOURCE -Iservice -o "$BUILD/wheel_bench" bench/wheel_bench.c \
        service/wheel.c service/backoff.c service/xalloc.c service/clock.c -lm 2>"$WORK/wheel_build.log"; then
        WHEEL_MD="(build failed: $(head -3 "$WORK/wheel_build.log" | tr '\n' ' '))"
        return 0
    fi
    local args=()
    [[ $QUICK == 1 ]] && args=(--quick)
    if ! WHEEL_MD=$(RUNS=$RUNS WHEEL_BENCH="$ROOT/$BUILD/wheel_bench" timeout 900 bash bench/wheel_bench.sh \
        "${args[@]}" 2>"$WORK/wheel_bench.log"); then
        WHEEL_MD="(bench/wheel_bench.sh failed: $(tail -3 "$WORK/wheel_bench.log" | tr '\n' ' '))"
    fi
}

# ---- main --------------------------------------------------------------------

# run_workload W FN: RUNS runs of FN. A run during whose measuring window
# processes this script did not start used more than NOISE_MAX % of one core
# is discarded and repeated, at most twice; the report lists discarded runs.
# With BASE, each run is a pair: the base binary first (run label <n>-base,
# RESULT lines tagged @base), then the current one.
run_workload() {
    local w=$1 fn=$2 run v
    [[ $ONLY == *" $w "* ]] || return 0
    for ((run = 1; run <= RUNS; run++)); do
        for v in base cur; do
            [[ $v == cur || -n $BASE ]] || continue
            VARIANT=$v
            if [[ $v == base ]]; then
                HW=$HW_BASE
                run_once "$w" "$fn" "$run-base"
            else
                HW=$HW_CUR
                run_once "$w" "$fn" "$run"
            fi
            VARIANT=cur HW=$HW_CUR
        done
    done
}

# run_once W FN LABEL: one run of FN (file and id label LABEL), repeated up
# to twice while other processes used more than NOISE_MAX % of one core.
run_once() {
    local w=$1 fn=$2 label=$3 try n0 noise
    for ((try = 1; try <= 3; try++)); do
        log "$w run $label/$RUNS$( ((try > 1)) && echo " (try $try)")"
        n0=$(wc -l <"$RAW")
        "$fn" "$label"
        noise=$(tail -n +$((n0 + 1)) "$RAW" | awk '$2 ~ /^CPU_/ {
            for (i = 3; i <= NF; i++) if ($i ~ /^others_pct=/) print substr($i, 12) }')
        if [[ -z $noise ]] || ((noise <= NOISE_MAX || try == 3)); then
            break
        fi
        log "discarding $w run $label: other processes used ${noise}% of one core meanwhile"
        tail -n +$((n0 + 1)) "$RAW" | sed 's/^RESULT /DISCARDED /' >>"$WORK/discarded.txt"
        head -n "$n0" "$RAW" >"$RAW.tmp"
        mv "$RAW.tmp" "$RAW"
    done
}

# build_base: BASE's hookwheel, built in a temporary detached worktree
# (removed on exit by cleanup); sets HW_BASE, BASE_SHA, BASE_DESC.
build_base() {
    local rev
    rev=$(git rev-parse --verify --quiet "$BASE^{commit}") || { log "BASE=$BASE is not a commit"; return 1; }
    BASE_DESC="$(git log -1 --format='%h %s' "$rev")"
    BASE_WT=$WORK/base-src
    log "base: $BASE = $BASE_DESC; building in $BASE_WT"
    git worktree add --detach "$BASE_WT" "$rev" >"$WORK/base-make.log" 2>&1 ||
        { log "git worktree add failed"; cat "$WORK/base-make.log" >&2; return 1; }
    if ! timeout 900 make -C "$BASE_WT" -s -j"$NCPU" BUILD=build build/hookwheel >>"$WORK/base-make.log" 2>&1; then
        log "base build failed"
        tail -5 "$WORK/base-make.log" >&2
        return 1
    fi
    cp "$BASE_WT/build/hookwheel" "$WORK/hookwheel-base"
    HW_BASE=$WORK/hookwheel-base
    BASE_SHA=$(sha256sum "$HW_BASE" | cut -d' ' -f1)
}

build() {
    local i
    for ((i = 1; i <= 5; i++)); do
        if make -s >"$WORK/make.log" 2>&1; then
            if grep -q 'bench/bench.mk' Makefile; then
                make -s "$BUILD/bench/sink" "$BUILD/bench/loadgen" >>"$WORK/make.log" 2>&1 && return 0
            else
                make -s -f Makefile -f bench/bench.mk bench-tools >>"$WORK/make.log" 2>&1 && return 0
            fi
        fi
        log "build failed (attempt $i/5); retrying in 60 s"
        tail -5 "$WORK/make.log" >&2
        sleep 60
    done
    return 1
}

main() {
    local run w
    for w in wrk redis-server redis-cli gnuplot curl python3 top git; do
        command -v "$w" >/dev/null && continue
        # what make bench would have installed first (Debian's packages, as make deps)
        log "missing tool: $w; installing the harness's tools (make bench-deps)"
        make -s -C "$ROOT" deps bench-deps >&2 || { log "make bench-deps failed"; exit 1; }
        command -v "$w" >/dev/null || { log "missing tool: $w"; exit 1; }
    done
    mkdir -p "$RESULTS"
    log "building (work dir $WORK)"
    build
    cp "$BUILD/hookwheel" "$WORK/hookwheel"
    HW_CUR=$WORK/hookwheel HW=$WORK/hookwheel SINK=$ROOT/$BUILD/bench/sink LOADGEN=$ROOT/$BUILD/bench/loadgen
    HW_SHA=$(sha256sum "$HW" | cut -d' ' -f1)
    [[ -z $BASE ]] || build_base
    LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
    OTHERS=$(top -b -n 2 -d 1 -w 160 2>/dev/null | awk '/^top -/ { n++ } n == 2 && ++k <= 14')
    : >"$RAW"
    run_workload R run_r
    run_workload L run_l
    run_workload L20 run_l20
    run_workload D run_d
    run_workload M run_m
    WHEEL_MD=""
    [[ $ONLY == *" W "* ]] && wheel_section
    plot_lateness
    write_report
    cat "$RAW" >"$RAWOUT"
    if [[ -s $WORK/discarded.txt ]]; then
        cat "$WORK/discarded.txt" >>"$RAWOUT"
    fi
    log "wrote $MD$([[ -s $PNG ]] && echo ", $PNG"), $RAWOUT"
}

main "$@"
