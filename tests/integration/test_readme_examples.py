"""The README's examples, run as written.

Every fenced block preceded by `<!-- runnable: NAME -->` is taken from
README.md and run against the real binary, a real receiver and (for the
fencing example) a real PostgreSQL. Two substitutions only, because a test
cannot own fixed ports: `localhost:8080` becomes this test's hookwheel and
`http://127.0.0.1:9000` this test's receiver. Each `curl` of a block reports
its HTTP status (to stderr, so pipelines and `$(...)` see what they would),
and the statuses must be the ones listed here: an example that stops
working, or whose answers change, fails the suite."""

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import CLUSTER_MODE, Reply, free_port, scaled, stop_process, wait_until

ROOT = Path(__file__).resolve().parents[2]
MARK = re.compile(r"^<!-- runnable: ([a-z0-9-]+) -->\n```[a-z]*\n(.*?)^```$", re.M | re.S)

# Every curl of a block writes "HTTP <status>" to stderr after its output.
CURL_STATUS = "curl() { command curl --write-out '%{stderr}HTTP %{http_code}\\n' \"$@\"; }\n"


def readme_blocks():
    text = (ROOT / "README.md").read_text()
    blocks = {name: body for name, body in MARK.findall(text)}
    assert len(blocks) == len(MARK.findall(text)), "two runnable blocks share a name"
    return blocks


BLOCKS = readme_blocks()


def localize(block, hookwheel, receiver):
    return (block.replace("localhost:8080", f"127.0.0.1:{hookwheel.port}")
                 .replace("http://127.0.0.1:9000", receiver.url("").rstrip("/")))


def run_block(name, hookwheel, receiver, tmp_path, env=None, shell_flags="", timeout=60):
    """Runs README block `name`; returns (exit code, stdout, [statuses])."""
    script = tmp_path / f"{name}.sh"
    script.write_text(CURL_STATUS + localize(BLOCKS[name], hookwheel, receiver))
    out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        # Output to files, not pipes: a child the block leaves behind would
        # hold a pipe open; the tests below look for such children directly.
        proc = subprocess.run(["sh", *([shell_flags] if shell_flags else []), str(script)],
                              stdout=o, stderr=e, cwd=tmp_path, env={**os.environ, **(env or {})},
                              timeout=scaled(timeout))
    stderr = err.read_text()
    codes = [int(c) for c in re.findall(r"^HTTP (\d{3})$", stderr, re.M)]
    return proc.returncode, out.read_text(), codes, stderr


def json_values(text):
    """The JSON values a block printed one after another (curl adds no newline)."""
    dec, values, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        value, i = dec.raw_decode(text, i)
        values.append(value)
    return values


def test_every_runnable_block_is_run_by_a_test():
    assert set(BLOCKS) == {"walkthrough-create", "walkthrough-inspect", "recurring", "schedule",
                           "schedule-dst", "lease", "fence-schema", "fence-worker", "listings",
                           "batch", "queues"}


@pytest.fixture
def open_hookwheel(redis, hookwheel_factory):
    """hookwheel as the walk-through starts it: open API, loopback allowed."""
    return hookwheel_factory(redis, env={"HOOKWHEEL_DESTINATION_ALLOWLIST": "127.0.0.0/8"})


def test_the_walk_through_registers_delivers_and_then_refuses_a_late_cancel(open_hookwheel, receiver, tmp_path):
    code, out, codes, err = run_block("walkthrough-create", open_hookwheel, receiver, tmp_path)
    assert (code, codes) == (0, [201]), err
    assert json.loads(out)["id"] == "order-42-reminder"
    got = receiver.wait_for(1, scaled(10), path="/hooks/reminder")
    assert len(got) == 1 and got[0].headers.get("X-Order") == "42"
    assert got[0].body == b'{"event":"reminder","order":42}'  # as the README says: compact, keys sorted
    # After the delivery: the GET shows it delivered, the cancel comes too late.
    assert open_hookwheel.api.wait_state("order-42-reminder", "delivered", scaled(5))["state"] == "delivered"
    code, out, codes, err = run_block("walkthrough-inspect", open_hookwheel, receiver, tmp_path)
    assert (code, codes) == (0, [200, 409]), err


def test_the_recurring_example_creates_fires_reschedules_pauses_and_resumes(open_hookwheel, receiver, tmp_path):
    code, out, codes, err = run_block("recurring", open_hookwheel, receiver, tmp_path)
    assert (code, codes) == (0, [201, 200, 200, 200, 200]), err
    got = receiver.wait_for(1, scaled(10), path="/hooks/sync")
    assert got, "the recurring timer never ran"
    status, _, timer = open_hookwheel.api.get("sync-inventory")
    assert status == 200 and timer["state"] == "scheduled" and timer["repeat"]["every_ms"] == 60000


def test_the_schedule_examples_create_a_calendar_timer_and_preview_it(open_hookwheel, receiver, tmp_path):
    code, out, codes, err = run_block("schedule", open_hookwheel, receiver, tmp_path)
    assert (code, codes) == (0, [201, 200]), err
    code, out, codes, err = run_block("schedule-dst", open_hookwheel, receiver, tmp_path)
    assert (code, codes) == (0, [200]), err
    assert "second_occurrence" in out


def test_the_lease_example_acquires_heartbeats_reads_and_releases(open_hookwheel, receiver, tmp_path):
    code, out, codes, err = run_block("lease", open_hookwheel, receiver, tmp_path)
    assert (code, codes) == (0, [201, 200, 200, 204]), err
    assert open_hookwheel.api.request("GET", "/leases/orders-export")[0] == 404


def test_the_listing_examples_page_through_every_dead_letter_and_replay(open_hookwheel, receiver, tmp_path):
    receiver.default("/charge", 500)
    api = open_hookwheel.api
    ids = ["order-42-reminder"] + [f"bill-{i}" for i in range(102)]  # more than one page of 100
    status, _, body = api.request("POST", "/timers/batch", json_body={"timers": [
        {"id": i, "url": receiver.url("/charge"), "queue": "billing", "delay_ms": 0,
         "retry": {"max_attempts": 1}} for i in ids]})
    assert status == 200 and body["created"] == len(ids), body
    assert wait_until(lambda: api.request("GET", f"/queues/billing")[2]["timers"] == {
        "scheduled": 0, "retrying": 0, "paused": 0}, scaled(20))
    assert wait_until(lambda: len(receiver.requests("/charge")) == len(ids), scaled(10))
    # Every one is a dead letter now. The attempts that the block's retry and replay start are
    # answered only after 5 s (then 500 again), so none is a dead letter again before the
    # purge, which therefore finds none (and the replay does not meet the retried one).
    receiver.default("/charge", Reply(500, delay_s=5.0))
    code, out, codes, err = run_block("listings", open_hookwheel, receiver, tmp_path)
    # scheduled, failed of billing, then the pages of every dead letter, the
    # retry of one, the replay of the others, the purge
    assert code == 0 and len(codes) >= 7 and set(codes) == {200}, err
    values = json_values(out)
    pages = values[2:-3]
    assert len(pages) >= 2 and pages[-1]["next_cursor"] is None
    assert sorted(t["id"] for p in pages for t in p["items"]) == sorted(ids)
    retried, replayed, purged = values[-3:]
    assert retried["id"] == "order-42-reminder"
    assert replayed["replayed"] == len(ids) - 1 and purged["purged"] == 0, (replayed, purged)
    # the retried one and the replayed ones each ran once more (two waves of 64, the queue's parallelism)
    assert wait_until(lambda: len(receiver.requests("/charge")) == 2 * len(ids), scaled(30))


def test_the_batch_example_stores_two_refuses_one_lists_and_cancels_by_label(open_hookwheel, receiver, tmp_path):
    code, out, codes, err = run_block("batch", open_hookwheel, receiver, tmp_path)
    assert (code, codes) == (0, [200, 200, 200]), err
    batch, listing, cancel = json_values(out)
    assert [i["status"] for i in batch["items"]] == [201, 201, 400]
    assert sorted(t["id"] for t in listing["items"]) == ["order-41-reminder", "order-42-reminder"]
    assert cancel["matched"] == 2 and sorted(cancel["cancelled"]) == ["order-41-reminder", "order-42-reminder"]


def test_the_queue_example_sets_reads_and_deletes_controls(open_hookwheel, receiver, tmp_path):
    code, out, codes, err = run_block("queues", open_hookwheel, receiver, tmp_path)
    assert (code, codes) == (0, [200, 200, 200, 200, 200, 204]), err
    status, _, queue = open_hookwheel.api.request("GET", "/queues/billing")
    assert status == 200 and queue["paused"] is False


# --------------------------------------------------------------------------
# The fencing example, against a real PostgreSQL

def _pg_bin():
    for d in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (d / "initdb").exists():
            return d
    return None


class Postgres:
    """A private PostgreSQL cluster on a Unix socket in tmp_path (and no TCP)."""

    def __init__(self, tmp_path):
        self.bin = _pg_bin()
        if self.bin is None:
            pytest.fail("PostgreSQL is not installed (make deps installs postgresql)", pytrace=False)
        # Not under tmp_path: its parents are closed to other users, and the
        # socket's path must stay short.
        self.dir = Path(tempfile.mkdtemp(prefix="hw-pg-"))
        self.port = free_port()
        # PostgreSQL refuses to run as root: run it as the postgres user.
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            pw = pwd.getpwnam(self.user)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self.env = {"PGHOST": str(self.dir), "PGPORT": str(self.port), "PGDATABASE": "postgres",
                    "PGUSER": self.user or pwd.getpwuid(os.geteuid()).pw_name}

    def _as_owner(self, argv):
        return ["runuser", "-u", self.user, "--", *argv] if self.user else argv

    def start(self):
        subprocess.run(self._as_owner([str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-A", "trust",
                                       "-U", self.env["PGUSER"]]),
                       check=True, capture_output=True)
        subprocess.run(self._as_owner([str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-w", "-l",
                                       str(self.dir / "log"), "-o",
                                       f"-k {self.dir} -p {self.port} -c listen_addresses=''", "start"]),
                       check=True, capture_output=True, timeout=scaled(60))
        return self

    def stop(self):
        subprocess.run(self._as_owner([str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast",
                                       "-w", "stop"]), capture_output=True, timeout=scaled(60))
        shutil.rmtree(self.dir, ignore_errors=True)

    def psql(self, sql, check=True):
        return subprocess.run(["psql", "-v", "ON_ERROR_STOP=1", "-qAt"], input=sql, text=True,
                              capture_output=True, env={**os.environ, **self.env}, check=check)


@pytest.fixture
def postgres(tmp_path):
    pg = Postgres(tmp_path).start()
    try:
        yield pg
    finally:
        pg.stop()


def run_worker(hookwheel, receiver, tmp_path, postgres, ttl_ms=3000):
    """The README's worker script as a user runs it (sh -e), its TTL shortened
    so that its heartbeat loop beats every second."""
    block = BLOCKS["fence-worker"]
    assert "TTL=30000" in block
    script = tmp_path / "export.sh"
    script.write_text(localize(block, hookwheel, receiver).replace("TTL=30000", f"TTL={ttl_ms}"))
    script.chmod(0o755)  # run as a user runs it: its #!/bin/sh -e line counts
    out, err = tmp_path / "export.out", tmp_path / "export.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen([str(script)], stdout=o, stderr=e, cwd=tmp_path,
                                env={**os.environ, **postgres.env}, start_new_session=True)
        code = proc.wait(timeout=scaled(60))
    return code, proc.pid, err.read_text()


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.skipif(CLUSTER_MODE, reason="one PostgreSQL example; the lease calls run on one Redis")
def test_the_fencing_example_commits_a_current_token_and_refuses_a_stale_one(open_hookwheel, receiver,
                                                                            tmp_path, postgres):
    if shutil.which("psql") is None:
        pytest.fail("psql is not installed (make deps installs postgresql)", pytrace=False)
    postgres.psql(BLOCKS["fence-schema"])
    api = open_hookwheel.api

    # A worker with the lease commits its results with its token.
    code, pgid, err = run_worker(open_hookwheel, receiver, tmp_path, postgres)
    assert code == 0, err
    first = int(postgres.psql("SELECT token FROM export_results").stdout)
    assert postgres.psql("SELECT token FROM fence").stdout.strip() == str(first)
    assert api.request("GET", "/leases/orders-export")[0] == 404, "the worker did not release its lease"

    # A second run draws a higher token and commits too.
    code, pgid, err = run_worker(open_hookwheel, receiver, tmp_path, postgres)
    assert code == 0, err
    second = int(postgres.psql("SELECT max(token) FROM export_results").stdout)
    assert second > first

    # The first holder wakes up and commits with its stale token: refused,
    # nothing of its transaction written.
    section = re.search(r"<<'SQL'\n(.*?)^SQL$", BLOCKS["fence-worker"], re.S | re.M).group(1)
    stale = subprocess.run(["psql", "-v", f"token={first}", "-v", "ON_ERROR_STOP=1"], input=section,
                           text=True, capture_output=True, env={**os.environ, **postgres.env})
    assert stale.returncode == 3, stale
    assert f"stale fencing token {first} for orders-export" in stale.stderr
    assert postgres.psql("SELECT count(*) FROM export_results").stdout.strip() == "2"
    assert postgres.psql("SELECT token FROM fence").stdout.strip() == str(second)

    # A worker whose critical section fails (a later holder has written)
    # exits non-zero, and its heartbeat loop stops with it.
    postgres.psql(f"UPDATE fence SET token = {second + 1000}")
    code, pgid, err = run_worker(open_hookwheel, receiver, tmp_path, postgres)
    assert code == 3, err
    assert "stale fencing token" in err
    assert wait_until(lambda: not group_alive(pgid), scaled(5)), "the heartbeat loop outlived the script"
    status, _, lease = api.request("GET", "/leases/orders-export")
    assert status == 200  # not released: it expires, and no heartbeat keeps it
    time.sleep(2.5)
    status, _, after = api.request("GET", "/leases/orders-export")
    assert status == 404 or after["last_heartbeat_at"] == lease["last_heartbeat_at"]
