# bench/lib.sh - helpers shared by bench/scale.sh and bench/capacity.sh
# (sourced, not run). The script sets LOG_NAME (the log prefix), PIDS (the
# pids it started, which stop_all and the exit trap stop) and WORK (its
# temporary directory, removed on exit) before it starts anything.

log() { printf '[%s %s] %s\n' "$LOG_NAME" "$(date +%T)" "$*" >&2; }

# Stops every process in PIDS, by pid, and waits for each.
stop_all() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
cleanup() {
    stop_all
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# kv LINE KEY: the value of KEY=value in a line of key=value words.
kv() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | awk 'NR <= 1'; }
# ticks PID: the process's CPU time so far (utime + stime, clock ticks; 0 once it is gone).
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# median: of the numbers on stdin, one per line.
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
