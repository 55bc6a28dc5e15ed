"""Reward filters on crafted sessions: every reason against a session is reported with evidence."""

from __future__ import annotations

from typing import Any

from rolltape.processors import ProcessorConfig
from rolltape.processors.audit import InputRecord
from rolltape.processors.filters import FilterConfig
from tests.unit.processors.scripted import Tape, emitted, run

CALC = {
    "name": "calc",
    "parameters": {
        "type": "object",
        "properties": {"expr": {"type": "string"}},
        "required": ["expr"],
        "additionalProperties": False,
    },
}


def session(
    tape: Tape, *middle: tuple[str, dict[str, Any]], status: str = "completed"
) -> list[InputRecord]:
    sid = "a1"
    records = [tape.start(sid, tools=[CALC])]
    records += [tape.event(sid, t, **p) for t, p in middle]
    return records + tape.end(sid, status)


def outcome(records: list[InputRecord], **config: Any) -> dict[str, Any]:
    outputs, _ = run(records, ProcessorConfig(filters=FilterConfig(**config)))
    (result,) = emitted(outputs, "filter_outcome")
    return result


def codes(result: dict[str, Any]) -> list[str]:
    return [r["code"] for r in result["reasons"]]


ANSWER = ("turn", {"role": "assistant", "content": "4", "reasoning": "2+2 is 4"})


def test_filter__a_clean_completed_session_is_accepted() -> None:
    result = outcome(
        session(
            Tape(), ("tool_call", {"id": "c", "name": "calc", "arguments": {"expr": "2+2"}}), ANSWER
        )
    )
    assert result["accepted"] and result["reasons"] == []
    assert (
        result["config"].startswith("default@") and result["filter_version"] == "rolltape.filters/1"
    )


def test_filter__interrupted_and_failed_sessions_are_rejected_as_failure_data() -> None:
    for status in ("interrupted", "failed"):
        result = outcome(session(Tape(), ANSWER, status=status))
        assert not result["accepted"] and codes(result) == ["not_completed"]
        assert result["status"] == status


def test_filter__a_hallucinated_tool_name_is_rejected_with_the_call_as_evidence() -> None:
    tape = Tape()
    records = session(
        tape, ("tool_call", {"id": "c", "name": "web_search", "arguments": {}}), ANSWER
    )
    result = outcome(records)
    (reason,) = result["reasons"]
    assert reason["code"] == "unknown_tool" and "'web_search'" in reason["message"]
    from rolltape.schemas import decode

    assert reason["evidence"] == [decode(records[1].value)["hash"]]


def test_filter__arguments_that_violate_the_tool_schema_are_rejected() -> None:
    result = outcome(session(Tape(), ("tool_call", {"id": "c", "name": "calc", "arguments": {"expr": 4}}),
                             ("tool_call", {"id": "d", "name": "calc", "arguments": {}}), ANSWER))  # fmt: skip
    (reason,) = result["reasons"]
    assert reason["code"] == "invalid_arguments"
    assert reason["message"] == "calc: expr: 4 is not of type 'string' (and 1 more)"
    assert len(reason["evidence"]) == 2


def test_filter__unparsed_argument_text_is_invalid_arguments() -> None:
    call = {"id": "c", "name": "calc", "arguments": {}, "raw_arguments": "{expr: 2+2"}
    assert codes(outcome(session(Tape(), ("tool_call", call), ANSWER))) == ["invalid_arguments"]


def test_filter__reasoning_is_required_only_when_configured() -> None:
    bare = ("turn", {"role": "assistant", "content": "4"})
    assert outcome(session(Tape(), bare))["accepted"]
    assert codes(outcome(session(Tape(), bare), require_reasoning=True)) == ["no_reasoning"]


def test_filter__minimum_turns_and_minimum_reward() -> None:
    records = session(Tape(), ANSWER, ("reward", {"value": 0.2}))
    assert codes(outcome(records, min_turns=2, min_reward=0.5)) == ["low_reward", "too_few_turns"]
    assert codes(outcome(session(Tape(), ANSWER), min_reward=0.5)) == ["no_reward"]
    assert outcome(records, min_reward=0.1)["reward"] == 0.2


def test_filter__every_reason_is_reported_not_only_the_first() -> None:
    records = session(
        Tape(), ("tool_call", {"id": "c", "name": "nope", "arguments": {}}), status="failed"
    )
    assert codes(outcome(records)) == ["not_completed", "too_few_turns", "unknown_tool"]


def test_filter__a_judge_conversation_is_never_training_data() -> None:
    tape = Tape()
    records = [
        tape.start("j1", trainable=False, linked_session_id="a1"),
        tape.event("j1", *ANSWER[:1], **ANSWER[1]),
        *tape.end("j1"),
    ]
    assert codes(outcome(records)) == ["not_trainable"]


def test_filter__a_nan_reward_never_passes_a_minimum() -> None:
    records = session(Tape(), ANSWER, ("reward", {"value": float("nan")}))
    assert codes(outcome(records, min_reward=0.1)) == ["non_finite_reward"]
