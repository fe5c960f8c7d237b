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

# The images once (each module's fixture finds them made), then the three
# stacks side by side: most of their time is spent waiting for health checks
# and failovers.
"$here/images.sh" && docker-compose -f "$here/../../docker/docker-compose.yml" -f "$here/compose.test.yml" \
  -p "hookwheel-test-build-$$" build -q >/dev/null 2>&1
logs=$(mktemp -d)
pids=""
for m in test_compose test_compose_sentinel test_compose_cluster; do
  "$python" -m pytest -q -rs -p no:cacheprovider "$here/$m.py" >"$logs/$m.log" 2>&1 &
  pids="$pids $!"
done
rc=0
for p in $pids; do wait "$p" || rc=1; done
for m in test_compose test_compose_sentinel test_compose_cluster; do
  echo "== $m"; cat "$logs/$m.log"
done
rm -rf "$logs"
stop_dockerd
dockerd_pid=
[ -z "$state" ] || rm -rf "$state"
exit $rc
