"""Reading the processors' outputs back while a run goes on: rule evaluations and verdicts
(the decision harness waits for each epoch's; the prompt loop's testers for each run's verdict).

Why the harness reads them from the log: the firings a decision answers must be the canonical
ones the worker computed from the monitor's metrics, never ones the harness computed itself,
and an attempt's feedback must be the verdict the judge wrote. A follower assigns the topics'
partitions directly (no consumer group: it never moves anyone's offsets), starts a little before
the run began (LogAppendTime), keeps the records of the sessions it was asked to watch, and
checks each record's hash before handing it out.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from rolltape.producers._errors import HarnessError
from rolltape.schemas import Stream, UnreadableRecord, read_event, topic_name
from rolltape.schemas.clients import KafkaConnection, LogReader, partitions_of

Match = Callable[[dict[str, Any]], bool]


class LogFollower:
    """Follows `topics` from `since_ms` (broker time) in a background thread."""

    def __init__(
        self, connection: KafkaConnection, topics: Sequence[str], *, since_ms: int
    ) -> None:
        self.connection = connection
        self.topics = list(topics)
        self.since_ms = since_ms
        self._watched: set[bytes] = set()
        self._records: list[dict[str, Any]] = []
        self._seen: set[str] = set()
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rolltape-follower", daemon=True)
        self._thread.start()
        if not self._ready.wait(60):
            raise HarnessError(f"could not start reading {', '.join(self.topics)} in 60 s")
        if self._error is not None:
            raise HarnessError(
                f"cannot read the processors' outputs: {self._error}"
            ) from self._error

    def watch(self, session_id: str) -> None:
        """Keep the records of this session (call before the session starts recording)."""
        with self._cond:
            self._watched.add(session_id.encode())

    def wait(self, match: Match, timeout_s: float, what: str) -> dict[str, Any]:
        """The first kept envelope `match` accepts; HarnessError naming `what` after
        `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for env in self._records:
                    if match(env):
                        return env
                if self._error is not None:
                    raise HarnessError(f"reading the processors' outputs failed: {self._error}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise HarnessError(
                        f"no {what} arrived within {timeout_s:.0f} s: is `rolltape serve worker` "
                        "running against this broker and topic prefix?"
                    )
                self._cond.wait(min(left, 0.5))

    def verdict(self, session_id: str, judge: str, timeout_s: float) -> dict[str, Any]:
        """The live verdict `judge` gave the watched session (its envelope); HarnessError after
        `timeout_s`."""
        live = Stream.VERDICTS.value

        def match(env: dict[str, Any]) -> bool:
            return bool(
                env["session_id"] == session_id
                and env["stream"] == live
                and env["type"] == "verdict"
                and env["payload"].get("judge") == judge
            )

        return self.wait(match, timeout_s, f"{judge} verdict")

    def seen(self, session_id: str) -> list[dict[str, Any]]:
        """The envelopes kept so far for a watched session, in arrival order."""
        with self._cond:
            return [env for env in self._records if env["session_id"] == session_id]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(15)

    # -- the background thread -------------------------------------------------------------------
    def _run(self) -> None:
        try:
            asyncio.run(self._follow())
        except BaseException as exc:  # reported to whoever waits
            with self._cond:
                self._error = exc
                self._cond.notify_all()
            self._ready.set()

    async def _follow(self) -> None:
        partitions = await partitions_of(self.connection, self.topics)
        if not partitions:
            raise HarnessError(f"the topics {', '.join(self.topics)} do not exist")
        async with LogReader(self.connection, fetch_max_wait_ms=20) as reader:
            reader.assign(partitions)
            await reader.seek_to_time(self.since_ms)
            for tp in partitions:
                await reader.position(tp)
            self._ready.set()
            while not self._stop.is_set():
                kept = [
                    env
                    for m in await reader.fetch(0.1, 2000)
                    if m.key in self._watched and (env := _checked(m.value)) is not None
                ]
                if kept:
                    with self._cond:
                        for env in kept:
                            if env["event_id"] not in self._seen:  # a redelivery: same id
                                self._seen.add(env["event_id"])
                                self._records.append(env)
                        self._cond.notify_all()


def _checked(value: bytes | None) -> dict[str, Any] | None:
    """The envelope when its content matches its hash; None for anything else."""
    if value is None:
        return None
    try:
        event = read_event(value)
    except UnreadableRecord:
        return None
    return event.mapping if event.intact else None


def rules_and_verdicts_follower(connection: KafkaConnection, prefix: str) -> LogFollower:
    """A follower of the live rules and verdicts topics from a few seconds ago."""
    since = int(time.time() * 1000) - 5_000
    return LogFollower(
        connection,
        [topic_name(Stream.RULES, prefix), topic_name(Stream.VERDICTS, prefix)],
        since_ms=since,
    )
