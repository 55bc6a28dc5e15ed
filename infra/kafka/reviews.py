"""Human verdicts written to the log: the one writer of the `verdicts@human` chains.

A reviewer's verdict (or preference) extends the reviewed session's `verdicts@human` chain on
the verdicts topic (schemas._review), as a reviewer principal. Several reviewers, in several
consoles, may review one session, so the chain has many writers over time; each append is a
takeover decided by log order, as a resumed recorder's first record is
(`rolltape.producers.read_head`): read the chain's head, append linked to it, and read back. If
another record of the chain landed first, this one is set aside by every reader and the writer
says so (`ReviewConflictError`): the reviewer reloads and records again. A writer's appends take
turns (one lock): they share one reader, which each append points at its session's partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel

from rolltape.infra._errors import InfraError
from rolltape.producers import ResumeError, first_record_from, read_head
from rolltape.schemas import (
    HUMAN_CHAIN,
    ChainWriter,
    HumanPreference,
    HumanVerdict,
    Stream,
    software_version,
    topic_name,
)
from rolltape.schemas.clients import KafkaConnection, LogReader, Partition, key_partition

REVIEW_TIMEOUT_S = 30.0

StartLocator = Callable[[str, int, str], int | str]
"""(topic, partition, session id) -> where the session's first record there lies, or why not
known: the read model's `IndexHeadLocator`, so the head is read from there, not the start."""


class ReviewError(InfraError):
    """A review the log did not take: the message says why and what to do."""


class ReviewConflictError(ReviewError):
    """Another review of the session landed on its chain first: reload and record again."""


@dataclass(frozen=True)
class RecordedReview:
    """Where a review landed: its chain's seq and hash, and its place in the log."""

    session_id: str
    seq: int
    hash: str
    partition: int
    offset: int


class ReviewWriter:
    """Appends human verdicts as the principal of `connection` (a reviewer's login). Start it
    once (`async with`); it keeps one producer and one reader for its appends."""

    def __init__(
        self,
        connection: KafkaConnection,
        prefix: str,
        *,
        partitions: int,
        locate: StartLocator | None = None,
    ) -> None:
        self.connection = connection
        self.topic = topic_name(Stream.VERDICTS, prefix)
        self.partitions = partitions
        self.locate = locate
        self.principal = connection.principal or "unauthenticated"
        self._producer = connection.chain_producer(linger_ms=0, client_id="rolltape-review")
        self._reader: LogReader | None = None
        self._lock = asyncio.Lock()
        self._stack: contextlib.AsyncExitStack | None = None

    async def __aenter__(self) -> ReviewWriter:
        stack = contextlib.AsyncExitStack()
        try:
            async with asyncio.timeout(REVIEW_TIMEOUT_S):
                doing = f"recording reviews on {self.connection}"
                await stack.enter_async_context(self.connection.started(self._producer, doing))
                self._reader = await stack.enter_async_context(
                    LogReader(self.connection, client_id="rolltape-review")
                )
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        self._reader = None
        if stack is not None:
            await stack.aclose()

    async def verdict(self, session_id: str, verdict: HumanVerdict) -> RecordedReview:
        """Append `verdict` to `session_id`'s human chain."""
        return await self._append(session_id, "human_verdict", verdict)

    async def preference(self, preference: HumanPreference) -> RecordedReview:
        """Append `preference` to the chosen session's human chain."""
        return await self._append(preference.chosen, "human_preference", preference)

    async def _append(self, session_id: str, kind: str, payload: BaseModel) -> RecordedReview:
        if getattr(payload, "reviewer", None) != self.principal:
            raise ReviewError(
                f"the review names reviewer {getattr(payload, 'reviewer', None)!r}, but it "
                f"is written as {self.principal!r}: a review is recorded by its reviewer's login"
            )
        async with self._lock:
            return await self._append_locked(session_id, kind, payload)

    async def _append_locked(
        self, session_id: str, kind: str, payload: BaseModel
    ) -> RecordedReview:
        assert self._reader is not None, "enter the ReviewWriter first"
        deadline = time.monotonic() + REVIEW_TIMEOUT_S
        tp = Partition(self.topic, key_partition(session_id.encode(), self.partitions))
        self._reader.assign([tp])
        start = 0
        if self.locate is not None:
            found = await asyncio.to_thread(self.locate, tp.topic, tp.partition, session_id)
            start = found if isinstance(found, int) else 0
        try:
            head = await read_head(
                self._reader, tp, session_id, HUMAN_CHAIN, deadline, from_offset=start
            )
        except ResumeError as exc:
            raise ReviewError(f"reading the review chain of {session_id}: {exc}") from exc
        writer: ChainWriter[str] = ChainWriter()
        if head.seq >= 0:
            writer.take_over(session_id, head.seq + 1, head.hash)
        seq, _ = writer.head(session_id)
        value, digest = writer.append(
            session_id,
            stream=HUMAN_CHAIN,
            session_id=session_id,
            ts_ns=time.time_ns(),
            type=kind,
            payload=payload.model_dump(mode="json"),
            producer={
                "name": "rolltape.review",
                "version": software_version(),
                "principal": self.principal,
            },
        )
        try:
            sent = await self._producer.send_and_wait(self.topic, value, key=session_id.encode())
        except Exception as exc:
            raise ReviewError(
                f"the broker at {self.connection} did not take the review of {session_id} "
                f"({type(exc).__name__}: {exc}); nothing was recorded, record it again"
            ) from exc
        try:
            first = await first_record_from(
                self._reader,
                tp,
                head.end_offset,
                sent.offset,
                session_id,
                deadline,
                stream=HUMAN_CHAIN,
            )
        except ResumeError as exc:
            raise ReviewError(
                f"the review of {session_id} was sent (offset {sent.offset}) but could not be "
                f"read back to confirm it stands ({exc}): reload the session to see whether it "
                "is there before recording it again"
            ) from exc
        if first != value:
            raise ReviewConflictError(
                f"another review of {session_id} was recorded at the same moment and came "
                "first; yours is set aside by every reader. Reload the session and record "
                "it again."
            )
        return RecordedReview(session_id, seq, digest, sent.partition, sent.offset)


__all__ = [
    "RecordedReview",
    "ReviewConflictError",
    "ReviewError",
    "ReviewWriter",
    "StartLocator",
]
