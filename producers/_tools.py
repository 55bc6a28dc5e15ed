"""Tool recording: a context manager and a decorator that time a tool and record its outcome.

Success follows one rule, `rolltape.schemas.result_failed` (the Hermes agent's rule, so counts
agree with Hermes `tool_stats`): an exception is a failure; otherwise the result's text decides,
unless the tool says otherwise (`run.success = ...`, or `record_tool(success=...)`).

Linking a result to its call: when the model's call was already recorded (by the client capture or
`Session.tool_call`), the run reuses that call's id: an explicit `call_id`, else the oldest call
of the same name and arguments that has no result yet. Otherwise the run records the call first.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from rolltape.schemas import result_failed

if TYPE_CHECKING:
    from rolltape.producers._session import Session

_current: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "rolltape_session", default=None
)

P = ParamSpec("P")
R = TypeVar("R")


def current_session() -> Session | None:
    """The session whose `with` block (sync or async) encloses this code, if any."""
    return _current.get()


def result_text(value: Any) -> str:
    """A tool's return value as the text a model would see: strings as they are, anything else
    as JSON (non-JSON values by their str)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


class ToolRun:
    """One execution of a tool inside a session; use as a context manager.

    Set `result` (any value; text or JSON of it is recorded) and optionally `success` to
    override the rule. An exception leaving the block is recorded as a failure and re-raised.
    """

    def __init__(
        self,
        session: Session,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
    ) -> None:
        self.session = session
        self.name = name
        self.arguments = dict(arguments or {})
        self.call_id = call_id
        self.result: Any = None
        self.success: bool | None = None
        self._t0 = 0.0

    def __enter__(self) -> ToolRun:
        if self.call_id is None:
            self.call_id = self.session._claim_call(self.name, self.arguments)
        if self.call_id is None:
            self.call_id = self.session.tool_call(self.name, self.arguments)
        self._t0 = time.perf_counter()
        return self

    def __exit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        duration_ms = (time.perf_counter() - self._t0) * 1000
        assert self.call_id is not None
        if exc is not None:
            error = f"{type(exc).__name__}: {exc}"
            content = json.dumps({"error": error}, ensure_ascii=False)
            self.session.tool_result(
                self.call_id, content, success=False, error=error, duration_ms=duration_ms
            )
            return
        content = result_text(self.result)
        success = self.success if self.success is not None else not result_failed(content)
        self.session.tool_result(self.call_id, content, success=success, duration_ms=duration_ms)


@overload
def record_tool(func: Callable[P, R], /) -> Callable[P, R]:
    """`@record_tool`: the tool recorded under its function's name, success by the rule."""
    ...


@overload
def record_tool(
    *, name: str | None = None, success: Callable[[Any], bool] | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`@record_tool(name=..., success=...)`: the same, with either default replaced."""
    ...


def record_tool(
    func: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    success: Callable[[Any], bool] | None = None,
) -> Any:
    """Record every call of a tool function (sync or async) in the current session.

    `@record_tool` or `@record_tool(name="calc", success=lambda result: ...)`. Arguments are
    the keyword arguments (positional ones by their parameter names). Outside a session's `with`
    block the function runs unrecorded. `success` decides from the returned value instead of the
    rule on its text.
    """

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        tool = name or fn.__name__
        signature = inspect.signature(fn)

        def arguments(args: Any, kwargs: Any) -> dict[str, Any]:
            bound = signature.bind_partial(*args, **kwargs)
            return dict(bound.arguments)

        def finish(run: ToolRun, value: Any) -> None:
            run.result = value
            if success is not None:
                run.success = bool(success(value))

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                session = _current.get()
                if session is None:
                    return await fn(*args, **kwargs)
                with ToolRun(session, tool, arguments(args, kwargs)) as run:
                    value = await fn(*args, **kwargs)
                    finish(run, value)
                return value

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run_sync(*args: P.args, **kwargs: P.kwargs) -> R:
            session = _current.get()
            if session is None:
                return fn(*args, **kwargs)
            with ToolRun(session, tool, arguments(args, kwargs)) as run:
                value = fn(*args, **kwargs)
                finish(run, value)
            return value

        return run_sync

    return wrap(func) if func is not None else wrap
