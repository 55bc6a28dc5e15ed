"""`rolltape serve worker`: the processors."""

from __future__ import annotations

import os
import sys
from typing import Annotated, NoReturn

import typer

from rolltape.infra.cli._common import err_console, settings
from rolltape.infra.commands.worker import checkpoint_key, serve_worker, worker_config


def worker(
    log_level: Annotated[
        str, typer.Option(help="faust/rolltape log level: debug, info, warning, error.")
    ] = "warning",
) -> None:
    """Run the processors: chain audit, rule engine, training judge and reward filters.

    Reads the events and metrics topics from where the worker group left off, writes rule
    evaluations, verdicts, filter outcomes and dead letters. Run several (same ROLLTAPE_WORKER_ID)
    to share the partitions; stop with Ctrl-C or SIGTERM.
    """
    s = settings()
    config = worker_config(s, log_level=log_level)
    err_console.print(
        f"worker {config.group_id} on {config.connection}: rules "
        f"{config.processor.rules.label}, filters {config.processor.filters.label}, "
        f"{config.partitions} partitions"
    )
    key = checkpoint_key(s, config)
    if key.key_id is not None:
        err_console.print(f"checkpoints signed with judge key {key.key_id}")
    else:
        err_console.print(
            f"[yellow]no judge key at {key.path}: no signed checkpoints[/yellow] (exports "
            "cannot carry evidence); create it with `rolltape keys init`"
        )
    serve_worker(config, on_stall=start_again)


def start_again() -> NoReturn:
    """Replace this process with the same command: outputs are resent from the outbox and
    records skipped by offset, so a restart loses nothing."""
    os.execv(sys.executable, [sys.executable, "-m", "rolltape.infra", *sys.argv[1:]])
