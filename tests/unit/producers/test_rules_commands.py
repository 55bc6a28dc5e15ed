"""`rolltape rules calibrate` and `rules evaluate` on real (short) training runs of the reference
task: the calibrated file reads back with its header, and evaluating it reports every rule's
false alarms and each scenario's detection."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rolltape.infra.cli import app
from rolltape.processors.rules import RuleSet
from rolltape.schemas import PRECEDENCE


def test_rules_calibrate_then_evaluate__on_short_seeded_runs(tmp_path: Path) -> None:
    out = tmp_path / "calibrated.json"
    runner = CliRunner()
    made = runner.invoke(
        app, ["rules", "calibrate", "-o", str(out), "--seeds", "2", "--epochs", "3"]
    )
    assert made.exit_code == 0, made.output
    rules = RuleSet.from_file(out)
    assert rules.calibration is not None and rules.calibration.seeds == (0, 1)
    assert rules.calibration.epochs == 3 and rules.calibration.base == RuleSet().label
    assert rules.calibration.ranges["grad_noise_scale"].samples == 6
    assert rules.r2_noise_scale_low < RuleSet().r2_noise_scale_low  # the digits task's is lower
    scored = runner.invoke(
        app,
        ["rules", "evaluate", "--ruleset", str(out), "--seeds", "1", "--epochs", "3",
         "--scenario", "lr_too_high", "--json"],
    )  # fmt: skip
    assert scored.exit_code == 0, scored.output
    (figures,) = json.loads(scored.stdout[scored.stdout.index("[") :])
    assert figures["ruleset"] == rules.label and figures["healthy_runs"] == 1
    assert [r["rule"] for r in figures["rules"]] == list(PRECEDENCE)
    (detection,) = figures["detections"]
    assert (detection["scenario"], detection["rule"], detection["detected"]) == (
        "lr_too_high",
        "R7",
        1,
    )
