"""Prompt targets folded from the log: each target's versions with their labels and lineage,
its promotions, and its champion.

A version is known by its digest; it is labelled `v000`, `v001`... in the order it first appears
in the log (by the recording clock, then session and seq, so the same log gives the same labels
on every read). The champion is what the latest promotion says; a promotion of a version the log
does not hold (yet) is kept and named, not applied.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rolltape.projections._errors import ProjectionError
from rolltape.schemas import (
    LIVE_JUDGE_VERSION,
    PromptDecision,
    PromptPromotion,
    PromptVersion,
    TypedEvent,
)

PROMPT_EVENT_TYPES = frozenset({"prompt_version", "prompt_promotion", "prompt_decision"})
"""The events a prompt target's history is folded from."""


class PromptLookupError(ProjectionError, LookupError):
    """A target or version the log does not hold, or a digest prefix that names several."""


@dataclass(frozen=True)
class Recorded:
    """A version as the log holds it: its label and where it was first recorded."""

    label: str
    version: PromptVersion
    session_id: str
    ts_ns: int


@dataclass(frozen=True)
class Promoted:
    promotion: PromptPromotion
    session_id: str
    ts_ns: int


@dataclass(frozen=True)
class Decided:
    """A round of a prompt loop as the log holds it."""

    decision: PromptDecision
    session_id: str
    ts_ns: int


@dataclass(frozen=True)
class TechniqueTally:
    """One technique's record on the scoreboard."""

    technique: str
    wins: int
    losses: int


@dataclass
class PromptTarget:
    """One target's history."""

    name: str
    versions: list[Recorded] = field(default_factory=list)
    promotions: list[Promoted] = field(default_factory=list)
    decisions: list[Decided] = field(default_factory=list)
    """The rounds as the loop judged them (on the live worker's verdicts)."""
    rejudged: list[Decided] = field(default_factory=list)
    """Rounds decided again under another judge version (`prompts rejudge --record`); they
    never change the champion or the scoreboard."""

    def by_digest(self) -> dict[str, Recorded]:
        return {r.version.digest: r for r in self.versions}

    @property
    def champion(self) -> Recorded | None:
        """The version the latest promotion names (None: never promoted, or a version the log
        does not hold)."""
        if not self.promotions:
            return None
        return self.by_digest().get(self.promotions[-1].promotion.version)

    def label_of(self, digest: str) -> str:
        found = self.by_digest().get(digest)
        return found.label if found is not None else digest[:12]

    def scoreboard(self) -> list[TechniqueTally]:
        """Wins and losses per technique over every judged round (a round's technique is its
        proposal's), by technique name."""
        versions = self.by_digest()
        counts: dict[str, list[int]] = {}
        for decided in self.decisions:
            proposal = versions.get(decided.decision.proposal)
            technique = (proposal.version.technique if proposal else None) or "unknown"
            row = counts.setdefault(technique, [0, 0])
            row[0 if decided.decision.promoted else 1] += 1
        return [TechniqueTally(name, w, lost) for name, (w, lost) in sorted(counts.items())]

    def rounds(self, loop: str | None = None) -> list[Decided]:
        """The judged rounds (of one loop run, or all), in log order."""
        return [d for d in self.decisions if loop is None or d.decision.loop == loop]

    def find(self, ref: str) -> Recorded:
        """A version by label (`v003`), `champion`, or digest (a unique prefix of 6 or more)."""
        if ref == "champion":
            champion = self.champion
            if champion is None:
                raise PromptLookupError(f"{self.name} has no champion: nothing was promoted")
            return champion
        for recorded in self.versions:
            if recorded.label == ref:
                return recorded
        matches = [r for r in self.versions if len(ref) >= 6 and r.version.digest.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        labels = ", ".join(r.label for r in self.versions) or "none"
        what = "names several versions" if matches else "is not a version of it"
        raise PromptLookupError(f"{ref!r} {what} (versions of {self.name}: {labels})")


def fold_prompts(events: Iterable[tuple[str, TypedEvent]]) -> dict[str, PromptTarget]:
    """Every target's history from `(session_id, event)` pairs of any sessions (events other
    than prompt versions, promotions and decisions are ignored), by target name."""
    found: list[tuple[int, str, int, TypedEvent]] = []
    for session_id, env in events:
        if env.type in PROMPT_EVENT_TYPES:
            found.append((env.ts_ns, session_id, env.seq, env))
    targets: dict[str, PromptTarget] = {}
    for ts_ns, session_id, _, env in sorted(found, key=lambda f: f[:3]):
        body = env.body
        if isinstance(body, PromptVersion):
            target = targets.setdefault(body.target, PromptTarget(body.target))
            if body.digest not in target.by_digest():
                label = f"v{len(target.versions):03d}"
                target.versions.append(Recorded(label, body, session_id, ts_ns))
        elif isinstance(body, PromptPromotion):
            target = targets.setdefault(body.target, PromptTarget(body.target))
            target.promotions.append(Promoted(body, session_id, ts_ns))
        elif isinstance(body, PromptDecision):
            target = targets.setdefault(body.target, PromptTarget(body.target))
            live = body.judge_version == LIVE_JUDGE_VERSION
            (target.decisions if live else target.rejudged).append(Decided(body, session_id, ts_ns))
    return dict(sorted(targets.items()))
