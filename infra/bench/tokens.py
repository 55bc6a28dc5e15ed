"""`rolltape bench tokens`: token samples, written and streamed, against their baselines.

- **export**: the same agent sessions (a captured client's exact ids and logprobs: two replies
  with a tool result between them, in groups of two with different rewards) exported by the
  export code (`run_export`) as `-f tokens` and as `-f atropos`, in alternation. Samples per
  second: a tokens line, or an Atropos group's sequence. Kafka reading is left out (the same
  work for both). Goal: tokens >= 1.0x Atropos.
- **stream** (on a broker): the same sessions written to a scratch prefix with a filter outcome
  each, read as token samples by `TokenStream` (a consumer group member, with its positions,
  checkpoint state and dedupe) against a plain read of the same topics to their end with the
  same fold and samples (`read_records`, no group). Goal: the stream >= 0.7x the plain read.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rolltape.infra.bench._chains import chained_session
from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._machine import machine
from rolltape.infra.broker import require_connection
from rolltape.infra.commands.export import Collected, run_export
from rolltape.infra.kafka.readback import read_records
from rolltape.infra.kafka.topics import scratch_prefix
from rolltape.infra.settings import Settings
from rolltape.projections import ExportOptions, Selection, fold
from rolltape.projections.exporters import SkipSession, token_samples
from rolltape.schemas import ChainWriter, Role, Stream, read_event, topic_name

GOAL_EXPORT_RATIO = 1.0
GOAL_STREAM_RATIO = 0.7
_PRODUCER = {"name": "bench", "version": "0", "principal": "processor"}
_PROMPT = list(range(100, 400))
"""A system prompt and task of 300 tokens."""


def _payloads(n: int) -> list[tuple[str, dict[str, Any]]]:
    """One captured rollout: exact prompt ids, sampled ids and logprobs of two replies."""
    first = [1000 + (n + i) % 500 for i in range(60)]
    tool = [2000 + i for i in range(40)]
    second = [3000 + (n * 7 + i) % 500 for i in range(120)]
    return [
        ("session_started", {"task": f"task {n // 2}", "group_id": f"g{n // 2}"}),
        ("turn", {"role": "user", "content": f"task {n // 2}: add the numbers"}),
        (
            "turn",
            {
                "role": "assistant",
                "content": "",
                "prompt_token_ids": _PROMPT,
                "token_ids": first,
                "logprobs": [-0.25] * len(first),
                "finish_reason": "tool_calls",
            },
        ),
        ("tool_call", {"id": "c1", "name": "calc", "arguments": {"e": f"{n}+1"}}),
        ("tool_result", {"call_id": "c1", "content": str(n + 1)}),
        (
            "turn",
            {
                "role": "assistant",
                "content": f"It is {n + 1}.",
                "prompt_token_ids": [*_PROMPT, *first, *tool],
                "token_ids": second,
                "logprobs": [-0.5] * len(second),
                "finish_reason": "stop",
            },
        ),
        ("reward", {"value": float(n % 2)}),
        ("session_ended", {"status": "completed"}),
    ]


class TokensFigures(Figures):
    """Token samples per second: the export against Atropos's, the stream against a plain read."""

    machine: str
    sessions: int
    repeats: int
    tokens_samples_per_s: float
    atropos_samples_per_s: float
    export_ratio: float
    goal_export_ratio: float = GOAL_EXPORT_RATIO
    stream_sessions: int | None = None
    stream_samples_per_s: float | None = None
    plain_samples_per_s: float | None = None
    stream_ratio: float | None = None
    goal_stream_ratio: float = GOAL_STREAM_RATIO

    def lines(self) -> Iterator[str]:
        yield machine_line(self.machine, f"{self.repeats} repeats (medians)")
        yield (
            f"export of {self.sessions} captured sessions (exact ids, 520 tokens each), "
            "Kafka reading left out"
        )
        yield f"    -f tokens                        {self.tokens_samples_per_s:10,.0f} samples/s"
        yield f"    -f atropos (baseline)            {self.atropos_samples_per_s:10,.0f} samples/s"
        met = "met" if self.export_ratio >= self.goal_export_ratio else "MISSED"
        yield f"    ratio: {self.export_ratio:.2f}x; goal >= {self.goal_export_ratio}: {met}"
        if self.stream_ratio is None:
            yield "stream: not measured (no broker)"
            return
        yield f"stream of {self.stream_sessions} sessions on the broker"
        yield f"    TokenStream                      {self.stream_samples_per_s:10,.0f} samples/s"
        yield f"    plain read (baseline)            {self.plain_samples_per_s:10,.0f} samples/s"
        met = "met" if self.stream_ratio >= self.goal_stream_ratio else "MISSED"
        yield f"    ratio: {self.stream_ratio:.2f}x; goal >= {self.goal_stream_ratio}: {met}"


def _collected(count: int) -> Collected:
    collected = Collected()
    for n in range(count):
        for value in chained_session(f"tok-{n:06d}", n, _payloads(n)):
            collected.add(value)
    return collected


def _export_rates(sessions: int, repeats: int) -> tuple[float, float]:
    times: dict[str, list[float]] = {"tokens": [], "atropos": []}
    samples: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp, _collected(sessions) as collected:
        for r in range(repeats):
            for format in ("tokens", "atropos"):
                t = time.perf_counter()
                manifest = run_export(
                    collected, ExportOptions(format=format), Path(tmp) / f"{format}-{r}"
                )
                times[format].append(time.perf_counter() - t)
                samples[format] = manifest.sessions_exported
                if manifest.sessions_exported != sessions:
                    raise RuntimeError(
                        f"the {format} export holds {manifest.sessions_exported} of {sessions} "
                        f"sessions (left out: {manifest.skipped})"
                    )
    return (
        samples["tokens"] / statistics.median(times["tokens"]),
        samples["atropos"] / statistics.median(times["atropos"]),
    )


async def _write(settings: Settings, sessions: int) -> None:
    """The sessions and a filter outcome each (as the worker writes one), acknowledged."""
    connection = require_connection(settings, Role.ADMIN)
    producer = connection.chain_producer(linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    events, filtered = (
        topic_name(s, settings.topic_prefix) for s in (Stream.EVENTS, Stream.FILTERED)
    )
    writer: ChainWriter[tuple[str, str]] = ChainWriter()
    try:
        pending = []
        for n in range(sessions):
            sid = f"tok-{n:06d}"
            for value in chained_session(sid, n, _payloads(n)):
                pending.append(await producer.send(events, value, key=sid.encode()))
            outcome, _ = writer.append(
                (sid, "filtered"),
                stream=Stream.FILTERED.value,
                session_id=sid,
                ts_ns=10**18 + n,
                type="filter_outcome",
                payload={
                    "filter_version": "1",
                    "config": "bench",
                    "accepted": True,
                    "reasons": [],
                    "status": "completed",
                    "turns": 3,
                    "tool_calls": 1,
                },
                producer=_PRODUCER,
            )
            pending.append(await producer.send(filtered, outcome, key=sid.encode()))
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


def _stream_seconds(settings: Settings, sessions: int) -> float:
    from rolltape.projections.dataset import TokenStream

    stream = TokenStream(
        require_connection(settings, Role.READER),
        group_id=f"bench-{uuid.uuid4().hex[:8]}",
        prefix=settings.topic_prefix,
        selection=Selection(),
    )
    t = time.perf_counter()
    for count, _ in enumerate(stream, 1):
        if count == sessions:
            stream.stop()
    return time.perf_counter() - t


async def _plain_seconds(settings: Settings, sessions: int) -> float:
    t = time.perf_counter()
    events: dict[str, list[Any]] = defaultdict(list)
    derived: dict[str, list[Any]] = defaultdict(list)
    count = 0
    async for record in read_records(
        require_connection(settings, Role.READER),
        (Stream.EVENTS, Stream.FILTERED),
        prefix=settings.topic_prefix,
    ):
        if record.key is None or record.value is None:
            continue
        sid = record.key.decode()
        event = read_event(record.value)
        (events if event.stream == Stream.EVENTS.value else derived)[sid].append(event)
        ended = events[sid] and events[sid][-1].type == "session_ended"
        if ended and derived[sid]:
            try:
                count += len(token_samples(fold(events.pop(sid), derived.pop(sid))))
            except SkipSession:
                continue
    if count != sessions:
        raise RuntimeError(f"the plain read made {count} of {sessions} samples")
    return time.perf_counter() - t


def run_tokens_bench(
    sessions: int = 2000,
    repeats: int = 3,
    settings: Settings | None = None,
    stream_sessions: int = 2000,
) -> TokensFigures:
    """The export figures, and the stream's on the broker of `settings` (BrokerUnavailable,
    before anything is measured, when there is none)."""
    if settings is not None:
        require_connection(settings, Role.ADMIN)
    tokens_rate, atropos_rate = _export_rates(sessions, repeats)
    figures: dict[str, Any] = {}
    if settings is not None:
        with scratch_prefix(settings, "bench-tokens-", partitions=3) as scratch:
            asyncio.run(_write(scratch, stream_sessions))
            times: dict[str, list[float]] = {"stream": [], "plain": []}
            for _ in range(repeats):
                times["stream"].append(_stream_seconds(scratch, stream_sessions))
                times["plain"].append(asyncio.run(_plain_seconds(scratch, stream_sessions)))
        stream_rate = stream_sessions / statistics.median(times["stream"])
        plain_rate = stream_sessions / statistics.median(times["plain"])
        figures = {
            "stream_sessions": stream_sessions,
            "stream_samples_per_s": stream_rate,
            "plain_samples_per_s": plain_rate,
            "stream_ratio": stream_rate / plain_rate,
        }
    return TokensFigures(
        machine=machine(),
        sessions=sessions,
        repeats=repeats,
        tokens_samples_per_s=tokens_rate,
        atropos_samples_per_s=atropos_rate,
        export_ratio=tokens_rate / atropos_rate,
        **figures,
    )
