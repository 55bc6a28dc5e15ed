"""`rolltape bench otlp`: spans per second through the OTLP receiver into Kafka.

The receiver runs in a process of its own (one process, as the goal states) against scratch
topics; a load generator in another process sends pre-built protobuf batches of agent traces
(an invoke_agent root, then chat and execute_tool spans whose messages grow turn by turn, as an
instrumented agent writes them) over `connections` keep-alive connections. A batch counts once
its answer came back, which the receiver sends only after the batch's records are acknowledged
by the broker: spans/s is end to end, into Kafka. Four ways, in the same run:

- spans with their content, over HTTP (the reference);
- the same traces with their content as log records (the legacy per-message events of
  OpenTelemetry's openai-v2 instrumentation: every request message and the choice, each call
  resending its history), each batch's log records sent before its spans, over HTTP;
- spans with their content over gRPC;
- a baseline receiver that only reads the spans (the same HTTP server and protobuf decoding,
  nothing recorded): the ceiling of the parts that are not rolltape's.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._machine import machine
from rolltape.infra.settings import Settings
from rolltape.schemas import Role
from rolltape.schemas.clients import KafkaConnection


class OtlpFigures(Figures):
    """What `rolltape bench otlp` prints: spans/s acknowledged into Kafka through the receiver,
    beside a receiver that only decodes, medians over `repeats`."""

    machine: str
    spans: int
    spans_per_batch: int
    connections: int
    repeats: int
    receiver_spans_per_s: float
    """Median over repeats: all spans acknowledged (in Kafka) / wall time."""
    receiver_runs: list[float]
    events_per_span: float
    """Records the receiver wrote per span (turns, calls, results, starts and ends)."""
    decode_only_spans_per_s: float
    """The same batches to a receiver that decodes and answers, recording nothing."""
    ratio: float
    logs_spans_per_s: float
    """Median over repeats with the content as log records (spans/s; the records not counted)."""
    logs_ratio: float
    """logs_spans_per_s / receiver_spans_per_s (goal >= 0.8)."""
    log_records_per_span: float
    grpc_spans_per_s: float
    grpc_ratio: float
    """grpc_spans_per_s / receiver_spans_per_s (goal >= 0.8)."""
    workers_spans_per_s: dict[int, float] = Field(default_factory=dict)
    """`otlp serve --workers N` for each N measured beside one process (medians, same runs)."""
    receiver_cpu_us_per_span: float | None = None
    """The receiver process's CPU time (user and system) over the timed batches, per span
    (median; the process's own CPU clock): what the ratio means when the baseline is not
    CPU-bound."""
    decode_only_cpu_us_per_span: float | None = None
    cpu_ratio: float | None = None
    """decode_only_cpu_us_per_span / receiver_cpu_us_per_span: the ratio in CPU, whatever
    bounds the baseline's rate."""
    logs_cpu_us_per_span: float | None = None
    grpc_cpu_us_per_span: float | None = None
    receiver_busy: float | None = None
    """Receiver CPU seconds per wall second over the timed batches (1.0: one core, saturated)."""
    decode_only_busy: float | None = None
    """The same for the baseline: under 1 when it waited for the load generator."""
    goal_spans_per_s: float = 10_000.0
    goal_ratio: float = 0.35
    """Of the decode-only baseline, in the same run."""
    anchor_collector_spans_per_s_per_core: float = 12_000.0

    def lines(self) -> Iterator[str]:
        yield machine_line(
            self.machine,
            f"{self.repeats} repeats of {self.spans:,} spans in requests of "
            f"{self.spans_per_batch} over {self.connections} connections (agent traces: chat "
            "and execute_tool spans with their messages)",
        )
        runs = ", ".join(f"{v:,.0f}" for v in self.receiver_runs)
        yield (
            "    rolltape serve otlp, acknowledged into Kafka: "
            f"{self.receiver_spans_per_s:,.0f} spans/s (runs {runs}; "
            f"{self.events_per_span:.2f} records per span)"
        )
        yield (
            "    baseline receiver that only decodes:        "
            f"{self.decode_only_spans_per_s:,.0f} spans/s"
        )
        yield (
            f"    ratio (rolltape / baseline): {self.ratio:.2f} (goal >= {self.goal_ratio:.2f}: "
            f"{'met' if self.ratio >= self.goal_ratio else 'MISSED'})"
        )
        if (
            self.receiver_cpu_us_per_span is not None
            and self.decode_only_cpu_us_per_span is not None
        ):
            waited = (
                ": the rest it waited for the load generator"
                if (self.decode_only_busy or 0) < 0.9
                else ""
            )
            yield (
                f"    receiver CPU per span: {self.receiver_cpu_us_per_span:.1f} µs (busy "
                f"{self.receiver_busy:.0%} of the run); baseline "
                f"{self.decode_only_cpu_us_per_span:.1f} µs (busy {self.decode_only_busy:.0%}"
                f"{waited}); ratio in CPU {self.cpu_ratio:.2f}"
            )
            yield (
                f"    CPU per span with content as log records {self.logs_cpu_us_per_span:.1f} "
                f"µs, over gRPC {self.grpc_cpu_us_per_span:.1f} µs"
            )
        for label, rate, ratio in (
            (
                f"content as log records ({self.log_records_per_span:.1f} per span)",
                self.logs_spans_per_s,
                self.logs_ratio,
            ),
            ("spans over gRPC", self.grpc_spans_per_s, self.grpc_ratio),
        ):
            verdict = "met" if ratio >= 0.8 else "MISSED"
            yield (
                f"    {label}: {rate:,.0f} spans/s, {ratio:.2f} of spans over HTTP "
                f"(goal >= 0.80: {verdict})"
            )
        for n, rate in self.workers_spans_per_s.items():
            yield (
                f"    otlp serve --workers {n}: {rate:,.0f} spans/s "
                f"({rate / self.receiver_spans_per_s:.2f}x one process)"
            )
        verdict = "met" if self.receiver_spans_per_s >= self.goal_spans_per_s else "MISSED"
        yield (
            f"    goal >= {self.goal_spans_per_s:,.0f} spans/s on one process: {verdict} (anchor: "
            f"the OpenTelemetry Collector, ~{self.anchor_collector_spans_per_s_per_core:,.0f} "
            "spans/s per core)"
        )


def _attr(key: str, value: Any) -> Any:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def _body(value: Any) -> Any:
    """A log record body (AnyValue) of a JSON-like value."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    if isinstance(value, dict):
        out = AnyValue()
        out.kvlist_value.values.extend(KeyValue(key=k, value=_body(v)) for k, v in value.items())
        return out
    if isinstance(value, list):
        out = AnyValue()
        out.array_value.values.extend(_body(v) for v in value)
        return out
    if isinstance(value, int):
        return AnyValue(int_value=value)
    return AnyValue(string_value=str(value))


def _legacy_events(
    logs: list[Any], trace_id: bytes, span_id: bytes, history: list[dict[str, Any]], out: Any
) -> None:
    """The records openai-v2 emits for one call with content capture on (default conventions):
    one per request message, then the choice."""
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

    def record(name: str, body: dict[str, Any]) -> None:
        logs.append(
            LogRecord(
                event_name=name,
                trace_id=trace_id,
                span_id=span_id,
                observed_time_unix_nano=1_700_000_000_000_000_000 + len(logs),
                body=_body(body),
            )
        )

    for message in history:
        role = message["role"]
        if role == "tool":
            part = message["parts"][0]
            record("gen_ai.tool.message", {"content": part["response"], "id": part["id"]})
        elif role == "assistant":
            record("gen_ai.assistant.message", {"tool_calls": _openai_calls(message)})
        else:
            record(f"gen_ai.{role}.message", {"content": message["parts"][0]["content"]})
    choice = {"role": "assistant", "content": out["parts"][0]["content"]}
    choice["tool_calls"] = _openai_calls(out)
    record("gen_ai.choice", {"index": 0, "finish_reason": "tool_calls", "message": choice})


def _openai_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": p["id"],
            "type": "function",
            "function": {"name": p["name"], "arguments": json.dumps(p["arguments"])},
        }
        for p in message["parts"]
        if p["type"] == "tool_call"
    ]


def _trace(spans: list[Any], trace_id: bytes, turns: int, logs: list[Any] | None = None) -> None:
    """One agent trace: root, then per turn a chat span and an execute_tool span. With `logs`,
    the chat spans carry no content: it goes to `logs` as openai-v2's legacy events."""
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    root_id = os.urandom(8)
    t = 1_700_000_000_000_000_000
    user = {"role": "user", "parts": [{"type": "text", "content": "What is 342/76? " * 8}]}
    history: list[dict[str, Any]] = [user]
    for turn in range(turns):
        call_id = f"call_{turn}"
        out = {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": f"Step {turn}: computing. " * 6},
                {"type": "tool_call", "id": call_id, "name": "calc", "arguments": {"x": turn}},
            ],
            "finish_reason": "tool_calls",
        }
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "qwen3-8b",
            "gen_ai.usage.input_tokens": 100 + 40 * turn,
            "gen_ai.usage.output_tokens": 40,
        }
        chat_id = os.urandom(8)
        if logs is None:
            attributes["gen_ai.input.messages"] = json.dumps(history)
            attributes["gen_ai.output.messages"] = json.dumps([out])
        else:
            attributes["gen_ai.system"] = "openai"
            attributes["gen_ai.response.finish_reasons"] = "tool_calls"
            _legacy_events(logs, trace_id, chat_id, history, out)
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=chat_id,
                parent_span_id=root_id,
                name="chat qwen3-8b",
                kind=Span.SPAN_KIND_CLIENT,
                start_time_unix_nano=t,
                end_time_unix_nano=t + 1000,
                attributes=[_attr(k, v) for k, v in attributes.items()],
            )
        )
        result = json.dumps({"value": 4.5, "turn": turn})
        tool = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "calc",
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.call.arguments": json.dumps({"x": turn}),
            "gen_ai.tool.call.result": result,
        }
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=os.urandom(8),
                parent_span_id=root_id,
                name="execute_tool calc",
                kind=Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=t + 2000,
                end_time_unix_nano=t + 3000,
                attributes=[_attr(k, v) for k, v in tool.items()],
            )
        )
        history = [
            *history,
            out,
            {
                "role": "tool",
                "parts": [{"type": "tool_call_response", "id": call_id, "response": result}],
            },
        ]
        t += 10_000
    spans.append(
        Span(
            trace_id=trace_id,
            span_id=root_id,
            name="invoke_agent calc",
            kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=1_700_000_000_000_000_000,
            end_time_unix_nano=t,
            attributes=[_attr("gen_ai.operation.name", "invoke_agent")],
        )
    )


Request = tuple[str, bytes]
"""(signal, serialized Export request): "traces" or "logs"."""


def build_batches(
    spans: int, spans_per_batch: int, turns: int = 3, *, as_logs: bool = False
) -> list[list[Request]]:
    """Batches of about `spans` spans in whole traces, each a list of requests sent in order:
    its ExportTraceServiceRequest, preceded by the ExportLogsServiceRequest of its content when
    `as_logs` (the SDK exports log records every second, spans every five)."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    service = KeyValue(key="service.name", value=AnyValue(string_value="bench-agent"))
    batches = []
    made = 0
    while made < spans:
        request = ExportTraceServiceRequest()
        resource = request.resource_spans.add()
        resource.resource.attributes.append(service)
        scope = resource.scope_spans.add()
        batch: list[Any] = []
        logs: list[Any] | None = [] if as_logs else None
        while len(batch) + 2 * turns + 1 <= spans_per_batch and made + len(batch) < spans:
            _trace(batch, os.urandom(16), turns, logs)
        scope.spans.extend(batch)
        made += len(batch)
        requests: list[Request] = []
        if logs is not None:
            log_request = ExportLogsServiceRequest()
            resource_logs = log_request.resource_logs.add()
            resource_logs.resource.attributes.append(service)
            scope_logs = resource_logs.scope_logs.add()
            scope_logs.scope.name = "opentelemetry.instrumentation.openai_v2"
            scope_logs.log_records.extend(logs)
            requests.append(("logs", log_request.SerializeToString()))
        requests.append(("traces", request.SerializeToString()))
        batches.append(requests)
    return batches


def _answer_cpu(clock: Connection) -> None:
    """Answer each question on `clock` with this process's CPU seconds so far, all its threads
    counted, the gone ones too (the process clock is precise to the nanosecond, where /proc's
    counts are clock ticks: a small run's CPU would read as 0)."""
    while True:
        try:
            clock.recv()
            clock.send(time.process_time())
        except (EOFError, OSError):
            return


def _run_receiver(
    settings: Settings,
    ports: multiprocessing.Queue[tuple[int, int | None]],
    decode_only: bool,
    workers: int,
    clock: Connection,
) -> None:
    """A receiver process: the real one on HTTP and gRPC (with `workers` worker processes when
    more than one), or the baseline that records nothing; both with the collector settings of
    `otlp serve`. It answers questions on `clock` with its CPU seconds."""
    from aiohttp import web

    from rolltape.infra._gc import RECEIVER_YOUNG_THRESHOLD, tune_collector
    from rolltape.infra.commands.otlp_listen import serve
    from rolltape.infra.commands.otlp_serve import ReceiverConfig, open_receiver
    from rolltape.infra.commands.otlp_workers import WorkerPool
    from rolltape.producers.otlp import decode, success_body, unpack

    tune_collector(RECEIVER_YOUNG_THRESHOLD)  # as `otlp serve` runs, the baseline too
    threading.Thread(target=_answer_cpu, args=(clock,), daemon=True).start()

    async def main() -> None:
        stop = asyncio.Event()
        if decode_only:

            async def traces(request: web.Request) -> web.Response:
                body = unpack(await request.read(), request.headers.get("Content-Encoding"))
                decode(body, "protobuf")
                return web.Response(body=success_body("protobuf"))

            app = web.Application(client_max_size=64 << 20)
            app.router.add_post("/v1/traces", traces)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            ports.put((int(runner.addresses[0][1]), None))
            await stop.wait()
            return
        config = ReceiverConfig(linger_s=0.2)
        receiver: Any
        if workers > 1:
            receiver = WorkerPool(settings, config, workers)
            await receiver.start()
        else:
            receiver = open_receiver(settings, config)
        await serve(
            receiver,
            "127.0.0.1",
            0,
            stop,
            lambda bound: ports.put((bound.http, bound.grpc)),
            grpc_port=0,
        )

    asyncio.run(main())


async def _send_http(base: str, batches: list[list[Request]], connections: int) -> float:
    import aiohttp

    queue: asyncio.Queue[list[Request]] = asyncio.Queue()
    for batch in batches:
        queue.put_nowait(batch)
    headers = {"Content-Type": "application/x-protobuf"}
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def worker() -> None:
            while not queue.empty():
                for signal, body in queue.get_nowait():
                    async with http.post(f"{base}/v1/{signal}", data=body, headers=headers) as r:
                        await r.read()
                        if r.status != 200:
                            raise RuntimeError(f"the receiver answered {r.status}")

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        return time.perf_counter() - t0


_GRPC_METHODS = {
    "traces": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
}


async def _send_grpc(target: str, batches: list[list[Request]], connections: int) -> float:
    """The same batches over gRPC: one channel per connection, raw bytes both ways."""
    from grpc import aio

    queue: asyncio.Queue[list[Request]] = asyncio.Queue()
    for batch in batches:
        queue.put_nowait(batch)
    channels = [aio.insecure_channel(target) for _ in range(connections)]
    try:

        async def worker(channel: aio.Channel) -> None:
            calls: dict[str, Any] = {
                signal: channel.unary_unary(method) for signal, method in _GRPC_METHODS.items()
            }
            while not queue.empty():
                for signal, body in queue.get_nowait():
                    await calls[signal](body, timeout=60)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(c) for c in channels))
        return time.perf_counter() - t0
    finally:
        for channel in channels:
            await channel.close()


def _load(
    target: str,
    transport: str,
    batches: list[list[Request]],
    connections: int,
    out: multiprocessing.Queue[float],
) -> None:
    """The load generator, in its own process (it must not share the receiver's interpreter)."""
    send = _send_grpc if transport == "grpc" else _send_http
    asyncio.run(send(target, batches[:2], connections))  # warm-up: connections, caches
    out.put(0.0)  # the timed part starts
    out.put(asyncio.run(send(target, batches[2:], connections)))


def _cpu_of(clock: Connection) -> float:
    """The receiver process's CPU seconds so far, as it answers on `clock`."""
    clock.send(None)
    if not clock.poll(60):
        raise RuntimeError("the receiver did not say how much CPU it had used")
    return float(clock.recv())


class _Timed(BaseModel):
    """One timed run: wall seconds of the timed batches, and the receiver process's CPU seconds
    over them (None with worker processes, whose CPU is not counted)."""

    seconds: float
    cpu_s: float | None


def _measure(
    settings: Settings,
    batches: list[list[Request]],
    connections: int,
    decode_only: bool,
    workers: int = 1,
    transport: str = "http",
) -> _Timed:
    ctx = multiprocessing.get_context("spawn")
    ports: multiprocessing.Queue[tuple[int, int | None]] = ctx.Queue()
    clock, answers = ctx.Pipe()
    receiver = ctx.Process(
        target=_run_receiver, args=(settings, ports, decode_only, workers, answers), daemon=True
    )
    receiver.start()
    try:
        http, grpc = ports.get(timeout=120)
        target = f"127.0.0.1:{grpc}" if transport == "grpc" else f"http://127.0.0.1:{http}"
        results: multiprocessing.Queue[float] = ctx.Queue()
        load = ctx.Process(
            target=_load, args=(target, transport, batches, connections, results), daemon=True
        )
        load.start()
        results.get(timeout=1800)
        before = _cpu_of(clock) if workers == 1 else None
        seconds = results.get(timeout=1800)
        cpu = _cpu_of(clock) - before if before is not None else None
        load.join(30)
        return _Timed(seconds=seconds, cpu_s=cpu)
    finally:
        receiver.terminate()
        receiver.join(30)


def _events_written(connection: KafkaConnection, prefix: str) -> int:
    from rolltape.infra.kafka.readback import end_offsets
    from rolltape.schemas import topic_name

    topic = topic_name("events", prefix)
    return asyncio.run(end_offsets(connection, [topic])).get(topic, 0)


def run_otlp_bench(
    settings: Settings,
    *,
    partitions: int,
    spans: int = 100_000,
    spans_per_batch: int = 512,
    connections: int = 4,
    repeats: int = 3,
    workers: tuple[int, ...] = (),
) -> OtlpFigures:
    """Send the same pre-built traces, each repeat on fresh scratch prefixes (deleted after):
    spans with content over HTTP, the content as log records over HTTP, spans over gRPC, to the
    decode-only baseline, and, for each of `workers`, to a receiver with that many worker
    processes, each in a process of its own. The first two batches warm up and are not timed.
    Needs a broker."""
    from rolltape.infra.broker import require_connection
    from rolltape.infra.kafka.topics import scratch_prefix

    require_connection(settings, Role.ADMIN)  # a clear error when there is no broker
    batches = build_batches(spans + 2 * spans_per_batch, spans_per_batch)
    as_logs = build_batches(spans + 2 * spans_per_batch, spans_per_batch, as_logs=True)
    counts = [_count(b, "traces") for b in batches]
    timed_spans = sum(counts[2:])
    records = sum(_count(b, "logs") for b in as_logs[2:])
    runs: list[_Timed] = []
    baseline: list[_Timed] = []
    logs: list[_Timed] = []
    grpc: list[_Timed] = []
    per_span: list[float] = []
    pooled: dict[int, list[_Timed]] = {n: [] for n in workers if n > 1}

    def timed(these: list[list[Request]], n: int = 1, transport: str = "http") -> _Timed:
        with (
            scratch_prefix(settings, "bench", partitions=partitions) as scratch,
            tempfile.TemporaryDirectory() as state,
        ):
            scoped = scratch.model_copy(update={"state_dir": Path(state)})
            return _measure(scoped, these, connections, False, n, transport)

    for _ in range(repeats):
        for n in pooled:
            pooled[n].append(timed(batches, n))
        logs.append(timed(as_logs))
        grpc.append(timed(batches, transport="grpc"))
        with scratch_prefix(settings, "bench", partitions=partitions) as scratch:
            with tempfile.TemporaryDirectory() as state:
                scoped = scratch.model_copy(update={"state_dir": Path(state)})
                runs.append(_measure(scoped, batches, connections, False))
            reader = require_connection(scratch, Role.READER)
            per_span.append(_events_written(reader, scratch.topic_prefix) / sum(counts))
            with tempfile.TemporaryDirectory() as state:
                scoped = scratch.model_copy(update={"state_dir": Path(state)})
                baseline.append(_measure(scoped, batches, connections, True))

    def rate(these: list[_Timed]) -> float:
        return statistics.median(timed_spans / t.seconds for t in these)

    def cpu(these: list[_Timed]) -> float | None:
        """Median receiver CPU per span, in microseconds."""
        known = [t.cpu_s for t in these if t.cpu_s is not None]
        return round(statistics.median(known) / timed_spans * 1e6, 2) if known else None

    def busy(these: list[_Timed]) -> float | None:
        known = [t.cpu_s / t.seconds for t in these if t.cpu_s is not None]
        return round(statistics.median(known), 2) if known else None

    receiver, decode_only = rate(runs), rate(baseline)
    logs_rate, grpc_rate = rate(logs), rate(grpc)
    receiver_cpu, decode_cpu = cpu(runs), cpu(baseline)
    return OtlpFigures(
        machine=machine(),
        spans=timed_spans,
        spans_per_batch=spans_per_batch,
        connections=connections,
        repeats=repeats,
        receiver_spans_per_s=round(receiver, 1),
        receiver_runs=[round(timed_spans / t.seconds, 1) for t in runs],
        events_per_span=round(statistics.median(per_span), 3),
        decode_only_spans_per_s=round(decode_only, 1),
        ratio=round(receiver / decode_only, 3),
        logs_spans_per_s=round(logs_rate, 1),
        logs_ratio=round(logs_rate / receiver, 3),
        log_records_per_span=round(records / timed_spans, 2),
        grpc_spans_per_s=round(grpc_rate, 1),
        grpc_ratio=round(grpc_rate / receiver, 3),
        workers_spans_per_s={n: round(rate(v), 1) for n, v in pooled.items()},
        receiver_cpu_us_per_span=receiver_cpu,
        decode_only_cpu_us_per_span=decode_cpu,
        cpu_ratio=(round(decode_cpu / receiver_cpu, 3) if receiver_cpu and decode_cpu else None),
        logs_cpu_us_per_span=cpu(logs),
        grpc_cpu_us_per_span=cpu(grpc),
        receiver_busy=busy(runs),
        decode_only_busy=busy(baseline),
    )


def _count(batch: list[Request], signal: str) -> int:
    """Spans ("traces") or log records ("logs") in a batch's requests."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    total = 0
    for kind, body in batch:
        if kind != signal:
            continue
        if kind == "traces":
            request = ExportTraceServiceRequest.FromString(body)
            total += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        else:
            logs = ExportLogsServiceRequest.FromString(body)
            total += sum(len(s.log_records) for r in logs.resource_logs for s in r.scope_logs)
    return total
