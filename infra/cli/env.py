"""`rolltape env list | evaluate | run | process`: environments run by the reference agent (their
Atropos server is `rolltape serve env`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rolltape.infra.cli._common import (
    KeepEqualScoresOption,
    ScoreOption,
    TokenizerOption,
    console,
    err_console,
    say,
    settings,
    stop_on_signals,
)
from rolltape.infra.cli._rollouts import (
    ConcurrencyOption,
    EnvArgument,
    ModelOption,
    PromptOption,
    endpoint_for,
    environment_prompt,
    print_summary,
    with_progress,
)
from rolltape.infra.commands.batch import process_batch, run_batch
from rolltape.infra.commands.environments import (
    DEFAULT_MODEL,
    Evaluation,
    Rollout,
    environment_lines,
    evaluate_environment,
    open_environment,
)
from rolltape.infra.commands.export import ExportOptions, Format, Selection, open_tokenizer

app = typer.Typer(
    help="Environments: tasks with rewards, run by the reference agent.", no_args_is_help=True
)


@app.command("list")
def list_() -> None:
    """The environments this installation knows, with their splits and judges."""
    table = Table(title="environments", title_justify="left")
    for column in ("name", "train items", "test items", "group size", "judges"):
        table.add_column(column)
    for line in environment_lines():
        table.add_row(
            line.name,
            str(line.train_items),
            str(line.test_items),
            str(line.group_size),
            ", ".join(line.judges) or "-",
        )
    console.print(table)


@app.command("evaluate")
def evaluate_(
    environment: EnvArgument,
    split: Annotated[str, typer.Option(help="The split to run, every item once.")] = "test",
    model: ModelOption = DEFAULT_MODEL,
    concurrency: ConcurrencyOption = 4,
    prompt: PromptOption = "champion",
) -> None:
    """Run every item of a split once, print a metrics table and record an `evaluation` event
    (its own session) naming every rollout's session."""
    env = open_environment(environment)
    endpoint = endpoint_for(model)
    version = environment_prompt(env, prompt)
    rows: list[Rollout] = []

    def progress(rollout: Rollout) -> None:
        rows.append(rollout)
        reward = f"{rollout.reward.reward:.3f}" if rollout.reward else rollout.error or "-"
        err_console.print(f"[{len(rows)}] {rollout.item_id}: {escape(reward)}", highlight=False)

    evaluation, session_id = evaluate_environment(
        settings(),
        env,
        split,
        endpoint=endpoint,
        concurrency=concurrency,
        prompt=version,
        on_rollout=progress,
    )
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


@app.command("run")
def run_(
    environment: EnvArgument,
    items: Annotated[int, typer.Option(min=1, help="Rollouts to run (train items, cycled).")],
    concurrency: ConcurrencyOption = 4,
    model: ModelOption = DEFAULT_MODEL,
    run: Annotated[
        str | None,
        typer.Option(
            "--run",
            help="The batch's name (default: the environment's); run again "
            "with the same name to resume it.",
        ),
    ] = None,
    wait_judged: Annotated[
        float,
        typer.Option(
            min=0, help="Seconds to wait for the worker's decisions (its filter outcomes)."
        ),
    ] = 0.0,
    prompt: PromptOption = "champion",
) -> None:
    """Run ITEMS rollouts, CONCURRENCY at a time. Run it again with the same --run to resume:
    rollouts whose session ended completed are skipped (the log is the checkpoint), the rest run
    as fresh sessions. Prints per-tool statistics and the reward filter's outcomes at the end."""
    env = open_environment(environment)
    endpoint = endpoint_for(model)
    version = environment_prompt(env, prompt)
    name = run or env.name
    summary = with_progress(
        f"batch {name}",
        lambda on_plan, on_rollout: run_batch(
            settings(),
            env,
            run=name,
            count=items,
            endpoint=endpoint,
            concurrency=concurrency,
            wait_judged_s=wait_judged,
            on_plan=on_plan,
            on_rollout=on_rollout,
            prompt=version,
            say=say,
        ),
    )
    if summary is None:
        err_console.print(
            f"stopped: finished rollouts are in the log; `rolltape env run {environment} "
            f"--items {items} --run {name}` resumes"
        )
        raise typer.Exit(130)
    print_summary(summary)


@app.command()
def process(
    environment: EnvArgument,
    items: Annotated[int, typer.Option(min=1, help="Rollouts to run (train items, cycled).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the exported files.")],
    export_format: Annotated[
        Format, typer.Option("--format", "-f", help="Output format (of the export).")
    ] = "sharegpt",
    accepted_only: Annotated[
        bool, typer.Option("--accepted-only", help="Only sessions the reward filter accepted.")
    ] = False,
    tokenizer: TokenizerOption = None,
    concurrency: ConcurrencyOption = 4,
    model: ModelOption = DEFAULT_MODEL,
    run: Annotated[
        str | None,
        typer.Option("--run", help="The batch's name (resumable; default: the environment's)."),
    ] = None,
    wait_judged: Annotated[
        float, typer.Option(min=0, help="Seconds to wait for the worker's decisions.")
    ] = 120.0,
    overwrite: Annotated[bool, typer.Option(help="Replace an earlier export in --out.")] = False,
    prompt: PromptOption = "champion",
) -> None:
    """Run a batch of rollouts (as `batch run`, resumable), wait for the worker's judges and
    filters, and export the batch's scored sessions from the log (with provenance and a
    manifest, as `rolltape dataset export` writes them)."""
    env = open_environment(environment)
    chat_tokenizer, label = open_tokenizer(tokenizer)
    endpoint = endpoint_for(model)
    version = environment_prompt(env, prompt)
    name = run or env.name
    options = ExportOptions(
        format=export_format,
        selection=Selection(accepted="accepted" if accepted_only else "any"),
        tokenizer=label,
    )
    done = with_progress(
        f"process {name}",
        lambda on_plan, on_rollout: process_batch(
            settings(),
            env,
            out=out,
            options=options,
            tokenizer=chat_tokenizer,
            overwrite=overwrite,
            run=name,
            count=items,
            endpoint=endpoint,
            concurrency=concurrency,
            wait_judged_s=wait_judged,
            on_plan=on_plan,
            on_rollout=on_rollout,
            prompt=version,
            say=say,
        ),
    )
    if done is None:
        err_console.print(f"stopped: run the same command again to resume batch {name}")
        raise typer.Exit(130)
    summary, manifest = done
    print_summary(summary)
    skipped = (
        ", ".join(
            f"{k} {v}" for k, v in sorted(manifest.skipped.items()) if k != "session_not_selected"
        )
        or "none"
    )
    console.print(
        f"exported {manifest.lines} line(s) to {out} ({export_format}); skipped: {skipped}"
    )


def serve(
    environment: EnvArgument,
    url: Annotated[str, typer.Option(help="The Atropos API server, e.g. http://host:8000.")],
    group_size: Annotated[
        int | None,
        typer.Option(min=1, help="Sessions per group: rollouts per item (default: the env's)."),
    ] = None,
    groups: Annotated[
        int | None, typer.Option(min=1, help="Stop after this many groups (default: never).")
    ] = None,
    tokenizer: TokenizerOption = None,
    score: ScoreOption = "reward",
    keep_equal_scores: KeepEqualScoresOption = False,
    model: ModelOption = DEFAULT_MODEL,
    run: Annotated[
        str | None,
        typer.Option("--run", help="The batch's name: it names the sessions and the feed's group."),
    ] = None,
    prompt: PromptOption = "champion",
) -> None:
    """Register with an Atropos API server, run GROUP_SIZE rollouts per item, and deliver each
    group once the worker's filters and judges decided its sessions (through the live feed and
    the Atropos sink). Ctrl-C or SIGTERM stops."""
    from rolltape.infra.commands.env_serve import ServeOptions, ServeStats, serve_env

    env = open_environment(environment)
    chat_tokenizer, _ = open_tokenizer(tokenizer)
    endpoint = endpoint_for(model)
    version = environment_prompt(env, prompt)
    options = ServeOptions(
        url=url,
        run=run or env.name,
        group_size=group_size or env.group_size,
        groups=groups,
        score=score,
        keep_equal_scores=keep_equal_scores,
        prompt=version,
    )

    async def main() -> ServeStats:
        return await serve_env(
            settings(),
            env,
            endpoint=endpoint,
            options=options,
            tokenizer=chat_tokenizer,
            stop=stop_on_signals(),
            say=say,
        )

    stats = asyncio.run(main())
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(stats.skipped.items())) or "none"
    console.print(
        f"served {stats.groups_run} group(s) ({stats.rollouts} rollouts); sent "
        f"{stats.sent_groups} group(s) to {url}; skipped sessions: {skipped}"
    )
