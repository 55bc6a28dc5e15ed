"""`rolltape prompts` on a real broker: versions recorded by hand, their lineage, a diff, and the
champion decided by promotion events in the log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import Topics

CLI = [sys.executable, "-m", "rolltape.infra", "prompts"]


def run(args: list[str], topics: Topics) -> subprocess.CompletedProcess[str]:
    env = {**topics.env(), "COLUMNS": "200"}
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=120)


def test_prompts__versions_lineage_and_the_champion_come_from_the_log(
    topics: Topics, tmp_path: Path
) -> None:
    first, second = tmp_path / "v0.txt", tmp_path / "v1.txt"
    first.write_text("Act on every fired rule.\n")
    second.write_text("Act on every fired rule.\nFor R2, change the batch size.\n")

    none = run(["champion", "harness.policy"], topics)
    assert none.returncode == 2 and "no prompt target 'harness.policy'" in none.stderr

    added = run(["add", "harness.policy", "--file", str(first), "--promote", "initial"], topics)
    assert added.returncode == 0, added.stderr
    assert "harness.policy v000" in added.stdout and "v000 is the champion" in added.stdout
    edit = ["add", "harness.policy", "-f", str(second), "--technique", "negative_constraint"]
    edited = run([*edit, "--rationale", "R2 was deferred"], topics)
    assert edited.returncode == 0 and "harness.policy v001" in edited.stdout, edited.stderr

    listed = run(["list"], topics)
    assert listed.returncode == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if "v00" in line]
    assert "champion" in rows[0] and "v000" in rows[1] and "negative_constraint" in rows[1]
    assert "champion: v000" in listed.stdout

    diff = run(["diff", "harness.policy", "v000", "v001"], topics)
    assert "+For R2, change the batch size." in diff.stdout, diff.stderr

    promoted = run(
        ["add", "harness.policy", "-f", str(second), "--promote", "fixes the R2 deferrals"],
        topics,
    )
    assert "harness.policy v001" in promoted.stdout, promoted.stderr  # the same text: v001
    champion = run(["champion", "harness.policy"], topics)
    assert "harness.policy: v001" in champion.stdout and "replaced: v000" in champion.stdout
    shown = run(["show", "harness.policy", "v001"], topics)
    assert "parents: v000; technique: negative_constraint" in shown.stdout
    assert "promoted: fixes the R2 deferrals" in shown.stdout
    assert shown.stdout.rstrip().endswith("For R2, change the batch size.")
