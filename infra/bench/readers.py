"""`rolltape bench index --log-events N`: the readers that use the read model, against the scans
they replace, on a real broker.

One partition of a scratch prefix holds N events of agent sessions written one after another
(`rolltape.infra.bench._load`), and the read model is rebuilt over it as `rolltape index
rebuild` builds it. Then, in alternation, each way measured in the same run:

- **resume**: the head a resuming writer reads (`read_head`) of one of the sessions written
  last, from the offset the read model gives (`IndexHeadLocator`, store lookup included) against
  from the partition's start. A resume reads from the session's first record to the partition's
  end, so the figure depends on where the session starts: it is printed. (A crashed agent resumes
  a session it started lately; one started at the partition's start is read whole either way.)
- **export**: `dataset export -s` of 10 sessions drawn at random (seeded): the located read
  against the whole log's scan, each to ShareGPT, the two folders compared byte for byte.
- **prompt targets**: what the console's prompt pages and `rolltape prompts` read, a prompt
  version recorded after the load (`prompt_targets`): the sessions the read model says hold
  prompt events against the events topic's scan, the two histories compared.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._load import write_agent_sessions
from rolltape.infra.bench._machine import machine
from rolltape.infra.broker import BrokerUnavailable, require_connection
from rolltape.infra.commands.export import collect_narrowed, run_export
from rolltape.infra.commands.index import rebuild_index
from rolltape.infra.commands.prompts import prompt_targets, record_version
from rolltape.infra.index import IndexHeadLocator, open_store
from rolltape.infra.kafka.topics import scratch_prefix
from rolltape.infra.settings import Settings
from rolltape.producers._resume import HeadInLog, read_head
from rolltape.projections import ExportOptions, PromptTarget, Selection
from rolltape.schemas import Role, Stream, topic_name
from rolltape.schemas.clients import LogReader, Partition

GOAL_RESUME_RATIO = 50.0
EXPORTED = 10
PROMPT = "env.bench.system"


class ReadersFigures(Figures):
    """Resume and a 10-session export by the read model against by scan, in one partition."""

    machine: str
    events: int
    sessions: int
    repeats: int
    index_s: float
    resume_records_from_end: int
    resume_index_ms: float
    resume_scan_ms: float
    resume_ratio: float
    goal_resume_ratio: float = GOAL_RESUME_RATIO
    export_sessions: int
    export_index_ms: float
    export_scan_ms: float
    export_ratio: float
    prompts_index_ms: float
    prompts_scan_ms: float
    prompts_ratio: float

    def lines(self) -> Iterator[str]:
        yield machine_line(self.machine, f"{self.repeats} repeats, alternating (medians)")
        yield (
            f"{self.events:,} events of {self.sessions:,} sessions in one partition, "
            f"indexed in {self.index_s:,.1f} s"
        )
        yield (
            f"    resume (head of a session starting {self.resume_records_from_end:,} records "
            "before the end)"
        )
        yield f"        by the read model      {self.resume_index_ms:10,.1f} ms"
        yield f"        by scan                {self.resume_scan_ms:10,.1f} ms"
        yield (
            f"        ratio                  {self.resume_ratio:10,.1f}x  "
            f"(goal >= {self.goal_resume_ratio:g}x)"
        )
        yield f"    export of {self.export_sessions} sessions (ShareGPT, same bytes both ways)"
        yield f"        by the read model      {self.export_index_ms:10,.1f} ms"
        yield f"        by scan                {self.export_scan_ms:10,.1f} ms"
        yield f"        ratio                  {self.export_ratio:10,.1f}x"
        yield "    prompt targets (a version recorded after the load; the same history both ways)"
        yield f"        by the read model      {self.prompts_index_ms:10,.1f} ms"
        yield f"        by scan                {self.prompts_scan_ms:10,.1f} ms"
        yield f"        ratio                  {self.prompts_ratio:10,.1f}x"


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.jsonl"))}


async def _head(settings: Settings, sid: str, locator: IndexHeadLocator | None) -> HeadInLog:
    tp = Partition(topic_name(Stream.EVENTS, settings.topic_prefix), 0)
    start = 0
    if locator is not None:
        found = locator(tp.topic, tp.partition, sid)
        if isinstance(found, str):
            raise RuntimeError(f"the read model cannot place {sid}: {found}")
        start = found
    async with LogReader(require_connection(settings, Role.READER)) as reader:
        reader.assign([tp])
        return await read_head(reader, tp, sid, Stream.EVENTS.value, time.monotonic() + 600, start)


def _export(settings: Settings, ids: tuple[str, ...], out: Path) -> None:
    selection = Selection(sessions=ids, include_unfinished=True)

    async def collected() -> None:
        with await collect_narrowed(settings, "live", selection.narrowing()) as c:
            run_export(
                c, ExportOptions(format="sharegpt", selection=selection), out, overwrite=True
            )

    asyncio.run(collected())


def run_readers_bench(
    settings: Settings, *, events: int = 1_000_000, sessions: int = 10_000, repeats: int = 3
) -> ReadersFigures:
    """Write the load to a scratch prefix of one partition (deleted after), rebuild the read
    model over it into a temporary SQLite file, then time each reader both ways, alternating."""
    try:
        require_connection(settings, Role.ADMIN)
    except BrokerUnavailable as exc:  # `bench index` times the store without one
        raise BrokerUnavailable(f"{exc} To time the store alone: --log-events 0.") from exc
    with (
        tempfile.TemporaryDirectory() as tmp,
        scratch_prefix(settings, "benchreaders", partitions=1) as scratch,
    ):
        folder = Path(tmp)
        written = asyncio.run(
            write_agent_sessions(
                require_connection(scratch, Role.AGENT), scratch.topic_prefix, events, sessions
            )
        )
        record_version(scratch, PromptTarget(PROMPT), "You are a careful assistant.", promote="x")
        url = f"sqlite:{folder / 'index.sqlite3'}"
        indexed = scratch.model_copy(update={"index_url": url})
        scanned = scratch.model_copy(update={"index_url": f"sqlite:{folder / 'none.sqlite3'}"})
        t = time.perf_counter()
        asyncio.run(rebuild_index(indexed))
        index_s = time.perf_counter() - t
        locator = IndexHeadLocator(url, scratch.topic_prefix)
        store = open_store(url, prefix=scratch.topic_prefix)
        try:
            last = f"bench-{sessions - 1}"
            topic = topic_name(Stream.EVENTS, scratch.topic_prefix)
            first = store.first_offset(last, topic, 0)
        finally:
            store.close()
        if first is None:
            raise RuntimeError(f"the read model has no record of {last}")
        rng = random.Random(0)
        ids = tuple(sorted(f"bench-{n}" for n in rng.sample(range(sessions), EXPORTED)))
        resume_index, resume_scan, export_index, export_scan = [], [], [], []
        prompts_index: list[float] = []
        prompts_scan: list[float] = []
        for _ in range(repeats):
            t = time.perf_counter()
            located = asyncio.run(_head(scratch, last, locator))
            resume_index.append(time.perf_counter() - t)
            t = time.perf_counter()
            whole = asyncio.run(_head(scratch, last, None))
            resume_scan.append(time.perf_counter() - t)
            if located != whole:
                raise RuntimeError(f"the heads differ: {located} by index, {whole} by scan")
            t = time.perf_counter()
            _export(indexed, ids, folder / "by-index")
            export_index.append(time.perf_counter() - t)
            t = time.perf_counter()
            _export(scanned, ids, folder / "by-scan")
            export_scan.append(time.perf_counter() - t)
            by_index, by_scan = _tree(folder / "by-index"), _tree(folder / "by-scan")
            if by_index != by_scan or not by_index:
                raise RuntimeError("the exports by index and by scan differ")
            t = time.perf_counter()
            targets = asyncio.run(prompt_targets(indexed))
            prompts_index.append(time.perf_counter() - t)
            t = time.perf_counter()
            whole_targets = asyncio.run(prompt_targets(scanned))
            prompts_scan.append(time.perf_counter() - t)
            if targets != whole_targets or PROMPT not in targets:
                raise RuntimeError("the prompt targets by index and by scan differ")
    ri, rs = statistics.median(resume_index), statistics.median(resume_scan)
    ei, es = statistics.median(export_index), statistics.median(export_scan)
    pi, ps = statistics.median(prompts_index), statistics.median(prompts_scan)
    return ReadersFigures(
        machine=machine(),
        events=written,
        sessions=sessions,
        repeats=repeats,
        index_s=index_s,
        resume_records_from_end=written - first,
        resume_index_ms=ri * 1000,
        resume_scan_ms=rs * 1000,
        resume_ratio=rs / ri,
        export_sessions=EXPORTED,
        export_index_ms=ei * 1000,
        export_scan_ms=es * 1000,
        export_ratio=es / ei,
        prompts_index_ms=pi * 1000,
        prompts_scan_ms=ps * 1000,
        prompts_ratio=ps / pi,
    )
