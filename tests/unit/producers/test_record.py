"""`Session.record(model)`: a payload model handed on as it is writes the bytes its shortcut,
or its dump, writes; the session's bookkeeping follows; what a session does not record that way
is refused at the call; and a model the sender refuses is reported as a mapping."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from rolltape.producers import EventsRejectedError, Recorder, Session
from rolltape.producers import _recorder as recorder_module
from rolltape.producers import _session as session_module
from rolltape.producers.privacy import Redaction, RedactionRule
from rolltape.schemas import (
    Decision,
    Detection,
    EvaluatedItem,
    Evaluation,
    Feedback,
    Goal,
    Metric,
    ModelError,
    PairedResult,
    PromotionFigures,
    PromotionRule,
    PromptDecision,
    PromptPromotion,
    PromptVersion,
    RemedyParams,
    Reward,
    RuleFigures,
    RulesetEvaluation,
    RuleSetFigures,
    SessionEnded,
    ToolCall,
    ToolParseError,
    ToolResult,
    Turn,
    Verdict,
    Violation,
    WorldSnapshot,
    decode,
    read_event,
)
from rolltape.schemas.privacy import ContentKey, KeyEncryptionKey
from tests.support.spool import drain

KEK = KeyEncryptionKey(b"k" * 32)
VERSION = PromptVersion.of("env.demo.system", "Answer briefly.", technique="manual")
PROPOSAL = PromptVersion.of(
    "env.demo.system", "Answer briefly, then check.", parents=(VERSION.digest,)
)
FIGURES = PromotionFigures(pairs=2, scored=2, mean_difference=0.25, lower=0.1, upper=0.4)
PAIRS = (
    PairedResult(case="c1", seed=1, rules=("R1",), champion_score=0.5, proposal_score=0.75),
    PairedResult(case="c2", seed=2, champion_passed=True, proposal_passed=True),
)
VERDICT = Verdict(
    judge="llm:helpfulness",
    judge_version="live",
    status="ok",
    scores={"helpfulness": 0.8},
    violations=(Violation(code="V1", message="terse", rule="R2", evidence=("ab" * 32,)),),
    counts={"turns": 3},
    details={"notes": ["a", "b"], "nested": {"k": (1, 2)}, "n": None},
)

# (a payload model, the call that recorded it before `record`: its shortcut, or its dump)
CASES: list[tuple[BaseModel, Callable[[Session, Any], object]]] = [
    (
        Turn(role="assistant", content="hi", token_ids=(1, 2), logprobs=(-0.5, -0.25)),
        lambda s, m: s.turn("assistant", "hi", token_ids=[1, 2], logprobs=[-0.5, -0.25]),
    ),
    (
        Turn(role="user", content="plain"),
        lambda s, m: s.turn("user", "plain"),
    ),
    (
        Turn(
            role="assistant",
            content="answer",
            reasoning="think",
            prompt_tokens=12,
            completion_tokens=3,
            prompt_token_ids=(5, 6),
            finish_reason="stop",
            model="m-1",
            latency_ms=12.5,
        ),
        lambda s, m: s.turn(
            "assistant",
            "answer",
            reasoning="think",
            prompt_tokens=12,
            completion_tokens=3,
            prompt_token_ids=[5, 6],
            finish_reason="stop",
            model="m-1",
            latency_ms=12.5,
        ),
    ),
    (
        ToolCall(id="call-1", name="search", arguments={"q": "x", "k": [1, 2]}),
        lambda s, m: s.tool_call("search", {"q": "x", "k": [1, 2]}, call_id="call-1"),
    ),
    (
        ToolResult(call_id="call-1", content="found", success=False, error="e", duration_ms=2.5),
        lambda s, m: s.tool_result("call-1", "found", success=False, error="e", duration_ms=2.5),
    ),
    (
        Reward(value=0.5, components={"a": 0.25}, source="env"),
        lambda s, m: s.reward(0.5, components={"a": 0.25}, source="env"),
    ),
    (
        Feedback(score=1.0, text="good", about_seq=2),
        lambda s, m: s.feedback(score=1.0, text="good", about_seq=2),
    ),
    (
        Decision(
            epoch=3,
            event_type="hyperparameter_change",
            cites=("R1", "R4"),
            justification="loss rose",
            remedy_direction="decrease_lr",
            remedy_params=RemedyParams(lr_new=0.01, edit_op="none", edit_to="none"),
        ),
        lambda s, m: s.decision(**m.model_dump()),
    ),
    (
        ModelError(error_type="RateLimitError", message="slow down", status=429),
        lambda s, m: s._record("events", "model_error", m.model_dump()),
    ),
    (
        ToolParseError(family="qwen", raw="<tool_call>{", error="bad json", offset=11),
        lambda s, m: s._record("events", "tool_parse_error", m.model_dump()),
    ),
    (VERDICT, lambda s, m: s.verdict(m.model_dump())),
    (VERSION, lambda s, m: s.prompt_version(m.model_dump())),
    (
        PromptPromotion(
            target=VERSION.target,
            version=PROPOSAL.digest,
            replaces=VERSION.digest,
            reason="round 1",
            figures={"lower": 0.1},
        ),
        lambda s, m: s.prompt_promotion(m.model_dump()),
    ),
    (
        PromptDecision(
            target=VERSION.target,
            loop="loop-1",
            round=1,
            champion=VERSION.digest,
            proposal=PROPOSAL.digest,
            rule=PromotionRule(),
            pairs=PAIRS,
            review=VERDICT,
            figures=FIGURES,
            promoted=True,
            reason="promoted: lower bound > 0",
        ),
        lambda s, m: s.prompt_decision(m.model_dump(mode="json")),
    ),
    (
        Evaluation(
            environment="bugfix",
            split="test",
            model="m",
            items=2,
            scored=2,
            passed=1,
            mean_reward=0.5,
            pass_rate=0.5,
            rollouts=(EvaluatedItem(item_id="i1", session_id="s1", reward=1.0, passed=True),),
        ),
        lambda s, m: s.evaluation(m.model_dump(mode="json")),
    ),
    (
        RulesetEvaluation(
            ruleset={"name": "default", "rules": [{"id": "R1", "threshold": 2.5}]},
            label="default",
            task="mnist",
            healthy=("h1",),
            seeds=(1, 2),
            figures=RuleSetFigures(
                ruleset="default",
                healthy_runs=2,
                rules=(
                    RuleFigures(rule="R1", healthy_epochs=10, false_alarms=0, longest_streak=0),
                ),
                detections=(
                    Detection(
                        scenario="lr_high", rule="R1", seeds=2, detected=2, first_epochs=(3, None)
                    ),
                ),
            ),
            goals=(Goal(goal="no false alarms", met=True, detail="0 of 10"),),
        ),
        lambda s, m: s.ruleset_evaluation(m.model_dump(mode="json")),
    ),
]


def _recorded(
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    calls: Callable[[Session], None],
    recorder: dict[str, Any],
) -> list[bytes]:
    """The events chain a recorder spools for `calls` on one session, with the clock fixed."""
    monkeypatch.setattr(recorder_module, "_time_ns", itertools.count(1_700_000_000, 1000).__next__)
    rec = Recorder(None, spool_dir=folder, spool_after_s=0.0, **recorder)
    subject = "user-1" if "kek" in recorder else None
    with rec.session("record", session_id="record-1", subject=subject) as s:
        calls(s)
    assert rec.close(10).rejected == 0
    return [v for v in drain(folder) if decode(v).get("stream") == "events"]


EXTRA = Turn(role="user", content="mail me at jane@example.com")


def _by_shortcuts(s: Session) -> None:
    for model, call in CASES:
        call(s, model)
    s.turn("user", EXTRA.content)


def _by_record(s: Session) -> None:
    for model, _ in CASES:
        s.record(model)
    s.record(EXTRA)


@pytest.mark.parametrize(
    "recorder",
    [
        pytest.param({}, id="one sender"),
        pytest.param({"senders": 2}, id="sender processes"),
        pytest.param({"kek": KEK}, id="sealed content"),
        pytest.param(
            {
                "redaction": Redaction(
                    rules=(
                        RedactionRule(field="turn.content", action="mask", patterns=("email",)),
                        RedactionRule(field="tool_call.arguments", action="drop"),
                    )
                )
            },
            id="redaction",
        ),
    ],
)
def test_record__writes_the_bytes_its_shortcut_or_its_dump_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorder: dict[str, Any]
) -> None:
    key = ContentKey.generate()  # the same data key for both sessions: the same sealed bytes
    monkeypatch.setattr(ContentKey, "generate", classmethod(lambda cls: key))
    before = _recorded(tmp_path / "before", monkeypatch, _by_shortcuts, recorder)
    after = _recorded(tmp_path / "after", monkeypatch, _by_record, recorder)
    assert len(after) == len(CASES) + 3  # session_started, the cases, the extra turn, ended
    assert after == before
    types = [read_event(v).type for v in after[1:-2]]
    assert types == [session_module._RECORDED[type(model)] for model, _ in CASES]
    extra = read_event(after[-2]).payload
    if "kek" in recorder:
        assert extra["content"] == "" and extra["sealed"]
    if "redaction" in recorder:
        assert extra["content"] == "mail me at [email]"


def test_record__a_tool_call_is_open_until_its_result_is_recorded(tmp_path: Path) -> None:
    rec = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0)
    with rec.session("calls") as s:
        s.record(ToolCall(id="c-1", name="search", arguments={"q": "x"}))
        assert s._claim_call("search", {"q": "x"}) == "c-1"
        s.record(ToolCall(id="c-2", name="search", arguments={"q": "y"}))
        s.record(ToolResult(call_id="c-2", content="found"))
        assert s._claim_call("search", {"q": "y"}) is None and "c-2" in s._answered
    rec.close(5)


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (SessionEnded(status="completed"), "Session.end()"),
        (
            WorldSnapshot.of((), max_file_bytes=1, max_total_bytes=1),
            "Session.world(root)",
        ),
        (Metric(epoch=0), "training monitor"),
        ({"role": "user", "content": "hi"}, "not dict"),
    ],
)
def test_record__refuses_at_the_call_what_a_session_does_not_record_this_way(
    tmp_path: Path, payload: Any, says: str
) -> None:
    rec = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0)
    s = rec.session("refused")
    with pytest.raises(TypeError, match=r"Session\.record") as info:
        s.record(payload)
    assert says in str(info.value)
    s.end()
    assert rec.close(5).sealed == 2


def test_record__a_model_the_sender_refuses_is_reported_as_its_dump(tmp_path: Path) -> None:
    rec = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0)
    s = rec.session("refused by the sender", session_id="refused-1")
    s.record(Verdict(judge="j", judge_version="v", status="ok", details={"x": object()}))
    s.record(Turn(role="user", content="still recorded"))
    with pytest.raises(EventsRejectedError) as info:
        rec.flush(10)
    (rejected,) = info.value.rejected
    assert rejected.type == "verdict" and rejected.payload["judge"] == "j"
    s.end()
    rec.close(5)
    assert [read_event(v).type for v in drain(tmp_path)] == [
        "session_started",
        "turn",
        "session_ended",
    ]
