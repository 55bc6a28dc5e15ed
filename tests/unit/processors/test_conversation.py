"""The one reading of a conversation: what each view is told, with the decisions made."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel

from rolltape.processors.conversation import EVENT_TYPES, Conversation, Reader, View, read
from rolltape.schemas import (
    PAYLOAD_MODELS,
    Feedback,
    ModelError,
    Reward,
    SessionEnded,
    SessionStarted,
    ToolCall,
    ToolResult,
    Turn,
)


class Log(View[str]):
    """Every part told, as (part, evidence, what was decided)."""

    def __init__(self) -> None:
        self.told: list[tuple[str, str, Any]] = []

    def started(self, start: SessionStarted, at: str) -> None:
        self.told.append(("started", at, None))

    def turn(self, turn: Turn, at: str) -> None:
        self.told.append(("turn", at, turn.role))

    def call(self, call: ToolCall, at: str, *, opens: bool, repeated: bool) -> None:
        self.told.append(("call", at, {"opens": opens, "repeated": repeated}))

    def answer(self, result: ToolResult, at: str, *, failed: bool) -> None:
        self.told.append(("answer", at, {"failed": failed}))

    def stray(self, result: ToolResult, at: str, *, answered: bool) -> None:
        self.told.append(("stray", at, {"answered": answered}))

    def reward(self, reward: Reward, at: str) -> None:
        self.told.append(("reward", at, reward.value))

    def ended(self, end: SessionEnded, at: str) -> None:
        self.told.append(("ended", at, end.status))


def tell(*payloads: BaseModel) -> list[tuple[str, str, Any]]:
    conversation, log = Conversation(), Log()
    for n, payload in enumerate(payloads):
        conversation.tell(payload, f"e{n}", log)
    return log.told


def call(cid: str, name: str = "calc") -> ToolCall:
    return ToolCall(id=cid, name=name)


def test_conversation__a_call_with_no_assistant_turn_open_opens_a_message() -> None:
    told = tell(
        Turn(role="user", content="go"),
        call("a"),
        call("b"),
        Turn(role="assistant", content="x"),
        call("c"),
        Turn(role="user", content="again"),
        call("d"),
    )
    opened = [(at, d["opens"]) for part, at, d in told if part == "call"]
    assert opened == [("e1", True), ("e2", False), ("e4", False), ("e6", True)]


def test_conversation__results_find_their_call_by_id_and_only_the_first_answers() -> None:
    told = tell(
        call("a"),
        call("b"),
        ToolResult(call_id="b", content="2"),
        ToolResult(call_id="a", content="1"),
        ToolResult(call_id="a", content="again"),
        ToolResult(call_id="nope", content="?"),
    )
    assert told[2:] == [
        ("answer", "e2", {"failed": False}),
        ("answer", "e3", {"failed": False}),
        ("stray", "e4", {"answered": True}),
        ("stray", "e5", {"answered": False}),
    ]


def test_conversation__a_repeated_call_id_is_told_as_such_and_stays_with_the_first_call() -> None:
    told = tell(
        call("a"),
        Turn(role="user", content="u"),
        call("a", name="other"),
        ToolResult(call_id="a", content="1"),
    )
    assert told[2] == ("call", "e2", {"opens": True, "repeated": True})
    assert told[3] == ("answer", "e3", {"failed": False})


def test_conversation__a_result_fails_by_the_recorder_or_by_the_hermes_rule() -> None:
    results = [
        ToolResult(call_id="c", content="fine", success=False),
        ToolResult(call_id="c", content="fine", error="timeout"),
        ToolResult(call_id="c", content='{"error": "boom"}'),
        ToolResult(call_id="c", content='{"success": false}'),
        ToolResult(call_id="c", content='{"content": {"error": "deep"}}'),
        ToolResult(call_id="c", content="  "),
        ToolResult(call_id="c", content="Error: disk full"),
        ToolResult(call_id="c", content='{"error": null, "output": "ok"}'),
    ]
    failed = [tell(call("c"), result)[1][2]["failed"] for result in results]
    assert failed == [True] * 7 + [False]


def test_conversation__only_the_first_session_end_is_told() -> None:
    told = tell(SessionEnded(status="completed"), SessionEnded(status="failed"))
    assert told == [("ended", "e0", "completed")]


def test_conversation__events_outside_the_conversation_are_not_told() -> None:
    assert tell(ModelError(error_type="X", message="m")) == []
    assert "model_error" not in EVENT_TYPES and "session_resumed" not in EVENT_TYPES
    assert {PAYLOAD_MODELS[name] for name in EVENT_TYPES} >= {Turn, ToolCall, ToolResult, Feedback}


def test_conversation__its_state_is_small_json_and_resumes_where_it_stood() -> None:
    first, log = Conversation(), Log()
    first.tell(Turn(role="assistant", content="x"), "e0", log)
    first.tell(call("a"), "e1", log)
    saved = orjson.dumps(first.__dict__)
    assert orjson.loads(saved) == {"assistant_open": True, "calls": {"a": False}, "ended": False}
    resumed = Conversation(**orjson.loads(saved))
    resumed.tell(call("b"), "e2", log)
    resumed.tell(ToolResult(call_id="a", content="1"), "e3", log)
    assert log.told[-2:] == [
        ("call", "e2", {"opens": False, "repeated": False}),
        ("answer", "e3", {"failed": False}),
    ]


def test_read__tells_a_reader_the_events_as_recorded_with_no_book() -> None:
    class Calls(Reader[str]):
        def __init__(self) -> None:
            self.seen: list[str] = []

        def call(self, call: ToolCall, at: str) -> None:
            self.seen.append(f"call {call.id}")

        def result(self, result: ToolResult, at: str) -> None:
            self.seen.append(f"result {result.call_id}")

    reader = Calls()
    for payload in (call("a"), call("a"), ToolResult(call_id="z", content=""), Reward(value=1)):
        read(payload, "e", reader)
    assert reader.seen == ["call a", "call a", "result z"]
