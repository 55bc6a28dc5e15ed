"""What a runner gets and the guard that keeps cron runs from creating cron jobs."""

from __future__ import annotations

import contextvars
import inspect
import os
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from rolltape.producers._errors import ProducerError
from rolltape.producers.cron._routing import RunOutcome
from rolltape.schemas import CronJob
from rolltape.schemas.plugins import PluginLoadError, load_object

if TYPE_CHECKING:
    from rolltape.producers._session import Session

#: Set in the environment of a scheduler and of whatever its runs start, so a subprocess of a
#: run (a `rolltape cron add` in a tool's shell) is refused too.
CRON_RUN_ENV = "ROLLTAPE_CRON_RUN"
_current_run: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "rolltape_cron_run", default=None
)


class CronRecursionError(ProducerError, RuntimeError):
    """A cron run tried to create or change cron jobs."""


@dataclass(frozen=True)
class CronRunContext:
    """One attempt of a run, as its runner sees it: a fresh session (no context from earlier
    runs), tagged with the job, run and attempt, and the job's skills, workdir and channel."""

    job: CronJob
    run_id: str
    attempt: int
    due_ns: int
    session: Session
    workdir: Path | None

    @property
    def prompt(self) -> str:
        return self.job.prompt

    def env(self) -> dict[str, str]:
        """An environment for subprocesses of this run: it carries the recursion guard."""
        return {**os.environ, CRON_RUN_ENV: self.run_id}


class Runner(Protocol):
    """What runs one attempt of a cron job: called with the attempt's context, it returns the
    outcome (a `RunOutcome`; a string is the output of a success, None a success without one),
    or an awaitable of it. An exception it raises is a retryable failure of the attempt. A job
    names its runner as `package.module:function` (`load_runner`)."""

    def __call__(
        self, context: CronRunContext, /
    ) -> RunOutcome | str | Awaitable[RunOutcome | str | None] | None: ...


def guard_against_recursion(action: str) -> None:
    """Raise `CronRecursionError` inside a cron run (this task or a process it started)."""
    run = _current_run.get() or os.environ.get(CRON_RUN_ENV)
    if run:
        raise CronRecursionError(
            f"cannot {action} from inside cron run {run}: a run must not schedule more runs "
            "(recursion guard). Create jobs from outside the scheduler."
        )


def mark_cron_run(run_id: str) -> contextvars.Token[str | None]:
    """Mark the current task (and tasks it starts) as running `run_id`, for the recursion
    guard. A context variable, so concurrent runs on one loop each see only their own mark;
    pass the token to `unmark_cron_run` in a `finally`."""
    return _current_run.set(run_id)


def unmark_cron_run(token: contextvars.Token[str | None]) -> None:
    """Undo `mark_cron_run`, restoring whatever mark was there before."""
    _current_run.reset(token)


def load_runner(spec: str) -> Runner:
    """`package.module:function` -> the function; `PluginLoadError` (a ValueError) saying what
    is wrong: the form, the import, the name, or a function that does not take one argument."""
    runner = load_object(spec, "runner", what="function")
    if not callable(runner):
        raise PluginLoadError(
            f"runner {spec!r} is a {type(runner).__name__}, not a function of the CronRunContext"
        )
    try:
        inspect.signature(runner).bind(None)
    except TypeError as exc:
        raise PluginLoadError(
            f"runner {spec!r} must take one argument (the CronRunContext): {exc}"
        ) from exc
    except ValueError:  # no signature to inspect (a builtin): calling it will tell
        pass
    return cast(Runner, runner)


def as_outcome(returned: object) -> RunOutcome:
    """A runner's return value as an outcome: None is success, a string is the output."""
    if returned is None:
        return RunOutcome()
    if isinstance(returned, str):
        return RunOutcome(output=returned)
    if isinstance(returned, RunOutcome):
        return returned
    raise TypeError(
        f"a runner returns a RunOutcome, a string or None, not {type(returned).__name__}"
    )
