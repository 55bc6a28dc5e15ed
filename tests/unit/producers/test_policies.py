"""Decision policies and the harness's choice of when to act: the playbook's remedies, an LLM
policy over real HTTP with strict structured output, and deferrals in precedence order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rolltape.producers import HarnessError
from rolltape.producers.training import (
    ArchitectureSpec,
    AttemptStart,
    DecisionContext,
    LLMPolicy,
    ScriptedPolicy,
)
from rolltape.producers.training._harness import _Episodes, downgraded, feedback_text, plan
from rolltape.schemas import PRECEDENCE, Metric, RuleEvaluation, RuleOutcome, Verdict, Violation
from rolltape.schemas.clients import ModelEndpoint
from tests.support.openai_server import OpenAICompatibleServer
from tests.unit.producers.recorded import Spooled


def evaluation(epoch: int, *fired: str, signals: dict[str, float] | None = None) -> RuleEvaluation:
    ordered = tuple(r for r in PRECEDENCE if r in fired)
    return RuleEvaluation.model_validate(
        {
            "epoch": epoch,
            "rules_version": "t",
            "ruleset": "t",
            "no_data": False,
            "fired": ordered,
            "top_class": None,
            "rules": {
                r: RuleOutcome(fired=r in fired, reason=f"{r} reason", signals=signals or {})
                for r in PRECEDENCE
            },
        }
    )


def context(rule: str, ev: RuleEvaluation, spec: ArchitectureSpec | None = None) -> DecisionContext:
    return DecisionContext(
        epoch=ev.epoch,
        rule=rule,  # type: ignore[arg-type]
        evaluation=ev,
        metric=Metric(epoch=ev.epoch, steps=10, train_loss=1.0),
        lr=0.1,
        batch_size=32,
        clip=None,
        architecture=spec or ArchitectureSpec(),
    )


@pytest.mark.parametrize(
    ("rule", "spec", "signals", "expected"),
    [
        ("R7", None, {}, ("hyperparameter_change", "decrease_lr", "none")),
        ("R6", None, {}, ("architecture_change", "add_bn_or_residual", "add_batchnorm")),
        (
            "R6",
            ArchitectureSpec(batchnorm=True),
            {},
            ("hyperparameter_change", "increase_lr", "none"),
        ),
        ("R5", None, {}, ("architecture_change", "swap_activation", "swap_activation")),
        ("R4", None, {}, ("architecture_change", "add_capacity", "add_block")),
        (
            "R1",
            None,
            {"update_to_param_ratio.ema": 1e-6},
            ("hyperparameter_change", "increase_lr", "none"),
        ),
        (
            "R1",
            None,
            {"update_to_param_ratio.ema": 0.5},
            ("hyperparameter_change", "decrease_lr", "none"),
        ),
        (
            "R2",
            None,
            {"grad_noise_scale.ema": 10.0},
            ("hyperparameter_change", "increase_batch_size", "none"),
        ),
        (
            "R2",
            None,
            {"grad_noise_scale.ema": 9000.0},
            ("hyperparameter_change", "decrease_batch_size", "none"),
        ),
        ("R3", None, {}, ("hyperparameter_change", "stop", "none")),
    ],
)
def test_scripted_policy__answers_each_rule_with_the_playbooks_remedy(
    rule: str,
    spec: ArchitectureSpec | None,
    signals: dict[str, float],
    expected: tuple[str, str, str],
) -> None:
    d = ScriptedPolicy().decide(context(rule, evaluation(3, rule, signals=signals), spec)).at(3)
    assert (d.event_type, d.remedy_direction, d.remedy_params.edit_op) == expected
    assert d.cites == (rule,) and d.epoch == 3 and f"{rule} reason" in d.justification
    if rule == "R7":
        assert (
            d.remedy_params.lr_new == pytest.approx(0.01) and d.remedy_params.clip_grad_norm == 1.0
        )
    if rule == "R2":
        assert d.remedy_params.batch_size_new in (16, 64)


def test_plan__acts_on_the_top_rule_and_defers_newly_fired_lower_ones() -> None:
    episodes = _Episodes()
    assert plan(evaluation(0), (), episodes, 5) == (None, [])
    assert plan(evaluation(1, "R5", "R1", "R2"), (), episodes, 5) == ("R5", ["R1", "R2"])
    # R5 keeps firing (its EMA lags): answered already, nothing new to say
    assert plan(evaluation(2, "R5", "R1", "R2"), (), episodes, 5) == (None, [])
    # R5 cleared: R1, deferred earlier, is now the top rule and gets its action
    assert plan(evaluation(3, "R1", "R2"), (), episodes, 5) == ("R1", [])
    # a stability rule joins: a new cross-class conflict is an obligation to act on its class
    assert plan(evaluation(4, "R7", "R1", "R2"), (), episodes, 5) == ("R7", [])
    # the top rule still firing long after its remedy: act again
    assert plan(evaluation(9, "R7", "R1", "R2"), (), episodes, 5) == ("R7", [])


def test_plan__waived_rules_are_neither_acted_on_nor_deferred() -> None:
    episodes = _Episodes()
    assert plan(evaluation(2, "R2", "R3"), ("R2",), episodes, 5) == ("R3", [])


def test_downgraded__records_no_action_with_the_reason() -> None:
    d = ScriptedPolicy().decide(context("R4", evaluation(2, "R4"))).at(2)
    down = downgraded(d, "the network already has the most blocks")
    assert down.event_type == "rule_triggered_no_action" and down.remedy_direction == "none"
    assert (
        down.cites == ("R4",)
        and "Not applied: the network already has the most blocks" in down.justification
    )


def test_feedback_text__lists_violations_with_rules_epochs_and_both_scores() -> None:
    from rolltape.producers.training import AttemptResult

    verdict = Verdict(
        judge="training_audit",
        judge_version="t",
        status="ok",
        scores={"process_score": 0.5, "accuracy_score": 0.8},
        violations=(Violation(code="missing_decision", message="R5 fired", rule="R5", epoch=3),),
    )
    text = feedback_text(
        AttemptResult(
            attempt=1,
            session_id="s",
            policy_session_id=None,
            verdict=verdict,
            epochs_run=8,
            decisions=2,
            applied=1,
            downgraded=1,
            test_accuracy=0.7,
        )
    )
    assert "process_score 0.500" in text and "accuracy_score 0.800" in text
    assert "missing_decision (rule R5 epoch 3): R5 fired" in text


def _decide_r5(body: dict[str, Any]) -> str:
    return json.dumps(
        {
            "event_type": "architecture_change",
            "cites": ["R5"],
            "justification": "dead units: swap to leaky_relu",
            "remedy_direction": "swap_activation",
            "remedy_params": {
                "lr_new": None,
                "edit_op": "swap_activation",
                "edit_to": "leaky_relu",
                "batch_size_new": None,
                "clip_grad_norm": None,
            },
        }
    )


def test_llm_policy__asks_with_strict_structured_output_and_records_the_conversation(
    tmp_path: Path,
) -> None:
    spooled = Spooled(tmp_path)
    with OpenAICompatibleServer(_decide_r5) as server:
        policy = LLMPolicy(
            ModelEndpoint(base_url=server.base_url, model="local-policy"), spooled.agent
        )
        policy.begin(
            AttemptStart(session_id="train-1", group_id="run-1", feedback=("Attempt 1: bad",))
        )
        decision = policy.decide(context("R5", evaluation(2, "R5")))
        policy.end(0.75)
    assert decision.remedy_params.edit_to == "leaky_relu"
    (request,) = server.requests
    schema = request["response_format"]["json_schema"]
    assert schema["strict"] is True and schema["schema"]["additionalProperties"] is False
    assert [m["role"] for m in request["messages"]] == ["system", "system", "user"]
    assert "Attempt 1: bad" in request["messages"][1]["content"]
    envelopes = spooled.envelopes()
    start = next(e for e in envelopes if e["type"] == "session_started")["payload"]
    assert start["linked_session_id"] == "train-1" and start["group_id"] == "run-1"
    assert start["trainable"] is True and start["kind"] == "agent"
    turns = [(e["payload"]["role"]) for e in envelopes if e["type"] == "turn"]
    assert turns == ["system", "system", "user", "assistant"]
    (reward,) = [e["payload"] for e in envelopes if e["type"] == "reward"]
    assert reward["value"] == 0.75 and reward["source"] == "training_audit"


def test_llm_policy__a_failed_call_is_an_error_never_a_made_up_decision(tmp_path: Path) -> None:
    spooled = Spooled(tmp_path)
    with OpenAICompatibleServer(lambda body: "not json at all") as server:
        policy = LLMPolicy(
            ModelEndpoint(base_url=server.base_url, model="local-policy"), spooled.agent
        )
        policy.begin(AttemptStart(session_id="train-1", group_id="run-1"))
        with pytest.raises(HarnessError, match="no decision"):
            policy.decide(context("R5", evaluation(2, "R5")))
        policy.end(None)
    feedback = [e["payload"]["text"] for e in spooled.envelopes() if e["type"] == "feedback"]
    assert len(feedback) == 1 and "policy call failed" in feedback[0]
