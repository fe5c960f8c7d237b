"""The README's configuration table and `hookwheel --help` name the same
settings with the same defaults and the same words (the code's settings
table is the source)."""

import re
import subprocess
from pathlib import Path

from conftest import HOOKWHEEL_BIN

ROOT = Path(__file__).resolve().parents[2]


def help_settings():
    out = subprocess.run([HOOKWHEEL_BIN, "--help"], capture_output=True, text=True, check=True).stdout
    rows = re.findall(r"^  (--[a-z-]+)\s+(HOOKWHEEL_[A-Z_]+)\s+default: (.*)\n      (.*)$", out, re.M)
    assert len(rows) > 20, out
    return {env: (flag, default.strip(), meaning.strip()) for flag, env, default, meaning in rows}


def readme_settings():
    text = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| `(HOOKWHEEL_[A-Z_]+)` \| `(--[a-z-]+)` \| ([^|]*) \| (.*) \|$", text, re.M)
    return {env: (flag, default.strip(), meaning.strip()) for env, flag, default, meaning in rows}


def test_the_readme_configuration_table_matches_help_exactly():
    assert readme_settings() == help_settings()


def test_a_bad_listen_address_or_redis_url_stops_start_up_with_exit_2_before_anything_starts(tmp_path):
    for flag, setting in [("--listen=nope", "HOOKWHEEL_LISTEN"), ("--listen=127.0.0.1:99999", "HOOKWHEEL_LISTEN"),
                          ("--listen=127.0.0.1", "HOOKWHEEL_LISTEN"), ("--redis-url=http://x", "HOOKWHEEL_REDIS_URL"),
                          ("--redis-url=redis://:s3cret@host:port", "HOOKWHEEL_REDIS_URL")]:
        # no --redis-url for the listen cases: the embedded Redis must not even start
        r = subprocess.run([HOOKWHEEL_BIN, flag, f"--data-dir={tmp_path}/data"], capture_output=True, text=True,
                           timeout=10)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and setting in lines[0], (flag, r.returncode, r.stderr)
        assert "s3cret" not in r.stderr  # a URL may hold a password: it is not echoed
        assert not (tmp_path / "data").exists(), "the embedded Redis was started before the check"


def test_a_bad_file_secret_or_allowlist_stops_start_up_with_one_line_naming_it(tmp_path):
    # These are checked after the numbers (files read, secrets decoded), yet
    # the answer is still the one line the README promises, nothing before it.
    for flag, setting in [(f"--api-tokens-file={tmp_path}/none", "HOOKWHEEL_API_TOKENS_FILE"),
                          (f"--namespace-secrets-file={tmp_path}/none", "HOOKWHEEL_NAMESPACE_SECRETS_FILE"),
                          ("--signing-secret=nope", "HOOKWHEEL_SIGNING_SECRET"),
                          ("--destination-allowlist=10.0.0.0/33", "HOOKWHEEL_DESTINATION_ALLOWLIST")]:
        r = subprocess.run([HOOKWHEEL_BIN, flag, "--listen=127.0.0.1:0", f"--data-dir={tmp_path}/data"],
                           capture_output=True, text=True, timeout=10)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and setting in lines[0], (flag, r.returncode, r.stderr)
        assert not (tmp_path / "data").exists(), "the embedded Redis was started before the check"


def test_an_invalid_setting_stops_start_up_with_exit_2_naming_it():
    r = subprocess.run([HOOKWHEEL_BIN, "--tick-ms", "0"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "--tick-ms" in r.stderr
    r = subprocess.run([HOOKWHEEL_BIN], capture_output=True, text=True,
                       env={"HOOKWHEEL_WHEEL_SLOTS": "1000", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2
    assert "HOOKWHEEL_WHEEL_SLOTS" in r.stderr


def packages_installed_by(target):
    """The Debian packages `make <target>` checks and installs, from a dry run."""
    out = subprocess.run(["make", "-C", str(ROOT), "-n", "--no-print-directory", target],
                         capture_output=True, text=True, check=True).stdout
    lists = re.findall(r'for p in ([^;]+); do dpkg -s', out)
    assert lists, out[:2000]
    return set(lists[0].split())


def test_make_run_installs_only_what_running_needs_and_make_test_what_testing_needs():
    run = packages_installed_by("run")
    assert {"redis-server", "libmicrohttpd-dev", "libhiredis-dev", "tzdata"} <= run, run
    assert not run & {"docker-compose", "docker.io", "clang", "nodejs", "nginx-light", "libcmocka-dev",
                      "python3-pytest"}, run
    test = packages_installed_by("test")
    assert run <= test and {"clang", "nginx-light", "libcmocka-dev", "python3-pytest", "nodejs"} <= test, test


def test_the_lease_docs_say_leases_work_on_a_redis_cluster_under_a_hash_tagged_prefix():
    """Leases run on a Redis Cluster when HOOKWHEEL_LEASE_PREFIX has a hash tag
    (test_leases runs so under HOOKWHEEL_TEST_REDIS=cluster; without one the
    endpoints answer 501): the README's lease section and the API's overview
    must not send Cluster users away."""
    readme = (ROOT / "README.md").read_text()
    leases = readme[readme.index("## Watchdog leases"):readme.index("### Worked example: a critical section")]
    overview = (ROOT / "openapi.yaml").read_text()
    overview = overview[overview.index("## Watchdog leases"):overview.index("servers:")]
    for name, text in (("README", leases), ("openapi.yaml", overview)):
        flat = " ".join(text.split())
        assert "not Redis Cluster" not in flat, name
        assert "lease:{l}:" in flat and "501" in flat, name
