"""Shared CLI plumbing: settings, the console, and one place where errors become messages."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from pydantic_settings import SettingsError
from rich.console import Console
from rich.progress import Progress, ProgressColumn

from rolltape.infra.broker import BrokerError
from rolltape.infra.keys import JudgeKeyError
from rolltape.infra.settings import Settings
from rolltape.producers import RecorderError
from rolltape.schemas import JUDGE_VERSION_PATTERN, SchemaError
from rolltape.schemas.clients import KafkaClientError
from rolltape.schemas.plugins import PluginError

#: Options the Atropos paths share (`export -f atropos`, `feed atropos`).
TokenizerOption = Annotated[
    Path | None,
    typer.Option(help="Local Hugging Face tokenizer folder (with a chat template)."),
]
ScoreOption = Annotated[
    str, typer.Option(help="Atropos/DPO score: reward, reward:NAME or verdict:JUDGE:KEY.")
]
KeepEqualScoresOption = Annotated[
    bool, typer.Option(help="Atropos: keep groups whose scores are all equal.")
]

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def settings() -> Settings:
    """The ROLLTAPE_* settings as the environment holds them now: read on each call, never at
    import, so a command (or a test) sees variables set after the CLI module loaded. A variable
    that does not read is one red line naming it, and exit code 2."""
    try:
        return Settings()
    except SettingsError as exc:
        field = re.search(r'field "(\w+)"', str(exc))
        name = f"ROLLTAPE_{field.group(1).upper()}" if field else "a ROLLTAPE_* variable"
        err_console.print(
            f"[red]error:[/red] {name} does not read: a list or mapping setting is written as "
            f'JSON, e.g. {name}=\'["a", "b"]\''
        )
        raise typer.Exit(2) from exc
    except ValidationError as exc:
        problems = "; ".join(
            f"ROLLTAPE_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
            for e in exc.errors()
        )
        err_console.print(f"[red]error:[/red] {problems}")
        raise typer.Exit(2) from exc


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn our errors into one red line and exit code 2; the message says what to do."""
    try:
        yield
    except (
        BrokerError,
        RecorderError,
        SchemaError,
        KafkaClientError,
        PluginError,
        JudgeKeyError,
        OSError,
    ) as exc:
        err_console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc


def check_judge_version(label: str) -> str:
    """A --judge-version value, or a usage error that says what a label may hold."""
    if not re.fullmatch(JUDGE_VERSION_PATTERN, label):
        raise typer.BadParameter(
            f"{label!r}: a judge version is 1-40 lowercase letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
            param_hint="--judge-version",
        )
    return label


def stop_on_signals() -> asyncio.Event:
    """An event that Ctrl-C or SIGTERM sets (call inside the running loop): long-running
    commands stop cleanly, committing what they finished."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    return stop


def transient_progress(*columns: ProgressColumn) -> Progress:
    """A progress display on stderr that leaves nothing behind: erased when done, and not drawn
    at all when stderr is a log or a pipe (where a bar would leave blank lines)."""
    return Progress(
        *columns, console=err_console, transient=True, disable=not err_console.is_terminal
    )
