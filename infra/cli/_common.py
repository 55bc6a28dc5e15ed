"""Shared CLI plumbing: settings, the console, and the one place where errors become messages.

The boundary (`error_boundary`) wraps every command once, where `rolltape.infra.cli` registers
it: `RolltapeError` (every package's root is below it), an OSError, a pydantic ValidationError of options a command
validates, and a missing optional dependency become one line `error: <message>` on stderr and
exit code 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import re
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, NoReturn, ParamSpec, TypeVar

import typer
from pydantic import ValidationError
from pydantic_settings import SettingsError
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, ProgressColumn

from rolltape.infra import InfraError
from rolltape.infra.settings import Settings
from rolltape.producers import keep_client_logs_in
from rolltape.schemas import JUDGE_VERSION_PATTERN, RolltapeError

P = ParamSpec("P")
R = TypeVar("R")

#: Options the Atropos paths share (`export -f atropos`, `feed atropos`).
TokenizerOption = Annotated[
    Path | None,
    typer.Option(help="Local Hugging Face tokenizer folder (with a chat template)."),
]
ScoreOption = Annotated[
    str,
    typer.Option(
        help="What scores a session: reward, reward:NAME, verdict:JUDGE:KEY, or human (the "
        "reviewers' verdicts; exports only) (Atropos, DPO)."
    ),
]
KeepEqualScoresOption = Annotated[
    bool, typer.Option(help="Atropos: keep groups whose scores are all equal.")
]

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

#: The import name of each optional dependency and the extra of pyproject.toml that installs it.
OPTIONAL_MODULES = {
    "torch": "torch",
    "sklearn": "torch",
    "openai": "openai",
    "aiohttp": "otlp",
    "opentelemetry": "otlp",
    "google": "otlp",
    "testcontainers": "containers",
    "pytest": "env",
    "coverage": "env",
    "transformers": "tokenizer",
    "httpx": "atropos",
    "plotly": "report",
}


#: What the boundary prints as raised: a package's error, or the system's (a file, a port).
_USER_ERRORS: tuple[type[Exception], ...] = (RolltapeError, OSError)
_bounded: set[Callable[..., object]] = set()


class CliError(InfraError):
    """What the CLI finds wrong itself (a file that is not there, a model no endpoint is bound
    to, a setting that does not read); the message says what to do."""


def say(line: str) -> None:
    """One line of what a command does on stderr, as text (it may quote a topic or a path)."""
    err_console.print(escape(line))


def error_boundary(command: Callable[P, R]) -> Callable[P, R]:
    """`command` with our errors turned into one line on stderr and exit code 2. Applied once
    to every command at registration, so no command repeats it and none can forget it; typer
    still reads the parameters through `functools.wraps`. Bounding a bounded command again
    returns it as it is."""
    if command in _bounded:
        return command

    @functools.wraps(command)
    def bounded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except _USER_ERRORS as exc:
            fail(exc)
        except ValidationError as exc:
            fail(exc, option_problems(exc))
        except ImportError as exc:
            advice = missing_extra(exc)
            if advice is None:
                raise  # one of our own modules: a bug, shown as one
            fail(exc, advice)

    _bounded.add(bounded)
    return bounded


def client_logs_kept(command: Callable[P, R]) -> Callable[P, R]:
    """`command` with the Kafka client's own log lines kept in `<state dir>/logs/client.log`
    instead of stderr, as the recorder keeps them (aiokafka logs every failed connection and
    retry; against a broker that is away a command printed those before its one error line,
    which already says what failed and what to check)."""

    @functools.wraps(command)
    def kept(*args: P.args, **kwargs: P.kwargs) -> R:
        # A setting that does not read is the command's to report; a state folder that cannot
        # be made leaves the client's lines where they were rather than stopping the command.
        with contextlib.suppress(SettingsError, ValidationError, OSError):
            keep_client_logs_in(Settings().state_dir / "logs")
        return command(*args, **kwargs)

    return kept


def fail(exc: BaseException, message: str | None = None) -> NoReturn:
    """Print `error: <message>` (default: what `exc` says) as one line and exit with 2."""
    text = message if message is not None else _said(exc)
    text = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    err_console.print(f"[red]error:[/red] {escape(text)}")
    raise typer.Exit(2) from exc


def _said(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        where = str(exc.filename)
        if exc.filename2 is not None:
            where += f" -> {exc.filename2}"
        code = errno.errorcode.get(exc.errno, "") if exc.errno else ""
        return f"{where}: {exc.strerror or exc}" + (f" ({code})" if code else "")
    return str(exc) or type(exc).__name__


def option_problems(exc: ValidationError, options: Mapping[str, str] | None = None) -> str:
    """A ValidationError of the models a command builds from its options, in the options' own
    words: `--score: 'correct' is not a score source: ...; --token-budget: ...`. `options` names
    the option of a field whose flag is not the field's name (`{"prompt": "task"}`)."""
    problems = []
    for error in exc.errors():
        names = [part for part in error["loc"] if isinstance(part, str)]
        message = error["msg"].removeprefix("Value error, ")
        if names:
            option = (options or {}).get(names[-1], names[-1])
            problems.append(f"--{option.replace('_', '-')}: {message}")
        else:
            problems.append(message)
    return "; ".join(problems)


def missing_extra(exc: ImportError) -> str | None:
    """What to install when `exc` is about a missing optional dependency (which extra has it),
    or None for any other module: one of ours, or one every install has (a bug)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ImportError) and cause.name:
            top = cause.name.partition(".")[0]
            if top == "rolltape" or top not in OPTIONAL_MODULES:
                return None
            if "pip install" in str(exc):
                return str(exc)
            return f"{exc}: pip install 'rolltape[{OPTIONAL_MODULES[top]}]'"
        cause = cause.__cause__ or cause.__context__
    return None


def settings() -> Settings:
    """The ROLLTAPE_* settings as the environment holds them now: read on each call, never at
    import, so a command (or a test) sees variables set after the CLI module loaded. A variable
    that does not read is a `CliError` naming it."""
    try:
        return Settings()
    except SettingsError as exc:
        field = re.search(r'field "(\w+)"', str(exc))
        name = f"ROLLTAPE_{field.group(1).upper()}" if field else "a ROLLTAPE_* variable"
        raise CliError(
            f"{name} does not read: a list or mapping setting is written as JSON, "
            f'e.g. {name}=\'["a", "b"]\''
        ) from exc
    except ValidationError as exc:
        raise CliError(
            "; ".join(
                f"ROLLTAPE_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
                for e in exc.errors()
            )
        ) from exc


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
