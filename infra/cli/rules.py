"""`rolltape rules`: calibrate a rule set on healthy runs, and measure any rule set's false
alarms and detections."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rolltape.infra.cli._common import CliError, console
from rolltape.infra.commands.rules import (
    EVALUATION_SEED_OFFSET,
    HEALTHY,
    calibrate_rules,
    evaluate_rules,
    write_ruleset,
)
from rolltape.processors.rules import RuleSet, RuleSetError, RuleSetFigures, goals

app = typer.Typer(
    help="Calibrate rule sets on healthy runs of the reference task and measure their alarms.",
    no_args_is_help=True,
)


def _quantiles(text: str) -> tuple[float, float]:
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError as exc:
        raise CliError(f"--quantiles: {text!r} is not two numbers such as 0.01,0.99") from exc
    if not 0 <= low < high <= 1:
        raise CliError(f"--quantiles: need 0 <= low < high <= 1, got {text}")
    return low, high


def _progress(line: str) -> None:
    print(f"  training {line} ...", file=sys.stderr, flush=True)


@app.command("calibrate")
def calibrate_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the rule set (JSON).")],
    name: Annotated[str, typer.Option(help="The rule set's name.")] = "digits-cnn-calibrated",
    seeds: Annotated[int, typer.Option(min=1, help="Seeded healthy runs (seeds 0..N-1).")] = 10,
    scenario: Annotated[
        list[str] | None, typer.Option(help="Healthy scenario(s) to run (default: baseline).")
    ] = None,
    epochs: Annotated[
        int | None, typer.Option(min=1, help="Epochs per run (default: the scenario's).")
    ] = None,
    quantiles: Annotated[
        str, typer.Option(help="The healthy quantiles the thresholds sit beyond.")
    ] = "0.01,0.99",
    margin: Annotated[
        float, typer.Option(min=1.0, help="How many times beyond its quantile a threshold sits.")
    ] = 2.0,
    relative_r2: Annotated[
        bool,
        typer.Option(
            help="Calibrate R2 on McCandlish's B_simple / batch size (the runs measure B_simple) "
            "rather than on the monitor's default noise scale."
        ),
    ] = False,
    base: Annotated[
        Path | None,
        typer.Option(help="The rule set to start from (default: the reference monitor's)."),
    ] = None,
) -> None:
    """Train N seeded healthy runs of the reference task under the monitor (no broker needed),
    read every rule's smoothed signal per epoch, and write a rule set whose thresholds sit beyond
    the healthy quantiles (never tighter than the base). Its `calibration` header records the
    runs, seeds, quantiles and the spread of every signal."""
    try:
        start = RuleSet.from_file(base) if base else RuleSet()
    except RuleSetError as exc:
        raise CliError(f"--base: {exc}") from exc
    rules = calibrate_rules(
        name=name,
        scenarios=tuple(scenario or HEALTHY),
        seeds=tuple(range(seeds)),
        epochs=epochs,
        quantiles=_quantiles(quantiles),
        margin=margin,
        relative_r2=relative_r2,
        base=start,
        progress=_progress,
    )
    write_ruleset(rules, out)
    console.print(f"wrote {rules.label} to {out}")
    table = Table(title=f"thresholds changed from {start.label}", title_justify="left")
    for col in ("threshold", "base", "calibrated"):
        table.add_column(col)
    for field, value in rules.model_dump().items():
        if field.startswith("r") and field[1].isdigit() and value != getattr(start, field):
            table.add_row(field, _shown(getattr(start, field)), _shown(value))
    console.print(table)


def _shown(value: object) -> str:
    """A threshold as both columns print it (4 significant digits), so they compare."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@app.command("evaluate")
def evaluate_command(
    ruleset: Annotated[
        list[Path] | None,
        typer.Option(
            help="A rule set to measure; repeat it to compare several on the same runs "
            "(default: the reference monitor's)."
        ),
    ] = None,
    seeds: Annotated[int, typer.Option(min=1, help="Seeded runs per scenario.")] = 10,
    first_seed: Annotated[
        int, typer.Option(help="The first seed (default: away from calibration's 0..N-1).")
    ] = EVALUATION_SEED_OFFSET,
    scenario: Annotated[
        list[str] | None,
        typer.Option(help="Faulty scenario(s) to run (default: every one but baseline)."),
    ] = None,
    epochs: Annotated[
        int | None, typer.Option(min=1, help="Epochs per run (default: the scenario's).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Measure rule sets: per rule, its firings on healthy baseline epochs (false alarms) and
    the longest run of them; per scenario, in how many seeds its intended rule fired and at
    which epoch first, and which other rules fired. Every rule set reads the same runs."""
    try:
        rulesets = [RuleSet.from_file(path) for path in ruleset] if ruleset else [RuleSet()]
    except RuleSetError as exc:
        raise CliError(f"--ruleset: {exc}") from exc
    measured = evaluate_rules(
        rulesets,
        seeds=tuple(range(first_seed, first_seed + seeds)),
        scenarios=scenario,
        epochs=epochs,
        progress=_progress,
    )
    if as_json:
        report = [
            {**f.model_dump(mode="json"), "goals": [g.model_dump() for g in goals(f)]}
            for f in measured
        ]
        print(json.dumps(report, indent=2))
        return
    for figures in measured:
        _print(figures)


def _print(figures: RuleSetFigures) -> None:
    alarms = Table(
        title=f"{figures.ruleset}: healthy runs ({figures.healthy_runs})", title_justify="left"
    )
    for col in ("rule", "false alarms", "of epochs", "rate", "longest streak"):
        alarms.add_column(col)
    for rule in figures.rules:
        alarms.add_row(
            rule.rule,
            str(rule.false_alarms),
            str(rule.healthy_epochs),
            f"{rule.false_alarm_rate:.1%}",
            str(rule.longest_streak),
        )
    console.print(alarms)
    found = Table(title="scenarios: the rule each is meant to provoke", title_justify="left")
    for col in ("scenario", "rule", "detected", "first epochs", "other rules (epochs)"):
        found.add_column(col)
    for d in figures.detections:
        found.add_row(
            d.scenario,
            d.rule,
            f"{d.detected}/{d.seeds}",
            " ".join("-" if e is None else str(e) for e in d.first_epochs),
            ", ".join(f"{r} ({n})" for r, n in d.unintended.items()) or "-",
        )
    console.print(found)
    for goal in goals(figures):
        mark = "[green]met[/green]" if goal.met else "[red]not met[/red]"
        console.print(f"  {mark}  {goal.goal}: {goal.detail}")
