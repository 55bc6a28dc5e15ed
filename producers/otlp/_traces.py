"""The state of the traces a receiver holds: each trace's queue of spans waiting to be recorded,
its log records waiting for their span, and the group of traces that becomes one session.

Apart from the ingest (`_ingest.py`), which decides when each waits, is recorded and ends: this
is what it decides about.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rolltape.producers._session import Session
from rolltape.producers.otlp._events import has_content
from rolltape.producers.otlp._genai import INFERENCE_OPERATIONS, operation
from rolltape.producers.otlp._grouping import grouped_session_id, grouping, session_id_for
from rolltape.producers.otlp._log_records import LogRecord
from rolltape.producers.otlp._span_records import SpanRecorder
from rolltape.producers.otlp._wire import Span


@dataclass
class Waiting:
    span: Span
    arrived: float
    journaled: bool = False
    inference: bool = field(init=False)
    """An inference operation (read once: the queue asks on every batch of its trace)."""
    content: bool = field(init=False)
    """It carries its messages itself (`has_content`)."""

    def __post_init__(self) -> None:
        self.inference = operation(self.span) in INFERENCE_OPERATIONS
        self.content = has_content(self.span)


@dataclass
class WaitingLog:
    record: LogRecord
    key: str
    arrived: float
    journaled: bool = False


@dataclass
class Group:
    """What becomes one session: a trace, or every trace of one OpenInference `session.id`
    (an agent's session across traces)."""

    key: str
    """The trace id, or a `group_key` (`session:<id>`, `conversation:<id>`)."""
    generation: int
    session: Session | Closed | None = None
    spans: SpanRecorder | None = None
    traces: set[str] = field(default_factory=set)
    """Traces recorded into the open session."""
    rootless: set[str] = field(default_factory=set)
    """Of those, the ones whose root span has not come."""
    last_span_at: float = 0.0
    root_at: float | None = None
    root_error: str | None = None
    ended_at: float | None = None

    @property
    def grouped(self) -> bool:
        """Traces grouped by a session or conversation id, not a trace alone."""
        return grouping(self.key) is not None


@dataclass
class Trace:
    trace_id: str
    group: Group | None = None
    """Where its spans are recorded, once its first spans were."""
    seen: set[str] = field(default_factory=set)
    """Span ids recorded (in this process or, per the journal, before)."""
    queue: list[Waiting] = field(default_factory=list)
    """Spans not recorded yet, in the order they ended."""
    logs: dict[str, list[WaitingLog]] = field(default_factory=dict)
    """Span id -> the GenAI log records waiting for it."""
    log_keys: set[str] = field(default_factory=set)
    """Digests of the log records taken (a batch sent again is a redelivery)."""
    on_span: set[str] = field(default_factory=set)
    """Ids of inference spans recorded with content of their own: log records of theirs that
    come later are copies (SPAN_AND_EVENT), not late content."""
    last_span_at: float = 0.0
    journaled: tuple[int, str] | None = None
    """What the journal knew of the trace's own session when the trace was first seen."""

    def waits(self) -> bool:
        return bool(self.queue or self.logs)


class Closed:
    """Stands for a session that ended: its id, and that no record can join it."""

    ended = True

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id


ENDED: Any = Closed("")
"""The session an earlier run of the receiver wrote: ended, as far as this run can write (its
chain's head is gone)."""


def needs_session(group: Group) -> bool:
    return group.session is None or group.session.ended


def session_id_of(group: Group, generation: int | None = None) -> str:
    generation = group.generation if generation is None else generation
    named = grouping(group.key)
    if named is not None:
        _, word, name = named
        return grouped_session_id(name, generation, word=word)
    return session_id_for(group.key, generation)


def span_order(waiting: Waiting) -> tuple[int, int]:
    return waiting.span.end_ns, waiting.span.start_ns
