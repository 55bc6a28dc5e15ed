"""`rolltape demo`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rolltape.infra.cli._common import console, err_console, settings
from rolltape.infra.cli.harness import print_attempts

if TYPE_CHECKING:  # the demo trains with torch: imported when the command runs
    from rolltape.infra.commands.demo import DemoResult


def demo(
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Where to write the exported training files (default: a new temp folder).",
        ),
    ] = None,
) -> None:
    """Start the broker if needed (as `broker up` does: topics, the judge's key) and a worker,
    record agent sessions and two monitored training attempts of the decision harness, verify
    every chain, print rule firings, verdicts, both attempts' scores and filter outcomes, and
    export the sessions as ShareGPT, Atropos and OpenAI files."""
    s = settings()
    from rolltape.infra.commands.demo import run_demo  # loads torch: a bad setting is told first

    result = run_demo(s, out, on_step=_step)
    _chains(result)
    _firings(result)
    _verdicts(result)
    _attempts(result)
    _outcomes(result)
    _exports(result)
    if result.worker_error:
        console.print(f"[red]demo: {escape(result.worker_error)}[/red]")
        raise typer.Exit(1)
    if not result.ok:
        console.print("[red]demo: a chain did not verify[/red]")
        raise typer.Exit(1)
    if result.report:
        console.print(f"report of the training attempts: {result.report}", soft_wrap=True)
    console.print(
        f"checkpoints signed with judge key {result.broker.judge_key_id} (public key in "
        f"{result.broker.judge_public_key}): `rolltape dataset export --evidence` can prove these sessions",
        soft_wrap=True,
    )
    console.print("demo: all chains verified")


def _step(line: str) -> None:
    """Progress on stderr while the demo works: the whole run takes minutes."""
    err_console.print(f"demo: {line}", markup=False)


def _chains(result: DemoResult) -> None:
    ids = [c.session_id for c in result.chains] or ["-"]
    table = Table(title=f"chains recorded to {result.bootstrap}", title_justify="left")
    for col in ("session", "stream", "recs", "ended", "head", "chain"):
        # Session ids are what a reader copies into `verify --session`: never truncate them.
        table.add_column(
            col, no_wrap=True, min_width=len(max(ids, key=len)) if col == "session" else None
        )
    for c in result.chains:
        table.add_row(
            c.session_id,
            c.stream,
            str(c.records),
            "yes" if c.ended else "no",
            c.head_hash[:8],
            "[green]intact[/green]" if c.ok else f"[red]{len(c.breaks)} break(s)[/red]",
        )
    console.print(table)


def _firings(result: DemoResult) -> None:
    table = Table(title="rule evaluations (the last training attempt)", title_justify="left")
    for col in ("epoch", "fired", "why (first rule)"):
        table.add_column(col)
    for e in result.rule_evaluations:
        why = e.rules[e.fired[0]].reason if e.fired else "-"
        table.add_row(str(e.epoch), ", ".join(e.fired) or "-", why)
    console.print(table)


def _verdicts(result: DemoResult) -> None:
    """Verdicts other than the training audits (those are in the attempts table)."""
    rows = [
        (sid, v)
        for sid, verdicts in sorted(result.verdicts.items())
        for v in verdicts
        if v.judge != "training_audit"
    ]
    if not rows:
        return
    table = Table(title="verdicts", title_justify="left")
    for col in ("session", "judge", "status", "scores", "violations"):
        table.add_column(col, no_wrap=col in ("session", "judge"))
    for sid, v in rows:
        scores = ", ".join(f"{k} {x:.2f}" for k, x in sorted(v.scores.items())) or "-"
        found = "; ".join(f"{x.code} ({x.rule or '-'} @ {x.epoch})" for x in v.violations[:3])
        table.add_row(sid, v.judge, v.status, scores, found or v.error or "-")
    console.print(table)


def _attempts(result: DemoResult) -> None:
    if result.self_refine is not None:
        print_attempts(result.self_refine)


def _outcomes(result: DemoResult) -> None:
    table = Table(title="reward filters", title_justify="left")
    for col in ("session", "accepted", "reasons"):
        table.add_column(col, no_wrap=col == "session")
    for sid, o in sorted(result.filter_outcomes.items()):
        reasons = "; ".join(f"{r.code}: {r.message}" for r in o.reasons) or "-"
        table.add_row(sid, "yes" if o.accepted else "[red]no[/red]", reasons)
    console.print(table)
    if result.dead_letters:
        console.print(f"{result.dead_letters} record(s) went to the dead-letter topic")


def _exports(result: DemoResult) -> None:
    table = Table(title="training data exported", title_justify="left")
    for col in ("format", "lines", "sessions", "skipped"):
        table.add_column(col)
    for e in result.exports:
        skipped = ", ".join(f"{k} {n}" for k, n in e.skipped.items()) or "-"
        table.add_row(e.format, str(e.lines), str(e.sessions), skipped)
    console.print(table)
    for e in result.exports:
        for name in e.files:
            console.print(f"  {e.folder}/{name}", soft_wrap=True)
