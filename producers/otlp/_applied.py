"""What one batch of spans and log records (or one tick of the timer) did to the sessions: the
account a receiver answers its sender with, journals once the records are durable, and counts
by reason when something was acknowledged but not recorded (nothing is dropped in silence).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

UNMAPPED_REASONS = {
    "span_not_genai": "spans of other libraries (HTTP, databases) in GenAI traces",
    "trace_not_genai": "spans of traces without any GenAI span",
    "span_rejected": "spans whose content broke the mapping (named in partial_success)",
    "span_kind_not_recorded": "OpenInference spans of kinds that hold no conversation "
    "(RETRIEVER, EMBEDDING, RERANKER, GUARDRAIL, EVALUATOR)",
    "log_not_genai": "log records that are no GenAI event (an application's own logs)",
    "log_outside_span": "GenAI log records without a trace and span id to join",
    "log_after_its_span": "GenAI log records that came after their span was recorded",
    "log_content_also_on_span": "content log records whose span carried the same content",
    "log_span_never_came": "GenAI log records whose span did not come within the idle time",
    "log_ids_unusable": "log records with malformed ids",
}
"""Why a span or log record was acknowledged but not recorded, for the counters and the docs."""


@dataclass
class Applied:
    """What one batch (or one tick of the timer) did. `recorded`, `hold` and `release` are
    journaled once the records are durable."""

    spans: int = 0
    logs: int = 0
    recorded: list[tuple[str, str]] = field(default_factory=list)
    redelivered: int = 0
    again: list[tuple[str, str]] = field(default_factory=list)
    """(trace, span) of redelivered spans: journaled again once the batch is durable (the
    first delivery may have failed before its ids were journaled)."""
    rejected: list[str] = field(default_factory=list)
    """Spans whose content could not be mapped, with why."""
    not_genai: int = 0
    sessions_started: list[str] = field(default_factory=list)
    without_content: int = 0
    unreadable: list[str] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)
    """What would send the content of the inference spans that came without it."""
    logs_joined: int = 0
    """GenAI log records recorded with their span."""
    logs_redelivered: int = 0
    unmapped: collections.Counter[str] = field(default_factory=collections.Counter)
    """Reason (UNMAPPED_REASONS) -> spans or log records acknowledged, not recorded."""
    hold: list[tuple[str, str, bytes]] = field(default_factory=list)
    release: list[tuple[str, str]] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)

    @property
    def wrote(self) -> bool:
        """Whether anything of this account must be durable before it is journaled: records it
        gave the recorder, or spans and held items an earlier batch recorded but could not
        journal (a batch of log records that all wait for their spans has none of these: no
        flush to wait for)."""
        return bool(
            self.recorded
            or self.again
            or self.release
            or self.sessions_started
            or self.ended
            or self.logs_joined
            or self.rejected
        )

    def warning(self) -> str:
        """The note for the sender's partial_success (empty when all went as expected)."""
        notes = []
        if self.without_content:
            setting = self.settings[0] if self.settings else "turn on content capture"
            notes.append(
                f"{self.without_content} inference span(s) carried no message content; {setting}"
            )
        notes.extend(f"unreadable attribute {u}" for u in self.unreadable[:5])
        return "; ".join(notes)
