"""How the tests wait: on a condition, never on the clock.

A test that sleeps "long enough" and then asserts guesses how fast one machine is on one day:
on a fast machine it wastes the time, on a loaded one (two test processes, a broker and a
second engineer's build on two cores) it fails for nothing. So a test waits for the condition
it needs (a record arrived, a process printed a line, a counter advanced), asking again until it
holds. The timeout is only a ceiling that stops a hung test, generous on purpose: it is never a
statement about how fast anything should be, and no test asserts on elapsed time.

Where a test asserts that something does *not* happen ("no second fire", "nothing is sent
while no trainer runs"), it waits for a positive sign that the system had its chance (a later
marker record arrived, the component made more rounds, a poll returned), then asserts.

A wait that runs out fails with what it waited for and the last value it saw, so a failure
explains itself without a rerun.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from typing import IO, Any, TypeVar, cast

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 120.0
"""The ceiling of a wait: far above what any condition takes on a loaded machine, below the
suite's per-test timeout so that the wait's own message, not pytest-timeout's, is the failure."""

_SHOWN = 2000  # characters of the last value a failure shows (topics read back can be long)


class WaitTimeout(AssertionError):
    """A condition a test waited for did not hold within the ceiling (or could no longer)."""


class _Wait:
    """One wait's bookkeeping: the ceiling, the last value seen and the failure message."""

    def __init__(
        self,
        what: str,
        timeout_s: float,
        describe: Callable[[Any], str],
        abort: Callable[[], str | None] | None,
        explain: Callable[[], str] | None,
    ) -> None:
        self.what = what
        self.timeout_s = timeout_s
        self.describe = describe
        self.abort = abort
        self.explain = explain
        self.deadline = time.monotonic() + timeout_s
        self.polls = 0
        self.last: Any = None
        self.raised: BaseException | None = None

    def saw(self, value: Any) -> None:
        self.polls += 1
        self.last, self.raised = value, None

    def saw_error(self, error: BaseException) -> None:
        self.polls += 1
        self.raised = error

    def check(self) -> None:
        """Fail when the wait can end only in failure: an abort reason, or the ceiling."""
        reason = self.abort() if self.abort is not None else None
        if reason is not None:
            raise self.failure(f"gave up waiting for {self.what}: {reason}")
        if time.monotonic() > self.deadline:
            raise self.failure(f"timed out after {self.timeout_s:g} s waiting for {self.what}")

    def failure(self, headline: str) -> WaitTimeout:
        if self.raised is not None:
            seen = f"the last check raised {self.raised!r}"
        elif self.polls == 0:
            seen = "nothing was seen"
        else:
            shown = self.describe(self.last)
            if len(shown) > _SHOWN:
                shown = shown[: _SHOWN // 2] + " [...] " + shown[-_SHOWN // 2 :]
            seen = f"last seen ({self.polls} checks): {shown}"
        text = f"{headline}; {seen}"
        if self.explain is not None:
            text += f"\n{self.explain()}"
        return WaitTimeout(text)


def wait_until(
    probe: Callable[[], T],
    done: Callable[[T], object] | None = None,
    *,
    what: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    every_s: float = 0.1,
    abort: Callable[[], str | None] | None = None,
    describe: Callable[[T], str] = repr,
    explain: Callable[[], str] | None = None,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """Call `probe` until `done(value)` holds (truthiness of the value without `done`) and return
    that value.

    `what` names the condition for the failure message ("the worker to join its group"), which
    also shows the last value (through `describe`). `abort` is asked after each miss: a reason
    (a process the condition needs has exited) fails the wait at once. `explain` adds text to a
    failure (a process's log). Exceptions in `ignoring` count as "not yet" (a broker still
    coming back refuses an answer); the last one is shown if the wait fails."""
    wait = _Wait(what, timeout_s, describe, abort, explain)
    while True:
        try:
            value = probe()
        except ignoring as exc:
            wait.saw_error(exc)
        else:
            wait.saw(value)
            if done(value) if done is not None else value:
                return value
        wait.check()
        time.sleep(every_s)


async def wait_until_async(
    probe: Callable[[], T | Awaitable[T]],
    done: Callable[[T], object] | None = None,
    *,
    what: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    every_s: float = 0.1,
    abort: Callable[[], str | None] | None = None,
    describe: Callable[[T], str] = repr,
    explain: Callable[[], str] | None = None,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """`wait_until` inside a running event loop: the loop runs on between checks, and `probe`
    may be a coroutine function."""
    wait = _Wait(what, timeout_s, describe, abort, explain)
    while True:
        try:
            got = probe()
            value = cast(T, await got if inspect.isawaitable(got) else got)
        except ignoring as exc:
            wait.saw_error(exc)
        else:
            wait.saw(value)
            if done(value) if done is not None else value:
                return value
        wait.check()
        await asyncio.sleep(every_s)


class Output:
    """A text stream (a child process's stdout or stderr) read on a thread as it comes, so a
    test can wait for a line without a read that blocks for ever, and still get the whole text
    once the process ended."""

    def __init__(self, stream: IO[str] | None, name: str = "the output") -> None:
        assert stream is not None, f"{name} is not a pipe"
        self.name = name
        self._parts: list[str] = []
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        try:
            with stream:  # closed at the end: the pipe is this reader's alone
                for line in stream:
                    with self._lock:
                        self._parts.append(line)
        finally:
            self._ended.set()

    @property
    def text(self) -> str:
        """Everything read so far."""
        with self._lock:
            return "".join(self._parts)

    def wait_for(self, needle: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
        """Wait until `needle` was written; the text so far. Fails at once when the stream
        ended without it."""

        def ended() -> str | None:
            return "the stream ended" if self._ended.is_set() and needle not in self.text else None

        return wait_until(
            lambda: self.text,
            lambda text: needle in text,
            what=f"{self.name} to say {needle!r}",
            timeout_s=timeout_s,
            abort=ended,
        )

    def whole(self, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
        """The whole text, once the writer closed the stream (call after the process ended)."""
        self._thread.join(timeout_s)
        assert self._ended.is_set(), f"{self.name} still open after {timeout_s:g} s"
        return self.text
