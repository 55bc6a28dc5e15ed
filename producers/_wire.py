"""What the recorder and its sender processes say to each other over one socket per shard.

Invariant: events cross the socket exactly as the caller queued them (the same types, tuples
stay tuples), so a shard validates and seals them byte for byte as the in-thread sender would.

Events travel in batches: marshal where every value is a plain built-in (it is the cheapest:
~1.0 µs an event of ~1 KB to dump and ~1.2 µs to load, against ~1.5 µs each for pickle, measured
on 2,000 distinct 1 KB turns), else pickle (numpy scalars, enums, models). An event neither can
encode is handed back to the caller's side, which rejects it by name. Control messages (barriers,
resumes, stop) and everything a shard reports are pickled tuples.

Frames, parent to shard: b"M" + marshal(list of events) | b"P" + pickle(list of events) |
b"C" + pickle(control tuple). Shard to parent: pickle(report tuple).
"""

from __future__ import annotations

import marshal
import pickle
from dataclasses import dataclass, field
from typing import Any

from rolltape.producers._errors import RecorderError
from rolltape.producers._queued import QueuedEvent
from rolltape.producers._sender_config import SenderStats

#: A queued event as it crosses the socket: (session_id, stream, type, payload, ts_ns)
Event = QueuedEvent

EVENTS_MARSHAL = b"M"
EVENTS_PICKLE = b"P"
CONTROL = b"C"


def shard_of(session_id: str, shards: int) -> int:
    """The shard that owns a session: every event of it, and its resume, go there (so each
    chain has one writer). Stable within the recording process, which alone routes."""
    return hash(session_id) % shards


def encode_events(events: list[Event]) -> tuple[bytes, list[tuple[Event, str]]]:
    """One frame for `events`, and the events that cannot cross a process boundary (with why)."""
    try:
        return EVENTS_MARSHAL + marshal.dumps(events), []
    except ValueError:
        pass
    try:
        return EVENTS_PICKLE + pickle.dumps(events, protocol=5), []
    except Exception:  # one bad value: find it, send the rest
        pass
    sendable: list[Event] = []
    refused: list[tuple[Event, str]] = []
    for event in events:
        try:
            pickle.dumps(event, protocol=5)
        except Exception as exc:
            refused.append((event, f"cannot be handed to a sender process: {exc!r}"))
        else:
            sendable.append(event)
    return EVENTS_PICKLE + pickle.dumps(sendable, protocol=5), refused


def decode_events(frame: bytes) -> list[Event]:
    """The events of a frame from `encode_events`, as they were queued. Any frame not marked
    marshal is read as pickle, so the caller must set control frames aside first."""
    body = memoryview(frame)[1:]
    if frame[:1] == EVENTS_MARSHAL:
        events: list[Event] = marshal.loads(body)
    else:
        events = pickle.loads(body)
    return events


def encode_control(message: tuple[Any, ...]) -> bytes:
    """A control frame ("stop", "resume", "barrier" tuples): its first byte tells a shard it
    is not events."""
    return CONTROL + pickle.dumps(message, protocol=5)


def portable_error(error: BaseException | None) -> BaseException | None:
    """`error` if it survives pickling, else a RecorderError that names it."""
    if error is None:
        return None
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RecorderError(f"the sender failed: {error!r}")
    return error


@dataclass
class ShardStatus:
    """A shard's counters and conditions, sent every ~0.1 s and with every barrier it settles.
    `stats.rejected_events` are the ones rejected since the previous status (each sent once)."""

    stats: SenderStats = field(default_factory=SenderStats)
    error: BaseException | None = None
    spool_unread_bytes: int = 0
    spool_pending: bool = False
    seq: int = 0
    """Counts the statuses a shard sent: a newer one reflects the shard later in time."""
