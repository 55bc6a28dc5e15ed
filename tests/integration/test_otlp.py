"""`rolltape serve otlp` as a user runs it: an agent instrumented with the OpenTelemetry SDK
exports its trace over OTLP/HTTP, and the trace lands on the broker as a verified session."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from rolltape.infra.kafka.readback import read_records
from rolltape.schemas import Stream, decode
from tests.support.otlp import agent_tracer, failed_call, recorded_request, weather_agent
from tests.support.waiting import wait_until

from .conftest import Topics

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "rolltape.infra"]


def start_receiver(env: dict[str, str], *more: str) -> tuple[subprocess.Popen[str], str]:
    receiver = subprocess.Popen(
        [*CLI, "serve", "otlp", "--port", "0", "--grpc-port", "0", "--linger", "0.2", *more],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal gives it
    )
    assert receiver.stderr is not None
    line = receiver.stderr.readline()
    found = re.search(r"(http://127\.0\.0\.1:\d+/v1/traces)", line)
    assert found, line + receiver.stderr.read()
    return receiver, found.group(1)


def _events(topics: Topics) -> list[dict[str, object]]:
    async def read() -> list[dict[str, object]]:
        return [
            decode(r.value)
            async for r in read_records(topics.reader, [Stream.EVENTS], prefix=topics.prefix)
        ]

    return asyncio.run(read())


def test_otlp_serve__an_sdk_exported_agent_trace_lands_as_a_verified_session(
    topics: Topics, tmp_path: Path
) -> None:
    env = {**topics.env(), "ROLLTAPE_STATE_DIR": str(tmp_path), "COLUMNS": "250"}
    receiver, url = start_receiver(env)
    try:
        second = subprocess.run(
            [*CLI, "serve", "otlp", "--port", "0"], env=env, capture_output=True, text=True
        )
        assert second.returncode == 2 and "another OTLP receiver" in second.stderr
        with agent_tracer(url, gzip=True) as tracer:
            weather_agent(tracer)
            failed_call(tracer)
        _ended(topics, 2)  # the sessions end 0.2 s after their root spans
    finally:
        receiver.send_signal(signal.SIGTERM)
        _, err = receiver.communicate(timeout=60)
    assert receiver.returncode == 0, err
    assert "5 span(s): 5 recorded, 0 redelivered" in err and "2 session(s) started" in err

    recorded = _events(topics)
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


def _ended(topics: Topics, sessions: int) -> None:
    """Wait until the receiver has ended `sessions` sessions on the events topic."""
    wait_until(
        lambda: sorted(
            str(e["session_id"]) for e in _events(topics) if e["type"] == "session_ended"
        ),
        lambda ended: len(ended) >= sessions,
        what=f"{sessions} session(s) to end on the events topic",
        every_s=0.2,
    )


def _stop(receiver: subprocess.Popen[str]) -> str:
    """Ctrl-C in a terminal: SIGINT to the receiver's whole process group, workers too."""
    os.killpg(receiver.pid, signal.SIGINT)
    _, err = receiver.communicate(timeout=120)
    assert receiver.returncode == 0, err
    assert "Traceback" not in err, err
    return err


def _with_a_new_tool_span(request: bytes) -> tuple[bytes, str]:
    """The request's first trace, its execute_tool span sent again under a new span id (the
    same trace goes on after a restart); with that trace's id."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    parsed = ExportTraceServiceRequest.FromString(request)
    spans = parsed.resource_spans[0].scope_spans[0].spans
    tool = next(s for s in spans if s.name.startswith("execute_tool"))
    trace = tool.trace_id
    keep = [s for s in spans if s.trace_id == trace and s.span_id == tool.span_id]
    del spans[:]
    spans.extend(keep)
    spans[0].span_id = bytes(8 * [7])
    return parsed.SerializeToString(), trace.hex()


def test_otlp_serve__workers_record_each_trace_once_and_other_workers_after_a_restart_fork_none(
    topics: Topics, tmp_path: Path
) -> None:
    env = {**topics.env(), "ROLLTAPE_STATE_DIR": str(tmp_path), "COLUMNS": "250"}
    request = recorded_request(*[weather_agent] * 6)  # six traces, over both workers
    headers = {"Content-Type": "application/x-protobuf"}
    receiver, url = start_receiver(env, "--workers", "2")
    try:
        assert httpx.post(url, content=request, headers=headers, timeout=60).status_code == 200
        _ended(topics, 6)  # the sessions end 0.2 s after their root spans
    finally:
        err = _stop(receiver)
    assert "24 span(s): 24 recorded, 0 redelivered" in err and "6 session(s) started" in err

    # Another number of workers routes traces elsewhere; the shared journal still knows them.
    again, trace = _with_a_new_tool_span(request)
    receiver, url = start_receiver(env, "--workers", "3")
    try:
        assert httpx.post(url, content=request, headers=headers, timeout=60).status_code == 200
        assert httpx.post(url, content=again, headers=headers, timeout=60).status_code == 200
    finally:
        err = _stop(receiver)
    assert "25 span(s): 1 recorded, 24 redelivered" in err and "1 session(s) started" in err

    recorded = _events(topics)
    starts = {str(e["session_id"]): e for e in recorded if e["type"] == "session_started"}
    assert len(starts) == 7
    continued = starts[f"otel-{trace}.2"]["payload"]
    assert continued["linked_session_id"] == f"otel-{trace}"  # type: ignore[index]
    reports = topics.verify().reports()
    assert len(reports) == 7 and all(r.ok and r.ended for r in reports)


def test_otlp_serve__instrumented_agents_are_judged_honestly_and_exported_whole(
    topics: Topics, tmp_path: Path
) -> None:
    """What the ecosystem really sends, end to end: an openai-v2 agent with content capture on
    (its content as log records) and one with it off, into `otlp serve`, the
    worker's default filter, and `export --accepted-only`: the complete session is accepted and
    exported whole (its undeclared tool observed, not a rejection), the empty one is rejected as
    `content_missing`, never exported."""
    import json

    from tests.integration.workers import WorkerProcess, payloads, wait_for
    from tests.support.instrumented import ANSWER, python_of, run_agent, weather_server

    env = {**topics.env(), "ROLLTAPE_STATE_DIR": str(tmp_path), "COLUMNS": "250"}
    receiver, url = start_receiver(env)
    worker = WorkerProcess(topics, tmp_path).start()
    try:
        assert receiver.stderr is not None
        with weather_server() as model:
            base = url.removesuffix("/v1/traces")
            content = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
            whole = run_agent(python_of(".venv"), "openai-v2", base, model.base_url, env=content)
            empty = run_agent(python_of(".venv"), "openai-v2", base, model.base_url, env={})
        records = wait_for(
            topics, lambda rs: len(payloads(rs, "filter_outcome")) == 2, worker=worker
        )
    finally:
        err = _stop(receiver)
        worker.stop()
    outcomes = {
        sid: payloads(records, "filter_outcome", sid)[0]
        for sid in (f"otel-{whole}", f"otel-{empty}")
    }
    accepted = outcomes[f"otel-{whole}"]
    assert accepted["accepted"] and accepted["reasons"] == []
    assert [o["code"] for o in accepted["observed"]] == ["tools_undeclared"]
    rejected = outcomes[f"otel-{empty}"]
    assert "content_missing" in {r["code"] for r in rejected["reasons"]}
    assert "CAPTURE_MESSAGE_CONTENT=true" in next(
        r["message"] for r in rejected["reasons"] if r["code"] == "content_missing"
    )
    assert "joined to their spans" in err and "2 inference span(s) without content" in err

    out = tmp_path / "export"
    done = subprocess.run(
        [*CLI, "dataset", "export", "-f", "openai", "-o", str(out), "--accepted-only"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (line,) = [
        json.loads(raw) for f in sorted(out.glob("*.jsonl")) for raw in f.read_text().splitlines()
    ]
    roles = [m["role"] for m in line["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert line["messages"][2]["tool_calls"][0]["function"]["name"] == "weather"
    assert line["messages"][-1]["content"] == ANSWER
