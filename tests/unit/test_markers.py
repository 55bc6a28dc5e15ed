"""Every integration test carries the `integration` marker, so `-m "not integration"` runs the
unit tests without a broker. A module that forgets its `pytestmark` must not slip through: the
marker is added at collection by the folder's conftest."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INTEGRATION = ROOT / "tests" / "integration"


def _collect(marker_expression: str) -> subprocess.CompletedProcess[str]:
    """Collect (never run) the integration folder under a marker expression, with the
    project's own options (`--strict-markers` among them)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "--strict-markers",
            "-m",
            marker_expression,
            str(INTEGRATION.relative_to(ROOT)),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTEST_ADDOPTS": ""},
        capture_output=True,
        text=True,
        timeout=240,
    )


def _node_ids(output: str) -> list[str]:
    return [line for line in output.splitlines() if "::" in line]


@pytest.fixture(scope="module")
def integration_ids() -> list[str]:
    done = _collect("integration")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "deselected" not in done.stdout, done.stdout
    return _node_ids(done.stdout)


def test_integration_marker__selects_every_test_in_the_integration_folder(
    integration_ids: list[str],
) -> None:
    modules = {node.split("::")[0] for node in integration_ids}
    # Modules without a `pytestmark` of their own (test_wheel, test_training) included.
    assert modules == {path.relative_to(ROOT).as_posix() for path in INTEGRATION.glob("test_*.py")}


def test_not_integration__deselects_every_test_in_the_integration_folder(
    integration_ids: list[str],
) -> None:
    done = _collect("not integration")
    # Exit code 5: nothing left to run, which is the point.
    assert done.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, done.stdout + done.stderr
    assert _node_ids(done.stdout) == []
    deselected = re.search(r"\((\d+) deselected\)", done.stdout)
    assert deselected is not None, done.stdout
    assert int(deselected.group(1)) == len(integration_ids)
