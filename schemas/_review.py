"""Human review: what a reviewer records about a session, on the verdicts stream.

A human verdict is a verdict like a judge's, written by a principal of the `reviewer` role (the
console's reviewer login, or `rolltape review record`), so it is chained, read and exported as
every verdict is. It lives on its own chain per session, `verdicts@human` (the judge version
`HUMAN_JUDGE_VERSION`), keyed by the reviewed session like the worker's chains, so it sits on
the session's partition and never forks a chain the worker writes. The version is reserved: no
replay may write under it.

A reviewer either judges one session (`HumanVerdict`: pass or fail, a score, labels, a comment)
or prefers one of two sessions of a group (`HumanPreference`, on the chain of the one chosen);
the console records both (`rolltape serve console`, its review pages).
Each names the heads of the chains the reviewer read, so a verdict says what it was about: a
re-judged session shows its human verdict as given on the verdicts it had then.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rolltape.schemas._envelope import SESSION_ID_PATTERN

HUMAN_JUDGE_VERSION: Final = "human"
"""The judge version human verdicts are written under (`verdicts@human`)."""
REVIEW_LABEL_PATTERN: Final = r"^[a-z0-9][a-z0-9_.:-]{0,63}$"
COMMENT_MAX_CHARS: Final = 10_000

ReviewQueue = Literal[
    "needs_human_review", "awaiting_review", "rejected", "disagreeing", "accepted_sample", "direct"
]
"""Why the reviewer was shown the session: a cron run routed to review, a session a filter holds
for a reviewer, a session the filter rejected, judges that disagree, a random sample of accepted
sessions, or none (opened directly)."""


class HumanVerdict(BaseModel):
    """A reviewer's verdict on one session."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reviewer: str = Field(min_length=1, max_length=200)
    """The principal that recorded it (the reviewer's login)."""
    verdict: Literal["pass", "fail"]
    score: float | None = Field(default=None, ge=0.0, le=1.0)
    """A graded score in [0, 1]; without one, `pass` counts 1.0 and `fail` 0.0 (`value`)."""
    labels: tuple[str, ...] = ()
    """Sorted, each once, each matching `REVIEW_LABEL_PATTERN` (`hallucination`, `tool:misuse`)."""
    comment: str = Field(default="", max_length=COMMENT_MAX_CHARS)
    queue: ReviewQueue = "direct"
    reviewed: dict[str, str] = Field(default_factory=dict)
    """chain name -> the hash of its head when the reviewer read the session."""

    @field_validator("labels")
    @classmethod
    def _labels_in_order(cls, labels: tuple[str, ...]) -> tuple[str, ...]:
        return _labels(labels)

    @property
    def value(self) -> float:
        """The verdict as a score: `score` when given, else 1.0 for pass and 0.0 for fail."""
        if self.score is not None:
            return self.score
        return 1.0 if self.verdict == "pass" else 0.0


class HumanPreference(BaseModel):
    """A reviewer's choice between two sessions (of one group, where they have one): written on
    the chosen session's `verdicts@human` chain, naming the other."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reviewer: str = Field(min_length=1, max_length=200)
    chosen: str = Field(pattern=SESSION_ID_PATTERN)
    rejected: str = Field(pattern=SESSION_ID_PATTERN)
    group_id: str | None = None
    labels: tuple[str, ...] = ()
    comment: str = Field(default="", max_length=COMMENT_MAX_CHARS)
    reviewed: dict[str, str] = Field(default_factory=dict)
    """`<session id>/<chain name>` -> its head's hash when the reviewer read the two."""

    @field_validator("labels")
    @classmethod
    def _labels_in_order(cls, labels: tuple[str, ...]) -> tuple[str, ...]:
        return _labels(labels)

    @field_validator("rejected")
    @classmethod
    def _two_sessions(cls, rejected: str, info: object) -> str:
        data = getattr(info, "data", {})
        if rejected == data.get("chosen"):
            raise ValueError("a preference is between two different sessions")
        return rejected


def _labels(labels: tuple[str, ...]) -> tuple[str, ...]:
    for label in labels:
        if not re.fullmatch(REVIEW_LABEL_PATTERN, label):
            raise ValueError(
                f"label {label!r}: lowercase letters, digits and _ . : - (up to 64), "
                "starting with a letter or digit"
            )
    return tuple(sorted(set(labels)))


REVIEW_PAYLOAD_MODELS: dict[str, type[BaseModel]] = {
    "human_verdict": HumanVerdict,
    "human_preference": HumanPreference,
}
