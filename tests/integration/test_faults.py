"""The faults-at-scale script at a small size: several recording processes, the broker and the
worker SIGKILLed twice each, and nothing lost, doubled, forked or left unjudged. The full size
(100,000 events) is run by hand: `.venv/bin/python scripts/faults_at_scale.py`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).parents[2] / "scripts" / "faults_at_scale.py"


def test_faults_at_scale__small__every_event_once_every_chain_intact_every_output(
    tmp_path: Path,
) -> None:
    args = ["--events", "3000", "--processes", "3", "--seconds", "60", "--catch-up", "300"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "OK: every event once, every chain intact" in done.stdout
    for fault in ("broker SIGKILLed (2/2)", "worker SIGKILLed (2/2)"):
        assert fault in done.stdout
