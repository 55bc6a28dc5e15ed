"""`rolltape env list | evaluate`: environments run by the reference agent."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rolltape.infra import open_recorder
from rolltape.infra.cli._common import console, err_console, settings, user_errors
from rolltape.producers.agent import DEFAULT_MODEL
from rolltape.producers.environments import (
    Rollout,
    environment_names,
    evaluate,
    load_environment,
)
from rolltape.schemas import Evaluation, ModelEndpoint

app = typer.Typer(help="Environments: tasks with rewards, run by the reference agent.")


@app.command("list")
def list_() -> None:
    """The environments this installation knows, with their splits."""
    table = Table(title="environments", title_justify="left")
    for column in ("name", "train items", "test items", "group size"):
        table.add_column(column)
    for name in environment_names():
        env = load_environment(name)
        table.add_row(
            name, str(len(env.items("train"))), str(len(env.items("test"))), str(env.group_size)
        )
    console.print(table)


def endpoint_for(model: str) -> ModelEndpoint:
    """The endpoint ROLLTAPE_MODELS binds `model` to, or a usage error saying how to bind it."""
    endpoints = settings().models
    if model not in endpoints:
        bound = ", ".join(sorted(endpoints)) or "none"
        err_console.print(
            f"[red]error:[/red] no endpoint is bound to model {escape(model)!r} (bound: {bound}); "
            f'set ROLLTAPE_MODELS=\'{{"{escape(model)}": {{"base_url": "http://HOST/v1", '
            '"model": "NAME"}}\''
        )
        raise typer.Exit(2)
    return endpoints[model]


@app.command("evaluate")
def evaluate_(
    environment: Annotated[str, typer.Argument(help="A name (`env list`) or module:Class.")],
    split: Annotated[str, typer.Option(help="The split to run, every item once.")] = "test",
    model: Annotated[
        str, typer.Option(help="Logical model (ROLLTAPE_MODELS binds it to an endpoint).")
    ] = DEFAULT_MODEL,
    concurrency: Annotated[int, typer.Option(min=1, help="Rollouts at once.")] = 4,
) -> None:
    """Run every item of a split once, print a metrics table and record an `evaluation` event
    (its own session) naming every rollout's session."""
    try:
        env = load_environment(environment)
    except ValueError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    endpoint = endpoint_for(model)
    rows: list[Rollout] = []

    def progress(rollout: Rollout) -> None:
        rows.append(rollout)
        reward = f"{rollout.reward.reward:.3f}" if rollout.reward else rollout.error or "-"
        err_console.print(f"[{len(rows)}] {rollout.item_id}: {escape(reward)}", highlight=False)

    async def main() -> tuple[Evaluation, str]:
        recorder = open_recorder(settings())
        try:
            return await evaluate(
                env,
                split,
                recorder=recorder,
                endpoint=endpoint,
                concurrency=concurrency,
                on_rollout=progress,
            )
        finally:
            await recorder.aclose()

    with user_errors():
        try:
            evaluation, session_id = asyncio.run(main())
        except ValueError as exc:
            err_console.print(f"[red]error:[/red] {escape(str(exc))}")
            raise typer.Exit(2) from exc
    _print(evaluation, {r.item_id: r for r in rows})
    console.print(f"recorded as session {session_id}")


def _print(evaluation: Evaluation, rollouts: dict[str, Rollout]) -> None:
    table = Table(
        title=f"{evaluation.environment} / {evaluation.split} with {evaluation.model}",
        title_justify="left",
    )
    for column in ("item", "reward", "passed", "iterations", "tool calls (failed)", "session"):
        table.add_column(column)
    for row in evaluation.rollouts:
        result = rollouts[row.item_id].result if row.item_id in rollouts else None
        table.add_row(
            row.item_id,
            f"{row.reward:.3f}" if row.reward is not None else escape(row.error or "-"),
            "-" if row.passed is None else ("yes" if row.passed else "no"),
            str(result.iterations) if result else "-",
            f"{result.tool_calls} ({result.tool_errors})" if result else "-",
            row.session_id,
        )
    console.print(table)
    mean = "-" if evaluation.mean_reward is None else f"{evaluation.mean_reward:.3f}"
    rate = "-" if evaluation.pass_rate is None else f"{evaluation.pass_rate:.0%}"
    console.print(
        f"{evaluation.items} items, {evaluation.scored} scored: mean reward {mean}, "
        f"passed {evaluation.passed} ({rate})"
    )
