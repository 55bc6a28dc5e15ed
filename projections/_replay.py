"""Replay: the raw streams through the processors' pure step again, under a judge version.

Pure: records in, sealed outputs per chain out, and a plan of what to write given what the judge
version's chains already hold. The Kafka reading and writing are infra's part.

Order. The live worker reads the events and metrics topics as they arrive; replay must not
depend on how a second read interleaves them. Each session's two chains are merged by the
broker's LogAppendTime (ties: events first), each chain kept in offset order, and sessions are
processed one after another. The step anchors every output on its inputs (derived ids, `ts_ns`
of the triggering record, end-of-session outputs on the latest end), so a replay of an unchanged
version reproduces the live outputs byte for byte, and two replays always agree.

Versions are immutable. Replay never rewrites a chain: outputs already present byte for byte are
counted as reproduced, new ones are appended after them, and a session whose recomputed chain
differs from what its version already holds is a conflict: nothing of it is written and the
report names the first differing record. A changed rule set, filter or judge is a new version.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rolltape.processors import (
    DeadLetter,
    Emitted,
    ProcessorConfig,
    Requested,
    SessionProcessor,
    SessionState,
    handle,
)
from rolltape.processors.audit import InputRecord
from rolltape.schemas import Stream


@dataclass(frozen=True)
class ReplayRecord:
    """A raw record as read back, with the broker's append time (the merge order)."""

    record: InputRecord
    broker_ts_ms: int


_STREAM_RANK = {Stream.EVENTS.value: 0, Stream.METRICS.value: 1}


def replay_order(records: Iterable[ReplayRecord]) -> list[InputRecord]:
    """Every session's records, its chains merged by broker time; sessions by first record."""
    per_session: dict[bytes | None, dict[str, list[ReplayRecord]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for item in records:
        per_session[item.record.key][item.record.topic].append(item)
    ordered: list[tuple[tuple[int, bytes], list[InputRecord]]] = []
    for key, topics in per_session.items():
        chains = [
            sorted(chain, key=lambda r: (r.record.partition, r.record.offset))
            for chain in topics.values()
        ]
        merged = heapq.merge(
            *chains,
            key=lambda r: (r.broker_ts_ms, _STREAM_RANK.get(r.record.stream, 2), r.record.offset),
        )
        session_records = [r.record for r in merged]
        first = min(chain[0].broker_ts_ms for chain in chains)
        ordered.append(((first, key or b""), session_records))
    ordered.sort(key=lambda item: item[0])
    return [record for _, session_records in ordered for record in session_records]


@dataclass
class ReplayResult:
    chains: dict[tuple[str, str], list[Emitted]] = field(default_factory=dict)
    """(chain name, session id) -> outputs in chain order."""
    sessions: set[str] = field(default_factory=set)
    dead_letters: Counter[str] = field(default_factory=Counter)
    """Reasons of records the live worker dead-lettered too; replay does not write them again."""
    judge_requests: int = 0


def replay(records: Sequence[InputRecord], config: ProcessorConfig) -> ReplayResult:
    """Run the processor step over records in `replay_order`."""
    processor = SessionProcessor(config)
    states: dict[str, SessionState] = {}
    result = ReplayResult()
    chains: dict[tuple[str, str], list[Emitted]] = defaultdict(list)
    for record in records:
        sid, outputs = handle(processor, states, record)
        if sid is not None:
            result.sessions.add(sid)
        for output in outputs:
            if isinstance(output, Emitted):
                chains[(output.stream, output.session_id)].append(output)
            elif isinstance(output, DeadLetter):
                result.dead_letters[output.reason] += 1
            elif isinstance(output, Requested):
                result.judge_requests += 1
    result.chains = dict(chains)
    return result


@dataclass(frozen=True)
class Conflict:
    session_id: str
    stream: str
    seq: int
    detail: str


@dataclass
class WritePlan:
    writes: list[Emitted] = field(default_factory=list)
    """New outputs in chain order (each chain's records after those already present)."""
    reproduced: int = 0
    """Outputs the version's chains already hold byte for byte."""
    conflicts: list[Conflict] = field(default_factory=list)


def plan_writes(
    result: ReplayResult, existing: Mapping[tuple[str, str], Sequence[bytes]]
) -> WritePlan:
    """Compare recomputed chains with what the judge version already holds (records by seq)."""
    plan = WritePlan()
    per_session: dict[str, list[tuple[str, list[Emitted]]]] = defaultdict(list)
    for (stream, sid), outputs in sorted(result.chains.items()):
        per_session[sid].append((stream, outputs))
    for sid in sorted(per_session):
        writes: list[Emitted] = []
        reproduced = 0
        conflict: Conflict | None = None
        for stream, outputs in per_session[sid]:
            held = existing.get((stream, sid), ())
            for seq, output in enumerate(outputs):
                if seq < len(held):
                    if held[seq] != output.value:
                        conflict = Conflict(
                            sid, stream, seq, "the version already holds a different record here"
                        )
                        break
                    reproduced += 1
                else:
                    writes.append(output)
            if conflict is None and len(held) > len(outputs):
                conflict = Conflict(
                    sid, stream, len(outputs), "the version holds records this replay did not make"
                )
            if conflict is not None:
                break
        if conflict is not None:
            plan.conflicts.append(conflict)
            continue
        plan.writes.extend(writes)
        plan.reproduced += reproduced
    return plan
