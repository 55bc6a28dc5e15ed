"""`otlp serve --workers N`: a trace has one owner, a batch's answer is what one process would
give, and a worker that dies stops the receiver instead of losing its traces' spans. (The
broker case, with a restart under another number of workers, is an integration test.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rolltape.infra.commands.otlp_serve import Outcome, ReceiverConfig
from rolltape.infra.commands.otlp_workers import WorkerPool, worker_of
from rolltape.infra.settings import Settings
from rolltape.producers.otlp import decode
from tests.support.otlp import recorded_request, weather_agent


@given(trace=st.text(alphabet="0123456789abcdef", min_size=32, max_size=32), n=st.integers(2, 9))
def test_worker_of__every_trace_has_one_owner_among_the_workers(trace: str, n: int) -> None:
    owner = worker_of(trace, n)
    assert 0 <= owner < n and owner == worker_of(trace, n)
    assert 0 <= worker_of("not hex at all", n) < n


def test_outcome__a_share_not_made_durable_makes_the_whole_batch_a_retry() -> None:
    fine = Outcome(spans=3, recorded=3, rejected=["span a: broken"], warning="no content")
    busy = Outcome(503, "the batch is not recorded yet; send it again", spans=2)
    merged = fine.merged(busy)
    assert (merged.status, merged.message) == (503, busy.message)
    both = fine.merged(Outcome(spans=1, recorded=1, sessions_started=1))
    assert (both.status, both.spans, both.recorded, both.sessions_started) == (200, 4, 4, 1)
    assert both.rejected == ["span a: broken"] and both.warning == "no content"


def test_worker_pool__records_every_share_and_a_dead_worker_stops_it(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, bootstrap=None)
    spans = decode(recorded_request(*[weather_agent] * 4), "protobuf").spans

    async def scenario() -> tuple[Outcome, Outcome, str | None]:
        pool = WorkerPool(settings, ReceiverConfig(linger_s=0.2), 2)
        await pool.start()
        stop = asyncio.Event()
        running = asyncio.ensure_future(pool.run(stop))
        recorded = await pool.record(spans, [])
        pool._workers[0].proc.kill()
        await asyncio.wait_for(running, 60)  # the pool stops on its own
        after = await pool.record(spans, [])
        return recorded, after, pool.failure

    recorded, after, failure = asyncio.run(scenario())
    assert (recorded.status, recorded.spans, recorded.recorded) == (200, 16, 16)
    assert recorded.sessions_started == 4
    assert after.status == 503 and "send the batch again" in after.message
    assert failure is not None and "worker 0" in failure and "exited" in failure
