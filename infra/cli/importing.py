"""`rolltape import hermes FILE` and `rolltape import env-rl DIR`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rolltape.infra.cli._common import CliError, console, settings
from rolltape.infra.commands.importing import (
    import_env_rl,
    import_identity,
    read_env_rl_logs,
    read_hermes,
    send_sessions,
)

app = typer.Typer(help="Import historical runs from other recorders.", no_args_is_help=True)


@app.command()
def hermes(
    file: Annotated[Path, typer.Argument(help="Hermes ShareGPT / batch-runner JSONL file.")],
    dry_run: Annotated[bool, typer.Option(help="Write nothing: read and check the rows.")] = False,
) -> None:
    """Turn each row into an agent session on the events stream (tagged imported:hermes, chained
    on import). Importing a file twice writes the same records again, which readers drop as
    redeliveries. Rows that cannot be read are listed by line; the others are imported."""
    if not file.is_file():
        raise CliError(f"{file} is not a file: give the path of a Hermes JSONL file")
    rows = read_hermes(file)
    sessions, errors = rows.sessions, rows.errors
    s = settings()
    sent = 0
    if sessions and not dry_run:
        sent = asyncio.run(send_sessions(s, import_identity(s, "hermes"), sessions))
    verb = "checked" if dry_run else f"imported ({sent} events)"
    console.print(f"{len(sessions)} session(s) {verb} from {escape(file.name)}")
    for session in sessions[:20]:
        console.print(f"  {session.session_id}")
    for error in errors:
        console.print(f"  [red]line {error.line}[/red]: {escape(error.reason)}")
    if errors:
        console.print(
            f"{len(errors)} row(s) not imported: fix them (each needs a 'conversations' list of "
            "{from, value} turns) and import the file again"
        )
        raise typer.Exit(1)


@app.command("env-rl")
def env_rl(
    folder: Annotated[Path, typer.Argument(help="An env_rl judge_logs folder.")],
    dry_run: Annotated[bool, typer.Option(help="Write nothing: verify and re-judge.")] = False,
) -> None:
    """Verify an env_rl judge_logs folder with env_rl's own hash formula, import its metrics and
    decisions as a training session, re-judge it with rolltape's rule engine and judge, and show
    where the two judges disagree and why."""
    if not folder.is_dir():
        raise CliError(f"{folder} is not a folder: give an env_rl judge_logs folder")
    run = read_env_rl_logs(folder)
    if not run.verified:
        for problem in run.problems:
            where = f"line {problem.line}" if problem.line else "folder"
            console.print(f"[red]{problem.file} {where}[/red]: {escape(problem.detail)}")
        console.print(
            "the logs do not verify with env_rl's hash formula: not imported (a changed or "
            "truncated log cannot be trusted; import an untouched copy)"
        )
        raise typer.Exit(1)
    done = import_env_rl(settings(), run, source=folder.name, dry_run=dry_run)
    counts = {name: len(records) for name, records in run.records.items()}
    console.print(
        "env_rl chains verified: " + ", ".join(f"{name} {n} lines" for name, n in counts.items())
    )
    console.print(
        f"session {done.session_id}: "
        + ("checked, not sent" if dry_run else f"imported ({done.sent} events)")
    )
    for note in run.notes:
        console.print(f"  note: {escape(note)}")
    theirs, ours = done.their_epochs, done.our_epochs
    if theirs != ours:
        console.print(
            f"  env_rl logged rule evaluations for {theirs} epochs, rolltape evaluated "
            f"{ours} (compared: the first {min(theirs, ours)})"
        )
    if done.disagreements:
        table = Table(title="where the rule engines disagree", title_justify="left")
        for col in ("epoch", "rule", "env_rl", "rolltape", "why (rolltape)"):
            table.add_column(col)
        for d in done.disagreements:
            table.add_row(
                str(d["epoch"]),
                d["rule"],
                "fired" if d["env_rl"] else "-",
                "fired" if d["rolltape"] else "-",
                escape(d["why"]),
            )
        console.print(table)
    else:
        console.print("  rule firings: env_rl and rolltape agree on every epoch")
    if (verdict := done.verdict) is not None:
        scores = ", ".join(f"{k} {v:.2f}" for k, v in sorted(verdict["scores"].items()))
        codes = sorted({v["code"] for v in verdict["violations"]})
        console.print(
            f"  rolltape's verdict: {verdict['status']}; {scores or 'no scores'}; "
            f"violations: {', '.join(codes) or 'none'}"
        )
