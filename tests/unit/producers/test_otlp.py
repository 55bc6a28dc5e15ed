"""The OTLP GenAI receiver: traces sent by the real OpenTelemetry SDK exporter over HTTP become
sessions (recorded here to a spool, which is what a broker outage looks like; the broker case is
an integration test); resent batches are redeliveries; bad requests get OTLP error answers."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)
from opentelemetry.trace import SpanKind, StatusCode, Tracer
from opentelemetry.trace import Status as SpanStatus

from rolltape.producers import Recorder
from rolltape.producers.otlp import Journal, TraceIngest
from tests.support.otlp import (
    JS,
    PB,
    Rig,
    agent_tracer,
    as_otlp_json,
    by_session,
    envelopes,
    failed_call,
    parts,
    recorded_request,
    text,
    weather_agent,
)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with Rig(tmp_path, linger_s=0.0) as running:
        yield running


def test_sdk_exporter__an_agent_trace_becomes_one_session_in_conversation_order(
    tmp_path: Path,
) -> None:
    with Rig(tmp_path, linger_s=0.0) as rig, agent_tracer(rig.thread.url, gzip=True) as tracer:
        weather_agent(tracer)
    sessions = by_session(tmp_path)
    assert len(sessions) == 1
    (sid, events), = sessions.items()  # fmt: skip
    assert sid.startswith("otel-") and len(sid) == 5 + 32
    assert [e["type"] for e in events] == [
        "session_started", "turn", "turn", "turn", "tool_call", "tool_result", "turn",
        "feedback", "session_ended",
    ]  # fmt: skip
    started, system, user, asked, call, result, answer, feedback, ended = (
        e["payload"] for e in events
    )
    assert started["task"] == "Weather in Paris?" and started["model"] == "qwen3-8b"
    assert started["tools"][0]["name"] == "weather" and started["tags"] == ["otlp"]
    assert started["run_config"]["otel"] == {
        "trace_id": sid.removeprefix("otel-"),
        "service.name": "weather-agent",
    }
    assert (system["role"], system["content"]) == ("system", "You are a weather bot.")
    assert (user["role"], user["content"]) == ("user", "Weather in Paris?")
    assert asked["role"] == "assistant" and asked["reasoning"] == "look it up"
    assert (asked["prompt_tokens"], asked["completion_tokens"]) == (40, 12)
    assert asked["finish_reason"] == "tool_calls" and asked["model"] == "qwen3-8b"
    assert call == {
        "id": "call_w1",
        "name": "weather",
        "arguments": {"city": "Paris"},
        "raw_arguments": None,
    }
    assert result["call_id"] == "call_w1" and result["success"] is True
    assert json.loads(result["content"]) == {"sky": "sunny"}
    assert answer["content"] == "Sunny in Paris." and answer["finish_reason"] == "stop"
    assert feedback == {
        "source": "evaluation:correctness",
        "score": 0.9,
        "text": "pass - matches the forecast",
        "about_seq": None,
    }
    assert ended["status"] == "completed"


def test_a_subject_attribute_seals_the_traces_session_under_a_key_of_its_own(
    tmp_path: Path,
) -> None:
    from rolltape.producers._spool import Spool
    from rolltape.schemas import DataKeyRecord, Stream, topic_name
    from rolltape.schemas.privacy import KeyEncryptionKey

    kek = KeyEncryptionKey.generate()
    with (
        Rig(tmp_path, kek=kek, linger_s=0.0, subject_attribute="service.name") as rig,
        agent_tracer(rig.thread.url) as tracer,
    ):
        weather_agent(tracer)
    spool = Spool(tmp_path / "spool", 1 << 30)
    records, _ = spool.read(10_000)
    spool.close()
    keys = [v for t, _, v in records if t == topic_name(Stream.KEYS)]
    (entry,) = [DataKeyRecord.model_validate_json(v) for v in keys]
    assert entry.subject == "weather-agent" and entry.session_id.startswith("otel-")
    events = [v for t, _, v in records if t == topic_name(Stream.EVENTS)]
    assert len(events) == 9 and b"Weather in Paris?" not in b"".join(events)
    assert all(b'"sealed":"v1.' in v for v in events if b'"type":"turn"' in v)


def test_a_failed_inference_span_is_a_model_error_and_a_failed_root_fails_the_session(
    tmp_path: Path,
) -> None:
    with Rig(tmp_path, linger_s=0.0) as rig, agent_tracer(rig.thread.url) as tracer:
        failed_call(tracer)
    (events,) = by_session(tmp_path).values()
    assert [e["type"] for e in events] == [
        "session_started",
        "turn",
        "model_error",
        "session_ended",
    ]
    error = events[2]["payload"]
    assert error["error_type"] == "RateLimitError" and error["message"] == "429 too many requests"
    assert events[-1]["payload"]["status"] == "failed"


def test_a_tool_that_failed_counts_as_failed_by_its_status_or_by_the_hermes_rule(
    tmp_path: Path,
) -> None:
    def broken_tool(tracer: Tracer) -> None:
        with tracer.start_as_current_span("execute_tool shell", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "shell",
            "gen_ai.tool.call.arguments": '{"cmd": "ls"}',
        }) as span:  # fmt: skip
            span.set_status(SpanStatus(StatusCode.ERROR, "exit 2"))

    with Rig(tmp_path, linger_s=0.0) as rig:
        assert rig.post(recorded_request(lambda t: weather_agent(t, fail_tool=True))).is_success
        assert rig.post(recorded_request(broken_tool)).is_success
    recorded = envelopes(tmp_path)
    results = {e["session_id"]: e["payload"] for e in recorded if e["type"] == "tool_result"}
    by_status, by_rule = sorted(results.values(), key=lambda r: r["error"] is None)
    assert (by_status["success"], by_status["error"]) == (False, "exit 2")  # the span's status
    assert by_rule["success"] is False  # the result's text, by Hermes' rule
    assert json.loads(by_rule["content"]) == {"error": "service down"}
    calls = [e["payload"] for e in recorded if e["type"] == "tool_call"]
    shell = next(c for c in calls if c["name"] == "shell")  # no reply named it: recorded first
    assert shell["arguments"] == {"cmd": "ls"} and shell["id"].startswith("call_")


def test_json_and_protobuf_bodies_of_the_same_spans_record_the_same_session(
    tmp_path: Path,
) -> None:
    request = recorded_request(weather_agent)
    with Rig(tmp_path / "pb", linger_s=0.0) as rig:
        assert rig.post(gzip.compress(request), {**PB, "Content-Encoding": "gzip"}).is_success
    with Rig(tmp_path / "json", linger_s=0.0) as rig:
        answer = rig.post(as_otlp_json(request), JS)
        assert answer.is_success and answer.json() == {}

    def content(folder: Path) -> list[tuple[str, str, int, Any]]:
        return [(e["session_id"], e["type"], e["seq"], e["payload"]) for e in envelopes(folder)]

    recorded = content(tmp_path / "pb")
    assert len(recorded) == 9 and recorded == content(tmp_path / "json")


def test_a_resent_batch_is_a_redelivery_also_after_a_receiver_restart(tmp_path: Path) -> None:
    request = recorded_request(weather_agent)
    with Rig(tmp_path, linger_s=0.0) as rig:
        assert rig.post(request).is_success
        assert rig.post(request).is_success  # the exporter did not get our answer: again
        assert rig.receiver.stats.redelivered == 4
    with Rig(tmp_path, linger_s=0.0) as rig:  # a new process, the same journal
        assert rig.post(request).is_success
        assert rig.receiver.stats.redelivered == 4 and rig.receiver.stats.recorded == 0
    (events,) = by_session(tmp_path).values()
    assert [e["seq"] for e in events] == list(range(9))


def test_spans_after_a_restart_continue_the_trace_in_a_linked_session_never_a_fork(
    tmp_path: Path,
) -> None:
    def first_chat(tracer: Tracer) -> None:  # the root span comes later
        with tracer.start_as_current_span("chat qwen3", attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([parts("user", text("hello"))]),
            "gen_ai.output.messages": json.dumps([parts("assistant", text("hi!"))]),
        }):  # fmt: skip
            pass

    whole = recorded_request(lambda t: _under_root(t, first_chat))
    # The batch processor would send the child first and the root in a later batch: split.
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest.FromString(whole)
    spans = request.resource_spans[0].scope_spans[0].spans
    root = next(s for s in spans if not s.parent_span_id)
    child_only, root_only = ExportTraceServiceRequest(), ExportTraceServiceRequest()
    child_only.CopyFrom(request)
    root_only.CopyFrom(request)
    for message, keep_root in ((child_only, False), (root_only, True)):
        kept = [s for s in message.resource_spans[0].scope_spans[0].spans
                if (s.span_id == root.span_id) == keep_root]  # fmt: skip
        del message.resource_spans[0].scope_spans[0].spans[:]
        message.resource_spans[0].scope_spans[0].spans.extend(kept)
    with Rig(tmp_path, linger_s=0.0) as rig:
        assert rig.post(child_only.SerializeToString()).is_success
    with Rig(tmp_path, linger_s=0.0) as rig:
        assert rig.post(root_only.SerializeToString()).is_success
    sessions = by_session(tmp_path)
    first, second = sorted(sessions)
    assert second == f"{first}.2"
    assert sessions[first][-1]["payload"]["status"] == "interrupted"
    assert "stopped before" in sessions[first][-1]["payload"]["error"]
    continued = sessions[second][0]["payload"]
    assert continued["linked_session_id"] == first and "continuation" in continued["tags"]
    assert [e["seq"] for e in sessions[first]] == list(range(len(sessions[first])))


def _under_root(tracer: Tracer, inner: Any) -> None:
    with tracer.start_as_current_span("invoke_agent", attributes={"gen_ai.operation.name": "invoke_agent"}):  # fmt: skip
        inner(tracer)


def test_older_indexed_prompt_and_completion_attributes_become_turns_and_calls(rig: Rig) -> None:
    def openllmetry(tracer: Tracer) -> None:
        with tracer.start_as_current_span("openai.chat", kind=SpanKind.CLIENT, attributes={
            "llm.request.type": "chat", "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "Be brief.",
            "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "2+2 and 3+3?",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.finish_reason": "tool_calls",
            "gen_ai.completion.0.tool_calls.0.id": "c1",
            "gen_ai.completion.0.tool_calls.0.name": "add",
            "gen_ai.completion.0.tool_calls.0.arguments": '{"a": 2, "b": 2}',
            "gen_ai.completion.0.tool_calls.1.id": "c2",
            "gen_ai.completion.0.tool_calls.1.name": "add",
            "gen_ai.completion.0.tool_calls.1.arguments": '{"a": 3, "b": 3}',
            "gen_ai.usage.prompt_tokens": 20, "gen_ai.usage.completion_tokens": 9,
            "llm.request.functions.0.name": "add",
            "llm.request.functions.0.parameters": '{"type": "object"}',
        }):  # fmt: skip
            pass

    assert rig.post(recorded_request(openllmetry)).is_success
    (events,) = by_session(rig.recorded()).values()
    kinds = [(e["type"], e["payload"].get("role") or e["payload"].get("id")) for e in events]
    assert kinds[1:6] == [
        ("turn", "system"), ("turn", "user"), ("turn", "assistant"),
        ("tool_call", "c1"), ("tool_call", "c2"),
    ]  # fmt: skip
    assert events[0]["payload"]["tools"][0]["name"] == "add"
    assert events[3]["payload"]["prompt_tokens"] == 20
    assert events[5]["payload"]["arguments"] == {"a": 3, "b": 3}


def test_messages_on_the_operation_details_event_are_read_like_attributes(rig: Rig) -> None:
    def details(tracer: Tracer) -> None:
        with tracer.start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat"}) as span:  # fmt: skip
            span.add_event("gen_ai.client.inference.operation.details", {
                "gen_ai.input.messages": json.dumps([parts("user", text("ping"))]),
                "gen_ai.output.messages": json.dumps([parts("assistant", text("pong"))]),
            })  # fmt: skip

    assert rig.post(recorded_request(details)).is_success
    (events,) = by_session(rig.recorded()).values()
    turns = [e["payload"]["content"] for e in events if e["type"] == "turn"]
    assert turns == ["ping", "pong"]


def test_traces_without_genai_spans_are_not_sessions(rig: Rig, tmp_path: Path) -> None:
    def web_request(tracer: Tracer) -> None:
        with tracer.start_as_current_span("GET /health", attributes={"http.method": "GET"}):
            pass

    answer = rig.post(recorded_request(web_request))
    assert answer.is_success
    assert rig.receiver.stats.not_genai == 1
    assert rig.recorded() == []


def test_spans_without_message_content_are_recorded_flagged_and_the_sender_told_what_to_set(
    tmp_path: Path,
) -> None:
    def no_content(tracer: Tracer) -> None:
        with tracer.start_as_current_span("chat m", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
            "gen_ai.provider.name": "openai",
            "gen_ai.usage.input_tokens": 7, "gen_ai.usage.output_tokens": 3,
        }):  # fmt: skip
            pass

    with Rig(tmp_path, linger_s=0.0, join_wait_s=0.0) as rig:  # no log records will come
        answer = rig.post(recorded_request(no_content))
        response = ExportTraceServiceResponse.FromString(answer.content)
        assert response.partial_success.rejected_spans == 0
        warning = response.partial_success.error_message
        assert "1 inference span(s) carried no message content" in warning
        assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY" in warning
        events = rig.recorded()
    turn = next(e["payload"] for e in events if e["type"] == "turn")
    assert (turn["content"], turn["prompt_tokens"], turn["completion_tokens"]) == ("", 7, 3)
    ended = next(e["payload"] for e in events if e["type"] == "session_ended")
    assert ended["outcome"]["content_missing"].startswith(
        "1 of 1 inference span(s) carried no message content: set "
    )


@pytest.mark.parametrize(
    ("body", "headers", "status", "says"),
    [
        (b"\xff\x00garbage", PB, 400, "not an ExportTraceServiceRequest in protobuf"),
        (b"{not json", JS, 400, "not JSON"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": 5}]}]}]}', JS, 400,
         "resourceSpans[0].scopeSpans[0].spans[0]"),
        (b"{}", {"Content-Type": "text/plain"}, 415, "application/x-protobuf"),
        (b"not gzip", {**PB, "Content-Encoding": "gzip"}, 400, "not valid gzip"),
        (b"", {**PB, "Content-Encoding": "br"}, 415, "gzip, deflate or none"),
    ],
)  # fmt: skip
def test_a_bad_request_gets_an_otlp_error_status_saying_what_was_wrong(
    rig: Rig, body: bytes, headers: dict[str, str], status: int, says: str
) -> None:
    answer = rig.post(body, headers)
    assert answer.status_code == status
    if headers["Content-Type"] == PB["Content-Type"]:
        message = Status.FromString(answer.content).message
    else:
        message = answer.json()["message"]
    assert says in message


def test_an_oversized_body_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    with Rig(tmp_path, max_body_bytes=1000) as rig:
        answer = rig.post(gzip.compress(b"\x00" * 5000), {**PB, "Content-Encoding": "gzip"})
        assert answer.status_code == 413
        assert "smaller batches" in Status.FromString(answer.content).message


def test_wrong_method_or_path_is_answered_with_what_to_do(rig: Rig) -> None:
    assert httpx.get(rig.thread.url).status_code == 405
    other = httpx.post(rig.thread.url.replace("/v1/traces", "/v1/spans"), content=b"")
    assert other.status_code == 404
    assert "/v1/traces" in other.json()["message"] and "/v1/logs" in other.json()["message"]


def test_spans_with_unusable_ids_are_rejected_and_the_rest_recorded(rig: Rig) -> None:
    body = json.loads(as_otlp_json(recorded_request(failed_call)))
    span = body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    body["resourceSpans"][0]["scopeSpans"][0]["spans"].append({**span, "traceId": "0" * 32})
    answer = rig.post(json.dumps(body).encode(), JS)
    assert answer.status_code == 200
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and "16 non-zero bytes" in partial["errorMessage"]
    assert len(by_session(rig.recorded())) == 1


def test_a_trace_ends_after_linger_once_its_root_came_or_after_idle_without_it(
    tmp_path: Path,
) -> None:
    from rolltape.producers.otlp import decode

    now = [0.0]
    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0)
    ingest = TraceIngest(
        recorder, Journal(tmp_path / "j.sqlite"), linger_s=5, idle_s=60, clock=lambda: now[0]
    )
    rooted = decode(recorded_request(failed_call), "protobuf").spans
    whole = decode(recorded_request(weather_agent), "protobuf").spans
    children = [s for s in whole if s.parent_span_id]
    ingest.apply(rooted)
    ingest.apply(children)
    now[0] = 4.0
    assert ingest.end_due() == []
    now[0] = 5.0
    assert ingest.end_due() == [f"otel-{rooted[0].trace_id}"]
    now[0] = 59.0
    assert ingest.end_due() == []
    now[0] = 60.0
    assert ingest.end_due() == [f"otel-{children[0].trace_id}"]
    recorder.close()
    ended = [e["payload"] for e in envelopes(tmp_path) if e["type"] == "session_ended"]
    assert [e["status"] for e in ended] == ["failed", "interrupted"]
    assert "root span never arrived" in ended[1]["error"]


def _chat(tracer: Tracer, inputs: list[Any], output: dict[str, Any], **extra: Any) -> None:
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps(inputs),
        "gen_ai.output.messages": json.dumps([output]),
        **extra,
    }
    with tracer.start_as_current_span("chat m", attributes=attributes):
        pass


def test_a_span_that_breaks_the_mapping_is_rejected_with_why_and_costs_only_itself(
    tmp_path: Path,
) -> None:
    def agent(tracer: Tracer) -> None:
        _chat(tracer, [parts("user", text("first"))], parts("assistant", text("one")))
        bad = {"role": "user", "parts": 5}
        _chat(tracer, [bad], parts("assistant", text("never")))
        _chat(tracer, [parts("user", text("third"))], parts("assistant", text("three")))

    request = recorded_request(lambda t: _under_root(t, agent))
    with Rig(tmp_path, linger_s=0.0) as rig:
        answer = ExportTraceServiceResponse.FromString(rig.post(request).content)
        assert answer.partial_success.rejected_spans == 1
        assert "parts must be a list" in answer.partial_success.error_message
        assert rig.post(request).is_success  # sent again: nothing more, nothing lost
        events = rig.recorded()
    turns = [e["payload"]["content"] for e in events if e["type"] == "turn"]
    assert turns == ["first", "one", "third", "three"]


def test_calls_without_ids_get_unique_ids_and_every_result_finds_its_call(
    tmp_path: Path,
) -> None:
    def agent(tracer: Tracer) -> None:
        def call(city: str) -> dict[str, Any]:
            return {"type": "tool_call", "name": "weather", "arguments": {"city": city}}

        def run(city: str, sky: str) -> None:
            with tracer.start_as_current_span("execute_tool weather", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "weather",
                "gen_ai.tool.call.arguments": json.dumps({"city": city}),
                "gen_ai.tool.call.result": sky,
            }):  # fmt: skip
                pass

        user = parts("user", text("Paris, then Oslo"))
        first = parts("assistant", call("Paris"))
        _chat(tracer, [user], first)
        run("Paris", "sunny")
        second = parts("assistant", call("Oslo"))
        _chat(tracer, [user, first, parts("tool", {"type": "tool_call_response", "response": "sunny"})], second)  # fmt: skip
        run("Oslo", "rainy")

    with Rig(tmp_path, linger_s=0.0) as rig:
        assert rig.post(recorded_request(lambda t: _under_root(t, agent))).is_success
        events = rig.recorded()
    calls = [e["payload"] for e in events if e["type"] == "tool_call"]
    results = [e["payload"] for e in events if e["type"] == "tool_result"]
    assert len({c["id"] for c in calls}) == 2
    assert [(r["call_id"], r["content"]) for r in results] == [
        (calls[0]["id"], "sunny"),
        (calls[1]["id"], "rainy"),
    ]


def test_agents_taking_turns_in_one_trace_are_each_recorded_once(tmp_path: Path) -> None:
    def agents(tracer: Tracer) -> None:
        a_sys = {"gen_ai.system_instructions": json.dumps([text("You are A.")])}
        b_sys = {"gen_ai.system_instructions": json.dumps([text("You are B.")])}
        a1, a_out1 = parts("user", text("plan a trip")), parts("assistant", text("asking B"))
        b1, b_out1 = parts("user", text("find hotels")), parts("assistant", text("Hotel X"))
        _chat(tracer, [a1], a_out1, **a_sys)
        _chat(tracer, [b1], b_out1, **b_sys)
        a2 = parts("user", text("B says Hotel X"))
        _chat(tracer, [a1, a_out1, a2], parts("assistant", text("booked")), **a_sys)

    with Rig(tmp_path, linger_s=0.0) as rig:
        assert rig.post(recorded_request(lambda t: _under_root(t, agents))).is_success
        events = rig.recorded()
    turns = [e["payload"]["content"] for e in events if e["type"] == "turn"]
    assert sorted(turns) == sorted(
        ["You are A.", "plan a trip", "asking B", "You are B.", "find hotels", "Hotel X",
         "B says Hotel X", "booked"]
    )  # fmt: skip


def test_a_framework_span_around_the_provider_span_records_the_call_once(
    tmp_path: Path,
) -> None:
    def wrapped(tracer: Tracer) -> None:
        question, answer = [parts("user", text("hi"))], parts("assistant", text("hello"))
        with tracer.start_as_current_span("chat framework", attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(question),
            "gen_ai.output.messages": json.dumps([answer]),
        }):  # fmt: skip
            _chat(tracer, question, answer, **{"gen_ai.usage.output_tokens": -1})

    with Rig(tmp_path, linger_s=0.0) as rig:
        assert rig.post(recorded_request(wrapped)).is_success
        events = rig.recorded()
    turns = [e["payload"] for e in events if e["type"] == "turn"]
    assert [t["content"] for t in turns] == ["hi", "hello"]
    assert turns[1]["completion_tokens"] is None  # -1 is not a count: unknown, not a lost turn


def test_ids_that_are_not_hex_are_rejected(rig: Rig) -> None:
    body = json.loads(as_otlp_json(recorded_request(failed_call)))
    span = body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["traceId"] = "a b/" * 8
    answer = rig.post(json.dumps(body).encode(), JS)
    assert answer.json()["partialSuccess"]["rejectedSpans"] == "1"
    assert "must be hex" in answer.json()["partialSuccess"]["errorMessage"]
    assert rig.recorded() == []


def test_a_span_whose_parent_is_remote_is_the_root_that_ends_the_session(
    tmp_path: Path,
) -> None:
    import dataclasses

    from rolltape.producers.otlp import decode

    now = [0.0]
    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0)
    ingest = TraceIngest(recorder, Journal(tmp_path / "j.sqlite"), linger_s=1, clock=lambda: now[0])
    (span,) = decode(recorded_request(failed_call), "protobuf").spans
    called = dataclasses.replace(span, parent_span_id="ab" * 8, parent_is_remote=True)
    ingest.apply([called])
    now[0] = 1.0
    assert ingest.end_due() == [f"otel-{span.trace_id}"]
    recorder.close()


def _log_request(*records: dict[str, Any]) -> bytes:
    """An ExportLogsServiceRequest (OTLP/JSON) of records given as {trace, span, event, body}."""
    out = []
    for r in records:
        record: dict[str, Any] = {"timeUnixNano": str(r.get("time", 0)), "eventName": r["event"]}
        if "trace" in r:
            record.update(traceId=r["trace"], spanId=r["span"])
        if "body" in r:
            record["body"] = {"stringValue": r["body"]}
        out.append(record)
    return json.dumps(
        {"resourceLogs": [{"scopeLogs": [{"scope": {"name": "app"}, "logRecords": out}]}]}
    ).encode()


def test_log_records_that_are_no_genai_content_are_acknowledged_and_counted_by_reason(
    rig: Rig,
) -> None:
    body = _log_request(
        {"event": "http.request", "trace": "ab" * 16, "span": "cd" * 8, "body": "GET /"},
        {"event": "", "body": "a plain log line"},
        {"event": "gen_ai.user.message", "body": "outside any span"},
    )
    answer = rig.post(body, JS, signal="logs")
    assert answer.status_code == 200
    scrape = httpx.get(rig.thread.url.replace("/v1/traces", "/metrics")).text
    assert 'rolltape_otlp_unmapped_total{reason="log_not_genai"} 2.0' in scrape
    assert 'rolltape_otlp_unmapped_total{reason="log_outside_span"} 1.0' in scrape
    assert "rolltape_otlp_log_records_received_total 3.0" in scrape
    assert rig.recorded() == []  # nothing of them became a session
    assert rig.receiver.stats.line(0).endswith(
        "not recorded: 2 log_not_genai, 1 log_outside_span; 0 session(s) started, 0 ended at stop"
    )


def _legacy_logs_and_span(tracer_spans: bytes) -> tuple[bytes, bytes]:
    """A chat span without content (openai-v2's default conventions) and the log records that
    carry its messages, as two requests."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    span = ExportTraceServiceRequest.FromString(tracer_spans).resource_spans[0]
    chat = span.scope_spans[0].spans[0]
    trace, span_id = chat.trace_id.hex(), chat.span_id.hex()
    logs = json.dumps(
        {
            "resourceLogs": [{"scopeLogs": [{"logRecords": [
                {"eventName": "gen_ai.user.message", "traceId": trace, "spanId": span_id,
                 "body": {"kvlistValue": {"values": [
                     {"key": "content", "value": {"stringValue": "hi there"}}]}}},
                {"eventName": "gen_ai.choice", "traceId": trace, "spanId": span_id,
                 "body": {"kvlistValue": {"values": [
                     {"key": "index", "value": {"intValue": "0"}},
                     {"key": "finish_reason", "value": {"stringValue": "stop"}},
                     {"key": "message", "value": {"kvlistValue": {"values": [
                         {"key": "role", "value": {"stringValue": "assistant"}},
                         {"key": "content", "value": {"stringValue": "hello!"}}]}}}]}}},
            ]}]}]
        }
    ).encode()  # fmt: skip
    return tracer_spans, logs


def _bare_chat(tracer: Tracer) -> None:
    with tracer.start_as_current_span(
        "chat m", kind=SpanKind.CLIENT,
        attributes={"gen_ai.operation.name": "chat", "gen_ai.system": "openai",
                    "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 3},
    ):  # fmt: skip
        pass


def test_log_records_held_across_a_restart_join_their_span_sent_after_it(tmp_path: Path) -> None:
    """Log records acknowledged by one run wait in the journal; the next run joins them to
    their span when it comes, as one run would have."""
    spans, logs = _legacy_logs_and_span(recorded_request(_bare_chat))
    with Rig(tmp_path, linger_s=0.0) as first:
        assert first.post(logs, JS, signal="logs").status_code == 200
        assert first.receiver.ingest.waiting() == 2
    assert envelopes(tmp_path) == []  # acknowledged, not recorded: held
    with Rig(tmp_path, linger_s=0.0) as second:
        assert second.receiver.ingest.waiting() == 2
        assert second.post(spans).status_code == 200
        events = second.recorded()
    turns = [(e["payload"]["role"], e["payload"]["content"]) for e in events if e["type"] == "turn"]
    assert turns == [("user", "hi there"), ("assistant", "hello!")]
    assert "content_missing" not in events[-1]["payload"]["outcome"]


def test_a_span_waiting_for_its_log_records_is_recorded_without_them_once_the_wait_is_over(
    tmp_path: Path,
) -> None:
    clock = [0.0]
    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0)
    ingest = TraceIngest(
        recorder, Journal(tmp_path / "j.sqlite"), linger_s=0.0, join_wait_s=10.0,
        clock=lambda: clock[0],
    )  # fmt: skip
    from rolltape.producers.otlp import decode

    spans = decode(recorded_request(_bare_chat), "protobuf").spans
    done = ingest.apply(spans)
    assert done.recorded == [] and ingest.waiting() == 1 and len(done.hold) == 1
    clock[0] = 9.0
    assert ingest.tick().recorded == []
    clock[0] = 10.0
    waited = ingest.tick()
    assert len(waited.recorded) == 1 and waited.release == [done.hold[0][:2]]
    assert waited.without_content == 1
    assert waited.ended == [f"otel-{spans[0].trace_id}"]  # its root: nothing else waits
    recorder.close()
    ended = envelopes(tmp_path)[-1]["payload"]
    assert (
        "1 of 1 inference span(s) carried no message content" in ended["outcome"]["content_missing"]
    )
    assert "logs exported to this receiver" in ended["outcome"]["content_missing"]


def test_grpc_answers_in_otlp_grpc_status_codes(tmp_path: Path) -> None:
    import grpc

    with Rig(tmp_path, linger_s=0.0, grpc=True) as rig:
        channel = grpc.insecure_channel(f"127.0.0.1:{rig.thread.grpc_port}")
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=None,
        )
        with pytest.raises(grpc.RpcError) as bad:
            export(b"\xff\x00garbage", timeout=10)
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not an ExportTraceServiceRequest" in (bad.value.details() or "")
        fine = ExportTraceServiceResponse.FromString(
            export(recorded_request(weather_agent), timeout=10)
        )
        assert not fine.HasField("partial_success")
        unknown = channel.unary_unary("/opentelemetry.proto.collector.profiles.v1.X/Export")
        with pytest.raises(grpc.RpcError) as missing:
            unknown(b"", timeout=10)
        assert missing.value.code() == grpc.StatusCode.UNIMPLEMENTED
        channel.close()
        sessions = by_session(rig.recorded())
    assert len(sessions) == 1


def _kv(value: Any) -> dict[str, Any]:
    """A JSON-like value as OTLP/JSON's AnyValue."""
    if isinstance(value, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": _kv(v)} for k, v in value.items()]}}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_kv(v) for v in value]}}
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": str(value)}


def test_an_echoed_assistant_message_without_its_text_is_the_reply_it_echoes(rig: Rig) -> None:
    """openai-v2's legacy events drop an assistant message's text when it made calls: the
    resent history still matches the recorded reply (by its call ids), recorded once."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    def agent(tracer: Tracer) -> None:
        with tracer.start_as_current_span("invoke_agent weather"):
            for name in ("chat 1", "chat 2"):
                with tracer.start_as_current_span(
                    name, attributes={"gen_ai.operation.name": "chat", "gen_ai.system": "openai"}
                ):
                    pass

    spans = recorded_request(agent)
    chats = ExportTraceServiceRequest.FromString(spans).resource_spans[0].scope_spans[0].spans
    trace, first, second = chats[0].trace_id.hex(), chats[0].span_id.hex(), chats[1].span_id.hex()
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    events = [
        (first, "gen_ai.user.message", {"content": "Weather?"}),
        (first, "gen_ai.choice", {"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Let me look.", "tool_calls": [call]}}),
        (second, "gen_ai.user.message", {"content": "Weather?"}),
        (second, "gen_ai.assistant.message", {"tool_calls": [call]}),  # its text dropped
        (second, "gen_ai.tool.message", {"content": "sunny", "id": "c1"}),
        (second, "gen_ai.choice", {"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "Sunny."}}),
    ]  # fmt: skip
    logs = json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [
        {"eventName": name, "traceId": trace, "spanId": span, "timeUnixNano": str(i + 1),
         "body": _kv(body)}
        for i, (span, name, body) in enumerate(events)
    ]}]}]}).encode()  # fmt: skip
    assert rig.post(logs, JS, signal="logs").status_code == 200
    assert rig.post(spans).status_code == 200
    recorded = rig.recorded()
    kinds = [
        (e["type"], e["payload"].get("role"), e["payload"].get("content"))
        for e in recorded
        if e["type"] in ("turn", "tool_call", "tool_result")
    ]
    assert kinds == [
        ("turn", "user", "Weather?"),
        ("turn", "assistant", "Let me look."),
        ("tool_call", None, None),
        ("tool_result", None, "sunny"),
        ("turn", "assistant", "Sunny."),
    ]


def _ingest(tmp_path: Path, **options: Any) -> tuple[Recorder, TraceIngest]:
    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0)
    return recorder, TraceIngest(recorder, Journal(tmp_path / "j.sqlite"), **options)


def test_a_batch_resent_after_it_was_not_durable_waits_for_the_flush_of_the_first(
    tmp_path: Path,
) -> None:
    """The first delivery's records were queued, not durable (answered 503); the resend is all
    redeliveries, yet it must still be flushed before it is journaled and acknowledged."""
    from rolltape.producers.otlp import decode

    recorder, ingest = _ingest(tmp_path, linger_s=0.0)
    spans = decode(recorded_request(weather_agent), "protobuf").spans
    first = ingest.apply(spans)
    assert first.recorded and first.wrote
    ingest.not_durable(first)
    again = ingest.apply(spans)
    assert again.recorded == [] and again.redelivered == len(spans)
    assert again.wrote  # the first delivery's span ids are journaled with this one, once durable
    assert {s for _, s in again.again} == {s.span_id for s in spans}
    recorder.close()


def test_a_span_twice_in_one_batch_while_it_waits_is_not_journaled_as_recorded(
    tmp_path: Path,
) -> None:
    from rolltape.producers.otlp import decode

    recorder, ingest = _ingest(tmp_path, join_wait_s=10.0)
    (chat,) = decode(recorded_request(_bare_chat), "protobuf").spans
    done = ingest.apply([chat, chat])
    assert done.recorded == [] and done.again == [] and done.redelivered == 1
    assert ingest.waiting() == 1
    recorder.close()


def test_a_session_ids_trace_resent_after_a_restart_is_a_redelivery(tmp_path: Path) -> None:
    """The spans of a trace that went to an OpenInference session are known after a restart,
    although the journal names the session, not the trace: a resend is not recorded again."""
    case = Path(__file__).with_name("otlp_conformance") / "openinference__session-user.json"
    body = json.dumps(json.loads(case.read_text())["exports"][0]["body"]).encode()
    with Rig(tmp_path, linger_s=0.0) as first:
        assert first.post(body, JS).status_code == 200
    with Rig(tmp_path, linger_s=0.0) as second:
        assert second.post(body, JS).status_code == 200
        assert second.receiver.stats.recorded == 0
        assert second.receiver.stats.redelivered == 5
    sessions = by_session(tmp_path)
    assert list(sessions) == ["otel-session-sess-1"]


def test_a_session_id_that_looks_like_a_continuation_is_hashed() -> None:
    from rolltape.producers.otlp._grouping import grouped_session_id

    assert grouped_session_id("chat-7") == "otel-session-chat-7"
    assert grouped_session_id("abc.2") != grouped_session_id("abc", 2)
    assert grouped_session_id("abc.2").startswith(
        "otel-session-"
    ) and "." not in grouped_session_id("abc.2")


def test_traces_naming_one_conversation_id_are_one_session_each_message_once(
    tmp_path: Path,
) -> None:
    """A chat whose turns are traces of their own (each user question an agent run) is one
    session when its spans name one `gen_ai.conversation.id`; another id is another session,
    and a trace naming none stays a session of its own."""
    question, answer = parts("user", text("Weather in Paris?")), parts("assistant", text("Sunny."))
    again, answer2 = parts("user", text("And Oslo?")), parts("assistant", text("Rainy."))

    def turn(conversation: str | None, inputs: list[Any], output: dict[str, Any]) -> bytes:
        extra = {} if conversation is None else {"gen_ai.conversation.id": conversation}
        return recorded_request(lambda t: _under_root(t, lambda t2: _chat(t2, inputs, output, **extra)))  # fmt: skip

    with Rig(tmp_path, linger_s=0.0) as rig:
        for request in (
            turn("conv_1", [question], answer),
            turn("conv_1", [question, answer, again], answer2),
            turn("conv_2", [question], answer),
            turn(None, [again], answer2),
        ):
            assert rig.post(request).is_success
    sessions = by_session(tmp_path)
    grouped = sorted(s for s in sessions if s.startswith("otel-conversation-"))
    assert grouped == ["otel-conversation-conv_1", "otel-conversation-conv_2"]
    assert len(sessions) == 3  # the trace naming no conversation is its own
    one = sessions["otel-conversation-conv_1"]
    turns = [(e["payload"]["role"], e["payload"]["content"]) for e in one if e["type"] == "turn"]
    assert turns == [
        ("user", "Weather in Paris?"),
        ("assistant", "Sunny."),
        ("user", "And Oslo?"),
        ("assistant", "Rainy."),
    ]
    started = one[0]["payload"]
    assert started["run_config"]["otel"]["gen_ai.conversation.id"] == "conv_1"
    assert [e["type"] for e in one].count("session_ended") == 1


def test_an_openinference_session_id_wins_over_a_conversation_id() -> None:
    from rolltape.producers.otlp import Span, group_key

    def span(**attributes: Any) -> Span:
        return Span("a" * 32, "b" * 16, "", "chat", 3, 0, 1, attributes)

    assert group_key(span(**{"session.id": "s", "gen_ai.conversation.id": "c"})) == "session:s"
    assert group_key(span(**{"gen_ai.conversation.id": "c"})) == "conversation:c"
    assert group_key(span(**{"gen_ai.conversation.id": ""})) is None
