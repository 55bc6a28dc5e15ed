"""Conformance: what real instrumentations exported (otlp_conformance/, each case naming the
instrumentation's version and source) becomes the session the agent's calls describe, whichever
of spans and log records arrives first. The expectations below come from the agent run every
case records (otlp_conformance/README.md), not from rolltape's output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rolltape.producers import Recorder
from rolltape.producers.otlp import Journal, TraceIngest, decode, decode_logs
from tests.support.instrumented import conversation
from tests.support.otlp import by_session, envelopes

CASES = Path(__file__).with_name("otlp_conformance")
SYSTEM, USER = "You are a weather bot.", "Weather in Paris?"
MODEL = "gpt-4o-mini-2024-07-18"
REPLIES = [("", "tool_calls", 40, 12), ("Sunny in Paris.", "stop", 70, 5)] * 2
"""(content, finish reason, prompt tokens, completion tokens) of the four calls."""
CALLS = ["turn:assistant", "tool_call"]
FOUR_CALLS = [
    "turn:system", "turn:user", *CALLS, "tool_result", "turn:assistant", *CALLS,
    "turn:assistant",
]  # fmt: skip
"""The streamed repeat of the first request adds no message (it resends what is held); its
reply calls the tool again, and the last request's history is held already."""

WHOLE = {
    "openai_v2__default-content-true": {"tools": []},
    "openai_v2__latest-SPAN_ONLY": {"tools": []},
    "openai_v2__latest-EVENT_ONLY": {"tools": []},
    "openai_v2__latest-SPAN_AND_EVENT": {"tools": [], "copies": 4},
    "genai_openai__SPAN_ONLY": {"tools": ["weather"]},
    "genai_openai__EVENT_ONLY": {"tools": ["weather"]},
    "genai_openai__SPAN_AND_EVENT": {"tools": ["weather"], "copies": 4},
    "openinference__default": {"tools": ["weather"]},
    "openinference__session-user": {"tools": ["weather"], "session": "otel-session-sess-1"},
    "openinference__genai-semconv": {"tools": ["weather"]},
}
"""Cases whose content is all there: every field of the run is kept, once."""

FLAGGED = {
    "openai_v2__default-content-off": (
        "4 of 4 inference span(s) carried no message content",
        "came without content: set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true",
    ),
    "openai_v2__latest-NO_CONTENT": (
        "4 of 4 inference span(s) carried no message content",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY",
    ),
    "genai_openai__NO_CONTENT": (
        "4 of 4 inference span(s) carried no message content",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY",
    ),
    "openinference__hide-inputs": (
        "4 of 4 inference span(s) carried no input messages",
        "unset OPENINFERENCE_HIDE_INPUTS",
    ),
}
"""Cases without (some of) their content: flagged, naming the setting for that mode."""


def test_every_case_is_checked_and_names_its_source() -> None:
    names = {p.stem for p in CASES.glob("*.json")}
    assert names == set(WHOLE) | set(FLAGGED)
    for path in CASES.glob("*.json"):
        case = json.loads(path.read_text())
        assert "==" in case["instrumentation"] and case["source"]["repo"]
        assert case["source"]["files"] and case["source"]["commit"]


def replay(tmp_path: Path, name: str, order: str) -> tuple[list[dict[str, Any]], TraceIngest]:
    """The case's exports into an ingest, in `order`; the one session they became."""
    case = json.loads((CASES / f"{name}.json").read_text())
    exports = case["exports"] if order == "recorded" else case["exports"][::-1]
    clock = [0.0]
    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0)
    ingest = TraceIngest(
        recorder, Journal(tmp_path / "journal.sqlite"), linger_s=0.0, join_wait_s=10.0,
        clock=lambda: clock[0],
    )  # fmt: skip
    for export in exports:
        body = json.dumps(export["body"]).encode()
        if export["signal"] == "traces":
            ingest.apply(spans=decode(body, "json").spans)
        else:
            ingest.apply(logs=decode_logs(body, "json").records)
    clock[0] = 60.0  # past the wait for log records: spans without them are recorded as they are
    ingest.tick()
    ingest.end_all("the test ended")
    recorder.close()
    sessions = by_session(envelopes(tmp_path))
    (events,) = sessions.values()
    events = [e for e in events if "type" in e]
    return events, ingest


@pytest.mark.parametrize("order", ["recorded", "reversed"])
@pytest.mark.parametrize("name", sorted(WHOLE))
def test_a_case_with_its_content_is_the_run_field_by_field(
    tmp_path: Path, name: str, order: str
) -> None:
    expect = WHOLE[name]
    events, _ = replay(tmp_path, name, order)
    if "session" in expect:
        assert events[0]["session_id"] == expect["session"]
    assert conversation(events) == FOUR_CALLS
    started = events[0]["payload"]
    assert started["task"] == USER and started["model"] == MODEL
    assert [t["name"] for t in started["tools"]] == expect["tools"]
    turns = [e["payload"] for e in events if e["type"] == "turn"]
    assert [(t["role"], t["content"]) for t in turns[:2]] == [("system", SYSTEM), ("user", USER)]
    replies = [
        (t["content"], t["finish_reason"], t["prompt_tokens"], t["completion_tokens"])
        for t in turns[2:]
    ]
    assert replies == REPLIES
    assert all(t.get("model") == MODEL for t in turns[2:])
    calls = [e["payload"] for e in events if e["type"] == "tool_call"]
    assert [(c["id"], c["name"], c["arguments"]) for c in calls] == [
        ("call_w1", "weather", {"city": "Paris"})
    ] * 2
    (result,) = [e["payload"] for e in events if e["type"] == "tool_result"]
    assert (result["call_id"], json.loads(result["content"])) == ("call_w1", {"sky": "sunny"})
    ended = events[-1]["payload"]
    assert ended["status"] == "completed" and "content_missing" not in ended["outcome"]


@pytest.mark.parametrize("order", ["recorded", "reversed"])
@pytest.mark.parametrize("name", sorted(FLAGGED))
def test_a_case_without_its_content_is_flagged_with_the_setting_for_its_mode(
    tmp_path: Path, name: str, order: str
) -> None:
    starts, setting = FLAGGED[name]
    events, _ = replay(tmp_path, name, order)
    missing = events[-1]["payload"]["outcome"]["content_missing"]
    assert missing.startswith(starts) and setting in missing
    usage = [
        (e["payload"]["prompt_tokens"], e["payload"]["completion_tokens"])
        for e in events
        if e["type"] == "turn" and e["payload"]["role"] == "assistant"
    ]
    assert usage == [r[2:] for r in REPLIES]  # what the spans do carry is kept
