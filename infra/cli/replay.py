"""`rolltape log replay`: re-judge recorded sessions under a judge version."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

from rolltape.infra.cli._common import (
    check_judge_version,
    console,
    settings,
    transient_progress,
)
from rolltape.infra.cli.dataset import parse_time
from rolltape.infra.commands.replay import replay_config, run_replay


def replay(
    judge_version: Annotated[
        str,
        typer.Option(
            help="The judge version to write: `live` reproduces the worker's chains; any other label "
            "writes rules@V, verdicts@V and filtered@V beside them."
        ),
    ],
    since: Annotated[
        str | None,
        typer.Option(
            help="Only sessions started at or after (ISO 8601): their first event reached the broker then."
        ),
    ] = None,
    from_beginning: Annotated[
        bool,
        typer.Option(
            "--from-beginning",
            help="Start at the oldest record: every session on the topics (the default).",
        ),
    ] = False,
    dry_run: Annotated[bool, typer.Option(help="Write nothing: compute and compare.")] = False,
    jobs: Annotated[
        int,
        typer.Option(
            min=1,
            help="Processes replaying partitions at once, each its own partition numbers (sessions "
            "never span partition numbers).",
        ),
    ] = 1,
    group: Annotated[
        str | None,
        typer.Option(
            help="Join this consumer group and replay the partition numbers it gives this "
            "process: replays on several hosts with the same group share the partitions, and "
            "each stays until all are done. The union of their outputs is what one replay "
            "writes.",
        ),
    ] = None,
) -> None:
    """Re-run the rule engine, training judge, reward functions, LLM judges and filters over the
    raw topics with the configuration of the current settings (the rule book: ROLLTAPE_RULES_FILE,
    ROLLTAPE_RULES_BY_TASK; ROLLTAPE_FILTERS_FILE, ROLLTAPE_REWARDS, ROLLTAPE_LLM_JUDGES,
    ROLLTAPE_MODELS), under --judge-version. LLM verdicts the version already holds are kept (a model is not asked again);
    missing ones are asked for.

    A version's chains are never rewritten: outputs already there byte for byte are counted as
    reproduced, new ones are appended, and sessions whose recomputed outputs differ from what the
    version holds are reported as conflicts (use a new version label for a changed config).
    Export the result with `rolltape dataset export --judge-version V`.
    """
    if since is not None and from_beginning:
        raise typer.BadParameter("choose one of --since and --from-beginning")
    check_judge_version(judge_version)
    since_ns = parse_time(since, "--since")
    s = settings()
    config = replay_config(s, judge_version)
    with transient_progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn()
    ) as progress:
        task = progress.add_task("reading raw topics")

        def advance(done: int) -> None:
            if jobs > 1 or done % 5000 == 0:  # with jobs: called once per finished slice
                progress.update(task, description=f"read {done} raw records")

        summary = asyncio.run(
            run_replay(
                s,
                config,
                since_ms=None if since_ns is None else since_ns // 1_000_000,
                dry_run=dry_run,
                on_record=advance,
                jobs=jobs,
                group=group,
            )
        )
    console.print(
        f"replayed {summary.sessions} sessions ({summary.records_read} raw records) as judge "
        f"version {summary.judge_version}: rules {summary.rules}, filters {summary.filters}"
        + (f", rewards {', '.join(summary.rewards)}" if summary.rewards else "")
    )
    if group is not None:
        done = ", ".join(map(str, summary.partitions)) or "none (the others had them all)"
        console.print(f"  partitions of group {escape(group)} replayed here: {done}")
    console.print(
        f"  {summary.outputs} outputs: {summary.reproduced} already held byte for byte, "
        f"{summary.written} written{' (dry run: none written)' if dry_run else ''}, "
        f"{len(summary.conflicts)} session(s) in conflict"
    )
    if summary.llm_requests:
        console.print(
            f"  LLM verdicts: {summary.llm_adopted} held (not asked again), "
            f"{summary.llm_called} asked" + (" (dry run: none asked)" if dry_run else "")
        )
    for conflict in summary.conflicts[:20]:
        console.print(
            f"  [red]conflict[/red] {conflict['session_id']} {conflict['stream']} seq "
            f"{conflict['seq']}: {conflict['detail']}"
        )
    if summary.unopened:
        why = ", ".join(f"{n} {k}" for k, n in summary.unopened.items())
        console.print(
            f"  sessions naming a subject left out (content not opened, nothing written): {why}"
        )
    if summary.dead_letters:
        reasons = ", ".join(f"{k} {n}" for k, n in summary.dead_letters.items())
        console.print(f"  unusable input (dead-lettered live, not written again): {reasons}")
    if summary.conflicts:
        console.print(
            f"  {escape(summary.judge_version)} already holds different outputs for these "
            "sessions: replay a changed configuration under a new --judge-version"
        )
        raise typer.Exit(1)
