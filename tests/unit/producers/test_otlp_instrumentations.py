"""Real instrumentations, as users run them, into `rolltape serve otlp`: the real `openai` client
against a local OpenAI-compatible server, OpenTelemetry's own instrumentation and the SDK's
own OTLP exporters, in each content mode and with spans and log records arriving in either
order and across batches. Each session is checked field by field against what the client sent
and the server answered, and every message is held once. (The receiver records to a spool; the
broker and the worker's judgment of such sessions are an integration test.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.instrumented import (
    CHECKED,
    FOLLOW_UP,
    FOLLOW_UP_ANSWER,
    WHOLE,
    conversation,
    kept_fields,
    python_of,
    run_agent,
    weather_server,
)
from tests.support.openai_server import OpenAICompatibleServer
from tests.support.otlp import Rig, by_session

LEGACY = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
LATEST = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}


@pytest.fixture(scope="module")
def model() -> Iterator[OpenAICompatibleServer]:
    with weather_server() as server:
        yield server


def record(
    tmp_path: Path, model: OpenAICompatibleServer, env: dict[str, str], **run: Any
) -> tuple[list[dict[str, Any]], Rig]:
    """Run the agent once into a fresh receiver; the one session it became, and the rig."""
    run_expects = {"session": run.pop("session")} if "session" in run else {}
    rig_config = {"join_wait_s": run.pop("join_wait_s", 10.0), **run.pop("rig", {})}
    grpc = run.get("transport") == "grpc"
    with Rig(tmp_path, linger_s=0.0, grpc=grpc, **rig_config) as rig:
        endpoint = (
            f"http://127.0.0.1:{rig.thread.grpc_port}"
            if grpc
            else rig.thread.url.removesuffix("/v1/traces")
        )
        trace = run_agent(
            run.pop("python", python_of(".venv")),
            run.pop("instrumentation", "openai-v2"),
            endpoint,
            model.base_url,
            env=env,
            **run,
        )
        sessions = by_session(rig.recorded())
    (sid,) = sessions
    assert sid == run_expects.get("session", f"otel-{trace}"), sessions.keys()
    return sessions[sid], rig


def lost(events: list[dict[str, Any]]) -> list[str]:
    kept = kept_fields(events)
    return [name for name in CHECKED if not kept[name]]


@pytest.mark.parametrize(
    ("transport", "order", "batch"),
    [
        ("http", "logs-first", 512),
        ("http", "spans-first", 512),
        ("http", "spans-first", 2),
        ("grpc", "logs-first", 512),
        ("grpc", "spans-first", 2),
    ],
)
def test_openai_v2_content_as_log_records__every_field_kept_once_in_any_order(
    tmp_path: Path, model: OpenAICompatibleServer, transport: str, order: str, batch: int
) -> None:
    """Default conventions with content capture on: every message is a log record (the legacy
    events), joined to its chat span whichever arrives first, split over several exports, over
    either transport."""
    events, rig = record(tmp_path, model, LEGACY, transport=transport, order=order, batch=batch)
    assert lost(events) == []
    assert conversation(events) == WHOLE
    ended = events[-1]["payload"]
    assert ended["status"] == "completed" and "content_missing" not in ended["outcome"]
    stats = rig.receiver.stats
    assert stats.logs_joined == stats.logs and stats.logs >= 7
    assert not stats.unmapped.get("log_after_its_span")


@pytest.mark.parametrize("mode", ["SPAN_ONLY", "EVENT_ONLY", "SPAN_AND_EVENT"])
def test_openai_v2_latest_conventions__every_field_kept_once_in_each_content_mode(
    tmp_path: Path, model: OpenAICompatibleServer, mode: str
) -> None:
    """The latest conventions: content on the spans, on the operation details event, or both
    (then the event's copy is counted, not recorded again)."""
    env = {**LATEST, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": mode}
    events, rig = record(tmp_path, model, env, order="spans-first")
    assert lost(events) == []
    assert conversation(events) == WHOLE
    unmapped = rig.receiver.stats.unmapped
    assert unmapped.get("log_content_also_on_span", 0) == (2 if mode == "SPAN_AND_EVENT" else 0)


def test_openai_v2_without_content__the_session_is_flagged_with_the_setting_that_sends_it(
    tmp_path: Path, model: OpenAICompatibleServer
) -> None:
    """Content capture off: the log records still come, without content; the session is
    flagged `content_missing`, naming the setting (not the one to export logs)."""
    events, _ = record(tmp_path, model, {}, order="logs-first")
    missing = events[-1]["payload"]["outcome"]["content_missing"]
    assert missing.startswith("2 of 2 inference span(s) carried no message content")
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true" in missing
    assert "export logs" not in missing
    assert set(lost(events)) >= {"system prompt", "user text", "answer text"}


def test_openai_v2_content_on_but_logs_not_exported__the_hint_says_to_export_logs(
    tmp_path: Path, model: OpenAICompatibleServer
) -> None:
    """Content capture is on, but the agent exports no logs, where these conventions put the
    content: the flag says so instead of asking for the setting already set."""
    events, _ = record(tmp_path, model, LEGACY, more=("--no-logs",), join_wait_s=0.0)
    missing = events[-1]["payload"]["outcome"]["content_missing"]
    assert "none came for this span" in missing and "export logs to this receiver" in missing


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_openinference__every_field_kept_once_and_declared_tools_read(
    tmp_path: Path, model: OpenAICompatibleServer, transport: str
) -> None:
    """OpenInference's OpenAI instrumentation (spans only, content by default): its flattened
    messages, tool calls with their ids, declared tools and token counts."""
    events, rig = record(tmp_path, model, {}, instrumentation="openinference", transport=transport)
    assert lost(events) == []
    assert conversation(events) == WHOLE
    started = events[0]["payload"]
    assert [t["name"] for t in started["tools"]] == ["weather"]
    assert started["tools"][0]["parameters"]["properties"] == {"city": {"type": "string"}}
    assert rig.receiver.stats.unmapped == {}


def test_openinference__one_session_id_across_traces_is_one_session_for_its_user(
    tmp_path: Path, model: OpenAICompatibleServer
) -> None:
    """`session.id` groups an agent's traces (a chat, a question per trace) into one rolltape
    session, each message once; `user.id` names its subject when the receiver is told."""
    from rolltape.schemas.privacy import KeyEncryptionKey

    events, _ = record(
        tmp_path, model, {}, instrumentation="openinference",
        more=("--session", "chat-7", "--user", "ada", "--follow-up", FOLLOW_UP),
        session="otel-session-chat-7",
        rig={"subject_attribute": "user.id", "kek": KeyEncryptionKey.generate()},
    )  # fmt: skip
    (key,) = [e for e in events if "wrapped" in e]  # the session's data key, for its subject
    assert (key["subject"], key["session_id"]) == ("ada", "otel-session-chat-7")
    chained = [e for e in events if "type" in e]
    started = chained[0]["payload"]
    assert started["run_config"]["otel"]["session.id"] == "chat-7"
    assert started["sealed"]  # the subject's content sealed under its own key
    assert [e["type"] for e in chained].count("session_ended") == 1


def test_openinference__a_chat_across_traces_holds_every_message_once(
    tmp_path: Path, model: OpenAICompatibleServer
) -> None:
    events, _ = record(
        tmp_path, model, {}, instrumentation="openinference",
        more=("--session", "chat-8", "--follow-up", FOLLOW_UP), session="otel-session-chat-8",
    )  # fmt: skip
    assert conversation(events) == [*WHOLE, "turn:user", "turn:assistant"]
    turns = [e["payload"] for e in events if e["type"] == "turn"]
    assert [t["content"] for t in turns if t["role"] == "user"] == ["Weather in Paris?", FOLLOW_UP]
    assert turns[-1]["content"] == FOLLOW_UP_ANSWER
    assert lost(events) == ["user text"]  # two questions now: each checked above


def _genai_python() -> str:
    python = python_of(".venv-genai")
    assert python.endswith(".venv-genai/bin/python"), (
        "the genai-openai instrumentation runs in .venv-genai (it cannot share .venv with "
        "openai-v2): scripts/bootstrap.sh makes it"
    )
    return python


@pytest.mark.parametrize(
    ("mode", "transport"),
    [("SPAN_ONLY", "http"), ("EVENT_ONLY", "http"), ("SPAN_AND_EVENT", "grpc")],
)
def test_genai_openai__every_field_kept_once_with_its_declared_tools(
    tmp_path: Path, model: OpenAICompatibleServer, mode: str, transport: str
) -> None:
    """openai-v2's successor (always the latest conventions; content through util-genai's
    modes), which also sends `gen_ai.tool.definitions`."""
    env = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": mode}
    events, _ = record(
        tmp_path, model, env, python=_genai_python(), instrumentation="genai-openai",
        transport=transport, order="spans-first",
    )  # fmt: skip
    assert lost(events) == []
    assert conversation(events) == WHOLE
    assert [t["name"] for t in events[0]["payload"]["tools"]] == ["weather"]


def test_genai_openai__a_conversation_id_across_traces_is_one_session(
    tmp_path: Path, model: OpenAICompatibleServer
) -> None:
    """util-genai's agent invocation with a `conversation_id` puts `gen_ai.conversation.id` on
    its spans and on the chat spans under it: a chat whose follow-up is a trace of its own is one
    session, each message once."""
    env = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY"}
    events, _ = record(
        tmp_path, model, env, python=_genai_python(), instrumentation="genai-openai",
        more=("--conversation", "conv_7", "--follow-up", FOLLOW_UP),
        session="otel-conversation-conv_7",
    )  # fmt: skip
    assert conversation(events) == [*WHOLE, "turn:user", "turn:assistant"]
    turns = [e["payload"] for e in events if e["type"] == "turn"]
    assert [t["content"] for t in turns if t["role"] == "user"] == ["Weather in Paris?", FOLLOW_UP]
    assert events[0]["payload"]["run_config"]["otel"]["gen_ai.conversation.id"] == "conv_7"
    assert [e["type"] for e in events].count("session_ended") == 1


def test_genai_openai_without_content__flagged_with_its_modes(
    tmp_path: Path, model: OpenAICompatibleServer
) -> None:
    events, _ = record(
        tmp_path, model, {}, python=_genai_python(), instrumentation="genai-openai",
        join_wait_s=0.0,
    )  # fmt: skip
    missing = events[-1]["payload"]["outcome"]["content_missing"]
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY" in missing
