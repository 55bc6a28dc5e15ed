"""`rolltape bench rules`: how soon a rule firing is readable, and how fast one worker processes.

(a) Latency: one training session records a metric per epoch; after the broker acknowledges the
    metric (flush returns), time until its rule evaluation is readable by a consumer of the rules
    topic, through a real worker process. p50/p99 over the epochs after a warm-up.
(b) Throughput: N events (half metrics, half turns, over many sessions) written first, then a
    worker with a fresh group processes them all; events/s between its first and last output
    (broker LogAppendTime). Beside it, in the same run: rolltape's log reader (one consumer)
    reading the same records (the ceiling of reading alone) and the pure core (`handle`) over the same
    records in memory (the ceiling without Kafka). The load is written a session after another,
    so a batch touches few sessions; the same number of events over many sessions that record
    at once (their epochs interleaved, as live agents and training runs do) is measured too: a
    worker then loads and saves far more session states a batch.

Everything runs on scratch topics of its own prefix, deleted afterwards.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rolltape.infra import open_monitor_recorder, open_recorder
from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._machine import machine
from rolltape.infra.bench._synthetic import end_synthetic_metrics, synthetic_metric
from rolltape.infra.broker import require_connection
from rolltape.infra.commands.worker_process import WorkerProcess
from rolltape.infra.kafka.readback import read_records
from rolltape.infra.kafka.topics import scratch_prefix
from rolltape.infra.settings import Settings
from rolltape.processors import ProcessorConfig, SessionProcessor, SessionState, handle
from rolltape.processors.audit import InputRecord, Position
from rolltape.schemas import Role, Stream, read_event, topic_name
from rolltape.schemas.clients import KafkaConnection, LogReader, Partition


class RulesBench(Figures):
    """What `rolltape bench rules` prints: rule-firing latency, and one worker's events/s beside
    a plain consumer, a faust agent doing nothing and the pure core over the same records."""

    machine: str
    partitions: int
    epochs: int
    warmup: int
    latency_p50_ms: float
    latency_p99_ms: float
    latency_max_ms: float
    events: int
    sessions: int
    worker_events_per_s: float
    worker_span_s: float
    raw_consumer_events_per_s: float
    worker_vs_raw_consumer: float
    faust_floor_events_per_s: float
    worker_vs_faust_floor: float
    pure_core_events_per_s: float
    two_workers_events_per_s: float | None
    """The same load on fresh topics through two worker processes in one group (None: not
    run)."""
    concurrent_sessions: int
    interleaved_events_per_s: float | None
    """One worker over the same number of events from `concurrent_sessions` sessions recording
    at once (None: not run)."""

    def lines(self) -> Iterator[str]:
        yield machine_line(self.machine, f"{self.partitions} partitions")
        yield (
            "(a) metric acknowledged -> rule evaluation readable, "
            f"{self.epochs} epochs after {self.warmup} warm-up"
        )
        yield (
            f"    p50 {self.latency_p50_ms:.1f} ms   p99 {self.latency_p99_ms:.1f} ms   "
            f"max {self.latency_max_ms:.1f} ms"
        )
        yield f"(b) {self.events} events (half metrics, half turns) over {self.sessions} sessions"
        yield (
            f"    worker: {self.worker_events_per_s:,.0f} events/s (first to last output "
            f"{self.worker_span_s:.2f} s)"
        )
        yield (
            "    log reader alone (one consumer), same records: "
            f"{self.raw_consumer_events_per_s:,.0f} events/s"
        )
        yield f"    ratio (worker / consumer): {self.worker_vs_raw_consumer:.2f}"
        if self.two_workers_events_per_s is not None:
            yield (
                "    two worker processes in one group, same load on fresh topics: "
                f"{self.two_workers_events_per_s:,.0f} events/s "
                f"({self.two_workers_events_per_s / self.worker_events_per_s:.2f}x one worker)"
            )
        yield (
            "    faust agent doing nothing, same records: "
            f"{self.faust_floor_events_per_s:,.0f} events/s "
            f"(worker / faust floor: {self.worker_vs_faust_floor:.2f})"
        )
        yield f"    pure core in memory (no Kafka): {self.pure_core_events_per_s:,.0f} events/s"
        if self.interleaved_events_per_s is not None:
            yield (
                f"    the same events from {self.concurrent_sessions:,} sessions at once: "
                f"{self.interleaved_events_per_s:,.0f} events/s"
            )


async def _latency(
    settings: Settings, spool: Path, epochs: int, warmup: int, partition_count: int
) -> list[float]:
    prefix = settings.topic_prefix
    consumer = await LogReader(
        require_connection(settings, Role.MONITOR), fetch_max_wait_ms=5
    ).start()
    # The session is the agent's (its events chain); the metrics are the monitor's.
    agent = open_recorder(settings, spool_dir=spool / "agent")
    recorder = open_monitor_recorder(settings, spool_dir=spool / "monitor")
    samples: list[float] = []
    try:
        topic = topic_name(Stream.RULES, prefix)
        consumer.assign(Partition(topic, p) for p in range(partition_count))
        await consumer.seek_to_end()
        session = agent.session("bench rules latency", kind="training")
        for epoch in range(epochs + warmup):
            synthetic_metric(recorder, session, epoch, steps=10, train_loss=1.0 / (epoch + 1),
                             max_layer_grad_norm=1.0, min_layer_grad_norm=1e-3,
                             update_to_param_ratio=1e-3)  # fmt: skip
            await recorder.aflush()
            acked = time.perf_counter()
            deadline = acked + (120.0 if epoch == 0 else 30.0)  # the first waits for the worker
            found = False
            while not found:
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"no rule evaluation for epoch {epoch}; is the worker up?")
                for m in await consumer.fetch(0.05):
                    env = read_event(m.value or b"")
                    if env.session_id == session.session_id and env.payload["epoch"] == epoch:
                        found = True
            if epoch >= warmup:
                samples.append((time.perf_counter() - acked) * 1000)
        end_synthetic_metrics(recorder, session)
        session.end()
    finally:
        await recorder.aclose()
        await agent.aclose()
        await consumer.stop()
    return samples


def _write_load(
    settings: Settings, spool: Path, events: int, sessions: int, *, interleaved: bool = False
) -> None:
    """Agent sessions that also log metrics: each epoch is one turn and one metric. One session
    after another, or (`interleaved`) every session open at once, epoch by epoch."""
    per_session = events // sessions
    backlog = events + 4 * sessions + 10  # plus each session's start and ends
    with (
        open_recorder(settings, spool_dir=spool / "agent", max_backlog=backlog) as rec,
        open_monitor_recorder(settings, spool_dir=spool / "monitor", max_backlog=backlog) as mon,
    ):
        groups = [range(sessions)] if interleaved else [range(i, i + 1) for i in range(sessions)]
        for group in groups:
            opened = [(i, rec.session("bench load", session_id=f"load-{i}")) for i in group]
            for epoch in range(per_session // 2):
                for i, s in opened:
                    s.turn("assistant", f"step {epoch} of session {i}")
                    synthetic_metric(
                        mon, s, epoch, steps=10, train_loss=1.0, max_layer_grad_norm=1.0
                    )
            for _, s in opened:
                end_synthetic_metrics(mon, s)
                s.end()
        rec.flush(300)
        mon.flush(300)


async def _read_inputs(connection: KafkaConnection, prefix: str) -> list[InputRecord]:
    return [
        InputRecord(r.stream.value, r.key, r.value, Position(r.topic, r.partition, r.offset))
        async for r in read_records(connection, (Stream.EVENTS, Stream.METRICS), prefix=prefix)
    ]


async def _raw_consume(connection: KafkaConnection, prefix: str) -> tuple[int, float]:
    start = time.perf_counter()
    count = 0
    async for _ in read_records(connection, (Stream.EVENTS, Stream.METRICS), prefix=prefix):
        count += 1
    return count, count / (time.perf_counter() - start)


async def _output_span(
    connection: KafkaConnection, prefix: str, expected_rules: int, sessions: int, timeout_s: float
) -> float:
    """Wait until every output exists; the seconds between the first and last (broker time)."""
    deadline = time.monotonic() + timeout_s
    while True:
        stamps: list[int] = []
        rules = outcomes = 0
        async for r in read_records(connection, (Stream.RULES, Stream.FILTERED), prefix=prefix):
            stamps.append(r.broker_ts_ms)
            rules += r.stream == Stream.RULES
            outcomes += r.stream == Stream.FILTERED
        if rules >= expected_rules and outcomes >= sessions:
            return (max(stamps) - min(stamps)) / 1000
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the worker wrote {rules}/{expected_rules} evaluations in {timeout_s}s"
            )
        await asyncio.sleep(0.5)


def _faust_floor(settings: Settings, records: int, tmpdir: Path) -> float:
    out = tmpdir / "floor.txt"
    with open(tmpdir / "floor.log", "wb") as log:
        subprocess.run(
            [sys.executable, "-m", "rolltape.infra.bench.faust_floor", str(records), str(out)],
            env={**os.environ, **settings.child_env()},
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=600,
            check=False,
        )
    if not out.exists():
        raise RuntimeError(
            f"the faust floor run failed: {(tmpdir / 'floor.log').read_text()[-2000:]}"
        )
    return float(out.read_text())


def _worker_span(
    load: Settings,
    reader: KafkaConnection,
    tmpdir: Path,
    metrics: int,
    sessions: int,
    *,
    workers: int,
) -> float:
    """Seconds from the first output to the last of `workers` worker processes in one group,
    started together on a load already written."""
    name = load.topic_prefix
    started = [WorkerProcess(load, tmpdir / f"{name}-worker-{n}.log") for n in range(workers)]
    try:
        return asyncio.run(_output_span(reader, load.topic_prefix, metrics, sessions, 600))
    finally:
        for worker in started:
            worker.stop()


def run_rules_bench(
    settings: Settings,
    *,
    partitions: int,
    epochs: int = 1000,
    warmup: int = 20,
    events: int = 100_000,
    sessions: int = 100,
    two_workers: bool = True,
    concurrent_sessions: int = 1000,
) -> RulesBench:
    """Run the latency and throughput measurements, each on scratch topic prefixes of its own
    (deleted after) with real worker processes. Needs a broker; raises `RuntimeError` when the
    worker or the faust floor does not deliver in time."""
    require_connection(settings, Role.ADMIN)  # a clear error when there is no broker
    with (
        tempfile.TemporaryDirectory(prefix="rolltape-bench-") as tmp,
        scratch_prefix(settings, "benchlat", partitions=partitions) as latency,
        scratch_prefix(settings, "benchload", partitions=partitions) as load,
    ):
        tmpdir = Path(tmp)
        reader = require_connection(load, Role.READER)
        load_prefix = load.topic_prefix
        worker = WorkerProcess(latency, tmpdir / "latency-worker.log")
        try:
            samples = asyncio.run(_latency(latency, tmpdir / "spool-a", epochs, warmup, partitions))
        finally:
            worker.stop()

        _write_load(load, tmpdir / "spool-b", events, sessions)
        inputs = asyncio.run(_read_inputs(reader, load_prefix))
        count, raw_rate = asyncio.run(_raw_consume(reader, load_prefix))
        processor = SessionProcessor(ProcessorConfig())
        states: dict[str, SessionState] = {}
        start = time.perf_counter()
        for record in inputs:
            handle(processor, states, record)
        core_rate = len(inputs) / (time.perf_counter() - start)
        metrics = sum(1 for r in inputs if b'"type":"metric"' in r.value)
        floor = _faust_floor(load, count, tmpdir)
        span = _worker_span(load, reader, tmpdir, metrics, sessions, workers=1)
        two_rate = None
        if two_workers:  # the same load on fresh topics: the first run's outputs are there
            with scratch_prefix(settings, "benchtwo", partitions=partitions) as two:
                _write_load(two, tmpdir / "spool-c", events, sessions)
                two_reader = require_connection(two, Role.READER)
                two_span = _worker_span(two, two_reader, tmpdir, metrics, sessions, workers=2)
            two_rate = count / two_span if two_span > 0 else float("inf")
        interleaved_rate = None
        if concurrent_sessions:
            with scratch_prefix(settings, "benchmany", partitions=partitions) as many:
                _write_load(many, tmpdir / "spool-d", events, concurrent_sessions, interleaved=True)
                many_reader = require_connection(many, Role.READER)
                many_count = sum(
                    1 for _ in asyncio.run(_read_inputs(many_reader, many.topic_prefix))
                )
                many_metrics = (events // concurrent_sessions // 2) * concurrent_sessions
                many_span = _worker_span(
                    many, many_reader, tmpdir, many_metrics, concurrent_sessions, workers=1
                )
            interleaved_rate = many_count / many_span if many_span > 0 else float("inf")
    samples.sort()
    worker_rate = count / span if span > 0 else float("inf")
    return RulesBench(
        machine=machine(),
        partitions=partitions,
        epochs=len(samples),
        warmup=warmup,
        latency_p50_ms=statistics.median(samples),
        latency_p99_ms=samples[min(len(samples) - 1, int(0.99 * len(samples)))],
        latency_max_ms=samples[-1],
        events=count,
        sessions=sessions,
        worker_events_per_s=worker_rate,
        worker_span_s=span,
        raw_consumer_events_per_s=raw_rate,
        worker_vs_raw_consumer=worker_rate / raw_rate,
        faust_floor_events_per_s=floor,
        worker_vs_faust_floor=worker_rate / floor,
        pure_core_events_per_s=core_rate,
        two_workers_events_per_s=two_rate,
        concurrent_sessions=concurrent_sessions,
        interleaved_events_per_s=interleaved_rate,
    )
