"""`rolltape report`: one self-contained HTML page about training runs or agent sessions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from rolltape.infra.cli._common import console, say, settings


def report(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Where to write the HTML report.")
    ] = Path("report.html"),
    session: Annotated[
        str | None, typer.Option("--session", "-s", help="A session id (training or agent).")
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(
            help="The task: every session started with this task text, e.g. digits-cnn/dead_relu."
        ),
    ] = None,
    runs: Annotated[int, typer.Option(min=1, help="With --task: the newest N training runs.")] = 5,
    prompts: Annotated[
        str | None,
        typer.Option(help="A prompt target, e.g. harness.policy: its lineage and loop rounds."),
    ] = None,
) -> None:
    """Write a self-contained HTML report (works offline): for training runs, train/val curves
    per attempt, the rule heatmap per epoch with decision markers (actioned, deferred, missed,
    waived), the decisions with their justifications, both scores per attempt and the violations
    with their evidence; for agent sessions, the conversation, tool calls, filter reasons and
    verdicts; for a prompt target, its lineage, the scoreboard and every round's decision with
    its per-case results and the rule's figures."""
    if sum(x is not None for x in (session, task, prompts)) != 1:
        raise typer.BadParameter(
            "choose what to report on: --session ID, --task NAME or --prompts TARGET"
        )
    # Loads plotly: without the report extra, the boundary says which one to install.
    from rolltape.infra.commands.report import (
        read_reported_sessions,
        write_prompts_report,
        write_report,
    )

    s = settings()
    if prompts is not None:
        from rolltape.infra.cli.prompts import target_history

        history = target_history(prompts)
        path = write_prompts_report(history, out)
        console.print(
            f"wrote {path} ({prompts}: {len(history.versions)} version(s), "
            f"{len(history.decisions)} round(s)); open it in a browser, it needs no network"
        )
        return
    sessions = asyncio.run(
        read_reported_sessions(
            s,
            session=session,
            task=task,
            say=say,
        )
    )
    result = write_report(sessions, out, session=session, task=task, runs=runs)
    attempts = sum(len(r.attempts) for r in result.runs)
    console.print(
        f"wrote {result.path} ({len(result.runs)} training run(s), {attempts} attempt(s), "
        f"{len(result.agents)} agent session(s)); open it in a browser, it needs no network"
    )
    if result.sealed:
        console.print(
            f"left out {len(result.sealed)} session(s) recorded with a subject whose content "
            "cannot be opened here (erased, or no key-encryption key on this machine)"
        )
