"""`rolltape report`: one self-contained HTML page about training runs or agent sessions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from rolltape.infra.broker import require_connection
from rolltape.infra.cli._common import console, settings
from rolltape.schemas import Role


def report(
    out: Annotated[Path, typer.Option("--out", "-o", help="The HTML file to write.")] = Path(
        "report.html"
    ),
    session: Annotated[
        str | None, typer.Option("--session", "-s", help="One session id (training or agent).")
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(help="Every session started with this task text, e.g. digits-cnn/dead_relu."),
    ] = None,
    runs: Annotated[int, typer.Option(min=1, help="With --task: the newest N training runs.")] = 5,
) -> None:
    """Write a self-contained HTML report (works offline): for training runs, train/val curves
    per attempt, the rule heatmap per epoch with decision markers (actioned, deferred, missed,
    waived), the decisions with their justifications, both scores per attempt and the violations
    with their evidence; for agent sessions, the conversation, tool calls, filter reasons and
    verdicts."""
    if (session is None) == (task is None):
        raise typer.BadParameter("choose what to report on: --session ID or --task NAME")
    # Loads plotly: without the report extra, the boundary says which one to install.
    from rolltape.infra.commands.report import read_sessions, write_report

    s = settings()
    connection = require_connection(s, Role.READER)
    sessions = asyncio.run(read_sessions(connection, s.topic_prefix))
    result = write_report(sessions, out, session=session, task=task, runs=runs)
    attempts = sum(len(r.attempts) for r in result.runs)
    console.print(
        f"wrote {result.path} ({len(result.runs)} training run(s), {attempts} attempt(s), "
        f"{len(result.agents)} agent session(s)); open it in a browser, it needs no network"
    )
