"""`rolltape batch run`: many rollouts of an environment, resumable, with a progress bar."""

from __future__ import annotations

from typing import Annotated

import typer

from rolltape.infra.cli._common import err_console, settings
from rolltape.infra.cli._rollouts import (
    ConcurrencyOption,
    EnvArgument,
    ModelOption,
    PromptOption,
    endpoint_for,
    environment_prompt,
    open_environment,
    print_summary,
    with_progress,
)
from rolltape.infra.commands.batch import run_batch
from rolltape.producers.agent import DEFAULT_MODEL

app = typer.Typer(help="Batches of rollouts: resumable from the log.", no_args_is_help=True)


@app.command("run")
def run_(
    environment: EnvArgument,
    items: Annotated[int, typer.Option(min=1, help="Rollouts in the batch (train items, cycled).")],
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
        float, typer.Option(min=0, help="Seconds to wait for the worker's filter outcomes.")
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
        ),
    )
    if summary is None:
        err_console.print(
            f"stopped: finished rollouts are in the log; `rolltape batch run {environment} "
            f"--items {items} --run {name}` resumes"
        )
        raise typer.Exit(130)
    print_summary(summary)
