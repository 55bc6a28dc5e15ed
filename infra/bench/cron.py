"""`rolltape bench cron`: scheduling jitter, from a run's due time to its session's start.

Jobs with a one-second interval fire on a scratch topic prefix through a real scheduler (its
consumer group, its claims acknowledged by the broker, a fresh recorded session per run) with a
runner that returns at once, so the figure is the scheduler's own delay. Jobs are created a
moment apart, so each second brings a burst of `jobs` runs due together; the first seconds
(joining the group, reading the topic) are left out.

Baseline in the same run: how late asyncio wakes a coroutine that sleeps until due times of its
own, 20 ms apart (the floor of any scheduler on this event loop and machine).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

from rolltape.infra import open_recorder
from rolltape.infra.bench._machine import machine
from rolltape.infra.commands.cron import cron_jobs, open_scheduler
from rolltape.infra.kafka.topics import scratch_prefix
from rolltape.infra.settings import Settings
from rolltape.producers.cron import CronRunContext, JobSpec
from rolltape.schemas import CronRun

_NS = 1_000_000_000


def noop(run: CronRunContext) -> None:
    """The bench's runner: returns at once."""


class CronFigures(BaseModel):
    """Cron's delay from due time to session start over `fires` runs after the warm-up, beside
    how late asyncio itself wakes from a sleep until a due time (the floor)."""

    machine: str
    jobs: int
    fires: int
    warmup_s: float
    jitter_p50_ms: float
    jitter_p99_ms: float
    jitter_max_ms: float
    asyncio_floor_p50_ms: float
    asyncio_floor_p99_ms: float


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _floor(samples: int) -> list[float]:
    """Lateness of asyncio sleeping until due times 20 ms apart (ms)."""
    late: list[float] = []
    step = 0.02
    due = time.time() + step
    for _ in range(samples):
        await asyncio.sleep(max(0.0, due - time.time()))
        late.append((time.time() - due) * 1000)
        due += step
    return late


def run_cron_bench(
    settings: Settings, *, jobs: int = 20, fires: int = 1000, warmup_s: float = 3.0
) -> CronFigures:
    """Fire `jobs` one-second jobs through a real scheduler on a scratch topic prefix (deleted
    after) until `fires` runs started past the warm-up. Needs a broker; raises `RuntimeError` if
    the runs do not all start before a deadline, rather than report a short sample."""
    with (
        tempfile.TemporaryDirectory(prefix="rolltape-bench-") as tmp,
        scratch_prefix(settings, "benchcron", partitions=settings.partitions) as scratch,
    ):
        scratch = scratch.model_copy(update={"spool_dir": Path(tmp) / "spool"})
        jitter = asyncio.run(_jitter(scratch, jobs, fires, warmup_s))
        floor = asyncio.run(_floor(max(fires, 200)))
    return CronFigures(
        machine=machine(),
        jobs=jobs,
        fires=len(jitter),
        warmup_s=warmup_s,
        jitter_p50_ms=statistics.median(jitter),
        jitter_p99_ms=_percentile(jitter, 0.99),
        jitter_max_ms=max(jitter),
        asyncio_floor_p50_ms=statistics.median(floor),
        asyncio_floor_p99_ms=_percentile(floor, 0.99),
    )


async def _jitter(settings: Settings, jobs: int, fires: int, warmup_s: float) -> list[float]:
    async with cron_jobs(settings) as admin:
        for n in range(jobs):
            await admin.add(
                JobSpec(
                    job_id=f"tick-{n}",
                    schedule="every 1s",
                    prompt="tick",
                    runner=f"{__name__}:noop",
                )
            )
    samples: list[float] = []
    begin = time.time_ns() + int(warmup_s * _NS)

    def started(run: CronRun, at_ns: int) -> None:
        if run.due_ns >= begin:
            samples.append((at_ns - run.due_ns) / 1e6)

    recorder = open_recorder(settings)
    scheduler = open_scheduler(settings, recorder=recorder, max_concurrent=jobs, on_start=started)
    stop = asyncio.Event()
    task = asyncio.create_task(scheduler.run(stop))
    deadline = time.monotonic() + warmup_s + fires / jobs * 3 + 60
    while len(samples) < fires and time.monotonic() < deadline and not task.done():
        await asyncio.sleep(0.2)
    stop.set()
    await task
    await recorder.aclose()
    if len(samples) < fires:
        raise RuntimeError(f"only {len(samples)} of {fires} runs started before the deadline")
    return samples[:fires]
