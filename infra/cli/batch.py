"""`rolltape batch run`: many rollouts of an environment, resumable, with a progress bar."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rolltape.infra.batch import BatchSummary, run_batch
from rolltape.infra.cli._common import console, err_console, settings, stop_on_signals, user_errors
from rolltape.infra.cli.env import endpoint_for
from rolltape.producers.agent import DEFAULT_MODEL
from rolltape.producers.environments import Rollout, load_environment

app = typer.Typer(help="Batches of rollouts: resumable from the log.", no_args_is_help=True)


@app.command("run")
def run_(
    environment: Annotated[str, typer.Argument(help="A name (`env list`) or module:Class.")],
    items: Annotated[int, typer.Option(min=1, help="Rollouts in the batch (train items, cycled).")],
    concurrency: Annotated[int, typer.Option(min=1, help="Rollouts at once.")] = 4,
    model: Annotated[
        str, typer.Option(help="Logical model (ROLLTAPE_MODELS binds it to an endpoint).")
    ] = DEFAULT_MODEL,
    run: Annotated[
        str | None,
        typer.Option(
            "--run",
            help="The batch's name (default: the environment's); run again "
            "with the same name to resume it.",
        ),
    ] = None,
    wait_judged: Annotated[
        float, typer.Option(min=0, help="Seconds to wait for the worker's filter outcomes.")
    ] = 0.0,
) -> None:
    """Run ITEMS rollouts, CONCURRENCY at a time. Run it again with the same --run to resume:
    rollouts whose session ended completed are skipped (the log is the checkpoint), the rest run
    as fresh sessions. Prints per-tool statistics and the reward filter's outcomes at the end."""
    try:
        env = load_environment(environment)
    except ValueError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    endpoint = endpoint_for(model)
    name = run or env.name
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=err_console,
    )
    task = progress.add_task(f"batch {name}", total=None, status="reading the log")
    counts = {"completed": 0, "failed": 0}

    def planned(todo: int, finished: int) -> None:
        progress.update(task, total=todo, status=f"{finished} finished before")

    def done(rollout: Rollout) -> None:
        counts[rollout.status] += 1
        progress.update(
            task,
            advance=1,
            status=f"{counts['completed']} completed, {counts['failed']} failed",
        )

    async def main() -> BatchSummary | None:
        stop = stop_on_signals()
        job = asyncio.create_task(
            run_batch(
                settings(),
                env,
                run=name,
                count=items,
                endpoint=endpoint,
                concurrency=concurrency,
                wait_judged_s=wait_judged,
                on_plan=planned,
                on_rollout=done,
            )
        )
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({job, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not job.done():
            job.cancel()
            await asyncio.gather(job, return_exceptions=True)
            return None
        stopper.cancel()
        return job.result()

    with user_errors(), progress:
        try:
            summary = asyncio.run(main())
        except ValueError as exc:
            progress.stop()
            err_console.print(f"[red]error:[/red] {escape(str(exc))}")
            raise typer.Exit(2) from exc
    if summary is None:
        err_console.print(
            f"stopped: finished rollouts are in the log; `rolltape batch run {environment} "
            f"--items {items} --run {name}` resumes"
        )
        raise typer.Exit(130)
    _print(summary)


def _print(summary: BatchSummary) -> None:
    mean = "-" if summary.mean_reward is None else f"{summary.mean_reward:.3f}"
    console.print(
        f"batch {summary.run} ({summary.environment}): {summary.planned} planned, "
        f"{summary.finished_before} finished before, {summary.ran} ran now "
        f"({summary.completed} completed, {summary.failed} failed); mean reward {mean}"
    )
    if summary.tools:
        table = Table(title="tools", title_justify="left")
        for column in ("tool", "calls", "success", "failure"):
            table.add_column(column)
        for tool, line in summary.tools.items():
            table.add_row(tool, str(line.count), str(line.success), str(line.failure))
        console.print(table)
    console.print(
        f"filter outcomes: {summary.accepted} accepted, {summary.rejected} rejected, "
        f"{summary.undecided} undecided"
        + (" (no worker has judged them yet: `rolltape worker`)" if summary.undecided else "")
    )
    for code, count in summary.reasons.items():
        console.print(f"    rejected for {code}: {count}")
