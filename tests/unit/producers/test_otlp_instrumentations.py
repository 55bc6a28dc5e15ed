"""Real instrumentations, as users run them, into `rolltape otlp serve`: the real `openai` client
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
    with Rig(tmp_path, linger_s=0.0, join_wait_s=run.pop("join_wait_s", 10.0)) as rig:
        trace = run_agent(
            run.pop("python", python_of(".venv")),
            run.pop("instrumentation", "openai-v2"),
            rig.thread.url.removesuffix("/v1/traces"),
            model.base_url,
            env=env,
            **run,
        )
        sessions = by_session(rig.recorded())
    assert list(sessions) == [f"otel-{trace}"], sessions.keys()
    return sessions[f"otel-{trace}"], rig


def lost(events: list[dict[str, Any]]) -> list[str]:
    kept = kept_fields(events)
    return [name for name in CHECKED if not kept[name]]


@pytest.mark.parametrize(
    ("order", "batch"), [("logs-first", 512), ("spans-first", 512), ("spans-first", 2)]
)
def test_openai_v2_content_as_log_records__every_field_kept_once_in_any_order(
    tmp_path: Path, model: OpenAICompatibleServer, order: str, batch: int
) -> None:
    """Default conventions with content capture on: every message is a log record (the legacy
    events), joined to its chat span whichever arrives first, split over several exports."""
    events, rig = record(tmp_path, model, LEGACY, order=order, batch=batch)
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
