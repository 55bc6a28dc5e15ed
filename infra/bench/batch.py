"""`rolltape bench batch`: the batch runner's own overhead, and cron's scheduling jitter.

(a) Rollouts per second of `rolltape env run`'s code (the timer runs from the planning callback,
so creating the model client counts, to the last rollout's flush) at several concurrencies, against
a local OpenAI-compatible server in its own process that answers at once, with an environment whose
items need one model call and whose reward is computed at once, so the figure is the runner's cost:
a working directory, a recorded session (captured client, reward, end) on a scratch topic prefix,
the flush that makes each finished rollout safe from a kill. Baseline in the same run:
the same number of bare `chat.completions.create` calls to the same server at the same
concurrency (no recording, no working directory): the floor any runner pays for its model calls.

(b) Cron jitter (`infra/bench/cron.py`): due time to session start over 1,000 fires.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._machine import machine
from rolltape.infra.bench.capture import start_instant_server
from rolltape.infra.bench.cron import CronFigures, run_cron_bench
from rolltape.infra.broker import require_connection
from rolltape.infra.commands.batch import run_batch
from rolltape.infra.kafka.topics import scratch_prefix
from rolltape.infra.settings import Settings
from rolltape.producers.agent import AgentResult, Tool
from rolltape.producers.environments import (
    Environment,
    Item,
    RewardResult,
    RolloutContext,
    binary,
)
from rolltape.schemas import Role
from rolltape.schemas.clients import ModelEndpoint


class _Instant(Environment):
    """Items answered in one model call, scored at once."""

    name = "instant"
    max_iterations = 2

    def items(self, split: str = "train") -> list[Item]:
        return [Item(item_id=f"q{n}", split=split) for n in range(100)]

    def format_prompt(self, item: Item) -> str:
        return f"What is 342 / 76? ({item.item_id})"

    def tools(self, item: Item, workdir: Path) -> list[Tool]:
        return []

    async def compute_reward(
        self, item: Item, result: AgentResult, ctx: RolloutContext
    ) -> RewardResult:
        return binary("4.5" in result.final)


class ConcurrencyFigures(BaseModel):
    """The batch runner at one concurrency, beside bare model calls to the same instant server
    at the same concurrency."""

    concurrency: int
    rollouts: int
    rollouts_per_s: float
    bare_calls_per_s: float
    ratio: float
    """rollouts/s over bare calls/s: the share of the floor the runner keeps."""


class BatchFigures(Figures):
    """Everything `rolltape bench batch` prints (and `--json` dumps): the runner's rate per
    concurrency and cron's jitter."""

    machine: str
    runs: list[ConcurrencyFigures]
    cron: CronFigures

    def lines(self) -> Iterator[str]:
        yield machine_line(self.machine)
        yield (
            "(a) batch runner: one-call rollouts, recorded on scratch topics, reward at once; "
            "bare calls to the same server as the floor"
        )
        yield "    concurrency   rollouts/s   bare calls/s   ratio"
        for run in self.runs:
            yield (
                f"    {run.concurrency:>11}   {run.rollouts_per_s:10,.1f}   "
                f"{run.bare_calls_per_s:12,.1f}   {run.ratio:5.2f}"
            )
        c = self.cron
        yield (
            f"(b) cron: {c.fires:,} runs of {c.jobs} jobs due every second (after "
            f"{c.warmup_s:.0f} s of warm-up), runner returns at once"
        )
        yield (
            f"    due -> session start    p50 {c.jitter_p50_ms:7.1f} ms   "
            f"p99 {c.jitter_p99_ms:7.1f} ms   max {c.jitter_max_ms:7.1f} ms"
        )
        yield (
            f"    asyncio wake-up floor   p50 {c.asyncio_floor_p50_ms:7.1f} ms   "
            f"p99 {c.asyncio_floor_p99_ms:7.1f} ms"
        )


async def _bare(base_url: str, calls: int, concurrency: int) -> float:
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
    left = calls

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await client.chat.completions.create(
                model="bench", messages=[{"role": "user", "content": "What is 342 / 76?"}]
            )

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    await client.close()
    return calls / elapsed


def _batch_rate(settings: Settings, endpoint: ModelEndpoint, count: int, concurrency: int) -> float:
    marks: list[float] = []

    def planned(todo: int, finished: int) -> None:
        marks.append(time.perf_counter())

    def finished(_: object) -> None:
        marks.append(time.perf_counter())

    summary = asyncio.run(
        run_batch(
            settings,
            _Instant(),
            run=f"bench-c{concurrency}",
            count=count,
            endpoint=endpoint,
            concurrency=concurrency,
            on_plan=planned,
            on_rollout=finished,
        )
    )
    if summary.completed != count:
        raise RuntimeError(
            f"{count - summary.completed} of {count} bench rollouts did not complete"
        )
    return count / (marks[-1] - marks[0])


def run_batch_bench(
    settings: Settings,
    *,
    concurrencies: tuple[int, ...] = (1, 8, 64),
    rollouts: int = 400,
    cron_jobs: int = 20,
    cron_fires: int = 1000,
) -> BatchFigures:
    """Measure the batch runner at each concurrency on a scratch topic prefix (deleted after),
    then cron's jitter. Needs a broker; raises `RuntimeError` when a bench rollout does not
    complete, since a rate over failed rollouts would flatter the runner."""
    require_connection(settings, Role.ADMIN)  # a clear error when there is no broker
    base_url, server = start_instant_server()
    endpoint = ModelEndpoint(base_url=base_url, model="bench")
    runs = []
    try:
        with scratch_prefix(settings, "benchbatch", partitions=settings.partitions) as scratch:
            for concurrency in concurrencies:
                rate = _batch_rate(scratch, endpoint, rollouts, concurrency)
                bare = asyncio.run(_bare(base_url, rollouts, concurrency))
                runs.append(
                    ConcurrencyFigures(
                        concurrency=concurrency,
                        rollouts=rollouts,
                        rollouts_per_s=rate,
                        bare_calls_per_s=bare,
                        ratio=rate / bare,
                    )
                )
    finally:
        server.terminate()
        server.join(10)
    cron = run_cron_bench(settings, jobs=cron_jobs, fires=cron_fires)
    return BatchFigures(
        machine=machine(),
        runs=runs,
        cron=cron,
    )
