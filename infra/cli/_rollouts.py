"""What the commands that run rollouts share: the endpoint of a logical model, the batch
summary."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rolltape.infra.cli._common import console, err_console, settings, stop_on_signals
from rolltape.infra.commands.batch import BatchSummary
from rolltape.infra.commands.environments import (
    Environment,
    ModelEndpoint,
    PromptVersion,
    Rollout,
)
from rolltape.infra.commands.environments import endpoint_for as bound_endpoint
from rolltape.infra.commands.environments import environment_prompt as prompt_version

T = TypeVar("T")
EnvArgument = Annotated[
    str, typer.Argument(help="A name (`env list`), jsonl:PATH or module:Class.")
]
ModelOption = Annotated[
    str, typer.Option(help="Logical model (ROLLTAPE_MODELS binds it to an endpoint).")
]
ConcurrencyOption = Annotated[int, typer.Option(min=1, help="Rollouts at once.")]
PromptOption = Annotated[
    str,
    typer.Option(
        "--prompt",
        help="The system prompt (the agent's): a version of the environment's prompt target "
        "env.<name>.system (label, digest prefix), `champion` (the log's, else the "
        "environment's own) or `base` (the environment's own).",
    ),
]
OnPlan = Callable[[int, int], None]
OnRollout = Callable[[Rollout], None]


def endpoint_for(model: str) -> ModelEndpoint:
    """The endpoint ROLLTAPE_MODELS binds `model` to (the settings as they are now)."""
    return bound_endpoint(settings(), model)


def print_summary(summary: BatchSummary) -> None:
    """Print a batch's outcome for `batch run` and `env process`: the counts, a per-tool table,
    the filter outcomes with rejection reasons, and a hint when no worker has judged yet."""
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
        + (" (no worker has judged them yet: `rolltape serve worker`)" if summary.undecided else "")
    )
    for code, count in summary.reasons.items():
        console.print(f"    rejected for {code}: {count}")


def with_progress(description: str, start: Callable[[OnPlan, OnRollout], Awaitable[T]]) -> T | None:
    """Run `start(on_plan, on_rollout)` under a progress bar; None when Ctrl-C or SIGTERM
    stopped it (finished rollouts are in the log by then)."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=err_console,
    )
    task = progress.add_task(description, total=None, status="reading the log")
    counts = {"completed": 0, "failed": 0}

    def planned(todo: int, finished: int) -> None:
        progress.update(task, total=todo, status=f"{finished} finished before")

    def done(rollout: Rollout) -> None:
        counts[rollout.status] += 1
        progress.update(
            task, advance=1, status=f"{counts['completed']} completed, {counts['failed']} failed"
        )

    async def main() -> T | None:
        stop = stop_on_signals()
        job = asyncio.ensure_future(start(planned, done))
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait({job, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not job.done():
            job.cancel()
            await asyncio.gather(job, return_exceptions=True)
            return None
        stopper.cancel()
        return job.result()

    with progress:
        return asyncio.run(main())


def environment_prompt(env: Environment, ref: str) -> PromptVersion | None:
    """The version of the environment's system prompt `--prompt` names, said on stderr."""
    version, said = prompt_version(settings(), env, ref)
    err_console.print(f"system prompt: {said}", highlight=False)
    return version
