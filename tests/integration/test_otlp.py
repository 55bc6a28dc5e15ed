"""`rolltape otlp serve` as a user runs it: an agent instrumented with the OpenTelemetry SDK
exports its trace over OTLP/HTTP, and the trace lands on the broker as a verified session."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rolltape.infra.kafka.readback import read_records
from rolltape.schemas import Stream, decode
from tests.support.otlp import agent_tracer, failed_call, weather_agent

from .conftest import Topics

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "rolltape.infra"]


def start_receiver(env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    receiver = subprocess.Popen(
        [*CLI, "otlp", "serve", "--port", "0", "--linger", "0.2"],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert receiver.stderr is not None
    line = receiver.stderr.readline()
    found = re.search(r"(http://127\.0\.0\.1:\d+/v1/traces)", line)
    assert found, line + receiver.stderr.read()
    return receiver, found.group(1)


def test_otlp_serve__an_sdk_exported_agent_trace_lands_as_a_verified_session(
    topics: Topics, tmp_path: Path
) -> None:
    env = {**topics.env(), "ROLLTAPE_STATE_DIR": str(tmp_path), "COLUMNS": "250"}
    receiver, url = start_receiver(env)
    try:
        second = subprocess.run(
            [*CLI, "otlp", "serve", "--port", "0"], env=env, capture_output=True, text=True
        )
        assert second.returncode == 2 and "another OTLP receiver" in second.stderr
        with agent_tracer(url, gzip=True) as tracer:
            weather_agent(tracer)
            failed_call(tracer)
        time.sleep(1.5)  # the sessions end 0.2 s after their root spans
    finally:
        receiver.send_signal(signal.SIGTERM)
        _, err = receiver.communicate(timeout=60)
    assert receiver.returncode == 0, err
    assert "5 span(s): 5 recorded, 0 redelivered" in err and "2 session(s) started" in err

    async def events() -> list[dict[str, object]]:
        return [
            decode(r.value)
            async for r in read_records(topics.reader, [Stream.EVENTS], prefix=topics.prefix)
        ]

    recorded = asyncio.run(events())
    sessions: dict[str, list[str]] = {}
    for e in sorted(recorded, key=lambda e: (str(e["session_id"]), int(str(e["seq"])))):
        sessions.setdefault(str(e["session_id"]), []).append(str(e["type"]))
    assert sorted(sessions.values(), key=len) == [
        ["session_started", "turn", "model_error", "session_ended"],
        ["session_started", "turn", "turn", "turn", "tool_call", "tool_result", "turn",
         "feedback", "session_ended"],
    ]  # fmt: skip
    assert all(sid.startswith("otel-") for sid in sessions)
    assert {e["producer"]["name"] for e in recorded} == {"rolltape.otlp"}  # type: ignore[index]
    reports = topics.verify().reports()
    assert len(reports) == 2 and all(r.ok and r.ended for r in reports)
