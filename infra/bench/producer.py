"""`rolltape bench producer`: what recording costs the agent, and how fast records reach Kafka.

(a) Hot path: per-call latency of `Session.turn` (p50/p99, microseconds) beside a local chained
    JSONL writer in the style of env_rl's `ChainedJsonlWriter` (json.dumps + sha256 + write +
    flush per event; zubairashfaque/environment_rl @633b4e7, `src/env_rl/monitor/logging.py`),
    measured in the same run on the same 1 KB payloads.
(b) Sustained: ~1 KB events from one process to the broker with acks=all, from the first record
    call until flush returns (every event acknowledged), beside raw aiokafka sending the same
    number of pre-encoded 1 KB values with the same producer settings (no validation, chaining
    or hashing): the ratio is rolltape's overhead. The sustained run is repeated with the
    recorder's sealing spread over sender processes (`senders=N`), each beside the client's
    ceiling measured in the same repeat (raw aiokafka, pre-encoded values in hand-built batches).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from aiokafka import AIOKafkaProducer
from pydantic import BaseModel, Field

from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._machine import machine
from rolltape.infra.broker import require_connection
from rolltape.infra.kafka.topics import scratch_prefix
from rolltape.infra.settings import Settings
from rolltape.producers import Recorder
from rolltape.schemas import Role, topic_name
from rolltape.schemas.clients import KafkaConnection

CONTENT = ("The quick brown fox jumps over the lazy dog. " * 23)[:900]


class Percentiles(BaseModel):
    """Latency of one record call, from per-call timings with the timer's overhead taken off."""

    p50_us: float
    p99_us: float


class SustainedRun(BaseModel):
    """One recorder configuration's sustained throughput, medians over the repeats."""

    senders: int
    events_per_s: float
    runs_events_per_s: list[float]
    enqueue_s: float
    until_acked_s: float
    ceiling_events_per_s: float
    """The client's ceiling (pre-encoded values in hand-built batches), same repeats."""
    ratio: float
    """Median over the repeats of events/s divided by that repeat's ceiling."""


class SealedRun(BaseModel):
    """Sessions that name a subject (their content sealed), beside the same sender count's
    unsealed runs of the same repeats."""

    senders: int
    events_per_s: float
    runs_events_per_s: list[float]
    ratio: float
    """Median over the repeats of sealed events/s over the same repeat's unsealed events/s."""
    goal_ratio: float = 0.85


class ProducerBench(Figures):
    """Everything `rolltape bench producer` prints: the hot path against a local chained-JSONL
    writer, and sustained throughput per sender count against the client's ceiling."""

    machine: str
    hot_path_calls: int
    timer_overhead_us: float
    recorder: Percentiles
    jsonl_writer: Percentiles
    hot_path_ratio: float
    sustained_events: int
    recorder_events_per_s: float
    recorder_enqueue_s: float
    recorder_until_acked_s: float
    raw_aiokafka_events_per_s: float
    throughput_ratio: float
    raw_batches_events_per_s: float
    raw_batches_runs_events_per_s: list[float]
    """The ceiling of each repeat, in order (the sustained runs' ratios use their own)."""
    repeats: int
    sustained_sessions: int
    by_senders: list[SustainedRun]
    sealed: list[SealedRun] = Field(default_factory=list)
    """With `--sealed`: the same sustained runs with every session naming a subject."""
    goal_events_per_s: float = 100_000
    goal_ratio: float = 0.6
    partitions: int = 0

    def lines(self) -> Iterator[str]:
        yield machine_line(
            self.machine,
            f"{self.repeats} repeats",
            f"{self.partitions} partitions",
            f"timer overhead {self.timer_overhead_us:.3f} us (subtracted)",
        )
        yield "(a) hot path, one record call of a ~1 KB turn"
        rec, writer = self.recorder, self.jsonl_writer
        yield f"    rolltape Session.turn      p50 {rec.p50_us:7.2f} us   p99 {rec.p99_us:7.2f} us"
        yield (
            f"    chained JSONL writer       p50 {writer.p50_us:7.2f} us   "
            f"p99 {writer.p99_us:7.2f} us"
        )
        yield f"    ratio (writer / rolltape p50): {self.hot_path_ratio:.1f}x"
        yield f"(b) sustained, {self.sustained_events} events of ~1 KB, acks=all, idempotent"
        yield (
            f"    rolltape: {self.recorder_events_per_s:,.0f} events/s (enqueue "
            f"{self.recorder_enqueue_s:.2f} s, all acknowledged after "
            f"{self.recorder_until_acked_s:.2f} s)"
        )
        yield f"    raw aiokafka, pre-encoded values: {self.raw_aiokafka_events_per_s:,.0f} events/s"
        yield f"    ratio (rolltape / raw): {self.throughput_ratio:.2f}"
        yield (
            "    raw aiokafka, pre-encoded values in hand-built batches (client ceiling): "
            f"{self.raw_batches_events_per_s:,.0f} events/s"
        )
        yield (
            f"(c) sustained by sender processes, {self.sustained_sessions} sessions; ceiling and "
            "ratio from the same repeats"
        )
        yield "    ceiling per repeat: " + _runs(self.raw_batches_runs_events_per_s)
        yield "    senders   events/s   ceiling   ratio   runs (ratio: median of the repeats')"
        for s in self.by_senders:
            yield (
                f"    {s.senders:>7}   {s.events_per_s:8,.0f}   {s.ceiling_events_per_s:7,.0f}   "
                f"{s.ratio:5.2f}   {_runs(s.runs_events_per_s)}"
            )
        two = next((s for s in self.by_senders if s.senders == 2), None)
        if two is not None:
            rate_met = two.events_per_s >= self.goal_events_per_s
            ratio_met = two.ratio >= self.goal_ratio
            yield (
                f"    goal, two senders: >= {self.goal_events_per_s:,.0f} events/s "
                f"({'met' if rate_met else 'MISSED'}: {two.events_per_s:,.0f}) and >= "
                f"{self.goal_ratio} of the ceiling ({'met' if ratio_met else 'MISSED'}: "
                f"{two.ratio:.2f})"
            )
        if self.sealed:
            yield "(d) sessions that name a subject (content sealed), same repeats"
            yield "    senders   events/s   ratio to unsealed   runs"
            for run in self.sealed:
                verdict = "met" if run.ratio >= run.goal_ratio else "MISSED"
                yield (
                    f"    {run.senders:>7}   {run.events_per_s:8,.0f}   {run.ratio:5.2f} "
                    f"(goal >= {run.goal_ratio}: {verdict})   {_runs(run.runs_events_per_s)}"
                )


def _runs(rates: list[float]) -> str:
    return " / ".join(f"{v:,.0f}" for v in rates)


def _pct(samples: list[int], overhead_ns: float) -> Percentiles:
    samples.sort()

    def at(q: float) -> float:
        return max(0.0, samples[min(len(samples) - 1, int(q * len(samples)))] - overhead_ns) / 1000

    return Percentiles(p50_us=at(0.50), p99_us=at(0.99))


def _timer_overhead_ns(n: int = 200_000) -> float:
    clock = time.perf_counter_ns
    samples = []
    for _ in range(n):
        t0 = clock()
        samples.append(clock() - t0)
    return float(statistics.median(samples))


def _hot_path(recorder: Recorder, calls: int) -> list[int]:
    clock = time.perf_counter_ns
    samples = [0] * calls
    with recorder.session("bench hot path") as s:
        turn = s.turn
        for i in range(calls):
            t0 = clock()
            turn("user", CONTENT)
            samples[i] = clock() - t0
    return samples


def _jsonl_writer(path: Path, calls: int) -> list[int]:
    """The local recorder we compare with: one chained JSON line per event, flushed each time."""
    clock = time.perf_counter_ns
    samples = [0] * calls
    prev = "0" * 64
    with open(path, "w") as f:
        for seq in range(calls):
            t0 = clock()
            payload = {"role": "user", "content": CONTENT, "reasoning": None}
            ts = time.time()
            h = hashlib.sha256(
                (
                    prev
                    + json.dumps(payload, sort_keys=True, separators=(",", ":"))
                    + str(seq)
                    + str(ts)
                ).encode()
            ).hexdigest()
            f.write(
                json.dumps(
                    {"seq": seq, "ts": ts, "prev_hash": prev, "payload": payload, "hash": h},
                    sort_keys=True,
                )
                + "\n"
            )
            f.flush()
            prev = h
            samples[seq] = clock() - t0
    return samples


def sustained_recording(
    connection: KafkaConnection,
    prefix: str,
    spool: Path,
    events: int,
    sessions: int,
    senders: int = 1,
    sealed: bool = False,
) -> tuple[float, float]:
    """(seconds to enqueue every event, seconds until every event is acknowledged); the sender
    processes are started and warmed up (a first flush) before the clock starts. `sealed`:
    every session names a subject, so its content is sealed under its data key."""
    from rolltape.schemas.privacy import KeyEncryptionKey

    recorder = Recorder(
        connection,
        topic_prefix=prefix,
        spool_dir=spool,
        max_backlog=events + 10,
        senders=senders,
        kek=KeyEncryptionKey.generate() if sealed else None,
    )
    # Distinct strings, as real turns are: the same object each time would cross to a sender
    # process once per batch (pickle and marshal write repeated objects by reference).
    contents = [f"{CONTENT[:-6]}{i:06d}" for i in range(min(events, 4096))]
    try:
        handles = [
            recorder.session("bench sustained", subject=f"user-{i}" if sealed else None)
            for i in range(sessions)
        ]
        recorder.flush(120)
        t0 = time.perf_counter()
        for i in range(events):
            handles[i % sessions].turn("assistant", contents[i % 4096])
        t1 = time.perf_counter()
        recorder.flush(600)
        t2 = time.perf_counter()
    finally:
        recorder.close()
    return t1 - t0, t2 - t0


def _baseline_producer(connection: KafkaConnection) -> AIOKafkaProducer:
    """The producer settings the recorder itself uses, so the baselines differ only in the work
    done per record."""
    return connection.producer(
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        max_batch_size=1_048_000,
        max_request_size=1_048_000 + 64 * 1024,
    )


async def _raw_aiokafka(connection: KafkaConnection, topic: str, events: int, size: int) -> float:
    producer = _baseline_producer(connection)
    await producer.start()
    try:
        value = os.urandom(size // 2).hex().encode()
        keys = [uuid.uuid4().hex.encode() for _ in range(8)]
        t0 = time.perf_counter()
        futures = [await producer.send(topic, value=value, key=keys[i % 8]) for i in range(events)]
        await asyncio.gather(*futures)
        return time.perf_counter() - t0
    finally:
        await producer.stop()


async def _raw_aiokafka_batches(
    connection: KafkaConnection, topic: str, events: int, size: int
) -> float:
    """The ceiling of the Python client here: pre-encoded values packed with create_batch."""
    producer = _baseline_producer(connection)
    await producer.start()
    try:
        value = os.urandom(size // 2).hex().encode()
        partitions = sorted(await producer.partitions_for(topic))
        t0 = time.perf_counter()
        futures = []
        sent = 0
        while sent < events:
            for partition in partitions:
                builder = producer.create_batch()
                while sent < events and builder.append(key=b"k", value=value, timestamp=None):
                    sent += 1
                futures.append(await producer.send_batch(builder, topic, partition=partition))
                if sent >= events:
                    break
        await asyncio.gather(*futures)
        return time.perf_counter() - t0
    finally:
        await producer.stop()


def run_producer_bench(
    settings: Settings,
    *,
    partitions: int = 6,
    calls: int = 200_000,
    events: int = 200_000,
    repeats: int = 3,
    senders: tuple[int, ...] = (1, 2),
    sessions: int = 64,
    sealed: bool = False,
) -> ProducerBench:
    """Run on scratch topics of its own (a fresh prefix, deleted afterwards), so benchmark and
    baseline records never mix with real sessions. `senders`: the recorder configurations of
    the sustained run (1 is always included: it is the in-thread sender the other figures use)."""
    require_connection(settings, Role.ADMIN)  # a clear error when there is no broker
    with scratch_prefix(settings, "bench", partitions=partitions) as scratch:
        agent = require_connection(scratch, Role.AGENT)
        report = _run(
            agent,
            scratch.topic_prefix,
            calls=calls,
            events=events,
            repeats=repeats,
            senders=tuple(sorted({1, *senders})),
            sessions=sessions,
            sealed=sealed,
        )
    return report.model_copy(update={"partitions": partitions})


def _run(
    connection: KafkaConnection,
    prefix: str,
    *,
    calls: int,
    events: int,
    repeats: int,
    senders: tuple[int, ...],
    sessions: int,
    sealed: bool = False,
) -> ProducerBench:
    overhead = _timer_overhead_ns()
    rec_samples: list[int] = []
    jsonl_samples: list[int] = []
    sustained: dict[int, list[tuple[float, float]]] = {n: [] for n in senders}
    sealed_runs: dict[int, list[tuple[float, float]]] = {n: [] for n in senders}
    raw: list[float] = []
    raw_batches: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        spool = Path(tmp) / "spool"
        for _ in range(repeats):
            recorder = Recorder(
                connection, topic_prefix=prefix, spool_dir=spool, max_backlog=calls + 10
            )
            try:
                rec_samples += _hot_path(recorder, calls // repeats)
                recorder.flush(600)
            finally:
                recorder.close()
            jsonl_samples += _jsonl_writer(Path(tmp) / "local.jsonl", calls // repeats)
            for n in senders:
                sustained[n].append(
                    sustained_recording(connection, prefix, spool, events, sessions, n)
                )
                if sealed:
                    sealed_runs[n].append(
                        sustained_recording(
                            connection, prefix, spool, events, sessions, n, sealed=True
                        )
                    )
            topic = topic_name("events", prefix)
            raw.append(asyncio.run(_raw_aiokafka(connection, topic, events, 1024)))
            raw_batches.append(asyncio.run(_raw_aiokafka_batches(connection, topic, events, 1024)))
    rec, jl = _pct(rec_samples, overhead), _pct(jsonl_samples, overhead)
    by_senders = [_summarise(n, events, sustained[n], raw_batches) for n in senders]
    sealed_summary = [
        SealedRun(
            senders=n,
            events_per_s=statistics.median(events / s for _, s in sealed_runs[n]),
            runs_events_per_s=[events / s for _, s in sealed_runs[n]],
            ratio=statistics.median(
                plain_s / sealed_s
                for (_, plain_s), (_, sealed_s) in zip(sustained[n], sealed_runs[n], strict=True)
            ),
        )
        for n in senders
        if sealed_runs[n]
    ]
    one = by_senders[0]
    raw_s = statistics.median(raw)
    return ProducerBench(
        machine=machine(),
        hot_path_calls=len(rec_samples),
        timer_overhead_us=overhead / 1000,
        recorder=rec,
        jsonl_writer=jl,
        hot_path_ratio=jl.p50_us / rec.p50_us if rec.p50_us else float("inf"),
        sustained_events=events,
        recorder_events_per_s=one.events_per_s,
        recorder_enqueue_s=one.enqueue_s,
        recorder_until_acked_s=one.until_acked_s,
        raw_aiokafka_events_per_s=events / raw_s,
        throughput_ratio=one.events_per_s / (events / raw_s),
        raw_batches_events_per_s=events / statistics.median(raw_batches),
        raw_batches_runs_events_per_s=[events / s for s in raw_batches],
        repeats=repeats,
        sustained_sessions=sessions,
        by_senders=by_senders,
        sealed=sealed_summary,
    )


def _summarise(
    senders: int, events: int, runs: list[tuple[float, float]], ceilings_s: list[float]
) -> SustainedRun:
    rates = [events / until_acked for _, until_acked in runs]
    return SustainedRun(
        senders=senders,
        events_per_s=statistics.median(rates),
        runs_events_per_s=rates,
        enqueue_s=statistics.median(enqueue for enqueue, _ in runs),
        until_acked_s=statistics.median(until_acked for _, until_acked in runs),
        ceiling_events_per_s=events / statistics.median(ceilings_s),
        ratio=statistics.median(
            rate / (events / ceiling) for rate, ceiling in zip(rates, ceilings_s, strict=True)
        ),
    )
