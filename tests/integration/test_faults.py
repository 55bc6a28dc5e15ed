"""The faults-at-scale script at a small size, each scenario once: several recording processes,
and nothing lost, doubled, forked or left unjudged while

- the broker and the worker are SIGKILLed twice each;
- three workers in one group are SIGKILLed in turn, two of them started again at once while the
  group still counts the dead (3 rounds; 20 by hand, below).

The full sizes are run by hand:

    .venv/bin/python scripts/faults_at_scale.py
    .venv/bin/python scripts/faults_at_scale.py --scenario worker-kills --rounds 20 \\
        --events 9000 --processes 3 --seconds 30
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).parents[2] / "scripts" / "faults_at_scale.py"


def _run(tmp_path: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    return done.stdout


def test_faults_at_scale__small__every_event_once_every_chain_intact_every_output(
    tmp_path: Path,
) -> None:
    out = _run(tmp_path, "--events", "3000", "--processes", "3", "--seconds", "60")
    assert "OK: every event once, every chain intact" in out
    for fault in ("broker SIGKILLed (2/2)", "worker SIGKILLed (2/2)"):
        assert fault in out


def test_worker_kills__three_rounds__no_chain_broken_no_fork_every_output(tmp_path: Path) -> None:
    out = _run(
        tmp_path,
        *("--scenario", "worker-kills", "--workers", "3", "--rounds", "3"),
        *("--events", "4000", "--processes", "3", "--seconds", "20"),
    )
    assert "OK: 3 of 3 rounds held" in out
    # Each fault is printed as it happens and again in its round's summary.
    twice = out.count("its predecessor still a member: SIGKILLed and started again at once")
    assert twice == 2 * 3
