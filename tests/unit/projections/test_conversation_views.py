"""The three views of one conversation agree: the export fold, the worker's reward filters and
the transcript an LLM judge reads, on a session made of the cases they used to disagree on."""

from __future__ import annotations

from typing import Any

import orjson

from rolltape.processors import Emitted, JudgeRequest, ProcessorConfig, Requested
from rolltape.processors.audit import InputRecord
from rolltape.processors.judges import Transcript
from rolltape.projections import Trajectory, fold
from rolltape.schemas import decode, read_event
from tests.unit.processors.scripted import Tape, emitted, run

SID = "tricky"
TOOLS = [
    {"name": "calc", "parameters": {"type": "object"}},
    {"name": "search", "parameters": {"type": "object"}},
]
CONFIG = ProcessorConfig(rewards=("final_reward",), llm_judges=("answer_quality",))
FAILED = {
    "c-flag": {"content": "fine", "success": False},
    "c-error": {"content": "fine", "error": "timeout"},
    "c-json-error": {"content": '{"error": "boom"}'},
    "c-json-success": {"content": '{"success": false}'},
    "c-nested-error": {"content": '{"content": {"error": "deep"}}'},
    "c-empty": {"content": "  "},
    "c-error-text": {"content": "Error: disk full"},
}


def tricky(tape: Tape, *extra: tuple[str, dict[str, Any]]) -> list[InputRecord]:
    """The session, with `extra` events (type, payload) before its last turn."""
    records = [tape.start(SID, tools=TOOLS)]
    records.append(tape.event(SID, "turn", role="user", content="add and look up"))
    # A call before any assistant turn: it opens an assistant message of its own.
    records.append(tape.event(SID, "tool_call", id="c-ok", name="calc", arguments={"e": "1+1"}))
    records.append(tape.event(SID, "tool_result", call_id="c-ok", content="2"))
    # A newer producer's field on a turn and on a call.
    turn = {"role": "assistant", "content": "now search", "reasoning": "r", "confidence": 0.9}
    records.append(tape.sealed(SID, "events", "turn", turn))
    newer = {"id": "c-newer", "name": "search", "arguments": {"q": "x"}, "index": 0}
    records.append(tape.sealed(SID, "events", "tool_call", newer))
    records.append(tape.event(SID, "tool_result", call_id="c-newer", content='{"error": null}'))
    for cid, result in FAILED.items():
        records.append(tape.event(SID, "tool_call", id=cid, name="search", arguments={"q": cid}))
        records.append(tape.event(SID, "tool_result", call_id=cid, **result))
    # A result for no call, and a second result for an answered call.
    records.append(tape.event(SID, "tool_result", call_id="c-ghost", content="boo"))
    records.append(tape.event(SID, "tool_result", call_id="c-ok", content="again"))
    records += [tape.event(SID, kind, **payload) for kind, payload in extra]
    records.append(tape.event(SID, "turn", role="assistant", content="done"))
    records.append(tape.event(SID, "reward", value=1.0))
    return records + tape.end(SID)


def views(records: list[InputRecord]) -> tuple[Trajectory, dict[str, Any], Transcript, bytes]:
    outputs, _ = run(records, CONFIG)
    derived = [read_event(o.value) for o in outputs if isinstance(o, Emitted)]
    events = [read_event(r.value) for r in records if r.stream == "events"]
    (request,) = [o.value for o in outputs if isinstance(o, Requested)]
    (filtered,) = emitted(outputs, "filter_outcome")
    transcript = JudgeRequest.model_validate_json(request).transcript
    return fold(events, derived), filtered, transcript, request


def items(transcript: Transcript, kind: str) -> list[tuple[str, str]]:
    return [(item.role, item.text) for item in transcript.items if item.kind == kind]


def test_views__agree_on_calls_results_failures_and_turns_of_a_tricky_session() -> None:
    trajectory, filtered, transcript, _ = views(tricky(Tape()))
    calls = [call for message in trajectory.messages for call in message.tool_calls]
    assert [c.id for c in calls] == ["c-ok", "c-newer", *FAILED]

    # The same calls, in the same order.
    args = [c.raw_arguments or orjson.dumps(c.arguments).decode() for c in calls]
    assert items(transcript, "tool_call") == [(c.name, a) for c, a in zip(calls, args, strict=True)]
    assert filtered["tool_calls"] == len(calls)

    # The call before any assistant turn opened an assistant message; the transcript shows it
    # after the user's turn, as the message's only content.
    opened = trajectory.messages[1]
    assert (opened.role, opened.event_hash, [c.id for c in opened.tool_calls]) == (
        "assistant",
        None,
        ["c-ok"],
    )

    # Each call's first result, failed by the same rule, and nothing else.
    assert {c.id: c.result.success for c in calls if c.result} == {
        "c-ok": True,
        "c-newer": True,
        **{cid: False for cid in FAILED},
    }
    shown = dict(items(transcript, "tool_result"))
    assert shown == {
        c.id: (f"[failed: {c.result.error}] " if not c.result.success else "") + c.result.content
        for c in calls
        if c.result
    }
    assert shown["c-ok"] == "2"  # the second result for c-ok answers nothing
    failures = {name: stats.failure for name, stats in trajectory.tool_stats.items()}
    assert failures == {"calc": 0, "search": len(FAILED)}

    # The result for no call: listed by the export, not shown to the judge.
    ghost = next(r for r in tricky(Tape()) if b'"c-ghost"' in r.value)
    assert trajectory.unmatched_results == (decode(ghost.value)["hash"],)
    assert "c-ghost" not in shown

    # The same turns: the newer producer's turn counts in all three, the opened message in none.
    told = [m for m in trajectory.messages if m.event_hash is not None]
    assert items(transcript, "turn") == [(m.role, m.content) for m in told]
    assistant = [m for m in told if m.role == "assistant"]
    assert filtered["turns"] == len(assistant) == 2
    assert assistant[0].content == "now search" and assistant[0].reasoning == "r"


def test_views__the_judge_request_carries_the_transcript_without_its_reading_state() -> None:
    _, _, transcript, request = views(tricky(Tape()))
    assert b"conversation" not in request and b"assistant_open" not in request
    assert transcript.conversation.calls == {}


def test_views__a_repeated_call_id_keeps_the_first_call_but_the_filters_judge_both() -> None:
    again = ("tool_call", {"id": "c-ok", "name": "nope", "arguments": {}})
    trajectory, filtered, transcript, _ = views(tricky(Tape(), again))
    calls = [call for message in trajectory.messages for call in message.tool_calls]
    assert [c.name for c in calls if c.id == "c-ok"] == ["calc"]
    assert ("nope", "{}") not in items(transcript, "tool_call")
    # The filters read no results and keep no book of calls: every call the model made is
    # judged, so the hallucinated tool is reported and counted.
    assert filtered["tool_calls"] == len(calls) + 1
    assert [r["code"] for r in filtered["reasons"]] == ["unknown_tool"]
