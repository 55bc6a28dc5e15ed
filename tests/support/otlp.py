"""The OTLP receiver served from a background thread, and an agent's traces made with the real
OpenTelemetry SDK and sent by its real OTLP/HTTP exporter."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from rolltape.infra.commands.otlp_listen import Listening, serve
from rolltape.infra.commands.otlp_serve import OtlpReceiver, ReceiverConfig
from rolltape.producers import Recorder
from rolltape.producers.otlp import Journal
from tests.unit.producers.recorded import spooled

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}


class ReceiverThread:
    def __init__(self, receiver: OtlpReceiver, *, grpc: bool = False) -> None:
        self.receiver = receiver
        self.grpc = grpc
        self.port = 0
        self.grpc_port: int | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await serve(
                self.receiver,
                "127.0.0.1",
                0,
                self._stop,
                self._bound,
                grpc_port=0 if self.grpc else None,
            )

        asyncio.run(main())

    def _bound(self, listening: Listening) -> None:
        self.port, self.grpc_port = listening.http, listening.grpc
        self._ready.set()

    def __enter__(self) -> ReceiverThread:
        self._thread.start()
        assert self._ready.wait(10), "the receiver did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


class Rig:
    """A receiver recording to a spool, with its journal, in `folder`."""

    def __init__(self, folder: Path, kek: Any = None, *, grpc: bool = False, **config: Any) -> None:
        self.folder = folder
        self.recorder = Recorder(None, spool_dir=folder / "spool", spool_after_s=0.0, kek=kek)
        self.receiver = OtlpReceiver(
            self.recorder, Journal(folder / "journal.sqlite"), ReceiverConfig(**config)
        )
        self.thread = ReceiverThread(self.receiver, grpc=grpc)
        self.stopped = False

    def __enter__(self) -> Rig:
        self.thread.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.stopped:
            self.stopped = True
            self.thread.__exit__()
            self.receiver.shutdown()

    def recorded(self) -> list[dict[str, Any]]:
        """Stop the receiver (it closes its recorder) and read what it spooled."""
        self.__exit__()
        return envelopes(self.folder)

    def post(
        self, body: bytes, headers: dict[str, str] = PB, signal: str = "traces"
    ) -> httpx.Response:
        url = self.thread.url.replace("/v1/traces", f"/v1/{signal}")
        return httpx.post(url, content=body, headers=headers, timeout=30)


def envelopes(folder: Path) -> list[dict[str, Any]]:
    return spooled(folder / "spool")


def by_session(source: Path | list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for e in envelopes(source) if isinstance(source, Path) else source:
        out.setdefault(e["session_id"], []).append(e)
    return out


@contextmanager
def agent_tracer(endpoint: str, *, gzip: bool = False) -> Iterator[Tracer]:
    """A tracer whose spans go to `endpoint` through the SDK's batch processor and OTLP/HTTP
    protobuf exporter; everything is exported when the block ends."""
    exporter = OTLPSpanExporter(
        endpoint=endpoint, compression=Compression.Gzip if gzip else Compression.NoCompression
    )
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-agent"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    try:
        yield provider.get_tracer("weather-agent")
    finally:
        provider.force_flush()
        provider.shutdown()


def parts(role: str, *items: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "parts": list(items)}
    if finish_reason:
        message["finish_reason"] = finish_reason
    return message


def text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


WEATHER_TOOL = {
    "type": "function",
    "name": "weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def weather_agent(
    tracer: Tracer, *, question: str = "Weather in Paris?", fail_tool: bool = False
) -> None:
    """The spans an instrumented agent writes for: chat (calls weather), execute_tool, chat
    (answers), with an evaluation of the answer, under one invoke_agent root span."""
    system = [text("You are a weather bot.")]
    user = parts("user", text(question))
    call = {"type": "tool_call", "id": "call_w1", "name": "weather", "arguments": {"city": "Paris"}}
    asked = parts(
        "assistant",
        {"type": "reasoning", "content": "look it up"},
        call,
        finish_reason="tool_calls",
    )
    result = '{"error": "service down"}' if fail_tool else '{"sky": "sunny"}'
    answered = parts("tool", {"type": "tool_call_response", "id": "call_w1", "response": result})
    final = parts("assistant", text("Sunny in Paris."), finish_reason="stop")
    with tracer.start_as_current_span(
        "invoke_agent weather", kind=SpanKind.INTERNAL,
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"},
    ):  # fmt: skip
        with tracer.start_as_current_span(
            "chat qwen3", kind=SpanKind.CLIENT, attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "qwen3",
                "gen_ai.response.model": "qwen3-8b",
                "gen_ai.usage.input_tokens": 40,
                "gen_ai.usage.output_tokens": 12,
                "gen_ai.response.finish_reasons": ["tool_calls"],
                "gen_ai.system_instructions": json.dumps(system),
                "gen_ai.tool.definitions": json.dumps([WEATHER_TOOL]),
                "gen_ai.input.messages": json.dumps([user]),
                "gen_ai.output.messages": json.dumps([asked]),
            },
        ):  # fmt: skip
            pass
        with tracer.start_as_current_span(
            "execute_tool weather", kind=SpanKind.INTERNAL, attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "weather",
                "gen_ai.tool.call.id": "call_w1",
                "gen_ai.tool.call.arguments": '{"city": "Paris"}',
                "gen_ai.tool.call.result": result,
            },
        ):  # fmt: skip
            pass
        with tracer.start_as_current_span(
            "chat qwen3", kind=SpanKind.CLIENT, attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "qwen3",
                "gen_ai.usage.input_tokens": 60,
                "gen_ai.usage.output_tokens": 5,
                "gen_ai.system_instructions": json.dumps(system),
                "gen_ai.input.messages": json.dumps([user, asked, answered]),
                "gen_ai.output.messages": json.dumps([final]),
            },
        ) as span:  # fmt: skip
            span.add_event(
                "gen_ai.evaluation.result",
                {
                    "gen_ai.evaluation.name": "correctness",
                    "gen_ai.evaluation.score.value": 0.9,
                    "gen_ai.evaluation.score.label": "pass",
                    "gen_ai.evaluation.explanation": "matches the forecast",
                },
            )


def failed_call(tracer: Tracer) -> None:
    """A single chat span that failed (a root span of its own trace)."""
    with tracer.start_as_current_span(
        "chat qwen3", kind=SpanKind.CLIENT,
        attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "qwen3",
                    "error.type": "RateLimitError",
                    "gen_ai.input.messages": json.dumps([parts("user", text("hi"))])},
    ) as span:  # fmt: skip
        span.set_status(Status(StatusCode.ERROR, "429 too many requests"))


def recorded_request(*agents: Any) -> bytes:
    """The protobuf ExportTraceServiceRequest the SDK's exporter would send for the spans the
    given functions write (each called with a tracer)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("weather-agent")
    for agent in agents:
        agent(tracer)
    provider.shutdown()
    return bytes(encode_spans(memory.get_finished_spans()).SerializeToString())


def as_otlp_json(request: bytes) -> bytes:
    """The same request in OTLP/JSON: protobuf's JSON mapping with the ids in hex."""
    import base64

    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    body = MessageToDict(ExportTraceServiceRequest.FromString(request), use_integers_for_enums=True)

    def hex_ids(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: base64.b64decode(v).hex()
                if k in ("traceId", "spanId", "parentSpanId")
                else hex_ids(v)
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [hex_ids(v) for v in node]
        return node

    return json.dumps(hex_ids(body)).encode()
