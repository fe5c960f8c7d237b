#!/usr/bin/env bash
# aof_bytes.sh - what a timer adds to Redis's append-only file, by command.
#
# Starts a redis-server (AOF everysec, automatic rewrites off, so one file
# holds every write), hookwheel and the receiver, creates N timers due at
# one instant T as workload D does (100-byte body), waits until all are
# delivered and Redis is quiet, then reads the AOF's commands and prints the
# bytes a timer added (create, claim, begin and finish together), in all and
# per command. The AOF's growth decides how often Redis forks a rewrite
# (auto-aof-rewrite-min-size, README Sizing).
#
# Usage: bash bench/aof_bytes.sh        N=20000 BUILD=build HW_EXTRA (extra hookwheel flags)
# Every process is started here, on 127.0.0.1, recorded by pid and stopped
# by pid on exit, also on failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${N:-20000} BUILD=${BUILD:-build}
HW=$PWD/$BUILD/hookwheel SINK=$PWD/$BUILD/bench/sink LOADGEN=$PWD/$BUILD/bench/loadgen
WORK=$(mktemp -d /tmp/hookwheel-aof.XXXXXX)
PIDS=()
LOG_NAME=aof
. bench/lib.sh

make -s "$BUILD/hookwheel" "$BUILD/bench/sink" "$BUILD/bench/loadgen" >/dev/null
rport=$(free_port) hport=$(free_port) sport=$(free_port)
redis-server --bind 127.0.0.1 --port "$rport" --dir "$WORK" --appendonly yes --appendfsync everysec \
    --auto-aof-rewrite-percentage 0 --save "" --daemonize no --logfile "$WORK/redis.log" >/dev/null 2>&1 &
PIDS+=("$!")
for ((i = 0; i < 200; i++)); do
    [[ $(redis-cli -p "$rport" ping 2>/dev/null) == PONG ]] && break
    sleep 0.05
done
"$HW" --listen "127.0.0.1:$hport" --redis-url "redis://127.0.0.1:$rport" --instance-id aof-bytes \
    --log-level warn --max-inflight 1024 --queue-parallelism 1024 --destination-allowlist 127.0.0.0/8 \
    ${HW_EXTRA:-} >>"$WORK/hw.log" 2>&1 &
PIDS+=("$!")
for ((i = 0; i < 300; i++)); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hport/readyz") == 200 ]] && break
    sleep 0.05
done
((i < 300)) || { log "hookwheel not ready"; tail -5 "$WORK/hw.log" >&2; exit 1; }
lead=$((3000 + N / 5))
"$SINK" --port "$sport" --expect "$N" --exit-when-done --timeout-s $((lead / 1000 + 120)) >"$WORK/sink.out" 2>&1 &
spid=$!
PIDS+=("$spid")
sleep 0.2
"$LOADGEN" --url "http://127.0.0.1:$hport/timers" --sink-url "http://127.0.0.1:$sport/hook" --rate 0 \
    --count "$N" --at-ms $(($(now_ms) + lead)) --body-bytes 100 --connections 32 --run-id aof \
    >"$WORK/lg.out" 2>&1 || { log "loadgen failed"; cat "$WORK/lg.out" >&2; exit 1; }
wait "$spid" || true
grep -q "unique=$N " "$WORK/sink.out" || { log "not every timer was delivered"; cat "$WORK/sink.out" >&2; exit 1; }
# quiet: the finishes of the last deliveries written (an idle instance still
# renews its lease and sweeps, a few calls a second)
prev=-1
for ((i = 0; i < 50; i++)); do
    sleep 0.5
    cur=$(redis-cli -p "$rport" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_fcall:calls=\([0-9]*\),.*/\1/p')
    ((cur - prev <= 20)) && break
    prev=$cur
done
sleep 1.2 # appendfsync everysec: what Redis wrote is in the file
python3 - "$WORK/appendonlydir" "$N" "$(git log -1 --format='%h %s' | cut -c1-100)" <<'EOF'
import collections, pathlib, sys
d, n, build = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
data = b"".join(f.read_bytes() for f in sorted(d.glob("*.incr.aof")))
size, count, i = collections.Counter(), collections.Counter(), 0
while i < len(data):
    j = data.index(b"\r\n", i)
    argc, start, i, args = int(data[i + 1:j]), i, j + 2, []
    for _ in range(argc):
        j = data.index(b"\r\n", i)
        k = int(data[i + 1:j])
        args.append(data[j + 2:j + 2 + k])
        i = j + 2 + k + 2
    name = args[0].upper().decode()
    if name == "SET" and any(a.upper() in (b"PX", b"PXAT") for a in args[3:]):
        name = "SET with expiry"
    size[name] += i - start
    count[name] += 1
total = sum(size.values())
print(f"{n} timers, each due at one instant (100-byte body), build {build}:")
print(f"the AOF grew {total:,} bytes, {total / n:,.0f} a timer (create, claim, begin and finish)\n")
print("| command | per timer | bytes a timer |")
print("| --- | ---: | ---: |")
for name, b in size.most_common():
    if b / n >= 0.5:
        print(f"| {name} | {count[name] / n:.2f} | {b / n:.0f} |")
EOF
