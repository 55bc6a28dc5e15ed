"""Reading a session's chain head from the log, for a writer that takes the chain over.

Kafka has no conditional append, so a takeover is decided by log order, the rule every reader
applies (`rolltape.schemas.ChainVerifier`, the worker's live audit): the chain is what was written
first, and a record that does not link to it is set aside with everything that continues it.
A resuming writer therefore

1. reads the session's records on its partition up to the end offset E (the head; `read_head`),
2. appends its first record linked to that head and waits for the broker's acknowledgement,
3. reads back from E (`first_record_from`): if another record of the session landed before its
   own, it lost the race; its record is set aside by every reader, and it is refused.

Once its record stands, what an older writer appends (a zombie, or a spool drained late) does not
link to the new head and is set aside too: the two never interleave (fencing by log order).

Kafka has no index by key, so step 1 would read the session's partition from its start, a cost
that grows with the partition. A `HeadLocator` (the read model) says where the session's first
record there lies, or that it has none before the offset indexed so far; the read starts there,
and its cost is the session's records. Without one it reads from the start, and says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rolltape.producers._errors import ResumeError
from rolltape.schemas import (
    GENESIS_HASH,
    ChainReport,
    ChainVerifier,
    UnreadableRecord,
    read_event,
)
from rolltape.schemas.clients import LogReader, LogStalledError, Partition


@dataclass(frozen=True)
class HeadInLog:
    """Where a chain stands in the log, read up to `end_offset` (exclusive)."""

    seq: int
    """The head's seq; -1 when the session has no record on this stream."""
    hash: str
    ended: bool
    end_offset: int
    report: ChainReport | None


async def _read(
    reader: LogReader, tp: Partition, start: int, stop: int, deadline: float
) -> list[tuple[bytes | None, bytes]]:
    """(key, value) of the records at offsets [start, stop) of one partition."""
    out: list[tuple[bytes | None, bytes]] = []
    if start >= stop:
        return out
    too_long = ResumeError(
        f"reading {tp.topic}[{tp.partition}] up to offset {stop} took too long; "
        "the broker is slow or the partition is large: retry with a longer timeout_s"
    )
    reader.seek({tp: start})
    try:
        async for batch in reader.read_to_end(
            [tp], until={tp: stop}, stall_s=max(0.0, deadline - time.monotonic())
        ):
            out.extend((m.key, m.value) for m in batch if m.value is not None)
            if time.monotonic() > deadline:
                raise too_long
    except LogStalledError as exc:
        raise too_long from exc
    return out


async def read_head(
    reader: LogReader,
    tp: Partition,
    session_id: str,
    stream: str,
    deadline: float,
    from_offset: int = 0,
) -> HeadInLog:
    """The chain of (`stream`, `session_id`) as every reader sees it, up to the partition's end,
    read from `from_offset` (at or before the session's first record there) on."""
    end = (await reader.end_offsets([tp]))[tp]
    start = max((await reader.beginning_offsets([tp]))[tp], min(from_offset, end))
    key = session_id.encode()
    verifier = ChainVerifier()
    for record_key, value in await _read(reader, tp, start, end, deadline):
        if record_key == key:
            verifier.add(value, key=record_key, expected_stream=stream)
    reports = [r for r in verifier.reports() if r.stream == stream and r.session_id == session_id]
    if not reports or reports[0].last_seq < 0:
        return HeadInLog(-1, GENESIS_HASH, False, end, None)
    report = reports[0]
    return HeadInLog(report.last_seq, report.head_hash, report.ended, end, report)


async def first_record_from(
    reader: LogReader,
    tp: Partition,
    start: int,
    through: int,
    session_id: str,
    deadline: float,
    stream: str | None = None,
) -> bytes | None:
    """The value of the first record of `session_id` at offsets [start, through]; with
    `stream`, the first of that chain (where the session's other chains share the topic: the
    verdicts of judge versions beside the human ones)."""
    key = session_id.encode()
    for record_key, value in await _read(reader, tp, start, through + 1, deadline):
        if record_key == key and (stream is None or _stream_of(value) == stream):
            return value
    return None


def _stream_of(value: bytes) -> str | None:
    try:
        return read_event(value).stream
    except UnreadableRecord:
        return None
