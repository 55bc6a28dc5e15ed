"""`rolltape bench index`: the read model's indexing rate and its query latencies.

Agent sessions are chained in memory as a sender seals them (tags, a tool call and its result,
turns, a reward, the end; a filter outcome and a verdict on the derived chains), spread over six
partitions by key as Kafka spreads them. The baseline is what any reader of those records does,
decoding each through the codec (`read_event`), measured in the same run; the indexer's rate is
the fold and the store's transaction on top of that. Kafka's reading is left out of both (the
same work for each), so the ratio is the code's own and a conservative one.

The queries then run on the store the run built: a list with three filters (a tag, a status, the
filter's outcome), a session's whole detail, and a full-text search of one word, each asked with
values drawn from the sessions (seeded), p50 and p95 over `queries` askings.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._machine import machine
from rolltape.infra.bench.readers import ReadersFigures
from rolltape.infra.index import SessionFilter, open_store
from rolltape.infra.settings import INDEX_BATCH_RECORDS as BATCH
from rolltape.projections.index import Record, fold_batch, keyed_subject
from rolltape.schemas import ChainWriter, Stream, read_event, topic_name
from rolltape.schemas.clients import key_partition

PARTITIONS = 6
GOAL_RATIO = 0.5
GOAL_LIST_P95_MS = 50.0
GOAL_LOOKUP_P95_MS = 5.0
GOAL_SEARCH_P95_MS = 200.0
_WORDS = ("parser", "timeout", "refund", "migration", "latency", "checksum", "deadlock", "quota")
_PRODUCER = {"name": "bench", "version": "0", "principal": "agent"}


class IndexFigures(Figures):
    machine: str
    store: str
    sessions: int
    records: int
    repeats: int
    decode_records_per_s: float
    index_records_per_s: float
    ratio: float
    goal_ratio: float = GOAL_RATIO
    list_p50_ms: float
    list_p95_ms: float
    lookup_p50_ms: float
    lookup_p95_ms: float
    search_p50_ms: float
    search_p95_ms: float
    queries: int
    store_bytes: int
    readers: ReadersFigures | None = None
    """Resume and export by the read model against by scan, on a broker (`--log-events`)."""

    def lines(self) -> Iterator[str]:
        yield machine_line(self.machine, f"{self.repeats} repeats of indexing (medians)")
        yield (
            f"{self.sessions:,} sessions, {self.records:,} records on {PARTITIONS} partitions, "
            f"into {self.store} ({self.store_bytes / 1e6:,.0f} MB)"
        )
        yield "(Kafka reading left out: the same work for both)"
        yield f"    read + decode (baseline)   {self.decode_records_per_s:12,.0f} records/s"
        yield f"    indexed                    {self.index_records_per_s:12,.0f} records/s"
        yield f"    ratio                      {self.ratio:12.2f}   (goal >= {self.goal_ratio})"
        yield f"queries on the store ({self.queries} each, p50 / p95):"
        yield (
            f"    list, three filters        {self.list_p50_ms:8.2f} / {self.list_p95_ms:8.2f} ms"
            f"   (goal p95 <= {GOAL_LIST_P95_MS:g})"
        )
        yield (
            f"    session lookup             {self.lookup_p50_ms:8.2f} / {self.lookup_p95_ms:8.2f} ms"
            f"   (goal p95 <= {GOAL_LOOKUP_P95_MS:g})"
        )
        yield (
            f"    full-text search           {self.search_p50_ms:8.2f} / {self.search_p95_ms:8.2f} ms"
            f"   (goal p95 <= {GOAL_SEARCH_P95_MS:g})"
        )
        if self.readers is not None:
            yield "readers on a broker:"
            yield from (f"    {line}" for line in self.readers.lines())


def synthetic_records(sessions: int, seed: int, prefix: str = "rolltape") -> list[Record]:
    """The sessions' records in the order a partition holds them (sessions interleaved), as
    on the topics of `prefix` (the store needs no such topics: only their rows are written)."""
    rng = random.Random(seed)
    writer: ChainWriter[tuple[str, str]] = ChainWriter()
    offsets: dict[tuple[str, int], int] = {}
    out: list[Record] = []
    clock = 1_764_547_200_000

    def add(stream: Stream, sid: str, kind: str, payload: dict[str, object]) -> None:
        nonlocal clock
        value, _ = writer.append(
            (sid, stream.value),
            stream=stream.value,
            session_id=sid,
            ts_ns=clock * 1_000_000,
            type=kind,
            payload=payload,
            producer=_PRODUCER,
        )
        topic = topic_name(stream, prefix)
        partition = key_partition(sid.encode(), PARTITIONS)
        offset = offsets.get((topic, partition), 0)
        offsets[(topic, partition)] = offset + 1
        clock += 1
        out.append(Record(stream, topic, partition, offset, sid.encode(), value, clock))

    for n in range(sessions):
        sid = f"bench-{n:07d}"
        word = rng.choice(_WORDS)
        failed = rng.random() < 0.2
        add(
            Stream.EVENTS,
            sid,
            "session_started",
            {"task": f"task {n % 50}", "tags": [f"env=e{n % 7}", f"batch=b{n // 1000}"]},
        )
        add(
            Stream.EVENTS, sid, "turn", {"role": "user", "content": f"the {word} fails on item {n}"}
        )
        add(Stream.EVENTS, sid, "tool_call", {"id": "c1", "name": "shell", "arguments": {"n": n}})
        add(
            Stream.EVENTS,
            sid,
            "tool_result",
            {"call_id": "c1", "content": "ok", "success": not failed},
        )
        add(Stream.EVENTS, sid, "turn", {"role": "assistant", "content": f"fixed the {word}"})
        add(Stream.EVENTS, sid, "reward", {"value": rng.random()})
        add(Stream.EVENTS, sid, "session_ended", {"status": "failed" if failed else "completed"})
        add(
            Stream.FILTERED,
            sid,
            "filter_outcome",
            {
                "filter_version": "1",
                "config": "c",
                "accepted": not failed,
                "reasons": [{"code": "tool_failed", "message": "m"}] if failed else [],
                "status": "failed" if failed else "completed",
                "turns": 2,
                "tool_calls": 1,
            },
        )
    # A partition's records in offset order, partitions one after another (as fetches come).
    out.sort(key=lambda r: (r.topic, r.partition, r.offset))
    return out


def index_records(url: str, records: list[Record], prefix: str = "rolltape") -> float:
    """Fold `records` into the store at `url` (of topic prefix `prefix`), batch by batch as the
    indexer does; the seconds it took."""
    store = open_store(url, prefix=prefix)
    subject = keyed_subject(b"bench" * 8)
    try:
        t = time.perf_counter()
        at: dict[tuple[str, int], int | None] = dict(store.positions())
        for start in range(0, len(records), BATCH):
            chunk = records[start : start + BATCH]
            changes = fold_batch(chunk, store.heads, subject)
            expected = {(r.topic, r.partition): at.get((r.topic, r.partition)) for r in chunk}
            store.apply(changes, expected=expected)
            for row in changes.positions:
                at[(row.topic, row.partition)] = row.next_offset
        return time.perf_counter() - t
    finally:
        store.close()


def _timed(calls: int, ask: object) -> tuple[float, float]:
    times = []
    for i in range(calls):
        t = time.perf_counter()
        ask(i)  # type: ignore[operator]
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)]


def run_index_bench(
    sessions: int = 10_000, repeats: int = 3, queries: int = 200, store_url: str | None = None
) -> IndexFigures:
    """Index `sessions` sessions `repeats` times into fresh SQLite files (or once into
    `store_url`), against decoding the same records, then ask the last store."""
    records = synthetic_records(sessions, seed=0)
    values = [r.value for r in records if r.value is not None]
    decode: list[float] = []
    index: list[float] = []
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        url = ""
        for r in range(repeats if store_url is None else 1):
            t = time.perf_counter()
            for value in values:
                read_event(value)
            decode.append(time.perf_counter() - t)
            url = store_url or f"sqlite:{Path(tmp) / f'index-{r}.sqlite3'}"
            if store_url is not None:
                dropping = open_store(url, prefix="rolltape", create=False)
                dropping.drop()
                dropping.close()
            index.append(index_records(url, records))
        store = open_store(url, prefix="rolltape")
        try:
            count = store.count()
            if count != sessions:
                raise RuntimeError(f"the store holds {count} of {sessions} sessions")
            list_p50, list_p95 = _timed(
                queries,
                lambda i: store.list_sessions(
                    SessionFilter(
                        tags=(f"env=e{rng.randrange(7)}",),
                        status=rng.choice(("completed", "failed")),
                        accepted=rng.random() < 0.8,
                    ),
                    limit=50,
                ),
            )
            lookup_p50, lookup_p95 = _timed(
                queries, lambda i: store.session(f"bench-{rng.randrange(sessions):07d}")
            )
            search_p50, search_p95 = _timed(
                queries,
                lambda i: store.search(rng.choice(_WORDS), limit=50),
            )
            size = (
                sum(p.stat().st_size for p in Path(tmp).glob(f"{Path(url).name}*"))
                if store_url is None
                else 0
            )
            where = store.describe().split(":")[0]
        finally:
            store.close()
    decode_rate = len(records) / statistics.median(decode)
    index_rate = len(records) / statistics.median(index)
    return IndexFigures(
        machine=machine(),
        store=where,
        sessions=sessions,
        records=len(records),
        repeats=len(index),
        decode_records_per_s=decode_rate,
        index_records_per_s=index_rate,
        ratio=index_rate / decode_rate,
        list_p50_ms=list_p50,
        list_p95_ms=list_p95,
        lookup_p50_ms=lookup_p50,
        lookup_p95_ms=lookup_p95,
        search_p50_ms=search_p50,
        search_p95_ms=search_p95,
        queries=queries,
        store_bytes=size,
    )
