"""docker/docker-compose.yml brought up for real on dockerd: the image built
from docker/Dockerfile, Redis with docker/redis.conf and its volume, the two
hookwheel replicas and nginx with docker/nginx.conf, plus a webhook receiver
on the compose network (tests/compose/compose.test.yml lays the images made
offline by tests/compose/images.sh over the file's).

Run by `make test-compose` (part of `make test`), as root or a member of the
docker group. When no Docker engine can run here, or the images cannot be
built, the module is skipped with the reason; once the stack is up every
check is a real assertion.
"""
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PROJECT = f"hookwheel-test-{os.getpid()}"
NETWORK = f"{PROJECT}_default"
FILES = ["-f", str(ROOT / "docker" / "docker-compose.yml"), "-f", str(HERE / "compose.test.yml")]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT = free_port()
BASE = f"http://127.0.0.1:{PORT}"
ENV = dict(os.environ, NGINX_PUBLISH=f"127.0.0.1:{PORT}",
           HOOKWHEEL_DESTINATION_ALLOWLIST="receiver", HOOKWHEEL_LOG_LEVEL="info")


def compose(*args, check=True, timeout=600):
    cmd = ["docker-compose", "-p", PROJECT, *FILES, *args]
    r = subprocess.run(cmd, env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def docker(*args, check=True):
    r = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: exit {r.returncode}\n{r.stderr}")
    return r.stdout


def http(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, ConnectionError, socket.timeout) as e:
        return None, str(e).encode()


def wait_until(fn, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"not within {timeout} s: {what}")


def received():
    """Every request the receiver logged: dicts with uri, webhook_id, run, body."""
    out = compose("exec", "-T", "receiver", "sh", "-c", "cat /tmp/hooks.log 2>/dev/null || true").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def addresses(service):
    ids = compose("ps", "-q", service).stdout.split()
    return sorted(docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", c).strip()
                  for c in ids)


@pytest.fixture(scope="module")
def stack():
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no Docker engine answers (tests/compose/run.sh starts one as root)")
    images = subprocess.run([str(HERE / "images.sh")], capture_output=True, text=True)
    if images.returncode != 0:
        pytest.skip(f"the base images could not be made offline:\n{images.stderr[-2000:]}")
    build = compose("build", check=False)
    if build.returncode != 0:
        pytest.skip(f"docker/Dockerfile could not be built here:\n{build.stdout[-3000:]}\n{build.stderr[-2000:]}")
    try:
        compose("up", "-d")
        wait_until(lambda: http("GET", "/readyz")[0] == 200, 90, "/readyz through nginx")
        yield
    finally:
        for service in ("hookwheel", "nginx", "redis"):
            logs = compose("logs", "--no-color", "--tail", "40", service, check=False).stdout
            print(f"--- {service} (last 40 lines)\n{logs}")
        compose("down", "-v", "--remove-orphans", check=False)


def test_the_file_starts_two_replicas_behind_nginx(stack):
    assert len(addresses("hookwheel")) == 2, addresses("hookwheel")
    status, body = http("GET", "/healthz")
    assert status == 200, body
    # /metrics is not served on the public port
    assert http("GET", "/metrics")[0] == 404


def test_a_timer_created_through_nginx_is_delivered_once(stack):
    status, body = http("POST", "/timers", {"id": "compose-1", "delay_ms": 300,
                                             "url": "http://receiver:8080/hook/compose-1",
                                             "json": {"hello": "compose"}})
    assert status == 201, body
    got = wait_until(lambda: [r for r in received() if r["uri"] == "/hook/compose-1"], 30,
                     "the receiver got /hook/compose-1")
    assert json.loads(got[0]["body"]) == {"hello": "compose"}
    timer = wait_until(lambda: (lambda s, b: s == 200 and json.loads(b)["state"] == "delivered" and json.loads(b))(
        *http("GET", "/timers/compose-1")), 15, "compose-1 delivered")
    assert timer["attempts"] == 1
    time.sleep(1)
    assert len([r for r in received() if r["uri"] == "/hook/compose-1"]) == 1


def test_replicas_recreated_at_new_addresses_are_found_by_nginx(stack):
    """`up -d` after a change recreates the replicas; their old addresses may
    go to other containers. nginx must follow the name, not the old ones."""
    old = addresses("hookwheel")
    compose("rm", "-s", "-f", "hookwheel")
    # Two containers take the freed addresses, as others on a busy network would.
    squatters = [docker("run", "-d", "--rm", "--network", NETWORK, "hookwheel-test/nginx:testing",
                        "sleep", "300").strip() for _ in old]
    try:
        compose("up", "-d", "--no-deps", "hookwheel")
        new = addresses("hookwheel")
        assert len(new) == 2 and not set(new) & set(old), (old, new)

        def all_answered():
            return all(http("GET", "/timers/compose-1")[0] == 200 for _ in range(10))
        wait_until(all_answered, 45, "every request through nginx answered by a recreated replica")
        for _ in range(20):
            status, body = http("GET", "/timers/compose-1")
            assert status == 200, (status, body)
    finally:
        for c in squatters:
            docker("rm", "-f", c, check=False)


def test_timers_outlive_down_and_up(stack):
    """`down` keeps the volume: a timer created before it and due after the
    stack is up again is delivered, once."""
    status, body = http("POST", "/timers", {"id": "compose-2", "delay_ms": 6000,
                                             "url": "http://receiver:8080/hook/compose-2", "body": "later"})
    assert status == 201, body
    compose("down")
    compose("up", "-d")
    wait_until(lambda: http("GET", "/readyz")[0] == 200, 90, "/readyz after up")
    got = wait_until(lambda: [r for r in received() if r["uri"] == "/hook/compose-2"], 40,
                     "the receiver got /hook/compose-2 after down and up")
    assert got[0]["body"] == "later"
    status, body = http("GET", "/timers/compose-1")
    assert status == 200 and json.loads(body)["state"] == "delivered", body
    time.sleep(1)
    assert len([r for r in received() if r["uri"] == "/hook/compose-2"]) == 1
