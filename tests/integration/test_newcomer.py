"""The README's path for someone new, on a machine where rolltape has never run: the demo
(`bash scripts/demo.sh` runs `rolltape demo` once installed) starts a managed broker of its own,
then the demo's sessions are exported with their evidence and verified offline with the judge's
public key.

The other CLI tests get a broker and a judge key from the session's fixtures; this one starts
from a state folder with neither, so it pins that the demo's own start of the broker leaves what
`broker up` leaves, the key included (without it the worker signs nothing and the export carries
no evidence). The Kafka jars come from the cache the other tests use (ROLLTAPE_CACHE_DIR), so
nothing new is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("java") is None, reason="the demo starts the managed broker: needs Java"
    ),
]
CLI = [sys.executable, "-m", "rolltape.infra"]
#: What a newcomer's environment may carry: where the broker's jars are cached and which Kafka
#: they are. Everything else of rolltape's (a cluster, credentials, a key) is left out.
KEPT = {"ROLLTAPE_CACHE_DIR", "ROLLTAPE_KAFKA_VERSION", "ROLLTAPE_SCALA_VERSION"}


@pytest.fixture
def newcomer(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of someone who never ran rolltape, with a state folder of their own;
    the managed broker the test starts there is stopped afterwards, however the test ends."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLTAPE_") or k in KEPT}
    env |= {"ROLLTAPE_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "200"}
    try:
        yield env
    finally:
        down = run(["broker", "down"], env, tmp_path)
        assert down.returncode == 0, down.stdout + down.stderr


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_demo_then_export_evidence__verifies_offline_with_the_key_the_demo_created(
    newcomer: dict[str, str], tmp_path: Path
) -> None:
    before = run(["keys", "show"], newcomer, tmp_path)
    assert before.returncode == 2 and "no judge key" in before.stderr, before.stderr

    demo = run(["demo", "--out", str(tmp_path / "demo")], newcomer, tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "demo: all chains verified" in demo.stdout
    assert "new judge key" in demo.stderr, demo.stderr

    export = run(
        ["dataset", "export", "-f", "sharegpt", "-o", "out", "--evidence"], newcomer, tmp_path
    )
    assert export.returncode == 0, export.stdout + export.stderr
    manifest = json.loads((tmp_path / "out" / ".rolltape" / "manifest.json").read_text())
    # The demo's four agent sessions, each with its evidence; none left out for want of a
    # signed checkpoint.
    assert manifest["lines"] == 4 and "no_checkpoint" not in manifest["skipped"], manifest
    evidence = [tmp_path / "out" / name for name in manifest["evidence"]]
    assert evidence and all(p.read_text().count("\n") == 4 for p in evidence), evidence

    exported = run(["keys", "export", "judge.pub.pem"], newcomer, tmp_path)
    assert exported.returncode == 0, exported.stderr
    verified = run(
        ["dataset", "verify", "out", "--public-key", "judge.pub.pem"],
        # The verifier is a third party: none of the recorder's settings, no broker.
        {k: v for k, v in newcomer.items() if k != "ROLLTAPE_STATE_DIR"},
        tmp_path,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "verified 4 lines" in verified.stdout
