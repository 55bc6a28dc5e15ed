"""The README's recording example runs as written (here without a broker, so it records to the
spools) and leaves verifiable chains: the agent session, and the training run's events and the
metrics its monitor wrote."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from rolltape.producers._spool import Spool
from rolltape.schemas import ChainVerifier

ROOT = Path(__file__).resolve().parents[2]


def test_readme_example__runs_and_records_two_verifiable_sessions(tmp_path: Path) -> None:
    (example,) = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    env = {**os.environ, "ROLLTAPE_STATE_DIR": str(tmp_path)}
    env.pop("ROLLTAPE_BOOTSTRAP", None)
    done = subprocess.run(
        [sys.executable, "-c", example], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    verifier = ChainVerifier()
    for folder in (
        tmp_path / "spool",
        tmp_path / "spool" / "monitor",
    ):  # the agent's, the monitor's
        spool = Spool(folder, 1 << 30)
        while not spool.empty:
            batch, token = spool.read(1000)
            for _, _, value in batch:
                verifier.add(value)
            spool.commit(token)
        spool.close()
    reports = verifier.reports()
    assert len(reports) == 3 and all(r.ok and r.ended for r in reports)
    # the agent's events, the training run's events, and its metrics chain written by the monitor
    assert {(r.stream, r.records > 5) for r in reports if r.stream == "metrics"} == {
        ("metrics", True)
    }
