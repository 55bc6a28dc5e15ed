"""`otlp serve --workers N`: a trace has one owner, a batch's answer is what one process would
give, and a worker that dies stops the receiver instead of losing its traces' spans. (The
broker case, with a restart under another number of workers, is an integration test.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
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


@pytest.mark.parametrize(
    ("attribute", "session"),
    [("session.id", "otel-session-sess-1"), ("gen_ai.conversation.id", "otel-conversation-sess-1")],
)
def test_worker_pool__a_session_across_traces_has_one_writer(
    tmp_path: Path, attribute: str, session: str
) -> None:
    """Traces naming one `session.id` (or `gen_ai.conversation.id`) go to the worker that owns
    the session, whichever worker their trace ids would pick: one session, one chain."""
    import dataclasses
    import json

    from rolltape.producers.otlp import decode as decode_spans
    from tests.unit.producers.recorded import spooled

    case = Path(__file__).parent / "producers" / "otlp_conformance"
    body = json.loads((case / "openinference__session-user.json").read_text())["exports"][0]
    first = decode_spans(json.dumps(body["body"]).encode(), "json").spans
    traces = [first[0].trace_id[:-1] + digit for digit in "0123"]  # owned by both workers
    spans = [
        dataclasses.replace(s, trace_id=t, attributes=_named(s.attributes, attribute))
        for t in traces
        for s in first
    ]
    settings = Settings(state_dir=tmp_path, bootstrap=None)

    async def scenario() -> Outcome:
        pool = WorkerPool(settings, ReceiverConfig(linger_s=0.0, idle_s=1.0), 2)
        await pool.start()
        stop = asyncio.Event()
        running = asyncio.ensure_future(pool.run(stop))
        outcome = await pool.record(spans, [])
        stop.set()
        await running
        return outcome

    outcome = asyncio.run(scenario())
    assert outcome.status == 200 and outcome.sessions_started == 1
    ids = {e["session_id"] for e in spooled(settings.resolved_spool_dir() / "otlp") if "type" in e}
    assert ids == {session}


def _named(attributes: dict[str, Any], attribute: str) -> dict[str, Any]:
    """The attributes with their `session.id` under `attribute`."""
    out = dict(attributes)
    if "session.id" in out:
        out[attribute] = out.pop("session.id")
    return out
