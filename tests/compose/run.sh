#!/usr/bin/env bash
# make test-compose: tests/compose/test_compose.py on a Docker engine. When
# none answers and this runs as root, it starts dockerd for the run and stops
# it after (by pid). Without an engine the test module skips with the reason.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-/usr/bin/python3}
dockerd_pid=
state=

stop_dockerd() {
  [ -n "$dockerd_pid" ] || return 0
  kill -TERM "$dockerd_pid" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$dockerd_pid" 2>/dev/null
  wait "$dockerd_pid" 2>/dev/null
}
trap stop_dockerd EXIT

if ! docker info >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null; then
  state=$(mktemp -d)
  dockerd --pidfile "$state/dockerd.pid" >"$state/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 1 150); do docker info >/dev/null 2>&1 && break; sleep 0.2; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start:"; tail -20 "$state/dockerd.log"; }
fi

"$python" -m pytest -q -rs -p no:cacheprovider "$here/test_compose.py"
rc=$?
stop_dockerd
dockerd_pid=
[ -z "$state" ] || rm -rf "$state"
exit $rc
