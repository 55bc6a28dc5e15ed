"""The prompt loop: a tuner proposes, a tester measures on held-out cases, a rule promotes.

Each round: the champion runs the learning cases (once per champion), the tuner reads its
failures there and the scoreboard and proposes a version; champion and proposal run the same
held-out cases with the same seeds (the champion's held-out runs are reused while it stays
champion: the same cases, seeds and prompt); the promotion rule judges the pairs. The loop's
session records, in chain order, the version it started from, each proposal (a `prompt_version`
with its parent, technique and rationale), each round's `prompt_decision` and, when a proposal
wins, the `prompt_promotion` that makes it champion. The test runs are ordinary sessions tagged
with the loop, round, version and role; the worker judges them like any session, and their
verdicts are the scores.

Invariant: the cases the tuner learns from are never the ones that decide (`Suite` refuses an
overlap), and a run's cost is bounded before it starts (`estimate`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rolltape.producers._errors import PromptLoopError
from rolltape.producers._recorder import Recorder
from rolltape.producers._session import Session
from rolltape.producers.prompts._review import Reviewer
from rolltape.producers.prompts._tuner import Tuner, TunerBrief
from rolltape.schemas import (
    CaseScoring,
    PairedResult,
    PromotionRule,
    PromptDecision,
    PromptPromotion,
    PromptVersion,
)


class Case(BaseModel):
    """One test case: a named setup (a harness scenario, an environment's item) and a seed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    seed: int = 0

    @property
    def label(self) -> str:
        return f"{self.name} (seed {self.seed})"


class Suite(BaseModel):
    """The cases a loop learns from and the held-out cases that decide; no setup is in both."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    learn: tuple[Case, ...]
    heldout: tuple[Case, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _disjoint(self) -> Suite:
        cases = [*self.learn, *self.heldout]
        twice = sorted({c.label for c in cases if cases.count(c) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} named more than once: each case runs once")
        shared = sorted({c.name for c in self.learn} & {c.name for c in self.heldout})
        if shared:
            raise ValueError(
                f"{', '.join(shared)} are both learned from and held out: the cases the tuner "
                "learns from must never be the ones that decide"
            )
        return self


class CaseResult(BaseModel):
    """What one run of a case gave: the session, the judge's score and pass, and the failures
    (one line each) a tuner may read when the case is a learning case."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    case: Case
    session_id: str
    rules: tuple[str, ...] = ()
    """The rules the case is built to provoke (what its pass is read by)."""
    score: float | None
    """None: the run could not be scored (the judge erred, the run failed)."""
    passed: bool
    failures: tuple[str, ...] = ()
    model_calls: int = Field(default=0, ge=0)


class Tester(Protocol):
    """Runs a version of the target's prompt on a case, as a recorded session judged by the
    worker; `labels` go into the session's run config (loop, round, version, role, phase)."""

    max_calls_per_case: int
    """An upper bound on the model calls one run makes (the budget's estimate uses it)."""
    scoring: CaseScoring
    """How its runs' verdicts become scores and passes (recorded in every decision)."""

    def run(self, version: PromptVersion, case: Case, labels: dict[str, Any]) -> CaseResult: ...


class LoopEstimate(BaseModel):
    """The most a loop can cost, computed before it starts."""

    model_config = ConfigDict(frozen=True)

    rounds: int
    runs: int
    """Test runs, at most (learning runs for each new champion, held-out runs per proposal)."""
    tuner_calls: int
    policy_calls: int
    """At most `runs` x the tester's calls per run."""
    review_calls: int = 0
    """One reviewer call per round when a reviewer judges too."""

    @property
    def model_calls(self) -> int:
        return self.tuner_calls + self.policy_calls + self.review_calls

    def describe(self) -> str:
        review = f", {self.review_calls} reviewer" if self.review_calls else ""
        return (
            f"at most {self.model_calls} model calls ({self.tuner_calls} tuner{review}, up to "
            f"{self.policy_calls} policy) and {self.runs} test runs over {self.rounds} round(s)"
        )


def estimate(
    suite: Suite, calls_per_run: int, rounds: int, *, review: bool = False
) -> LoopEstimate:
    """The most `rounds` rounds can cost when a test run makes at most `calls_per_run` model
    calls (a tester's `max_calls_per_case`): the start's learning and held-out runs, then per
    round the proposal's held-out runs and, when it wins, its learning runs for the next."""
    learn, heldout = len(suite.learn), len(suite.heldout)
    runs = learn + heldout + rounds * heldout + (rounds - 1) * learn
    return LoopEstimate(
        rounds=rounds,
        runs=runs,
        tuner_calls=rounds,
        policy_calls=runs * calls_per_run,
        review_calls=rounds if review else 0,
    )


class RoundResult(BaseModel):
    """One round, as the loop's decision recorded it."""

    model_config = ConfigDict(frozen=True)

    decision: PromptDecision
    proposal: PromptVersion


class LoopResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    loop: str
    """The loop's session id."""
    start: PromptVersion
    champion: PromptVersion
    rounds: list[RoundResult]
    model_calls: int
    runs: int


class PromptLoop:
    """Runs rounds for one target. `recorder` records the loop's session (the agent's
    principal); the tuner and the tester record their own sessions."""

    def __init__(
        self,
        recorder: Recorder,
        tuner: Tuner,
        tester: Tester,
        *,
        target: str,
        suite: Suite,
        rule: PromotionRule | None = None,
        labels: Mapping[str, str] | None = None,
        scoreboard: tuple[str, ...] = (),
        reviewer: Reviewer | None = None,
    ) -> None:
        self.recorder = recorder
        self.tuner = tuner
        self.tester = tester
        self.target = target
        self.suite = suite
        self.rule = rule or PromotionRule()
        self.reviewer = reviewer
        if self.rule.review_veto and reviewer is None:
            raise PromptLoopError("the rule requires a reviewer's verdict and none was given")
        self._labels = dict(labels or {})
        """Digest -> label (`v003`) of the versions the log already holds."""
        self.scoreboard = list(scoreboard)
        """Lines the tuner reads: the log's tallies before this run, then this run's rounds."""
        self._learned: dict[str, tuple[CaseResult, ...]] = {}
        self._heldout: dict[str, tuple[CaseResult, ...]] = {}
        self.runs = 0
        self.policy_calls = 0
        self.review_calls = 0

    def label(self, version: PromptVersion) -> str:
        """The log's label of a version, or its digest's first 12 characters."""
        return self._labels.get(version.digest, version.digest[:12])

    def run(
        self,
        start: PromptVersion,
        rounds: int,
        *,
        on_round: Callable[[RoundResult], None] | None = None,
    ) -> LoopResult:
        """`rounds` rounds from `start`; the loop's session ends failed (and the error is
        raised) when one cannot go on, with the rounds judged so far already on the log."""
        if start.target != self.target:
            raise PromptLoopError(f"the start version is of {start.target}, not {self.target}")
        loop_id = f"prompts.{self.target}.loop-{uuid.uuid4().hex[:12]}"
        self._learned.clear()  # a second run measures afresh: its pairs name its own sessions
        self._heldout.clear()
        results: list[RoundResult] = []
        champion = start
        with self.recorder.session(
            f"prompt loop of {self.target}",
            session_id=loop_id,
            kind="agent",
            trainable=False,
            group_id=loop_id,
            tags=["prompts", "prompt_loop", f"target={self.target}"],
            run_config={
                "role": "prompt_loop",
                "prompt_target": self.target,
                "rounds": rounds,
                "start": start.digest,
                "rule": self.rule.model_dump(),
                "learn": [c.model_dump() for c in self.suite.learn],
                "heldout": [c.model_dump() for c in self.suite.heldout],
            },
        ) as session:
            session.record(start)
            for number in range(1, rounds + 1):
                result = self._round(session, loop_id, number, champion)
                results.append(result)
                if result.decision.promoted:
                    champion = result.proposal
                if on_round is not None:
                    on_round(result)
            session.end(
                "completed",
                outcome={
                    "champion": champion.digest,
                    "promoted": sum(r.decision.promoted for r in results),
                    "rounds": len(results),
                },
            )
        self.recorder.flush()
        return LoopResult(
            loop=loop_id,
            start=start,
            champion=champion,
            rounds=results,
            model_calls=self.tuner.calls + self.policy_calls + self.review_calls,
            runs=self.runs,
        )

    # -- one round ---------------------------------------------------------------------------------
    def _round(
        self, session: Session, loop_id: str, number: int, champion: PromptVersion
    ) -> RoundResult:
        learned = self._results(self._learned, champion, self.suite.learn, loop_id, number, "learn")
        brief = TunerBrief(
            target=self.target,
            round=number,
            champion_label=self.label(champion),
            champion=champion.content,
            failures=tuple(f"{r.case.label}: {f}" for r in learned for f in r.failures),
            scoreboard=tuple(self.scoreboard),
        )
        proposed = self.tuner.propose(brief, loop_session=loop_id, group_id=loop_id)
        proposal = PromptVersion.of(
            self.target,
            proposed.prompt,
            parents=(champion.digest,),
            technique=proposed.technique,
            rationale=proposed.rationale,
        )
        if proposal.digest == champion.digest:
            raise PromptLoopError(
                f"the tuner proposed the champion unchanged in round {number}: nothing to test"
            )
        session.record(proposal)
        kept = self._results(
            self._heldout, champion, self.suite.heldout, loop_id, number, "heldout"
        )
        tried = self._results(
            self._heldout, proposal, self.suite.heldout, loop_id, number, "heldout", role="proposal"
        )
        pairs = tuple(
            PairedResult(
                case=old.case.name,
                seed=old.case.seed,
                rules=old.rules,
                champion_session=old.session_id,
                proposal_session=new.session_id,
                champion_score=old.score,
                proposal_score=new.score,
                champion_passed=old.passed,
                proposal_passed=new.passed,
            )
            for old, new in zip(kept, tried, strict=True)
        )
        review = None
        if self.reviewer is not None:
            draft = self.rule.judge(pairs)[2]
            review = self.reviewer(champion, proposal, pairs, draft, loop_id)
            self.review_calls += 1
        promoted, reason, figures = self.rule.judge(pairs, review)
        decision = PromptDecision(
            target=self.target,
            loop=loop_id,
            round=number,
            champion=champion.digest,
            proposal=proposal.digest,
            rule=self.rule,
            scoring=self.tester.scoring,
            pairs=pairs,
            review=review,
            figures=figures,
            promoted=promoted,
            reason=reason,
        )
        session.prompt_decision(decision.model_dump(mode="json"))
        if promoted:
            session.record(
                PromptPromotion(
                    target=self.target,
                    version=proposal.digest,
                    replaces=champion.digest,
                    reason=f"round {number} of {loop_id}: {reason}",
                    rule=self.rule.describe(),
                    figures=figures.flat(),
                )
            )
        self.scoreboard.append(_blind_line(decision, proposal))
        return RoundResult(decision=decision, proposal=proposal)

    def _results(
        self,
        cache: dict[str, tuple[CaseResult, ...]],
        version: PromptVersion,
        cases: tuple[Case, ...],
        loop_id: str,
        number: int,
        phase: str,
        *,
        role: str = "champion",
    ) -> tuple[CaseResult, ...]:
        """The version's results on `cases`, run once per version and phase."""
        if version.digest in cache:
            return cache[version.digest]
        results = []
        for case in cases:
            result = self.tester.run(
                version,
                case,
                {
                    "prompt_loop": loop_id,
                    "prompt_round": number,
                    "prompt_target": self.target,
                    "prompt_version": version.digest,
                    "prompt_role": role,
                    "prompt_phase": phase,
                },
            )
            self.runs += 1
            self.policy_calls += result.model_calls
            results.append(result)
        cache[version.digest] = tuple(results)
        return cache[version.digest]


def _blind_line(decision: PromptDecision, proposal: PromptVersion) -> str:
    """A judged round as the tuner reads it: held-out figures in aggregate, never a held-out
    case's name (the tuner must not learn which cases decide)."""
    f = decision.figures
    if decision.promoted:
        why = "promoted: its interval of the score difference lies above the margin"
    elif f.unscored:
        why = f"kept the champion: {len(f.unscored)} held-out pair(s) unscored"
    elif f.regressions and decision.rule.no_regressions:
        why = f"kept the champion: the proposal regressed {len(f.regressions)} held-out case(s)"
    elif decision.outcome == "kept: reviewer":
        why = "kept the champion: the reviewer preferred it"
    elif f.scored < decision.rule.min_pairs:
        why = "kept the champion: too few held-out pairs were scored"
    else:
        why = (
            "kept the champion: its interval of the score difference does not lie above the margin"
        )
    return (
        f"round {decision.round}: {proposal.technique} ({proposal.rationale}): held-out pass "
        f"rate {_rate(f.champion_pass_rate)} -> {_rate(f.proposal_pass_rate)}, mean score "
        f"{_rate(f.champion_mean)} -> {_rate(f.proposal_mean)}; {why}"
    )


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
