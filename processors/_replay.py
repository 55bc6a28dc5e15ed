"""Replay: the raw streams through the processors' pure step again, under a judge version.

It lives beside the step it re-runs: replay is the processors run a second time, not a view of
their outputs. Pure: records in, sealed outputs per chain out, and a plan of what to write given
what the judge version's chains already hold. The Kafka reading and writing are infra's part.

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

import asyncio
import heapq
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from rolltape.processors._judge_messages import JudgeRequest, JudgeResult
from rolltape.processors._outputs import DeadLetter, Emitted, Requested
from rolltape.processors._processor_config import ProcessorConfig
from rolltape.processors._session import SessionProcessor, handle
from rolltape.processors._session_state import SessionState
from rolltape.processors.audit import InputRecord, Position
from rolltape.schemas import Stream, TypedEvent, UnreadableRecord, read_event, versioned_stream


class ReplayRecord(NamedTuple):
    """A raw record as read back, with the broker's append time (the merge order); a named
    tuple, as `InputRecord` is (one per record read)."""

    record: InputRecord
    broker_ts_ms: int

    @property
    def at(self) -> Position:
        position = self.record.position
        assert position is not None, "replayed records are read from their topics"
        return position


_STREAM_RANK = {Stream.EVENTS.value: 0, Stream.METRICS.value: 1}


def replay_order(records: Iterable[ReplayRecord]) -> list[InputRecord]:
    """Every session's records, its chains merged by broker time; sessions by first record."""
    per_session: dict[bytes | None, dict[str, list[ReplayRecord]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for item in records:
        per_session[item.record.key][item.at.topic].append(item)
    ordered: list[tuple[tuple[int, bytes], list[InputRecord]]] = []
    for key, topics in per_session.items():
        chains = [
            sorted(chain, key=lambda r: (r.at.partition, r.at.offset)) for chain in topics.values()
        ]
        merged = heapq.merge(
            *chains,
            key=lambda r: (r.broker_ts_ms, _STREAM_RANK.get(r.record.stream, 2), r.at.offset),
        )
        session_records = [r.record for r in merged]
        first = min(chain[0].broker_ts_ms for chain in chains)
        ordered.append(((first, key or b""), session_records))
    ordered.sort(key=lambda item: item[0])
    return [record for _, session_records in ordered for record in session_records]


@dataclass
class ReplayResult:
    """What one replay pass computed: every output chain in chain order, the sessions touched,
    and what the LLM judges are still to do; `plan_writes` compares it with what is held."""

    chains: dict[tuple[str, str], list[Emitted]] = field(default_factory=dict)
    """(chain name, session id) -> outputs in chain order."""
    sessions: set[str] = field(default_factory=set)
    dead_letters: Counter[str] = field(default_factory=Counter)
    """Reasons of records the live worker dead-lettered too; replay does not write them again."""
    requests: list[JudgeRequest] = field(default_factory=list)
    """Finished sessions the configured LLM judges are to judge (`Replayer.judge`)."""
    llm_adopted: int = 0
    """LLM verdicts the version already held (by event id): taken as they are, not asked again."""
    llm_called: int = 0
    unopened: Counter[str] = field(default_factory=Counter)
    """Sessions naming a subject whose content could not be opened, by why (`erased`, `key
    unavailable`): not re-judged, and nothing of them written (what was erased cannot be judged
    again, and a machine without the key-encryption key would judge empty fields)."""


class ReplayedSession(NamedTuple):
    """One session as replay stepped it: its raw events (both streams, in the order stepped)
    decoded once, their payloads read by the step, and the outputs it emitted, in order."""

    session_id: str
    events: list[TypedEvent]
    outputs: list[Emitted]


JudgeCall = Callable[[JudgeRequest, str], Awaitable[JudgeResult]]


class Replayer:
    """The processors' step over replayed records, then the LLM judges the step asked for.

    LLM verdicts are not reproducible byte for byte; their event ids are. A verdict the judge
    version already holds (same id) is adopted as it is, so a replay never asks a model again for
    a verdict the version has, and later outputs chain on what the topic holds; only missing
    verdicts are asked for.
    """

    def __init__(self, config: ProcessorConfig) -> None:
        self.processor = SessionProcessor(config)
        self.states: dict[str, SessionState] = {}

    def run(self, records: Iterable[InputRecord]) -> ReplayResult:
        result = ReplayResult()
        chains: dict[tuple[str, str], list[Emitted]] = defaultdict(list)
        for session in self.sessions(records, result):
            for output in session.outputs:
                chains[(output.stream, output.session_id)].append(output)
        return self.finish(result, chains)

    def sessions(
        self, records: Iterable[InputRecord], result: ReplayResult
    ) -> Iterator[ReplayedSession]:
        """Step `records` (in `replay_order`: a session's records one after another) and yield
        each session once its records are stepped, with its events as the step decoded them,
        so that a fold after the step decodes nothing again. Dead letters and judge requests
        are counted into `result`; `finish` completes it."""
        sid: str | None = None
        decoded: list[TypedEvent] = []
        emitted: list[Emitted] = []
        for record in records:
            at = len(decoded)
            touched, outputs = handle(self.processor, self.states, record, decoded=decoded)
            if touched != sid and touched is not None:
                if sid is not None:
                    yield ReplayedSession(sid, decoded[:at], emitted)
                    del decoded[:at]
                    emitted = []
                sid = touched
                result.sessions.add(touched)
            for output in outputs:
                if isinstance(output, Emitted):
                    emitted.append(output)
                elif isinstance(output, DeadLetter):
                    result.dead_letters[output.reason] += 1
                elif isinstance(output, Requested):
                    result.requests.append(JudgeRequest.model_validate_json(output.value))
        if sid is not None:
            yield ReplayedSession(sid, decoded, emitted)

    def finish(
        self, result: ReplayResult, chains: dict[tuple[str, str], list[Emitted]]
    ) -> ReplayResult:
        """`result` with the chains stepped, less the sessions whose content could not be
        opened (nothing of them is written or judged)."""
        unopened = {sid: s.unopened for sid, s in self.states.items() if s.unopened is not None}
        result.unopened.update(unopened.values())
        result.chains = {ids: chain for ids, chain in chains.items() if ids[1] not in unopened}
        result.requests = [r for r in result.requests if r.session_id not in unopened]
        return result

    async def judge(
        self,
        result: ReplayResult,
        held: Mapping[tuple[str, str], Sequence[bytes]],
        call: JudgeCall | None,
    ) -> None:
        """Adopt held LLM verdicts, ask `call` for the missing ones (concurrently; None: adopt
        only, as a dry run does), and chain them in a fixed order: sessions by id, judges in the
        configured order."""
        stream = versioned_stream(Stream.VERDICTS, self.processor.config.judge_version)
        pending: list[tuple[JudgeRequest, str]] = []
        for request in sorted(result.requests, key=lambda r: r.session_id):
            sid = request.session_id
            state = self.states[sid]
            wanted = {
                self.processor.llm_verdict_id(sid, name, request.causes): name
                for name in request.judges
            }
            for value in held.get((stream, sid), ()):
                try:
                    name = wanted.get(read_event(value).event_id)
                except UnreadableRecord:
                    continue
                if name is None:
                    continue
                adopted = self.processor.adopt_verdict(state, sid, name, value)
                if adopted is not None:
                    result.chains.setdefault((stream, sid), []).append(adopted)
                    result.llm_adopted += 1
            pending += [(request, name) for name in request.judges if name not in state.judged]
        if call is None:
            return
        answers = await asyncio.gather(*(call(request, name) for request, name in pending))
        result.llm_called += sum(
            1 for answer in answers if answer.verdict is not None or answer.sealed_verdict
        )
        for (request, _), answer in zip(pending, answers, strict=True):
            state = self.states[request.session_id]  # an answer from no log: no position
            for output in self.processor.judge_result(state, answer, None):
                result.chains.setdefault((output.stream, output.session_id), []).append(output)


def replay(records: Sequence[InputRecord], config: ProcessorConfig) -> ReplayResult:
    """Run the processor step over records in `replay_order` (LLM judges are `Replayer.judge`)."""
    return Replayer(config).run(records)


@dataclass(frozen=True)
class Conflict:
    """A session whose recomputed chain differs from what its judge version already holds: the
    first differing record (versions are immutable, so nothing of the session is written)."""

    session_id: str
    stream: str
    seq: int
    detail: str


@dataclass
class WritePlan:
    """What a replay writes: new outputs after those already present, how many it reproduced
    byte for byte, and the sessions it leaves alone because they conflict."""

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
