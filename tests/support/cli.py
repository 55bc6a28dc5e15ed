"""The rolltape CLI run as a user runs it: a fresh interpreter, the test's settings in its
environment, its output captured."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping


def rolltape(
    env: Mapping[str, str], *args: str, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    """`python -m rolltape.infra ARGS` under `env`; the caller checks its return code."""
    return subprocess.run(
        [sys.executable, "-m", "rolltape.infra", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
