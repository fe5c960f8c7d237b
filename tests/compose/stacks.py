"""What the compose tests share: a compose project of docker/'s files with
tests/compose's overlay, and waiting for what its receiver got."""
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def docker(*args, check=True):
    r = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: exit {r.returncode}\n{r.stderr}")
    return r.stdout


def wait_until(fn, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"not within {timeout} s: {what}")


class Stack:
    """One of docker/'s compose files with tests/compose's overlay, as a
    compose project of its own, nginx published on a loopback port."""

    def __init__(self, label, name, overlay):
        self.project = f"hookwheel-test-{label}-{os.getpid()}"
        self.files = ["-f", str(ROOT / "docker" / name), "-f", str(HERE / overlay)]
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ, NGINX_PUBLISH=f"127.0.0.1:{self.port}",
                        HOOKWHEEL_DESTINATION_ALLOWLIST="receiver", HOOKWHEEL_LOG_LEVEL="info")

    def compose(self, *args, check=True, timeout=600):
        cmd = ["docker-compose", "-p", self.project, *self.files, *args]
        r = subprocess.run(cmd, env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r

    def http(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except (urllib.error.URLError, ConnectionError, socket.timeout) as e:
            return None, str(e).encode()

    def create(self, timer_id, delay_ms, body):
        return self.http("POST", "/timers", {"id": timer_id, "delay_ms": delay_ms, "body": body,
                                             "url": f"http://receiver:8080/hook/{timer_id}"})

    def received(self, timer_id=None):
        """The requests the receiver logged (uri, webhook_id, run, body), of
        one timer when timer_id is given."""
        out = self.compose("exec", "-T", "receiver", "sh", "-c",
                           "cat /tmp/hooks.log 2>/dev/null || true").stdout
        got = [json.loads(line) for line in out.splitlines() if line.strip()]
        return [r for r in got if timer_id is None or r["uri"] == f"/hook/{timer_id}"]

    def container(self, service):
        ids = self.compose("ps", "-q", service).stdout.split()
        assert len(ids) == 1, (service, ids)
        return ids[0]

    def addresses(self, service):
        ids = self.compose("ps", "-q", service).stdout.split()
        return sorted(docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                             c).strip() for c in ids)

    def wait_ready(self, timeout=90):
        wait_until(lambda: self.http("GET", "/readyz")[0] == 200, timeout, "/readyz through nginx")

    def up(self):
        self.compose("up", "-d")
        self.wait_ready()

    def down(self):
        for service in ("hookwheel", "nginx"):
            logs = self.compose("logs", "--no-color", "--tail", "150", service, check=False).stdout
            print(f"--- {self.project} {service} (last 150 lines)\n{logs}")
        self.compose("down", "-v", "--remove-orphans", check=False)


def delivered_once(stack, timer_id, timeout):
    """The one request the receiver got for timer_id (t: nginx's $msec)."""
    return delivered_each_once(stack, [timer_id], timeout)[timer_id]


def delivered_each_once(stack, timer_ids, timeout):
    def all_there():
        got = {}
        for r in stack.received():
            got.setdefault(r["uri"].rsplit("/", 1)[-1], []).append(r)
        return got if all(t in got for t in timer_ids) else None
    try:
        wait_until(all_there, timeout, f"the receiver got all of {timer_ids[:5]}...")
    except AssertionError as e:
        # What hookwheel says of each one missing, so a failure says where it stopped.
        got = {r["uri"].rsplit("/", 1)[-1] for r in stack.received()}
        missing = [t for t in timer_ids if t not in got]
        lines = [f"{t}: {stack.http('GET', '/timers/' + t)[1][:600].decode(errors='replace')}" for t in missing[:10]]
        raise AssertionError(f"{e}\n{len(missing)} missing:\n" + "\n".join(lines)) from None
    time.sleep(1)
    got = all_there()
    twice = {t: len(got[t]) for t in timer_ids if len(got[t]) != 1}
    assert not twice, f"delivered more than once: {twice}"
    return {t: got[t][0] for t in timer_ids}
