"""The prompt loop's judge: the stated rule that promotes a proposal over the champion, and the
`prompt_decision` event that records each round's evidence, figures and outcome.

The rule lives beside the wire format because a decision is meant to be recomputed by anyone
holding the log: the event carries the rule's config and every paired result it read, and
`PromotionRule.judge` gives the same figures from them on any machine. The paired bootstrap is
written here rather than taken from scipy for that reason: its resamples come from Python's own
seeded Mersenne Twister through `random.Random(seed).random()`, the one method whose sequence
the standard library promises to keep across releases (`randrange` is not promised), the
quantiles' ranks are computed in exact fractions, so a round re-judged next year prints the same
interval, and the core install needs no numerical library.

Why paired and why a lower bound: champion and proposal run the same held-out cases with the
same seeds, so the difference of their scores per case removes the seed's own noise; a proposal
is promoted only when the lower end of the bootstrap interval of the mean difference is above
the rule's margin, so a proposal better by noise alone (differences of both signs) stays out.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rolltape.schemas._derived import Verdict
from rolltape.schemas._prompts import PROMPT_TARGET_PATTERN
from rolltape.schemas._review import HUMAN_JUDGE_VERSION

_DIGEST: Final = r"^[0-9a-f]{64}$"


class CaseScoring(BaseModel):
    """How a test run's verdict becomes its case's score and pass, stated in every decision so
    that a round re-judged under another judge version is scored the same way: the `score` of
    the `judge`'s verdict (0 when the judge failed a hard gate; None when it could not judge),
    and a pass when the verdict is ok and either no violation cites one of the case's rules (for
    a case with none: no violation at all) or the score is at least `threshold`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    judge: str = "training_audit"
    score: str = "process_score"
    passes: Literal["no_violation_of_case_rules", "score_at_least"] = "no_violation_of_case_rules"
    threshold: float = 1.0

    def of(self, verdict: Verdict | None, rules: tuple[str, ...] = ()) -> tuple[float | None, bool]:
        """(score, passed) of one run from its verdict (None: no verdict to read)."""
        if verdict is None or verdict.status == "error":
            return None, False
        if verdict.status != "ok":
            return 0.0, False
        score = verdict.scores.get(self.score)
        if score is None:
            return None, False
        if self.passes == "score_at_least":
            return score, score >= self.threshold
        if not rules:
            return score, not verdict.violations
        return score, not any(v.rule in rules for v in verdict.violations)


class PairedResult(BaseModel):
    """One held-out case run by champion and proposal with the same seed: the sessions that ran
    it and what the judge of those sessions said (score None: the run could not be scored)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    case: str = Field(min_length=1)
    """The held-out case (a harness scenario, an environment's item)."""
    seed: int
    rules: tuple[str, ...] = ()
    """The rules the case is built to provoke (what `CaseScoring` reads a pass by)."""
    champion_session: str | None = None
    proposal_session: str | None = None
    champion_score: float | None = None
    proposal_score: float | None = None
    champion_passed: bool = False
    proposal_passed: bool = False

    @property
    def scored(self) -> bool:
        return self.champion_score is not None and self.proposal_score is not None

    @property
    def regressed(self) -> bool:
        """The champion passed this case and the proposal failed it."""
        return self.champion_passed and not self.proposal_passed

    @property
    def label(self) -> str:
        return f"{self.case} (seed {self.seed})"


class PromotionFigures(BaseModel):
    """What the rule measured over a round's pairs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pairs: int = Field(ge=0)
    scored: int = Field(ge=0)
    mean_difference: float | None = None
    """Mean of proposal score minus champion score over the scored pairs."""
    lower: float | None = None
    """The bootstrap interval of the mean difference (None: nothing scored)."""
    upper: float | None = None
    champion_pass_rate: float | None = None
    proposal_pass_rate: float | None = None
    champion_mean: float | None = None
    proposal_mean: float | None = None
    regressions: tuple[str, ...] = ()
    """The cases the champion passed and the proposal failed."""
    unscored: tuple[str, ...] = ()
    """The cases one of the two runs could not be scored on."""

    def flat(self) -> dict[str, float]:
        """The numeric figures, as a promotion records them."""
        out: dict[str, float] = {"pairs": float(self.pairs), "scored": float(self.scored)}
        for name in (
            "mean_difference",
            "lower",
            "upper",
            "champion_pass_rate",
            "proposal_pass_rate",
            "champion_mean",
            "proposal_mean",
        ):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out["regressions"] = float(len(self.regressions))
        return out


class PromptReview(BaseModel):
    """The verdict an LLM reviewer gives on a round (strict structured output): which prompt it
    prefers, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefer: Literal["champion", "proposal"]
    reasons: list[str] = Field(min_length=1)

    @classmethod
    def of(cls, verdict: Verdict | None) -> PromptReview | None:
        """The review a reviewer's verdict holds (None: no verdict, or one that is not ok)."""
        if verdict is None or verdict.status != "ok":
            return None
        return cls.model_validate(verdict.details.get("verdict", {}))


class PromotionRule(BaseModel):
    """When a proposal replaces the champion: every held-out pair scored, the lower end of the
    paired bootstrap interval of the mean score difference above `margin`, and (with
    `no_regressions`) no case the champion passed that the proposal fails."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["paired_bootstrap"] = "paired_bootstrap"
    confidence: float = Field(default=0.95, gt=0, lt=1)
    """The two-sided interval's coverage: its lower end is the (1 - confidence) / 2 quantile."""
    resamples: int = Field(default=2000, ge=100, le=100_000)
    seed: int = 0
    margin: float = 0.0
    """The lower bound must be above this (0: better than the champion at all)."""
    min_pairs: int = Field(default=2, ge=1)
    """Fewer scored pairs keep the champion: one pair's interval has no width at all."""
    no_regressions: bool = True
    review_veto: bool = False
    """A reviewer's verdict (the round's `review`) must also prefer the proposal; a reviewer
    that gave none keeps the champion."""

    def describe(self) -> str:
        """The rule in one line, as the decision and the scoreboard state it."""
        text = (
            f"paired bootstrap ({self.resamples} resamples, seed {self.seed}): promote when the "
            f"{self.confidence:.0%} interval of the mean score difference lies above "
            f"{self.margin:g}"
        )
        if self.no_regressions:
            text += " and no held-out case regresses from pass to fail"
        if self.review_veto:
            text += " and the reviewer prefers the proposal"
        return text + f"; every pair must be scored, at least {self.min_pairs} of them"

    def interval(self, differences: list[float]) -> tuple[float, float]:
        """The percentile bootstrap interval of the mean of `differences`: the nearest-rank
        quantiles (1 - confidence) / 2 and (1 + confidence) / 2 of `resamples` resampled
        means. With few pairs it is narrower than its nominal coverage (the percentile
        bootstrap's known bias on small samples): `min_pairs` and `margin` are the guards."""
        n = len(differences)
        rng = random.Random(self.seed)
        means = sorted(
            math.fsum(differences[int(rng.random() * n)] for _ in range(n)) / n
            for _ in range(self.resamples)
        )
        alpha = (1 - Fraction(str(self.confidence))) / 2
        lo = max(0, math.ceil(alpha * self.resamples) - 1)
        hi = min(self.resamples - 1, math.ceil((1 - alpha) * self.resamples) - 1)
        return means[lo], means[hi]

    def judge(
        self, pairs: tuple[PairedResult, ...], review: Verdict | None = None
    ) -> tuple[bool, str, PromotionFigures]:
        """(promote?, why, the figures) for a round's pairs (and its reviewer's verdict, which
        counts only under `review_veto`)."""
        unscored = tuple(p.label for p in pairs if not p.scored)
        regressions = tuple(p.label for p in pairs if p.regressed)

        def rate(values: list[bool]) -> float | None:
            return sum(values) / len(values) if values else None

        values = [
            (c, q)
            for p in pairs
            if (c := p.champion_score) is not None and (q := p.proposal_score) is not None
        ]
        figures: dict[str, object] = {
            "pairs": len(pairs),
            "scored": len(values),
            "champion_pass_rate": rate([p.champion_passed for p in pairs]),
            "proposal_pass_rate": rate([p.proposal_passed for p in pairs]),
            "regressions": regressions,
            "unscored": unscored,
        }
        if values:
            diffs = [q - c for c, q in values]
            lower, upper = self.interval(diffs)
            figures |= {
                "mean_difference": math.fsum(diffs) / len(diffs),
                "lower": lower,
                "upper": upper,
                "champion_mean": math.fsum(c for c, _ in values) / len(values),
                "proposal_mean": math.fsum(q for _, q in values) / len(values),
            }
        result = PromotionFigures.model_validate(figures)
        if not pairs:
            return False, "keep: no held-out case was run", result
        if unscored:
            return False, f"keep: {len(unscored)} pair(s) unscored ({', '.join(unscored)})", result
        if len(values) < self.min_pairs:
            return (
                False,
                f"keep: {len(values)} scored pair(s), the rule needs at least {self.min_pairs}",
                result,
            )
        if self.no_regressions and regressions:
            return False, f"keep: the proposal regressed {', '.join(regressions)}", result
        assert result.lower is not None and result.mean_difference is not None
        if result.lower <= self.margin:
            return (
                False,
                f"keep: the interval of the score difference [{result.lower:+.3f}, "
                f"{result.upper:+.3f}] (mean {result.mean_difference:+.3f}) does not lie above "
                f"{self.margin:g}",
                result,
            )
        if self.review_veto:
            verdict = PromptReview.of(review)
            if review is None or verdict is None:
                why = "none was given" if review is None else (review.error or review.status)
                return False, f"keep: the reviewer's verdict is required and {why}", result
            if verdict.prefer != "proposal":
                return (
                    False,
                    f"keep: the reviewer prefers the champion: {'; '.join(verdict.reasons)}",
                    result,
                )
        return (
            True,
            f"promote: the score difference's interval [{result.lower:+.3f}, "
            f"{result.upper:+.3f}] (mean {result.mean_difference:+.3f}) lies above "
            f"{self.margin:g}" + (", and no case regressed" if self.no_regressions else ""),
            result,
        )


class PromptDecision(BaseModel):
    """Payload of a `prompt_decision` event: one round of a prompt loop judged. It holds all a
    reader needs to recompute the outcome: the rule's config, each held-out pair with the
    sessions that ran it, and the figures the rule measured on them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str = Field(pattern=PROMPT_TARGET_PATTERN)
    loop: str = Field(min_length=1)
    """The loop run this round belongs to (its session id)."""
    round: int = Field(ge=1)
    champion: str = Field(pattern=_DIGEST)
    proposal: str = Field(pattern=_DIGEST)
    rule: PromotionRule
    scoring: CaseScoring = CaseScoring()
    pairs: tuple[PairedResult, ...]
    review: Verdict | None = None
    """The LLM reviewer's verdict on the round (`llm:prompt_review`), when one was asked."""
    figures: PromotionFigures
    promoted: bool
    reason: str = Field(min_length=1)
    judge_version: str = "live"
    """The version of the judge whose verdicts scored the pairs (`live`: the worker's; another
    when the round was re-judged from a replay's verdicts; `human`: from reviewers')."""

    def rejudged(self, verdicts: Mapping[str, Verdict], judge_version: str) -> PromptDecision:
        """This round decided again from other verdicts of the same sessions (a replay's under
        `judge_version`, by session id), scored by the recorded `scoring` and judged by the
        recorded `rule`. A session without a verdict there leaves its pair unscored."""
        return self._decided_again(
            lambda session, rules: self.scoring.of(verdicts.get(session or ""), rules),
            judge_version,
        )

    def reviewed_again(self, standing: Mapping[str, tuple[float, bool]]) -> PromptDecision:
        """This round decided again from what reviewers said of its test sessions (judge
        version `human`): each session's (score, passed) by session id, the reviewers' mean
        score and whether most of them passed it (`Trajectory.human_score`,
        `reviewers_passed`), judged by the recorded `rule`. A session no reviewer judged
        leaves its pair unscored, so a round is decided by people only when they judged every
        held-out run."""
        return self._decided_again(
            lambda session, _rules: standing.get(session or "", (None, False)), HUMAN_JUDGE_VERSION
        )

    def _decided_again(
        self,
        score: Callable[[str | None, tuple[str, ...]], tuple[float | None, bool]],
        judge_version: str,
    ) -> PromptDecision:
        pairs = []
        for p in self.pairs:
            old = score(p.champion_session, p.rules)
            new = score(p.proposal_session, p.rules)
            pairs.append(
                p.model_copy(
                    update={
                        "champion_score": old[0],
                        "champion_passed": old[1],
                        "proposal_score": new[0],
                        "proposal_passed": new[1],
                    }
                )
            )
        promoted, reason, figures = self.rule.judge(tuple(pairs), self.review)
        return self.model_copy(
            update={
                "pairs": tuple(pairs),
                "figures": figures,
                "promoted": promoted,
                "reason": reason,
                "judge_version": judge_version,
            }
        )

    @property
    def reviewed(self) -> str | None:
        """The reviewer's verdict in a line (None: no reviewer was asked)."""
        if self.review is None:
            return None
        verdict = PromptReview.of(self.review)
        if verdict is None:
            return f"no verdict ({self.review.error or self.review.status})"
        return f"prefers the {verdict.prefer}: {'; '.join(verdict.reasons)}"

    @property
    def outcome(self) -> str:
        """The decision in a few words (the reason says it whole)."""
        f = self.figures
        if self.promoted:
            return "promoted"
        if not f.pairs:
            return "kept: nothing run"
        if self.reason.startswith("keep: the reviewer"):
            return "kept: reviewer"
        if f.unscored:
            return f"kept: {len(f.unscored)} unscored"
        if f.scored < self.rule.min_pairs:
            return "kept: too few pairs"
        if f.regressions and self.rule.no_regressions:
            return f"kept: {len(f.regressions)} regressed"
        return f"kept: lower bound <= {self.rule.margin:g}"

    @model_validator(mode="after")
    def _distinct(self) -> PromptDecision:
        if self.champion == self.proposal:
            raise ValueError("a proposal must differ from the champion it is judged against")
        return self
