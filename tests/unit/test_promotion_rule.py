"""The prompt loop's promotion rule: a proposal better by noise only is not promoted, one better
on every held-out case is, one that regresses a case or leaves one unscored is not; the figures
are the same on every run (a decision is recomputed from the log)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rolltape.schemas import (
    CaseScoring,
    PairedResult,
    PromotionRule,
    PromptDecision,
    PromptVersion,
    Verdict,
    Violation,
)


def pairs(
    differences: list[float], *, base: float = 0.5, passed: tuple[bool, bool] = (True, True)
) -> tuple[PairedResult, ...]:
    return tuple(
        PairedResult(
            case=f"case{i}",
            seed=i,
            champion_score=base,
            proposal_score=base + d,
            champion_passed=passed[0],
            proposal_passed=passed[1],
        )
        for i, d in enumerate(differences)
    )


def test_a_proposal_better_by_noise_only__is_not_promoted() -> None:
    promoted, reason, figures = PromotionRule().judge(pairs([0.1, -0.08, 0.05, -0.04, 0.06, -0.02]))
    assert not promoted and reason.startswith("keep: the interval")
    assert figures.mean_difference == pytest.approx(0.07 / 6)
    assert figures.lower is not None and figures.lower < 0 < figures.mean_difference


def test_a_proposal_better_on_every_case__is_promoted() -> None:
    promoted, reason, figures = PromotionRule().judge(pairs([0.05, 0.2, 0.1]))
    assert promoted and reason.startswith("promote:")
    assert figures.lower is not None and figures.lower >= 0.05
    assert figures.champion_mean == 0.5 and figures.proposal_mean == pytest.approx(0.6166666)


def test_an_equal_proposal__is_not_promoted_at_a_margin_of_zero() -> None:
    promoted, reason, _ = PromotionRule().judge(pairs([0.0, 0.0]))
    assert not promoted and "does not lie above 0" in reason


def test_a_margin__must_be_cleared_by_the_lower_bound() -> None:
    assert not PromotionRule(margin=0.1).judge(pairs([0.05, 0.2, 0.1]))[0]
    assert PromotionRule(margin=0.01).judge(pairs([0.05, 0.2, 0.1]))[0]


def test_a_proposal_that_regresses_a_case__is_not_promoted_however_much_it_gains() -> None:
    better = list(pairs([0.3, 0.3, 0.3]))
    better[1] = better[1].model_copy(update={"proposal_passed": False})
    promoted, reason, figures = PromotionRule().judge(tuple(better))
    assert not promoted and reason == "keep: the proposal regressed case1 (seed 1)"
    assert figures.regressions == ("case1 (seed 1)",) and figures.proposal_pass_rate == 2 / 3
    assert PromotionRule(no_regressions=False).judge(tuple(better))[0]


def test_an_unscored_pair__keeps_the_champion() -> None:
    some = list(pairs([0.3, 0.3]))
    some[0] = some[0].model_copy(update={"proposal_score": None})
    promoted, reason, figures = PromotionRule().judge(tuple(some))
    assert not promoted and "unscored (case0 (seed 0))" in reason
    assert figures.scored == 1 and figures.unscored == ("case0 (seed 0)",)
    assert PromotionRule().judge(())[:2] == (False, "keep: no held-out case was run")


def test_the_figures__are_the_same_on_every_run_and_follow_the_rules_seed() -> None:
    noisy = pairs([0.1, -0.08, 0.05, -0.04, 0.06, -0.02, 0.03])
    assert PromotionRule().judge(noisy) == PromotionRule().judge(noisy)
    assert PromotionRule(seed=1).judge(noisy)[2].lower != PromotionRule().judge(noisy)[2].lower
    # a pinned value: a change to the resampling would silently change recorded decisions
    assert PromotionRule().interval([0.1, -0.08, 0.05, -0.04, 0.06, -0.02, 0.03]) == (
        -0.028571428571428574,
        0.05714285714285715,
    )


def test_a_decision__names_two_different_versions_and_round_trips() -> None:
    a, b = PromptVersion.of("harness.policy", "a"), PromptVersion.of("harness.policy", "b")
    rule = PromotionRule()
    promoted, reason, figures = rule.judge(pairs([0.1, 0.2]))
    decision = PromptDecision(
        target="harness.policy",
        loop="loop-1",
        round=1,
        champion=a.digest,
        proposal=b.digest,
        rule=rule,
        pairs=pairs([0.1, 0.2]),
        figures=figures,
        promoted=promoted,
        reason=reason,
    )
    assert PromptDecision.model_validate_json(decision.model_dump_json()) == decision
    with pytest.raises(ValidationError, match="must differ"):
        PromptDecision.model_validate({**decision.model_dump(), "proposal": a.digest})


def _verdict(score: float, *violated: str, status: str = "ok") -> Verdict:
    return Verdict(
        judge="training_audit",
        judge_version="v2",
        status=status,  # type: ignore[arg-type]
        scores={"process_score": score},
        violations=tuple(
            Violation(code="unanswered", message=f"{rule} fired", rule=rule) for rule in violated
        ),
    )


def test_case_scoring__reads_the_score_and_a_pass_from_a_verdict() -> None:
    scoring = CaseScoring()
    assert scoring.of(_verdict(0.7), ("R5",)) == (0.7, True)
    assert scoring.of(_verdict(0.7, "R3"), ("R5",)) == (0.7, True)  # not the case's rule
    assert scoring.of(_verdict(0.7, "R5"), ("R5",)) == (0.7, False)
    assert scoring.of(_verdict(0.7, "R3"), ()) == (0.7, False)  # no rules: no violation at all
    assert scoring.of(_verdict(0.7, status="failed"), ("R5",)) == (0.0, False)
    assert scoring.of(_verdict(0.7, status="error"), ("R5",)) == (None, False)
    assert scoring.of(None, ("R5",)) == (None, False)
    assert CaseScoring(passes="score_at_least", threshold=0.5).of(_verdict(0.4)) == (0.4, False)


def test_a_round_rejudged__is_decided_again_from_the_other_versions_verdicts() -> None:
    a, b = PromptVersion.of("harness.policy", "a"), PromptVersion.of("harness.policy", "b")
    live = tuple(
        PairedResult(
            case="dead_relu",
            seed=seed,
            rules=("R5",),
            champion_session=f"c{seed}",
            proposal_session=f"p{seed}",
            champion_score=0.2,
            proposal_score=0.6,
            champion_passed=False,
            proposal_passed=True,
        )
        for seed in (0, 1)
    )
    rule = PromotionRule()
    promoted, reason, figures = rule.judge(live)
    decision = PromptDecision(
        target="harness.policy",
        loop="loop-1",
        round=1,
        champion=a.digest,
        proposal=b.digest,
        rule=rule,
        pairs=live,
        figures=figures,
        promoted=promoted,
        reason=reason,
    )
    assert decision.promoted
    # the new judge sees the proposal's R5 answer as a violation on seed 1: no longer promoted
    verdicts = {
        "c0": _verdict(0.2, "R5"),
        "p0": _verdict(0.6),
        "c1": _verdict(0.5),
        "p1": _verdict(0.3, "R5"),
    }
    again = decision.rejudged(verdicts, "v2")
    assert again.judge_version == "v2" and not again.promoted
    assert again.reason == "keep: the proposal regressed dead_relu (seed 1)"
    assert [(p.champion_score, p.proposal_score) for p in again.pairs] == [(0.2, 0.6), (0.5, 0.3)]
    # a session the replay did not judge leaves its pair unscored
    missing = decision.rejudged({k: v for k, v in verdicts.items() if k != "p0"}, "v2")
    assert not missing.promoted and "unscored (dead_relu (seed 0))" in missing.reason
    # the same verdicts as the live ones give the same decision
    same = {
        "c0": _verdict(0.2, "R5"),
        "p0": _verdict(0.6),
        "c1": _verdict(0.2, "R5"),
        "p1": _verdict(0.6),
    }
    assert decision.rejudged(same, "v2").model_copy(update={"judge_version": "live"}) == decision

    # reviewers who find the proposal's answers worse overrule the judge; one unreviewed run
    # leaves its pair unscored, so people decide a round only when they judged every run
    reviewed = {"c0": (1.0, True), "p0": (0.0, False), "c1": (0.75, True), "p1": (0.5, False)}
    by_people = decision.reviewed_again(reviewed)
    assert by_people.judge_version == "human" and not by_people.promoted
    assert [(p.champion_passed, p.proposal_passed) for p in by_people.pairs] == [(True, False)] * 2
    assert by_people.figures.mean_difference == pytest.approx(-0.625)
    unreviewed = decision.reviewed_again({k: v for k, v in reviewed.items() if k != "c1"})
    assert "unscored (dead_relu (seed 1))" in unreviewed.reason


def _review(prefer: str | None, *reasons: str) -> Verdict:
    if prefer is None:
        return Verdict(
            judge="llm:prompt_review", judge_version="1", status="error", error="the model failed"
        )
    return Verdict(
        judge="llm:prompt_review",
        judge_version="1",
        status="ok",
        details={"verdict": {"prefer": prefer, "reasons": list(reasons)}},
    )


def test_a_reviewer__counts_only_when_the_rule_gives_it_a_veto() -> None:
    better = pairs([0.05, 0.2, 0.1])
    assert PromotionRule().judge(better, _review("champion", "overfitted"))[0]
    veto = PromotionRule(review_veto=True)
    assert "the reviewer prefers the proposal" in veto.describe()
    assert veto.judge(better, _review("proposal", "clearer"))[0]
    kept = veto.judge(better, _review("champion", "drops R2", "overfitted"))
    assert kept[:2] == (False, "keep: the reviewer prefers the champion: drops R2; overfitted")
    assert veto.judge(better, _review(None))[1] == (
        "keep: the reviewer's verdict is required and the model failed"
    )
    assert veto.judge(better)[1] == "keep: the reviewer's verdict is required and none was given"
    # the measured rule comes first: a reviewer cannot promote a proposal the figures keep out
    assert not veto.judge(pairs([0.0, 0.0]), _review("proposal", "nicer"))[0]


def test_a_single_pair__keeps_the_champion_however_large_its_gain() -> None:
    promoted, reason, figures = PromotionRule().judge(pairs([0.4]))
    assert not promoted and reason == "keep: 1 scored pair(s), the rule needs at least 2"
    assert figures.lower == figures.upper == pytest.approx(0.4)  # no width: no evidence of noise
    assert PromotionRule(min_pairs=1).judge(pairs([0.4]))[0]


def test_the_interval__reads_exact_nearest_rank_quantiles() -> None:
    # 2,000 resampled means of 0..1999 spaced values: the 2.5% and 97.5% nearest ranks are the
    # 50th and 1950th smallest, whatever the float rounding of 0.025 * 2000
    rule = PromotionRule(resamples=2000)
    differences = [float(i) for i in range(40)]
    lower, upper = rule.interval(differences)
    again = sorted(
        sum(differences[int(r * 40)] for r in draws) / 40 for draws in _draws(rule.seed, 2000, 40)
    )
    assert (lower, upper) == (again[49], again[1949])


def _draws(seed: int, resamples: int, n: int) -> list[list[float]]:
    import random

    rng = random.Random(seed)
    return [[rng.random() for _ in range(n)] for _ in range(resamples)]
