"""The README's configuration table and `hookwheel --help` name the same
settings with the same defaults (the code's settings table is the source)."""

import re
import subprocess
from pathlib import Path

from conftest import HOOKWHEEL_BIN

ROOT = Path(__file__).resolve().parents[2]


def help_settings():
    out = subprocess.run([HOOKWHEEL_BIN, "--help"], capture_output=True, text=True, check=True).stdout
    rows = re.findall(r"^  (--[a-z-]+)\s+(HOOKWHEEL_[A-Z_]+)\s+default: (.*)$", out, re.M)
    assert len(rows) > 20, out
    return {env: (flag, default.strip()) for flag, env, default in rows}


def readme_settings():
    text = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| `(HOOKWHEEL_[A-Z_]+)` \| `(--[a-z-]+)` \| ([^|]*) \|", text, re.M)
    return {env: (flag, default.strip()) for env, flag, default in rows}


def test_the_readme_configuration_table_matches_help_exactly():
    assert readme_settings() == help_settings()


def test_an_invalid_setting_stops_start_up_with_exit_2_naming_it():
    r = subprocess.run([HOOKWHEEL_BIN, "--tick-ms", "0"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "--tick-ms" in r.stderr
    r = subprocess.run([HOOKWHEEL_BIN], capture_output=True, text=True,
                       env={"HOOKWHEEL_WHEEL_SLOTS": "1000", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2
    assert "HOOKWHEEL_WHEEL_SLOTS" in r.stderr
