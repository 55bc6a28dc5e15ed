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
        result["config"].startswith("default@") and result["filter_version"] == "rolltape.filters/2"
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


def test_filter__a_session_with_no_prompt_or_no_assistant_content_is_not_accepted() -> None:
    tape = Tape()
    empty_reply = ("turn", {"role": "assistant", "content": ""})
    records = [tape.start("e1", task=" "), tape.event("e1", *empty_reply[:1], **empty_reply[1])]
    assert codes(outcome(records + tape.end("e1"))) == ["no_assistant_content", "no_prompt"]
    asked = ("turn", {"role": "user", "content": "What is 2+2?"})
    records = [tape.start("e2", task=""), tape.event("e2", *asked[:1], **asked[1])]
    records.append(tape.event("e2", *ANSWER[:1], **ANSWER[1]))
    assert outcome(records + tape.end("e2"))["accepted"]  # the user's text is the prompt
    a_call = ("tool_call", {"id": "c", "name": "calc", "arguments": {"expr": "2+2"}})
    assert outcome(session(Tape(), a_call), min_turns=0)["accepted"]  # a call answers too
    assert outcome(session(Tape(), empty_reply), require_content=False)["accepted"]


def test_filter__a_session_its_producer_flagged_content_missing_is_not_accepted() -> None:
    tape = Tape()
    records = [tape.start("m1", tools=[CALC]), tape.event("m1", *ANSWER[:1], **ANSWER[1])]
    records += tape.end("m1", content_missing="2 inference spans carried no messages")
    result = outcome(records)
    (reason,) = result["reasons"]
    assert reason["code"] == "content_missing" and reason["message"].startswith("2 inference")
    from rolltape.schemas import decode

    assert reason["evidence"] == [decode(records[-1].value)["hash"]]
    assert outcome(records, require_content=False)["accepted"]


def test_filter__calls_in_a_session_that_declares_no_tools_are_observed_not_rejected() -> None:
    tape = Tape()
    call = ("tool_call", {"id": "c", "name": "weather", "arguments": {"city": "Paris"}})
    records = [tape.start("u1"), tape.event("u1", *call[:1], **call[1])]
    records += [tape.event("u1", *ANSWER[:1], **ANSWER[1]), *tape.end("u1")]
    result = outcome(records)
    assert result["accepted"] and result["reasons"] == []
    (seen,) = result["observed"]
    assert seen["code"] == "tools_undeclared"
    assert seen["message"] == "the session declares no tools; it called weather (1)"
    from rolltape.schemas import decode

    assert seen["evidence"] == [decode(records[1].value)["hash"]]
    # Declared tools still reject a name not among them.
    records = session(
        Tape(), ("tool_call", {"id": "d", "name": "weather", "arguments": {}}), ANSWER
    )
    assert codes(outcome(records)) == ["unknown_tool"] and outcome(records)["observed"] == []


def test_filter__a_state_saved_before_content_was_tracked_judges_no_content() -> None:
    """A worker upgraded mid-session reads filter states that never tracked the prompt or the
    reply: it cannot tell, so it holds neither against the session."""
    from rolltape.processors.filters import FilterState
    from rolltape.processors.filters import outcome as filter_outcome

    saved = FilterState(status="completed", turns=1)
    assert filter_outcome(saved, FilterConfig()).accepted
    fresh = FilterState(status="completed", turns=1, prompted=False, answered=False)
    codes = [r.code for r in filter_outcome(fresh, FilterConfig()).reasons]
    assert codes == ["no_assistant_content", "no_prompt"]
