"""`rolltape rules`: calibrate a rule set on healthy runs, and measure any rule set's false
alarms and detections."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rolltape.infra.cli._common import CliError, console, settings
from rolltape.infra.commands.rules import (
    DIGITS_CALIBRATED,
    EVALUATION_SEED_OFFSET,
    HEALTHY,
    REFERENCE_MONITOR,
    TASK,
    RuleBook,
    RuleSet,
    RuleSetError,
    RulesetEvaluation,
    calibrate_recorded,
    calibrate_rules,
    evaluate_rules,
    load_ruleset,
    record_evaluations,
    rulebook,
    ruleset_evaluations,
    shipped_rulesets,
    write_ruleset,
)

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


def _ruleset(spec: str, option: str) -> RuleSet:
    try:
        return load_ruleset(spec)
    except RuleSetError as exc:
        raise CliError(f"{option}: {exc}") from exc


def _rulebook() -> RuleBook:
    try:
        return rulebook(settings())
    except RuleSetError as exc:
        raise CliError(f"{exc} (ROLLTAPE_RULES_FILE / ROLLTAPE_RULES_BY_TASK)") from exc


def _reference_task(task: str) -> None:
    if task != TASK:
        raise CliError(
            f"--task: only the reference task's scenarios run here ({TASK}); for another task "
            "read its recorded healthy runs with --from-log"
        )


def _progress(line: str) -> None:
    print(f"  training {line} ...", file=sys.stderr, flush=True)


@app.command("calibrate")
def calibrate_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the rule set (JSON).")],
    task: Annotated[
        str, typer.Option(help="The task (family) whose healthy runs to train or read.")
    ] = TASK,
    name: Annotated[
        str | None, typer.Option(help="The rule set's name (default: <task>-calibrated, / as -).")
    ] = None,
    seeds: Annotated[
        int | None, typer.Option(min=1, help="Seeded runs per scenario, seeds 0..N-1 (default 10).")
    ] = None,
    scenario: Annotated[
        list[str] | None,
        typer.Option(help="The scenario to run: healthy ones (repeatable; default: baseline)."),
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
        str,
        typer.Option(help="The rule set to start from: a file or a shipped set's name."),
    ] = REFERENCE_MONITOR,
    from_log: Annotated[
        bool,
        typer.Option(
            help="Read the healthy runs from the log instead of training them: every recorded "
            "training session of --task (any task), or the --session(s) named."
        ),
    ] = False,
    session: Annotated[
        list[str] | None,
        typer.Option(
            help="A session id: with --from-log, a recorded healthy run to read (repeatable)."
        ),
    ] = None,
) -> None:
    """Train N seeded healthy runs of the reference task under the monitor (no broker needed),
    or read any task's recorded healthy runs from the log (--from-log), read every rule's
    smoothed signal per epoch, and write a rule set whose thresholds sit beyond the healthy
    quantiles (never tighter than the base). Its `calibration` header records the runs (seeds
    or sessions), quantiles and the spread of every signal. Judge the task by it with
    ROLLTAPE_RULES_BY_TASK='{"TASK": "FILE"}'."""
    start = _ruleset(base, "--base")
    if session and not from_log:
        raise CliError("--session names recorded runs: add --from-log")
    if from_log:
        if scenario or epochs or seeds:
            raise CliError(
                "--scenario, --seeds and --epochs train runs; --from-log reads recorded ones"
            )
        rules, found = calibrate_recorded(
            settings(),
            name=name or f"{task.replace('/', '-')}-calibrated",
            task=task,
            sessions=tuple(session or ()),
            quantiles=_quantiles(quantiles),
            margin=margin,
            relative_r2=relative_r2,
            base=start,
        )
        console.print(f"read {len(found.runs)} recorded run(s) of {task}")
        for sid, why in sorted(found.skipped.items()):
            console.print(f"  left out {sid}: {why}", highlight=False)
    else:
        _reference_task(task)
        rules = calibrate_rules(
            name=name or DIGITS_CALIBRATED,
            scenarios=tuple(scenario or HEALTHY),
            seeds=tuple(range(seeds or 10)),
            epochs=epochs,
            quantiles=_quantiles(quantiles),
            margin=margin,
            relative_r2=relative_r2,
            base=start,
            progress=_progress,
        )
    write_ruleset(rules, out)
    console.print(f"wrote {rules.label} to {out}")
    table = Table(title=f"settings changed from {start.label}", title_justify="left")
    for col in ("setting", "base", "calibrated"):
        table.add_column(col)
    for field, value in rules.model_dump().items():
        if field not in ("name", "calibration") and value != getattr(start, field):
            table.add_row(field, _shown(getattr(start, field)), _shown(value))
    console.print(table)


def _shown(value: object) -> str:
    """A threshold as both columns print it (4 significant digits), so they compare."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@app.command("evaluate")
def evaluate_command(
    ruleset: Annotated[
        list[str] | None,
        typer.Option(
            help="A rule set to measure (a file or a shipped set's name); repeat it to compare "
            "several on the same runs (default: the task's rule set in the worker's rule book)."
        ),
    ] = None,
    task: Annotated[str, typer.Option(help="The task (family) whose scenarios to train.")] = TASK,
    seeds: Annotated[int, typer.Option(min=1, help="Seeded runs per scenario, seeds 0..N-1.")] = 10,
    first_seed: Annotated[
        int, typer.Option(help="The first seed (default: away from calibration's 0..N-1).")
    ] = EVALUATION_SEED_OFFSET,
    scenario: Annotated[
        list[str] | None,
        typer.Option(
            help="The scenario to run: faulty ones (repeatable; default: every one but baseline)."
        ),
    ] = None,
    epochs: Annotated[
        int | None, typer.Option(min=1, help="Epochs per run (default: the scenario's).")
    ] = None,
    record: Annotated[
        bool,
        typer.Option(
            help="Record the results as events: each rule set with its figures as a `ruleset_evaluation` "
            "(needs a broker)."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON: the figures.")] = False,
) -> None:
    """Measure rule sets: per rule, its firings on healthy baseline epochs (false alarms) and
    the longest run of them; per scenario, in how many seeds its intended rule fired and at
    which epoch first, and which other rules fired. Every rule set reads the same runs."""
    _reference_task(task)
    if ruleset:
        rulesets = [_ruleset(spec, "--ruleset") for spec in ruleset]
    else:
        rulesets = [_rulebook().for_task(task)]
    run_seeds = tuple(range(first_seed, first_seed + seeds))
    measured = evaluate_rules(
        rulesets, seeds=run_seeds, scenarios=scenario, epochs=epochs, progress=_progress
    )
    evaluations = ruleset_evaluations(rulesets, measured, seeds=run_seeds, epochs=epochs)
    if as_json:
        report = [
            {**e.figures.model_dump(mode="json"), "goals": [g.model_dump() for g in e.goals]}
            for e in evaluations
        ]
        print(json.dumps(report, indent=2))
    else:
        for evaluation in evaluations:
            _print(evaluation)
    if record:
        session_id, sent = record_evaluations(evaluations, settings())
        where = "recorded" if sent else "spooled (the broker did not take them yet)"
        print(f"{where} as session {session_id}", file=sys.stderr if as_json else sys.stdout)


@app.command("list")
def list_command() -> None:
    """The shipped rule sets, and which one judges each task family in the worker's rule book
    (ROLLTAPE_RULES_FILE / ROLLTAPE_RULES_BY_TASK)."""
    table = Table(title="shipped rule sets", title_justify="left")
    table.add_column("name", no_wrap=True)
    table.add_column("label in evaluations", no_wrap=True)
    table.add_column("calibrated on")
    for name, rules in shipped_rulesets().items():
        c = rules.calibration
        on = f"{c.task}: {', '.join(c.scenarios)}, {len(c.seeds)} seeds" if c else "-"
        table.add_row(name, rules.label, on)
    console.print(table)
    book = _rulebook()
    judged = Table(title="the worker's rule book", title_justify="left")
    for col in ("task family", "rule set"):
        judged.add_column(col)
    for family, rules in sorted(book.tasks.items()):
        judged.add_row(family, rules.label)
    judged.add_row("(any other)", book.fallback.label)
    console.print(judged)


def _print(evaluation: RulesetEvaluation) -> None:
    figures = evaluation.figures
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
    for goal in evaluation.goals:
        mark = "[green]met[/green]" if goal.met else "[red]not met[/red]"
        console.print(f"  {mark}  {goal.goal}: {goal.detail}")
