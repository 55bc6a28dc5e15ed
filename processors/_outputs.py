"""What the per-session step and `handle` give back: records to send, dead letters, refusals
and judge requests.

Exists apart from the step because its readers are the shells that deliver them (the worker,
replay) and need none of the step's machinery to do so.
"""

from __future__ import annotations

from dataclasses import dataclass

from rolltape.processors.audit import InputRecord


@dataclass(frozen=True)
class Emitted:
    """A sealed derived record, ready to send."""

    stream: str
    session_id: str
    value: bytes
    event_id: str
    type: str


@dataclass(frozen=True)
class DeadLetter:
    """An input record that cannot be used, with why. The original bytes travel unchanged."""

    record: InputRecord
    reason: str
    detail: str


@dataclass(frozen=True)
class Refused:
    """Why the step cannot use the event it was given; `handle` dead-letters the record with it
    (the step sees events, not the records that carried them)."""

    reason: str
    detail: str


@dataclass(frozen=True)
class Requested:
    """A judge request for the internal requests topic."""

    session_id: str
    value: bytes


Output = Emitted | DeadLetter | Requested
StepOutput = Emitted | Refused | Requested
