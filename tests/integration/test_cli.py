"""hookwheelctl, the command-line client, against the real binary: every
command's output and exit code, and the exit codes scripts rely on
(README "Command-line client"). The CLI is the one built beside
$HOOKWHEEL_BIN, so a sanitizer build tests its own CLI."""
import json
import os
import shlex
import socket
import subprocess
import time
from urllib.parse import parse_qs, quote

import pytest

from conftest import HOOKWHEEL_BIN, LEASE_PREFIX, SANITIZER_MARKERS, Reply, free_port, scaled

CLI = os.path.join(os.path.dirname(HOOKWHEEL_BIN), "hookwheelctl")
TOKEN = "cli-team-token-7d1e4c9a2b"


def ctl(hw, *args, token=None, url=None, stdin=None):
    """Runs hookwheelctl with HOOKWHEEL_URL set to hw's API; returns the
    CompletedProcess (text). Fails on a sanitizer report."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKWHEEL_")}
    env["HOOKWHEEL_URL"] = url or f"http://127.0.0.1:{hw.port}"  # hw None: url is given
    if token:
        env["HOOKWHEEL_TOKEN"] = token
    p = subprocess.run([CLI, *args], capture_output=True, text=True, errors="replace", env=env, input=stdin,
                       timeout=scaled(30))
    assert not any(m in p.stderr for m in SANITIZER_MARKERS), p.stderr
    return p


def ok(hw, *args, **kw):
    p = ctl(hw, *args, **kw)
    assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
    return p.stdout


def table(text):
    """An aligned table as a list of rows of cells (split on runs of spaces)."""
    return [line.split() for line in text.splitlines()]


def test_create_with_in_labels_headers_and_a_body_file_reaches_the_receiver(hookwheel, receiver, tmp_path):
    body = tmp_path / "body.txt"
    body.write_text("order 42 is ready\n")
    out = ok(hookwheel, "create", "--url", receiver.url("/cli/in"), "--in", "300ms", "--id", "cli-in",
             "--label", "team:ops", "--label", "kind:reminder", "--header", "X-Order: 42",
             "--header", "X-Kind:plain", "--body", f"@{body}", "--method", "put", "--queue", "cliq")
    assert out == "cli-in\n"
    (req,) = receiver.wait_for(1, path="/cli/in", timeout=scaled(5))
    assert req.method == "PUT" and req.body == b"order 42 is ready\n"
    assert req.headers["X-Order"] == "42" and req.headers["X-Kind"] == "plain"
    status, _, t = hookwheel.get("cli-in")
    assert status == 200 and t["labels"] == {"team": "ops", "kind": "reminder"} and t["queue"] == "cliq", t
    # standard input as the body, a file as the JSON body
    ok(hookwheel, "create", "--url", receiver.url("/cli/stdin"), "--in", "0", "--body", "@-", stdin="from stdin")
    (req,) = receiver.wait_for(1, path="/cli/stdin", timeout=scaled(5))
    assert req.body == b"from stdin"
    doc = tmp_path / "doc.json"
    doc.write_text('{"b": [1, 2], "a": null}')
    ok(hookwheel, "create", "--url", receiver.url("/cli/jfile"), "--in", "0", "--json-body", f"@{doc}")
    (req,) = receiver.wait_for(1, path="/cli/jfile", timeout=scaled(5))
    assert req.body == b'{"a":null,"b":[1,2]}' and req.headers["Content-Type"] == "application/json"


def test_create_with_at_in_epoch_ms_and_rfc3339_and_a_json_body(hookwheel, receiver):
    due = int(time.time() * 1000) + 400
    t = json.loads(ok(hookwheel, "--json", "create", "--url", receiver.url("/cli/at"), "--at", str(due),
                      "--json-body", '{"order": 42}', "--retries", "2", "--timeout", "5s"))
    assert t["fire_at_ms"] == due and t["json"] == {"order": 42}, t
    assert t["retry"]["max_attempts"] == 3 and t["timeout_ms"] == 5000, t
    (req,) = receiver.wait_for(1, path="/cli/at", timeout=scaled(5))
    assert json.loads(req.body) == {"order": 42} and req.wall_ms >= due
    later = int(time.time()) + 2 * 86400
    rfc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(later))
    t = json.loads(ok(hookwheel, "create", "--json", "--url", receiver.url("/cli/later"), "--at", rfc))
    assert t["fire_at_ms"] == later * 1000, t
    # what the API checks, the API refuses: exit 1 with the field
    p = ctl(hookwheel, "create", "--url", receiver.url("/x"), "--at", "tomorrow")
    assert p.returncode == 1 and "fire_at" in p.stderr and p.stdout == "", p
    # a calendar schedule: repeat.cron and repeat.tz, no due time
    t = json.loads(ok(hookwheel, "create", "--json", "--url", receiver.url("/cron"), "--cron", "0 9 * * MON-FRI",
                      "--tz", "Europe/Berlin"))
    assert t["repeat"]["cron"] == "0 9 * * MON-FRI" and t["repeat"]["tz"] == "Europe/Berlin", t
    t = json.loads(ok(hookwheel, "create", "--json", "--url", receiver.url("/every"), "--in", "1h",
                      "--every", "1m30s", "--times", "3"))
    assert t["repeat"]["every_ms"] == 90000 and t["repeat"]["times"] == 3, t


def test_durations_as_the_cli_reads_them(hookwheel, receiver):
    for text, ms in (("1h30m", 5400000), ("1500ms", 1500), ("2m15s500ms", 135500), ("1d", 86400000),
                     ("90s", 90000), ("10ms", 10)):
        t = json.loads(ok(hookwheel, "create", "--json", "--url", receiver.url("/d"), "--in", "1h", "--every", text))
        assert t["repeat"]["every_ms"] == ms, (text, t["repeat"])
    for bad in ("5", "1x", "m", "", "1h 30m", "-1s", "1.5s", "99999999999999999999s"):
        p = ctl(hookwheel, "create", "--url", receiver.url("/d"), "--in", bad)
        assert p.returncode == 2 and "--in" in p.stderr, (bad, p)


def test_get_prints_the_timer_and_json_prints_the_apis_answer(hookwheel, receiver):
    ok(hookwheel, "create", "--url", receiver.url("/g"), "--in", "1h", "--id", "cli-get", "--label", "a:b")
    fields = dict(line.split(None, 1) for line in ok(hookwheel, "get", "cli-get").splitlines())
    assert fields["id"] == "cli-get" and fields["state"] == "scheduled", fields
    assert fields["request"] == f"POST {receiver.url('/g')}" and fields["labels"] == "a:b", fields
    assert fields["last_attempt"] == "-", fields
    got = json.loads(ok(hookwheel, "get", "cli-get", "--json"))
    status, _, api = hookwheel.get("cli-get")
    assert status == 200 and got == api


def test_ls_prints_a_table_filters_and_pages_with_all(hookwheel, receiver):
    for i in range(5):
        ok(hookwheel, "create", "--url", receiver.url("/ls"), "--in", f"{60 + i}m", "--id", f"ls-{i}",
           "--queue", "lsq", "--label", f"n:{i % 2}")
    ok(hookwheel, "create", "--url", receiver.url("/ls"), "--in", "1h", "--id", "other-queue")
    rows = table(ok(hookwheel, "ls", "--queue", "lsq"))
    assert rows[0] == ["ID", "STATE", "QUEUE", "FIRE_AT", "ATTEMPTS", "URL"]
    assert [r[0] for r in rows[1:]] == [f"ls-{i}" for i in range(5)]  # soonest due first
    assert all(r[1] == "scheduled" and r[2] == "lsq" and r[4] == "0" for r in rows[1:]), rows
    header = ok(hookwheel, "ls", "--queue", "lsq").splitlines()[0]
    assert header.index("STATE") == len("ls-0") + 2  # aligned: the widest id and two spaces
    rows = table(ok(hookwheel, "ls", "--label", "n:1"))
    assert sorted(r[0] for r in rows[1:]) == ["ls-1", "ls-3"]
    page = json.loads(ok(hookwheel, "--json", "ls", "--queue", "lsq", "--label", "n:0"))
    assert sorted(t["id"] for t in page["items"]) == ["ls-0", "ls-2", "ls-4"]
    # one page of 2 says how to go on; --all follows next_cursor to the end
    p = ctl(hookwheel, "ls", "--limit", "2")
    assert p.returncode == 0 and len(table(p.stdout)) - 1 <= 2 and "--cursor" in p.stderr, p
    cursor = p.stderr.split("--cursor ", 1)[1].split()[0]
    p2 = ctl(hookwheel, "ls", "--limit", "2", "--cursor", cursor)
    assert p2.returncode == 0 and not set(r[0] for r in table(p2.stdout)[1:]) & set(r[0] for r in table(p.stdout)[1:])
    everything = json.loads(ok(hookwheel, "ls", "--limit", "2", "--all", "--json"))
    ids = [t["id"] for t in everything["items"]]
    assert sorted(ids) == sorted([f"ls-{i}" for i in range(5)] + ["other-queue"]), ids
    assert everything["next_cursor"] is None
    assert [r[0] for r in table(ok(hookwheel, "ls", "--state", "failed"))] == ["ID"]
    p = ctl(hookwheel, "ls", "--state", "nonsense")
    assert p.returncode == 1 and "state" in p.stderr, p


def next_command(stderr):
    """The argv (without hookwheelctl) of the next page's command that a
    listing printed on stderr as `more: hookwheelctl ... (or --all)`, read
    as a POSIX shell reads it; None when it printed none."""
    lines = [line for line in stderr.splitlines() if line.startswith("more: ")]
    if not lines:
        return None
    assert len(lines) == 1 and lines[0].endswith(" (or --all)"), stderr
    argv = shlex.split(lines[0][len("more: "):-len(" (or --all)")])
    assert argv[0] == "hookwheelctl", argv
    return argv[1:]


def api_pages(hw, path, member):
    """Every page of an API listing as (the ids or keys, next_cursor)."""
    pages, cursor = [], None
    while True:
        status, _, page = hw.request("GET", path + (f"&cursor={quote(cursor, safe='')}" if cursor else ""))
        assert status == 200, page
        pages.append(([item.get("id", item.get("key")) for item in page[member]], page["next_cursor"]))
        cursor = page["next_cursor"]
        if cursor is None:
            return pages


def follow_next_commands(hw, args, **kw):
    """Runs a listing, then the next page's command it prints, as printed,
    until there is none; returns each page's first column and the argv run."""
    pages, runs = [], []
    while args is not None:
        p = ctl(hw, *args, **kw)
        assert p.returncode == 0, (args, p)
        pages.append([r[0] for r in table(p.stdout)[1:]])
        runs.append(args)
        args = next_command(p.stderr)
        assert len(runs) < 20, runs
    return pages, runs


def test_ls_next_page_command_keeps_every_filter_and_reads_the_next_page_of_the_same_listing(hookwheel, receiver):
    # delivered timers of queue billing with label team:pay, and ones that
    # differ in one filter each (queue, label, state)
    def create(tid, queue, label, due):
        ok(hookwheel, "create", "--url", receiver.url("/hint"), "--in", due, "--id", tid, "--queue", queue,
           "--label", label)
    wanted = [f"pay-{i}" for i in range(5)]
    for tid in wanted:
        create(tid, "billing", "team:pay", "0")
    for i in range(3):
        create(f"other-label-{i}", "billing", "team:ops", "0")
        create(f"other-queue-{i}", "shipping", "team:pay", "0")
        create(f"scheduled-{i}", "billing", "team:pay", "1h")
    for tid in wanted + [f"other-{k}-{i}" for k in ("label", "queue") for i in range(3)]:
        assert hookwheel.wait_state(tid, "delivered", timeout=scaled(10))["state"] == "delivered"
    expected = api_pages(hookwheel, "/timers?state=delivered&queue=billing&label=team:pay&limit=2", "items")
    assert len(expected) >= 3 and sorted(sum((ids for ids, _ in expected), [])) == wanted, expected
    pages, runs = follow_next_commands(hookwheel, ["ls", "--state", "delivered", "--queue", "billing",
                                                   "--label", "team:pay", "--limit", "2"])
    assert pages == [ids for ids, _ in expected], (pages, expected, runs)
    for args, (_, cursor) in zip(runs[1:], expected):
        assert args == ["ls", "--state", "delivered", "--queue", "billing", "--label", "team:pay", "--limit", "2",
                        "--cursor", cursor], args
    # the default state stays the default; the last of a repeated option is the one that counts
    p = ctl(hookwheel, "ls", "--queue", "billing", "--limit", "5", "--limit", "1")
    assert p.returncode == 0 and next_command(p.stderr)[:5] == ["ls", "--queue", "billing", "--limit", "1"], p


def test_leases_next_page_command_keeps_the_limit_and_the_apis_url(hookwheel):
    keys = [f"hint-{i}" for i in range(5)]
    for k in keys:
        status, _, lease = hookwheel.request("POST", "/leases", json_body={"key": k, "owner": "w", "ttl_ms": 60000})
        assert status == 201, lease
    expected = api_pages(hookwheel, "/leases?limit=2", "leases")
    assert [ids for ids, _ in expected] == [keys[0:2], keys[2:4], keys[4:]], expected
    # the API's URL given on the command line (the environment's names a
    # port where nothing listens) and --max-time are repeated too
    api = f"http://127.0.0.1:{hookwheel.port}"
    nowhere = f"http://127.0.0.1:{free_port()}"
    pages, runs = follow_next_commands(hookwheel, ["--url", api, "--max-time", "20", "leases", "--limit", "2"],
                                       url=nowhere)
    assert pages == [ids for ids, _ in expected], (pages, runs)
    assert runs[1] == ["--url", api, "--max-time", "20", "leases", "--limit", "2", "--cursor", expected[0][1]], runs


def test_a_next_page_command_quotes_what_a_shell_would_read_otherwise(receiver, tmp_path):
    # an API (here the test's receiver) whose cursor holds what a shell
    # would split, expand or take for a comment: the command, run as printed
    # by sh and bash, sends it back exactly, with the same filters
    cursor = "~root it's a #c* $(x) \"$HOME\" \\ [a] {b,c} ;& \u00fc `id` !! a=~ ''"
    first = "/timers?state=failed&queue=q.1&label=k%3Av%3Dw&limit=3"
    receiver.plan("/timers", [Reply(200, {"Content-Type": "application/json"},
                                    json.dumps({"items": [{"id": "t-1", "state": "failed"}], "next_cursor": cursor}))])
    url = receiver.url("").rstrip("/")
    p = ctl(None, "ls", "--state", "failed", "--queue", "q.1", "--label", "k:v=w", "--limit", "3", url=url)
    assert p.returncode == 0 and table(p.stdout)[1][0] == "t-1", p
    assert [r.target for r in receiver.requests()] == [first]
    args = next_command(p.stderr)
    assert args == ["ls", "--state", "failed", "--queue", "q.1", "--label", "k:v=w", "--limit", "3",
                    "--cursor", cursor], (args, p.stderr)
    command = p.stderr.strip()[len("more: "):-len(" (or --all)")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKWHEEL_")}
    env.update(HOOKWHEEL_URL=url, PATH=f"{os.path.dirname(CLI)}:{env.get('PATH', '/usr/bin:/bin')}", HOME=str(tmp_path))
    for shell in [sh for sh in ("/bin/sh", "/bin/bash") if os.path.exists(sh)]:
        before = len(receiver.requests())
        r = subprocess.run([shell, "-c", command], capture_output=True, text=True, env=env, timeout=scaled(30))
        assert r.returncode == 0, (shell, command, r)
        (req,) = receiver.requests()[before:]  # the receiver's default answer: {} (no next page)
        assert req.target.startswith(first + "&cursor="), (shell, req.target)
        assert parse_qs(req.query)["cursor"] == [cursor], (shell, req.target)
    # a cursor with a control character is not printed as a command
    receiver.plan("/timers", [Reply(200, {"Content-Type": "application/json"},
                                    json.dumps({"items": [], "next_cursor": "a\x1b[2Jb\nc"}))])
    p = ctl(None, "ls", "--limit", "1", url=url)
    assert p.returncode == 0 and p.stderr == ("more: the next page's cursor or an option holds a control "
                                              "character; read on with --all, or --json and its next_cursor\n"), p


def refused_creates(hw, receiver, cases):
    """Each (options, message start) of cases: create exits 2 with one line
    that starts so, and creates and sends nothing."""
    for i, (opts, what) in enumerate(cases):
        p = ctl(hw, "create", "--url", receiver.url("/dup"), "--in", "0", "--id", f"dup-{i}", *opts)
        assert p.returncode == 2 and p.stdout == "" and len(p.stderr.splitlines()) == 1, (opts, p)
        assert p.stderr.startswith(f"hookwheelctl: {what} ("), (opts, p)
        assert hw.get(f"dup-{i}")[0] == 404
    for state in ("scheduled", "delivered"):
        assert json.loads(ok(hw, "--json", "ls", "--state", state))["items"] == []
    time.sleep(0.2)
    assert receiver.requests(path="/dup") == []


def test_a_label_key_given_twice_exits_2_naming_it_and_creates_nothing(hookwheel, receiver):
    refused_creates(hookwheel, receiver, [
        (["--label", "a:b", "--label", "a:c"], "--label: the key a is given twice"),
        (["--label", "a:b", "--label", "a:b"], "--label: the key a is given twice"),
        (["--label", "team:ops", "--label", "kind:x", "--header", "X-A: 1", "--label", "team:dev"],
         "--label: the key team is given twice")])
    # keys compare exactly: a and A are two labels
    t = json.loads(ok(hookwheel, "--json", "create", "--url", receiver.url("/two"), "--in", "1h", "--label", "a:b",
                      "--label", "A:c"))
    assert t["labels"] == {"a": "b", "A": "c"}, t


def test_a_header_name_given_twice_in_any_case_exits_2_naming_it_and_creates_nothing(hookwheel, receiver):
    refused_creates(hookwheel, receiver, [
        (["--header", "X-A: 1", "--header", "X-A: 2"], "--header: the name X-A is given twice"),
        (["--header", "X-Order: 1", "--header", "x-order:2"], "--header: the name X-Order is given twice")])
    t = json.loads(ok(hookwheel, "--json", "create", "--url", receiver.url("/two"), "--in", "1h",
                      "--header", "X-A: 1", "--header", "X-AB: 2"))
    assert t["headers"] == {"X-A": "1", "X-AB": "2"}, t


def test_ls_refuses_a_second_label_rather_than_dropping_one(hookwheel):
    p = ctl(hookwheel, "ls", "--label", "a:b", "--label", "a:c")  # the API filters by one label
    assert p.returncode == 2 and p.stdout == "" and "--label is given twice (a:b, then a:c)" in p.stderr, p


def test_cancel_fire_pause_and_resume_print_the_state(hookwheel, receiver):
    ok(hookwheel, "create", "--url", receiver.url("/c"), "--in", "1h", "--id", "cli-cancel")
    assert ok(hookwheel, "cancel", "cli-cancel") == "cli-cancel cancelled\n"
    assert ok(hookwheel, "cancel", "cli-cancel") == "cli-cancel cancelled\n"  # again: 200
    ok(hookwheel, "create", "--url", receiver.url("/p"), "--in", "1h", "--id", "cli-pause")
    assert ok(hookwheel, "pause", "cli-pause") == "cli-pause paused\n"
    assert hookwheel.get("cli-pause")[2]["state"] == "paused"
    assert ok(hookwheel, "resume", "cli-pause") == "cli-pause scheduled\n"
    assert json.loads(ok(hookwheel, "--json", "pause", "cli-pause"))["state"] == "paused"
    out = ok(hookwheel, "fire", "cli-pause")  # a fire resumes a paused timer and runs it now
    assert out.startswith("cli-pause "), out
    receiver.wait_for(1, path="/p", timeout=scaled(5))
    done = hookwheel.wait_state("cli-pause", "delivered", timeout=scaled(5))
    assert done["state"] == "delivered", done
    # too late to cancel: 409 -> 5, with the state
    p = ctl(hookwheel, "cancel", "cli-pause")
    assert p.returncode == 5 and "Conflict (409)" in p.stderr and "state: delivered" in p.stderr, p
    assert len(p.stderr.strip().splitlines()) == 1


def test_retry_replay_and_purge_of_dead_letters(hookwheel, receiver):
    receiver.plan("/dl", [500, 500, 500])  # then 204
    for tid in ("dl-a", "dl-b", "dl-c"):
        ok(hookwheel, "create", "--url", receiver.url("/dl"), "--in", "0", "--id", tid, "--retries", "0",
           "--queue", "dlq")
    for tid in ("dl-a", "dl-b", "dl-c"):
        assert hookwheel.wait_state(tid, "failed", timeout=scaled(5))["state"] == "failed"
    assert sorted(r[0] for r in table(ok(hookwheel, "ls", "--state", "failed"))[1:]) == ["dl-a", "dl-b", "dl-c"]
    out = ok(hookwheel, "retry", "dl-a")
    assert out.split()[0] == "dl-a" and out.split()[1] in ("scheduled", "firing", "delivered"), out
    assert hookwheel.wait_state("dl-a", "delivered", timeout=scaled(5))["state"] == "delivered"
    p = ctl(hookwheel, "retry", "dl-a")  # not failed any more
    assert p.returncode == 5 and "state: delivered" in p.stderr, p
    assert ok(hookwheel, "replay", "--queue", "dlq", "--json") == '{"replayed":2,"more":false}\n'
    for tid in ("dl-b", "dl-c"):
        assert hookwheel.wait_state(tid, "delivered", timeout=scaled(10))["state"] == "delivered"
    assert ok(hookwheel, "replay", "--queue", "dlq") == "replayed 0\n"
    receiver.plan("/dl2", [500])
    ok(hookwheel, "create", "--url", receiver.url("/dl2"), "--in", "0", "--id", "dl-d", "--retries", "0")
    hookwheel.wait_state("dl-d", "failed", timeout=scaled(5))
    assert ok(hookwheel, "purge", "--queue", "dlq") == "purged 0\n"
    assert ok(hookwheel, "purge", "--all-queues") == "purged 1\n"
    assert ctl(hookwheel, "get", "dl-d").returncode == 3
    p = ctl(hookwheel, "purge")  # neither --queue nor --all-queues
    assert p.returncode == 2 and "--all-queues" in p.stderr, p


def test_queues_table_and_pausing_a_queue(hookwheel, receiver):
    for i in range(3):
        ok(hookwheel, "create", "--url", receiver.url("/q"), "--in", "1h", "--id", f"q-{i}", "--queue", "billing")
    assert ok(hookwheel, "pause", "--queue", "held") == "held paused\n"
    time.sleep(scaled(1.2))  # every instance applies queue controls within a second
    ok(hookwheel, "create", "--url", receiver.url("/q"), "--in", "0", "--id", "q-due", "--queue", "held")
    rows = table(ok(hookwheel, "queues"))
    assert rows[0] == ["NAME", "STATUS", "PARALLELISM", "RATE/S", "SCOPE", "SCHEDULED", "RETRYING", "PAUSED",
                       "DUE", "OLDEST_DUE_AGE_MS"]
    by_name = {r[0]: r for r in rows[1:]}
    assert by_name["billing"][1] == "active" and by_name["billing"][5:8] == ["3", "0", "0"], rows
    assert by_name["held"][1] == "paused", rows
    one = table(ok(hookwheel, "queues", "billing"))
    assert len(one) == 2 and one[1][0] == "billing" and one[1][5] == "3", one
    q = json.loads(ok(hookwheel, "queues", "billing", "--json"))
    status, _, api = hookwheel.request("GET", "/queues/billing")
    assert q["name"] == "billing" and q["timers"] == api["timers"] and "oldest_due_age_ms" in q, q
    # the held queue's due timer waits while the queue is paused, and runs once resumed
    time.sleep(scaled(0.3))
    assert receiver.requests(path="/q") == []
    assert ok(hookwheel, "resume", "--queue", "held") == "held active\n"
    receiver.wait_for(1, path="/q", timeout=scaled(5))
    status, _, api = hookwheel.request("GET", "/queues/held")
    assert api["paused"] is False and api["scope"] == "instance", api
    assert ok(hookwheel, "resume", "--queue", "held") == "held active\n"  # again: the same PATCH
    p = ctl(hookwheel, "pause", "--queue", "held", "some-id")
    assert p.returncode == 2, p


def test_leases_show_one_and_list(hookwheel):
    status, _, lease = hookwheel.request("POST", "/leases", json_body={"key": "cli-lock", "owner": "worker-7",
                                                                      "ttl_ms": 30000})
    assert status == 201, lease
    fields = dict(line.split(None, 1) for line in ok(hookwheel, "leases", "cli-lock").splitlines())
    assert fields["owner"] == "worker-7" and fields["token"] == str(lease["token"]), fields
    assert json.loads(ok(hookwheel, "leases", "cli-lock", "--json"))["owner"] == "worker-7"
    assert ctl(hookwheel, "leases", "no-such-lock").returncode == 3
    rows = table(ok(hookwheel, "leases"))
    assert rows[0] == ["KEY", "OWNER", "TOKEN", "TTL_MS", "EXPIRES_IN_MS", "RENEWING"]
    assert ["cli-lock", "worker-7"] == rows[1][:2], rows
    listed = json.loads(ok(hookwheel, "leases", "--all", "--limit", "1", "--json"))
    assert [l["key"] for l in listed["leases"]] == ["cli-lock"] and listed["next_cursor"] is None


def test_a_value_with_line_breaks_and_escape_sequences_prints_on_its_own_line_as_text(redis, hookwheel):
    # a key held outside hookwheel: its owner is whatever the key holds,
    # here a forged second line, a window title, colours and a C1 CSI
    owner = "job-9\nowner              forged\x1b]0;pwned\x07 \x1b[31mred\x1b[0m \u009b2J \u00fc\u65e5\tend\x7f"
    redis.cmd("SET", LEASE_PREFIX + "held-outside", owner, "PX", 600000)
    assert json.loads(ok(hookwheel, "leases", "held-outside", "--json"))["owner"] == owner  # exact
    lines = ok(hookwheel, "leases", "held-outside").splitlines()
    assert [line.split(None, 1)[0] for line in lines] == ["key", "owner", "token", "ttl_ms", "expires_in_ms"], lines
    shown = lines[1].split(None, 1)[1]
    assert not any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f for c in shown), repr(shown)
    assert shown == "job-9 owner              forged ]0;pwned   [31mred [0m  2J \u00fc\u65e5 end ", repr(shown)


def test_leases_list_pages_with_cursor_and_all(hookwheel):
    keys = [f"lock-{i}" for i in range(5)]
    tokens = {}
    for k in keys:
        status, _, lease = hookwheel.request("POST", "/leases", json_body={"key": k, "owner": f"w-{k}",
                                                                          "ttl_ms": 30000})
        assert status == 201, lease
        tokens[k] = lease["token"]
    p = ctl(hookwheel, "leases", "--limit", "2")
    assert p.returncode == 0, p
    rows = table(p.stdout)
    assert rows[0] == ["KEY", "OWNER", "TOKEN", "TTL_MS", "EXPIRES_IN_MS", "RENEWING"]
    assert [r[:3] for r in rows[1:]] == [["lock-0", "w-lock-0", str(tokens["lock-0"])],
                                         ["lock-1", "w-lock-1", str(tokens["lock-1"])]]
    cursor = p.stderr.split("--cursor ", 1)[1].split()[0]  # where the next page starts
    assert [r[0] for r in table(ok(hookwheel, "leases", "--limit", "2", "--cursor", cursor))[1:]] == \
        ["lock-2", "lock-3"]
    assert [r[0] for r in table(ok(hookwheel, "leases", "--all", "--limit", "2"))[1:]] == keys
    listed = json.loads(ok(hookwheel, "leases", "--all", "--limit", "2", "--json"))
    assert [l["key"] for l in listed["leases"]] == keys and listed["next_cursor"] is None
    assert ctl(hookwheel, "leases", "--limit", "x").returncode == 2


def test_a_server_error_exits_6_naming_the_url(redis, hookwheel_factory):
    if vars(redis).get("cluster"):
        pytest.skip("stops its one Redis")
    hw = hookwheel_factory(redis)
    url = f"http://127.0.0.1:{hw.port}"
    redis.stop()  # creates answer 503 while Redis is unreachable
    try:
        p = ctl(hw, "create", "--url", "http://127.0.0.1:9/x", "--in", "1m")
        assert p.returncode == 6, p
        assert p.stderr.startswith(f"hookwheelctl: POST {url}/timers: Service Unavailable (503): "), p
    finally:
        redis.start()


def test_an_answer_that_is_not_hookwheels_exits_6(receiver):
    # Pointed at another HTTP server (here the test's receiver): a 2xx whose
    # body is not JSON, or a non-JSON error page, is not taken for an answer.
    receiver.default("/timers/page", Reply(200, {"Content-Type": "text/html"}, "<html>a login page</html>"))
    receiver.default("/timers/plain", Reply(502, {"Content-Type": "text/html"}, "<html>bad\ngateway</html>"))
    url = receiver.url("").rstrip("/")
    p = ctl(None, "get", "page", url=url)
    assert p.returncode == 6 and "is not JSON" in p.stderr and f"{url}/timers/page" in p.stderr, p
    p = ctl(None, "get", "plain", url=url)
    assert p.returncode == 6 and p.stderr == f"hookwheelctl: GET {url}/timers/plain: HTTP 502: <html>bad gateway</html>\n", p


def test_exit_codes_for_not_found_conflict_bad_flags_and_an_unreachable_server(hookwheel, receiver):
    p = ctl(hookwheel, "get", "no-such-timer")
    assert p.returncode == 3 and p.stdout == "", p
    assert p.stderr.startswith("hookwheelctl: Not Found (404): ") and len(p.stderr.splitlines()) == 1, p
    ok(hookwheel, "create", "--url", receiver.url("/c409"), "--in", "1h", "--id", "dup")
    assert ok(hookwheel, "create", "--url", receiver.url("/c409"), "--in", "1h", "--id", "dup") == "dup\n"  # 200
    p = ctl(hookwheel, "create", "--url", receiver.url("/c409"), "--in", "2h", "--id", "dup")
    assert p.returncode == 5 and "Conflict (409)" in p.stderr, p
    p = ctl(hookwheel, "create", "--url", "ftp://nope", "--in", "1s")
    assert p.returncode == 1 and "[field: url]" in p.stderr, p
    for bad in (["create", "--url", receiver.url("/x")],                      # no due time
                ["create", "--url", receiver.url("/x"), "--in", "5 minutes"],  # not a duration
                ["create", "--url", receiver.url("/x"), "--in", "1s", "--header", "no-colon"],
                ["create", "--url", receiver.url("/x"), "--in", "1s", "--json-body", "{nope"],
                ["create", "--url", receiver.url("/x"), "--in", "1s", "--body", "@/no/such/file"],
                ["ls", "--limit", "many"], ["get"], ["get", "a", "b"], ["frobnicate"], ["ls", "--bogus"],
                ["--max-time", "soon", "get", "x"],
                ["create", "--url", receiver.url("/x"), "--in", "1s", "--label", "k:\udcff"]):  # not UTF-8
        p = ctl(hookwheel, *bad)
        assert p.returncode == 2 and p.stderr.startswith("hookwheelctl: ") and p.stdout == "", (bad, p)
    time.sleep(0.2)
    assert receiver.requests(path="/x") == []
    with socket.socket() as silent:  # accepts connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        p = ctl(hookwheel, "--max-time", "0.5", "get", "x", url=url)
        assert p.returncode == 6 and f"{url}/timers/x" in p.stderr and "timed out" in p.stderr, p
        assert time.monotonic() - started < scaled(5)
    port = free_port()  # nothing listens there
    p = ctl(hookwheel, "get", "x", url=f"http://127.0.0.1:{port}")
    assert p.returncode == 6 and f"http://127.0.0.1:{port}/timers/x" in p.stderr, p
    p = ctl(hookwheel, "--url", f"http://127.0.0.1:{port}", "ls")
    assert p.returncode == 6 and f"127.0.0.1:{port}" in p.stderr, p


def test_a_max_time_under_a_millisecond_still_bounds_the_call():
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKWHEEL_")}
    with socket.socket() as silent:  # accepts connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        for max_time in ("0.0004", "0.001"):
            try:
                p = subprocess.run([CLI, "--url", url, "--max-time", max_time, "get", "x"], capture_output=True,
                                   text=True, env=env, timeout=scaled(5))
            except subprocess.TimeoutExpired:
                pytest.fail(f"--max-time {max_time}: still waiting after {scaled(5):.0f} s")
            assert p.returncode == 6 and f"{url}/timers/x" in p.stderr, (max_time, p)


def test_a_wrong_or_missing_token_exits_4_and_the_right_one_works(tmp_path, redis, receiver, hookwheel_factory):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"cli {TOKEN}\n")
    hw = hookwheel_factory(redis, env={"HOOKWHEEL_API_TOKENS_FILE": str(tokens)})
    p = ctl(hw, "get", "x", token="not-the-token-0000000")
    assert p.returncode == 4 and "Unauthorized (401)" in p.stderr, p
    assert ctl(hw, "ls").returncode == 4
    assert ok(hw, "create", "--url", receiver.url("/t"), "--in", "1h", "--id", "tok", token=TOKEN) == "tok\n"
    assert ok(hw, "--token", TOKEN, "get", "tok", "--json", token="wrong-but-overridden-000")
    assert ctl(hw, "get", "tok", "--token", TOKEN).returncode == 0


def test_help_for_every_command(hookwheel):
    main = ok(hookwheel, "--help")
    assert "Exit codes:" in main and "6  server error or unreachable" in main
    for cmd in ("create", "get", "cancel", "ls", "fire", "pause", "resume", "retry", "replay", "purge",
                "queues", "leases"):
        assert f"  {cmd} " in main
        text = ok(hookwheel, "help", cmd)
        assert text.startswith(f"usage: hookwheelctl {cmd}") and "Exit codes:" in text
        assert ok(hookwheel, cmd, "--help") == text
    assert ok(hookwheel, "help") == main
    p = ctl(hookwheel)
    assert p.returncode == 2 and p.stderr.startswith("usage: hookwheelctl")


def test_ids_and_names_that_are_dot_segments_reach_their_resource(hookwheel, receiver):
    # "." and ".." are valid ids, queue names and lease keys; a URL path keeps
    # them only percent-encoded (RFC 3986 removes dot segments)
    for tid in (".", ".."):
        assert ok(hookwheel, "create", "--url", receiver.url("/dots"), "--in", "1h", "--id", tid) == tid + "\n"
        t = json.loads(ok(hookwheel, "--json", "get", tid))
        assert t["id"] == tid and t["state"] == "scheduled", t
        assert ok(hookwheel, "pause", tid) == f"{tid} paused\n"
        assert ok(hookwheel, "cancel", tid) == f"{tid} cancelled\n"
    assert ok(hookwheel, "pause", "--queue", "..") == ".. paused\n"
    q = json.loads(ok(hookwheel, "--json", "queues", ".."))
    assert q["name"] == ".." and q["paused"] is True, q
    status, _, lease = hookwheel.request("POST", "/leases", json_body={"key": "..", "owner": "w", "ttl_ms": 60000})
    assert status == 201, lease
    assert json.loads(ok(hookwheel, "--json", "leases", ".."))["key"] == "..", lease
