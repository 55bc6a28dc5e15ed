"""Payloads of derived events: what processors write about the raw streams.

Invariant: a derived payload is a pure function of the events named in the envelope's `causes`
and of the processor version it names, so a replay with the same versions writes the same bytes
and the same event id (`derived_event_id`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from rolltape.schemas._content_fields import sealed_field

RuleId = Literal["R1", "R2", "R3", "R4", "R5", "R6", "R7"]
RuleClass = Literal["stability", "capacity", "tuning", "process"]

#: One total order, most urgent first: stability (R7 exploding before R6 vanishing: a NaN is
#: unrecoverable), then capacity (R5 dead activations before R4 stalled accuracy: R5 names a cause,
#: R4 only a symptom), then tuning (R1 learning rate before R2 batch size: the cheaper, more common
#: fix), then process (R3 early stop).
PRECEDENCE: Final[tuple[RuleId, ...]] = ("R7", "R6", "R5", "R4", "R1", "R2", "R3")
RULE_CLASS: Final[dict[RuleId, RuleClass]] = {
    "R7": "stability",
    "R6": "stability",
    "R5": "capacity",
    "R4": "capacity",
    "R1": "tuning",
    "R2": "tuning",
    "R3": "process",
}


class BreakKind(StrEnum):
    """Why a record does not extend its chain as it should (see _links.py and _verify.py for the
    checks). An exact copy of a record is no break: it is a redelivery, counted by the readers."""

    UNPARSEABLE = "unparseable"
    UNKNOWN_VERSION = "unknown_version"
    MISROUTED = "misrouted"
    TAMPERED = "tampered"
    NOT_CANONICAL = "not_canonical"
    FORK = "fork"
    REORDERED = "reordered"
    GAP = "gap"
    BAD_GENESIS = "bad_genesis"
    BROKEN_LINK = "broken_link"
    AFTER_END = "after_end"
    FOREIGN_PRINCIPAL = "foreign_principal"
    """The envelope names a principal that does not write this stream's trust domain."""


class RuleOutcome(BaseModel):
    """One rule on one epoch: whether it fired, why, and the smoothed signals it looked at."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fired: bool
    reason: str
    """Human-readable: which signal crossed which threshold, or why the rule could not tell."""
    signals: dict[str, float | None] = Field(default_factory=dict)
    """The values behind the outcome (EMAs, the window of raw values); None = no data."""


class RuleEvaluation(BaseModel):
    """The canonical rule engine on one epoch of one session (written to the rules stream)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epoch: int = Field(ge=0)
    rules_version: str
    """Version of the rule engine code."""
    ruleset: str
    """Name and digest of the rule-set config (thresholds, EMA alpha, persistence)."""
    no_data: bool
    """The epoch had no optimizer steps: nothing was measured, so no rule can fire from it."""
    non_finite: tuple[str, ...] = ()
    """Metric fields that were NaN or infinite (they fire R7 and never enter an EMA)."""
    fired: tuple[RuleId, ...]
    """The rules that fired, in precedence order (the first is the one to act on)."""
    top_class: RuleClass | None
    rules: dict[RuleId, RuleOutcome]


class ChainBroken(BaseModel):
    """A record of a raw stream that does not extend its chain (written to the verdicts stream).

    The envelope's session_id is the session whose chain is broken; `causes` holds the offending
    record's stored hash when it had one.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    stream: str
    seq: int | None
    reason: BreakKind
    detail: str
    position: str | None
    """Where the record sits in the log: topic[partition]@offset; None for a record judged
    before it was in any log (an import checked before it is sent)."""
    auditor_version: str


class Violation(BaseModel):
    """One thing a judge holds against a session, with the events that show it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    message: str
    epoch: int | None = None
    rule: RuleId | None = None
    evidence: tuple[str, ...] = ()
    """Hashes of the events that show the violation."""


class Verdict(BaseModel):
    """A judge's verdict on a session: training audit, LLM judge or reward function."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    judge: str
    """Which judge, e.g. `training_audit`, `llm:helpfulness`, `reward:task_pass`."""
    judge_version: str
    status: Literal["ok", "failed", "error"]
    """ok: judged; failed: a hard gate failed (scores are 0); error: could not judge (no scores,
    never a silent zero)."""
    scores: dict[str, float] = Field(default_factory=dict)
    violations: tuple[Violation, ...] = ()
    counts: dict[str, int] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    judge_session_id: str | None = None
    """The judge's own conversation, recorded as a session (trainable=false), when it had one."""
    sealed: str | None = sealed_field()


class FilterReason(BaseModel):
    """One reason against a session: a code, what it means here, and the hashes of the events
    that show it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    message: str
    evidence: tuple[str, ...] = ()


class FilterOutcome(BaseModel):
    """Whether a finished agent session may become training data, with every reason against it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    filter_version: str
    config: str
    """Name and digest of the filter config used."""
    accepted: bool
    reasons: tuple[FilterReason, ...] = ()
    observed: tuple[FilterReason, ...] = ()
    """What the filters noticed without holding it against the session (`tools_undeclared`:
    the tools a session called when it declared none), with the same evidence."""
    status: str
    turns: int
    tool_calls: int
    reward: float | None = None
    sealed: str | None = sealed_field()


DERIVED_PAYLOAD_MODELS: dict[str, type[BaseModel]] = {
    "rule_evaluation": RuleEvaluation,
    "chain_broken": ChainBroken,
    "verdict": Verdict,
    "filter_outcome": FilterOutcome,
}
