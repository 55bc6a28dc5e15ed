"""`rolltape bench otlp`: spans per second through the OTLP receiver into Kafka.

The receiver runs in a process of its own (one process, as the goal states) against scratch
topics; a load generator in another process POSTs pre-built protobuf batches of agent traces
(an invoke_agent root, then chat and execute_tool spans whose messages grow turn by turn, as an
instrumented agent writes them) over `connections` keep-alive connections. A batch counts once
its 200 came back, which the receiver sends only after the batch's records are acknowledged by
the broker: spans/s is end to end, into Kafka. The same batches sent in the same run to a
baseline receiver that only reads them (the same HTTP server and protobuf decoding, nothing
recorded) give the ceiling of the parts that are not rolltape's.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rolltape.infra.bench._machine import machine
from rolltape.infra.settings import Settings
from rolltape.schemas import Role
from rolltape.schemas.clients import KafkaConnection


class OtlpFigures(BaseModel):
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
    workers_spans_per_s: dict[int, float] = {}
    """`otlp serve --workers N` for each N measured beside one process (medians, same runs)."""
    goal_spans_per_s: float = 10_000.0
    anchor_collector_spans_per_s_per_core: float = 12_000.0


def _attr(key: str, value: Any) -> Any:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def _trace(spans: list[Any], trace_id: bytes, turns: int) -> None:
    """One agent trace: root, then per turn a chat span and an execute_tool span."""
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
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "qwen3-8b",
            "gen_ai.usage.input_tokens": 100 + 40 * turn,
            "gen_ai.usage.output_tokens": 40,
            "gen_ai.input.messages": json.dumps(history),
            "gen_ai.output.messages": json.dumps([out]),
        }
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=os.urandom(8),
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


def build_batches(spans: int, spans_per_batch: int, turns: int = 3) -> list[bytes]:
    """Serialized ExportTraceServiceRequests holding about `spans` spans in whole traces."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    batches = []
    made = 0
    while made < spans:
        request = ExportTraceServiceRequest()
        resource = request.resource_spans.add()
        resource.resource.attributes.append(
            KeyValue(key="service.name", value=AnyValue(string_value="bench-agent"))
        )
        scope = resource.scope_spans.add()
        batch: list[Any] = []
        while len(batch) + 2 * turns + 1 <= spans_per_batch and made + len(batch) < spans:
            _trace(batch, os.urandom(16), turns)
        scope.spans.extend(batch)
        made += len(batch)
        batches.append(request.SerializeToString())
    return batches


def _run_receiver(
    settings: Settings, ports: multiprocessing.Queue[int], decode_only: bool, workers: int = 1
) -> None:
    """A receiver process: the real one (with `workers` worker processes when more than one),
    or the baseline that records nothing."""
    from aiohttp import web

    from rolltape.infra.commands.otlp_listen import serve
    from rolltape.infra.commands.otlp_serve import ReceiverConfig, open_receiver
    from rolltape.infra.commands.otlp_workers import WorkerPool
    from rolltape.producers.otlp import decode, success_body, unpack

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
            ports.put(int(runner.addresses[0][1]))
            await stop.wait()
            return
        config = ReceiverConfig(linger_s=0.2)
        if workers > 1:
            pool = WorkerPool(settings, config, workers)
            await pool.start()
            await serve(pool, "127.0.0.1", 0, stop, lambda bound: ports.put(bound.http))
            return
        await serve(
            open_receiver(settings, config),
            "127.0.0.1",
            0,
            stop,
            lambda bound: ports.put(bound.http),
        )

    asyncio.run(main())


async def _send(url: str, batches: list[bytes], connections: int) -> float:
    import aiohttp

    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for batch in batches:
        queue.put_nowait(batch)
    headers = {"Content-Type": "application/x-protobuf"}
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def worker() -> None:
            while not queue.empty():
                body = queue.get_nowait()
                async with http.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"the receiver answered {response.status}")

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        return time.perf_counter() - t0


def _load(
    url: str, batches: list[bytes], connections: int, out: multiprocessing.Queue[float]
) -> None:
    """The load generator, in its own process (it must not share the receiver's interpreter)."""
    asyncio.run(_send(url, batches[:2], connections))  # warm-up: connections, caches
    out.put(asyncio.run(_send(url, batches[2:], connections)))


def _measure(
    settings: Settings,
    batches: list[bytes],
    connections: int,
    decode_only: bool,
    workers: int = 1,
) -> float:
    ctx = multiprocessing.get_context("spawn")
    ports: multiprocessing.Queue[int] = ctx.Queue()
    receiver = ctx.Process(
        target=_run_receiver, args=(settings, ports, decode_only, workers), daemon=True
    )
    receiver.start()
    try:
        url = f"http://127.0.0.1:{ports.get(timeout=120)}/v1/traces"
        results: multiprocessing.Queue[float] = ctx.Queue()
        load = ctx.Process(target=_load, args=(url, batches, connections, results), daemon=True)
        load.start()
        seconds = results.get(timeout=1800)
        load.join(30)
        return seconds
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
    """Send the same pre-built batches to the receiver and to the decode-only baseline, each
    in its own process, on a fresh scratch prefix per repeat (deleted after); and, for each of
    `workers`, to a receiver with that many worker processes. The first two batches warm up
    and are not timed. Needs a broker."""
    from rolltape.infra.broker import require_connection
    from rolltape.infra.kafka.topics import scratch_prefix

    batches = build_batches(spans + 2 * spans_per_batch, spans_per_batch)
    counts = [_count_spans(b) for b in batches]
    timed_spans = sum(counts[2:])
    runs, baseline, per_span = [], [], []
    pooled: dict[int, list[float]] = {n: [] for n in workers if n > 1}
    for _ in range(repeats):
        for n in pooled:
            with (
                scratch_prefix(settings, "bench", partitions=partitions) as scratch,
                tempfile.TemporaryDirectory() as state,
            ):
                scoped = scratch.model_copy(update={"state_dir": Path(state)})
                pooled[n].append(timed_spans / _measure(scoped, batches, connections, False, n))
        with scratch_prefix(settings, "bench", partitions=partitions) as scratch:
            with tempfile.TemporaryDirectory() as state:
                scoped = scratch.model_copy(update={"state_dir": Path(state)})
                runs.append(timed_spans / _measure(scoped, batches, connections, False))
            reader = require_connection(scratch, Role.READER)
            per_span.append(_events_written(reader, scratch.topic_prefix) / sum(counts))
            with tempfile.TemporaryDirectory() as state:
                scoped = scratch.model_copy(update={"state_dir": Path(state)})
                baseline.append(timed_spans / _measure(scoped, batches, connections, True))
    receiver = statistics.median(runs)
    decode_only = statistics.median(baseline)
    return OtlpFigures(
        machine=machine(),
        spans=timed_spans,
        spans_per_batch=spans_per_batch,
        connections=connections,
        repeats=repeats,
        receiver_spans_per_s=round(receiver, 1),
        receiver_runs=[round(r, 1) for r in runs],
        events_per_span=round(statistics.median(per_span), 3),
        decode_only_spans_per_s=round(decode_only, 1),
        ratio=round(receiver / decode_only, 3),
        workers_spans_per_s={n: round(statistics.median(v), 1) for n, v in pooled.items()},
    )


def _count_spans(batch: bytes) -> int:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest.FromString(batch)
    return sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
