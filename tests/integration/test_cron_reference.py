"""cron_next against an independent computation: tests/unit/cron_reference.py
reads the expression rules of README.md itself and maps local times with
Python's zoneinfo (gaps, overlaps, footer rules after 2037, leap days, the
31st), for seeded random expressions and zones. Runs the small program
build/tests/test_cron_oracle next to the hookwheel binary (`make
build/tests/test_cron_oracle`)."""
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import HOOKWHEEL_BIN, REPO_ROOT, SLOW

ORACLE = pathlib.Path(HOOKWHEEL_BIN).resolve().parent / "tests" / "test_cron_oracle"


@pytest.mark.skipif(SLOW, reason="runs once, on the plain build (cron.c runs under the sanitizers in test_cron)")
@pytest.mark.parametrize("seed", [20260229, 20380119])
def test_cron_next_matches_zoneinfo_for_random_schedules(seed):
    assert os.access(ORACLE, os.X_OK), f"{ORACLE} is not built (make integration builds it)"
    r = subprocess.run([sys.executable, str(REPO_ROOT / "tests" / "unit" / "cron_reference.py"), str(ORACLE),
                        "300", str(seed)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
