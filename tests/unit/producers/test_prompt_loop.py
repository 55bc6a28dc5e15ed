"""The prompt loop without a broker: the tuner over real HTTP (a local OpenAI-compatible server),
a tester whose scores follow the prompt's text, the loop's events read back from the spool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from rolltape.producers import PromptLoopError, Recorder
from rolltape.producers.prompts import (
    TUNER_INSTRUCTIONS,
    Case,
    CaseResult,
    PromptLoop,
    Suite,
    Tuner,
    estimate,
)
from rolltape.projections import fold_prompts
from rolltape.schemas import CaseScoring, PromotionRule, PromptVersion, Verdict, read_event
from rolltape.schemas.clients import ModelEndpoint
from tests.support.openai_server import OpenAICompatibleServer
from tests.unit.producers.recorded import spooled_records

TARGET = "harness.policy"
SUITE = Suite(
    learn=(Case(name="learned", seed=100),),
    heldout=(Case(name="secret", seed=0), Case(name="secret", seed=1), Case(name="hidden", seed=0)),
)


class MarkerTester:
    """Scores 0.8 when the prompt says BETTER, else 0.5; fails `secret` seed 1 when it says
    WORSE. Records what it ran."""

    max_calls_per_case = 3
    scoring = CaseScoring(passes="score_at_least", threshold=0.5)

    def __init__(self) -> None:
        self.ran: list[tuple[str, Case, dict[str, Any]]] = []

    def run(self, version: PromptVersion, case: Case, labels: dict[str, Any]) -> CaseResult:
        self.ran.append((version.digest, case, labels))
        worse = "WORSE" in version.content and case == Case(name="secret", seed=1)
        return CaseResult(
            case=case,
            session_id=f"{labels['prompt_loop']}-{len(self.ran)}",
            score=0.8 if "BETTER" in version.content else 0.5,
            passed=not worse,
            failures=(f"{case.name} failed R{case.seed % 7 + 1}",),
            model_calls=2,
        )


def tuner_server(proposals: list[dict[str, str]], briefs: list[str]) -> OpenAICompatibleServer:
    def reply(body: dict[str, Any]) -> Any:
        assert body["messages"][0]["content"] == TUNER_INSTRUCTIONS
        assert body["response_format"]["type"] == "json_schema"
        briefs.append(body["messages"][1]["content"])
        if not proposals:
            return (500, "the tuner is down")
        return json.dumps(proposals.pop(0))

    return OpenAICompatibleServer(reply)


def _loop(tmp_path: Path, server: OpenAICompatibleServer, tester: MarkerTester) -> PromptLoop:
    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0, principal="agent")
    tuner = Tuner(ModelEndpoint(base_url=server.base_url, model="tuner", timeout_s=5), recorder)
    return PromptLoop(recorder, tuner, tester, target=TARGET, suite=SUITE)


def test_the_loop__keeps_the_champion_against_a_regression_and_promotes_a_clear_win(
    tmp_path: Path,
) -> None:
    base = PromptVersion.of(TARGET, "Act on the rule.", technique="base")
    proposals = [
        {"technique": "few_shot", "rationale": "examples", "prompt": "Act. BETTER WORSE"},
        {"technique": "negative_constraint", "rationale": "never defer", "prompt": "Act. BETTER"},
    ]
    briefs: list[str] = []
    tester = MarkerTester()
    with tuner_server(proposals, briefs) as server:
        loop = _loop(tmp_path, server, tester)
        result = loop.run(base, 2)
        loop.recorder.close(10)
    first, second = result.rounds
    assert not first.decision.promoted
    assert first.decision.reason == "keep: the proposal regressed secret (seed 1)"
    assert second.decision.promoted and result.champion == second.proposal
    assert second.proposal.parents == (base.digest,)  # round 1 kept the base
    # the champion's held-out runs are reused while it stays champion; learning runs once
    phases = [(labels["prompt_role"], labels["prompt_phase"]) for _, _, labels in tester.ran]
    assert phases.count(("champion", "learn")) == 1
    assert phases.count(("champion", "heldout")) == 3
    assert phases.count(("proposal", "heldout")) == 6
    assert result.runs == 10 and result.model_calls == 2 + 10 * 2
    assert result.runs <= estimate(SUITE, tester.max_calls_per_case, 2).runs
    # the tuner reads the learning cases' failures and the scoreboard, never a held-out case
    assert "learned (seed 100): learned failed R3" in briefs[0]
    assert not any(name in brief for name in ("secret", "hidden") for brief in briefs)
    assert (
        "round 1: few_shot (examples): held-out pass rate 1.00 -> 0.67, mean score 0.50 -> "
        "0.80; kept the champion: the proposal regressed 1 held-out case(s)" in briefs[1]
    )
    # the log holds the whole story, in chain order
    events = [read_event(v) for v in spooled_records(tmp_path / "spool")]
    loop_events = [e.type for e in events if e.session_id == result.loop]
    assert loop_events == [
        "session_started",
        "prompt_version",  # the start
        "prompt_version",
        "prompt_decision",
        "prompt_version",
        "prompt_decision",
        "prompt_promotion",
        "session_ended",
    ]
    history = fold_prompts((e.session_id, e) for e in events)[TARGET]
    assert history.champion is not None and history.champion.version == second.proposal
    assert [(t.technique, t.wins, t.losses) for t in history.scoreboard()] == [
        ("few_shot", 0, 1),
        ("negative_constraint", 1, 0),
    ]
    tuner_sessions = {e.session_id for e in events if e.session_id.endswith("-tuner")}
    assert tuner_sessions == {f"{result.loop}-r1-tuner", f"{result.loop}-r2-tuner"}


def test_a_tuner_that_fails__stops_the_loop_with_the_judged_rounds_on_the_log(
    tmp_path: Path,
) -> None:
    base = PromptVersion.of(TARGET, "Act on the rule.")
    proposals = [{"technique": "rewrite", "rationale": "r", "prompt": "Act. BETTER"}]
    with tuner_server(proposals, []) as server:
        loop = _loop(tmp_path, server, MarkerTester())
        with pytest.raises(PromptLoopError, match="the tuner's endpoint failed in round 2"):
            loop.run(base, 3)
        loop.recorder.close(10)
    events = [read_event(v) for v in spooled_records(tmp_path / "spool")]
    history = fold_prompts((e.session_id, e) for e in events)[TARGET]
    assert len(history.decisions) == 1 and history.decisions[0].decision.promoted
    ended = [e.body for e in events if e.type == "session_ended"]
    assert {e.status for e in ended} >= {"failed"}  # the loop's session and round 2's tuner


def test_a_proposal_the_tuner_cannot_shape__is_an_error_naming_the_cause(tmp_path: Path) -> None:
    base = PromptVersion.of(TARGET, "Act on the rule.")
    proposals = [{"technique": "telepathy", "rationale": "r", "prompt": "p"}]
    with tuner_server(proposals, []) as server:
        loop = _loop(tmp_path, server, MarkerTester())
        with pytest.raises(
            PromptLoopError, match="no valid proposal in round 1: technique: Input should be"
        ):
            loop.run(base, 1)
        loop.recorder.close(10)


def test_a_reviewer__judges_every_round_and_its_veto_keeps_the_champion(tmp_path: Path) -> None:
    base = PromptVersion.of(TARGET, "Act on the rule.")
    proposals = [{"technique": "rewrite", "rationale": "r", "prompt": "Act. BETTER"}]
    seen: list[tuple[str, str, int, float | None, str]] = []

    def reviewer(champion, proposal, pairs, figures, loop_session):  # type: ignore[no-untyped-def]
        seen.append((champion.content, proposal.content, len(pairs), figures.lower, loop_session))
        return Verdict(
            judge="llm:prompt_review",
            judge_version="1",
            status="ok",
            details={"verdict": {"prefer": "champion", "reasons": ["overfitted to the suite"]}},
        )

    with tuner_server(proposals, []) as server:
        recorder = Recorder(
            None, spool_dir=tmp_path / "spool", spool_after_s=0.0, principal="agent"
        )
        tuner = Tuner(ModelEndpoint(base_url=server.base_url, model="t", timeout_s=5), recorder)
        loop = PromptLoop(
            recorder,
            tuner,
            MarkerTester(),
            target=TARGET,
            suite=SUITE,
            rule=PromotionRule(review_veto=True),
            reviewer=reviewer,
        )
        result = loop.run(base, 1)
        recorder.close(10)
    (only,) = result.rounds
    assert not only.decision.promoted and only.decision.outcome == "kept: reviewer"
    assert (
        only.decision.reason == "keep: the reviewer prefers the champion: overfitted to the suite"
    )
    assert only.decision.review is not None and only.decision.review.judge == "llm:prompt_review"
    assert seen == [("Act on the rule.", "Act. BETTER", 3, pytest.approx(0.3), result.loop)]
    assert result.model_calls == 1 + 7 * 2 + 1  # tuner, 7 runs of 2 policy calls, reviewer
    with pytest.raises(PromptLoopError, match="requires a reviewer"):
        PromptLoop(recorder, tuner, MarkerTester(), target=TARGET, suite=SUITE,
                   rule=PromotionRule(review_veto=True))  # fmt: skip


def test_a_suite__never_learns_from_a_case_that_decides() -> None:
    with pytest.raises(ValidationError, match="both learned from and held out"):
        Suite(learn=(Case(name="a", seed=1),), heldout=(Case(name="a", seed=2),))
    with pytest.raises(ValidationError, match=r"b \(seed 0\) named more than once"):
        Suite(learn=(), heldout=(Case(name="b"), Case(name="b")))


def test_the_estimate__bounds_runs_and_calls_before_anything_runs() -> None:
    bound = estimate(SUITE, 3, 2)
    # start: 1 learning + 3 held-out runs; per round 3 proposal runs; a win adds 1 learning run
    assert bound.runs == 1 + 3 + 2 * 3 + 1 and bound.tuner_calls == 2
    assert bound.model_calls == 2 + 11 * 3
    assert bound.describe() == (
        "at most 35 model calls (2 tuner, up to 33 policy) and 11 test runs over 2 round(s)"
    )
    reviewed = estimate(SUITE, 3, 2, review=True)
    assert reviewed.model_calls == 37 and "2 tuner, 2 reviewer, up to 33 policy" in (
        reviewed.describe()
    )
