"""`rolltape log replay` wiring: read the raw topics, re-run the processors under a judge version,
write what that version's chains do not hold yet.

The pure parts (order, step, write plan) are rolltape.processors' replay; this module reads and
writes Kafka and builds the processor config from settings, like the worker does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from pydantic import BaseModel

from rolltape.infra._errors import InfraError
from rolltape.infra._gc import tune_collector
from rolltape.infra.broker import require_connection
from rolltape.infra.commands.worker import load_plugins, processor_config
from rolltape.infra.judging import LogJudges
from rolltape.infra.kafka.keyring import keyring_if_any
from rolltape.infra.kafka.readback import partition_counts, read_records
from rolltape.infra.settings import Settings
from rolltape.processors import (
    Conflict,
    ProcessorConfig,
    Replayer,
    ReplayRecord,
    ReplayResult,
    WritePlan,
    plan_writes,
    replay_order,
)
from rolltape.processors.audit import InputRecord, Position
from rolltape.processors.worker import JudgeRunner, OutputProducer
from rolltape.schemas import (
    DERIVED_STREAMS,
    Role,
    Stream,
    UnreadableRecord,
    read_event,
    split_stream,
    topic_name,
    versioned_stream,
)
from rolltape.schemas.clients import GroupMember, KafkaConnection, Partition, partitions_of


class ReplayConfigError(InfraError):
    """The settings ask a replay for what it cannot do (the message says what to change)."""


def replay_config(settings: Settings, judge_version: str) -> ProcessorConfig:
    """The processor config of a judge version: the worker's, from the same settings, under
    that version's label and without a signer (replays never write checkpoints). A filter
    config that waits for reviewers is refused: a replay reads the raw streams, not the
    reviewers' chains, so it would leave every session undecided."""
    config = processor_config(settings, judge_version=judge_version)
    if config.filters.require_review:
        raise ReplayConfigError(
            f"the filter config {config.filters.label} waits for a reviewer's verdict "
            "(require_review), and a replay reads the raw streams, not the reviewers' chains: "
            "it would decide no session. Replay with a config without require_review, and "
            "select what reviewers passed at export (`dataset export --reviewers passed`)"
        )
    return config


async def read_raw(
    connection: KafkaConnection,
    prefix: str,
    on_record: Callable[[int], None] | None = None,
    partitions: Collection[int] | None = None,
) -> list[ReplayRecord]:
    """Every record of the events and metrics topics (or of those partitions) up to their
    current ends."""
    records = []
    async for raw in read_records(
        connection, [Stream.EVENTS, Stream.METRICS], prefix=prefix, partitions=partitions
    ):
        records.append(
            ReplayRecord(
                InputRecord(
                    raw.stream.value,
                    raw.key,
                    raw.value,
                    Position(raw.topic, raw.partition, raw.offset),
                ),
                raw.broker_ts_ms,
            )
        )
        if on_record is not None:
            on_record(len(records))
    return records


def sessions_since(records: list[ReplayRecord], since_ms: int) -> list[ReplayRecord]:
    """The records of sessions whose first event reached the broker at or after `since_ms`;
    such sessions are replayed whole, never from the middle of a chain."""
    first: dict[bytes | None, int] = {}
    for item in records:
        key = item.record.key
        first[key] = min(first.get(key, item.broker_ts_ms), item.broker_ts_ms)
    return [item for item in records if first[item.record.key] >= since_ms]


async def read_version(
    connection: KafkaConnection,
    prefix: str,
    judge_version: str,
    partitions: Collection[int] | None = None,
) -> dict[tuple[str, str], list[bytes]]:
    """What the judge version's chains hold: (chain, session) -> record bytes by seq, up to the
    first missing seq (copies of one seq are redeliveries: the first is kept)."""
    wanted = {versioned_stream(s, judge_version) for s in DERIVED_STREAMS}
    by_seq: dict[tuple[str, str], dict[int, bytes]] = defaultdict(dict)
    async for raw in read_records(
        connection, list(DERIVED_STREAMS), prefix=prefix, partitions=partitions
    ):
        try:
            env = read_event(raw.value)
        except UnreadableRecord:
            continue
        if env.stream in wanted:
            by_seq[(env.stream, env.session_id)].setdefault(env.seq, raw.value)
    held: dict[tuple[str, str], list[bytes]] = {}
    for key, records in by_seq.items():
        chain: list[bytes] = []
        while len(chain) in records:
            chain.append(records[len(chain)])
        held[key] = chain
    return held


def output_producer(settings: Settings) -> OutputProducer:
    """Replay writes as the worker does: rules and filter outcomes as the processor, verdicts and
    the LLM judges' conversations as the judge (idempotent, acks=all)."""
    return OutputProducer.for_roles(
        require_connection(settings, Role.PROCESSOR),
        require_connection(settings, Role.JUDGE),
        settings.topic_prefix,
        KafkaConnection.chain_producer,
    )


async def write_outputs(settings: Settings, plan: WritePlan) -> int:
    """Send the planned outputs (idempotent, acks=all; one session's chain stays in order)."""
    if not plan.writes:
        return 0
    prefix = settings.topic_prefix
    connection = require_connection(settings, Role.PROCESSOR)
    doing = f"writing {len(plan.writes)} replayed outputs on {connection}"
    async with connection.started(output_producer(settings), doing) as producer:
        futures = [
            await producer.send(
                topic_name(split_stream(o.stream)[0], prefix),
                o.value,
                key=o.session_id.encode(),
            )
            for o in plan.writes
        ]
        for future in futures:
            await future
    return len(plan.writes)


class ReplaySummary(BaseModel):
    """What `rolltape log replay` did, as it prints it (and as `--json` writes it)."""

    judge_version: str
    rules: str
    filters: str
    rewards: tuple[str, ...]
    records_read: int
    sessions: int
    outputs: int
    reproduced: int
    written: int
    conflicts: list[dict[str, Any]]
    dead_letters: dict[str, int]
    unopened: dict[str, int] = {}
    """Subject sessions left out, by why their content could not be opened (`erased`, `key
    unavailable`: no key-encryption key here)."""
    llm_requests: int
    """LLM judge verdicts the replayed sessions call for."""
    llm_adopted: int
    """... of which the version already held (by event id): not asked again."""
    llm_called: int
    """... of which were asked of the models in this run."""
    seconds: float
    partitions: list[int] = []
    """The partition numbers this replay did (every one, without --group)."""


async def _run_llm_judges(
    settings: Settings,
    replayer: Replayer,
    result: ReplayResult,
    held: dict[tuple[str, str], list[bytes]],
) -> None:
    """The judges, as the worker runs them: each run recorded as an untrainable session linked
    to the judged one; verdicts chained by the replayer."""
    runtime = LogJudges(settings)
    try:
        runner = JudgeRunner(runtime, keys=replayer.processor.config.keys)
        await replayer.judge(result, held, runner.judge)
    finally:
        await runtime.aclose()


async def replay_slices(connection: KafkaConnection, prefix: str) -> list[frozenset[int] | None]:
    """The partition numbers to replay one at a time, or [None] (everything at once) when the
    raw and derived topics do not all have the same partition count (then a session's records
    may sit on different partition numbers)."""
    streams = [Stream.EVENTS, Stream.METRICS, *DERIVED_STREAMS]
    counts = await partition_counts(connection, [topic_name(s, prefix) for s in streams])
    values = set(counts.values())
    if len(counts) != len(streams) or len(values) != 1:
        return [None]
    return [frozenset({p}) for p in range(values.pop())]


class SliceTotals(BaseModel):
    """What replaying one slice of partitions did (summed into the ReplaySummary)."""

    records: int = 0
    sessions: int = 0
    outputs: int = 0
    reproduced: int = 0
    written: int = 0
    llm_requests: int = 0
    llm_adopted: int = 0
    llm_called: int = 0
    conflicts: list[Conflict] = []
    dead_letters: dict[str, int] = {}
    unopened: dict[str, int] = {}
    partitions: list[int] = []
    """The partition numbers replayed (empty: every one at once)."""


async def replay_slice(
    settings: Settings,
    config: ProcessorConfig,
    part: frozenset[int] | None,
    *,
    since_ms: int | None,
    dry_run: bool,
    on_record: Callable[[int], None] | None = None,
) -> SliceTotals:
    """Replay the sessions of partition numbers `part` (None: every partition): a session's raw
    records and outputs all sit on one partition number, so slices are independent."""
    prefix = settings.topic_prefix
    connection = require_connection(settings, Role.READER)
    raw = await read_raw(connection, prefix, on_record, part)
    read = len(raw)
    if since_ms is not None:
        raw = sessions_since(raw, since_ms)
    keys = await keyring_if_any(connection, settings)  # opens subject sessions' content
    replayer = Replayer(dataclasses.replace(config, keys=keys))
    result = replayer.run(replay_order(raw))
    held = await read_version(connection, prefix, config.judge_version, part)
    if result.requests:
        if dry_run:
            await replayer.judge(result, held, None)  # adopt what V holds, ask nothing
        else:
            await _run_llm_judges(settings, replayer, result, held)
    plan = plan_writes(result, held)
    return SliceTotals(
        records=read,
        sessions=len(result.sessions),
        outputs=sum(len(chain) for chain in result.chains.values()),
        reproduced=plan.reproduced,
        written=0 if dry_run else await write_outputs(settings, plan),
        llm_requests=sum(len(r.judges) for r in result.requests),
        llm_adopted=result.llm_adopted,
        llm_called=result.llm_called,
        conflicts=plan.conflicts,
        dead_letters=dict(result.dead_letters),
        unopened=dict(result.unopened),
        partitions=sorted(part or ()),
    )


def _replay_slice_in_child(
    settings: Settings,
    config: ProcessorConfig,
    part: frozenset[int] | None,
    since_ms: int | None,
    dry_run: bool,
) -> SliceTotals:
    """`replay_slice` in a process of its own (`--jobs`): the plugins that registered the
    config's judges and reward functions are imported there too."""
    load_plugins(settings.plugins)
    return asyncio.run(replay_slice(settings, config, part, since_ms=since_ms, dry_run=dry_run))


class ReplayGroupError(InfraError):
    """A group replay cannot share this prefix's partitions (the message says why)."""


GROUP_SETTLE_S = 3.0
"""How long a new member waits for the group's assignment to stay the same before its first
slice: members started together (one per host) then share the partitions from the start, rather
than the first taking them all before the others have joined."""
GROUP_WAIT_S = 600.0
"""How long a member of a replay group waits, once its own partitions are done, for the others
to finish theirs (or for a partition of a member that died to come to it)."""


async def replay_in_group(
    settings: Settings,
    config: ProcessorConfig,
    group: str,
    connection: KafkaConnection,
    *,
    since_ms: int | None,
    dry_run: bool,
) -> list[SliceTotals]:
    """Replay the partition numbers the consumer group `group` gives this process, on any
    number of hosts. Each member subscribes to the events topic (its partitions paused: it reads
    through `replay_slice`, not the group's consumer), replays each partition number assigned to
    it, and commits the events topic's end offset (as of this member's start) for that partition
    once its outputs are written: the group's committed offsets say which partitions are done.
    A member stays until every partition is done, so the partitions of a member that dies are
    reassigned and replayed. A partition replayed twice (a rebalance in the middle of it) writes
    the same bytes twice at most: readers count the second as redeliveries."""
    prefix = settings.topic_prefix
    slices = await replay_slices(connection, prefix)
    if slices == [None]:
        raise ReplayGroupError(
            f"the raw and derived topics of {prefix} do not all have the same partition count: "
            "a session's records may sit on different partition numbers, which a group cannot "
            "share out; replay without --group"
        )
    events = topic_name(Stream.EVENTS, prefix)
    parts = await partitions_of(connection, [events])
    paused = _Paused()
    member = GroupMember(
        connection,
        group_id=group,
        topics=[events],
        ownership=paused,
        max_poll_interval_ms=24 * 3600 * 1000,  # a slice may take long; the group waits
    )
    paused.member = member
    out: list[SliceTotals] = []
    async with member:
        ends = await member.end_offsets(parts)
        seen, since = member.owned(), time.monotonic()
        while time.monotonic() - since < GROUP_SETTLE_S or not seen:
            await member.fetch(timeout_s=0.2)
            if member.owned() != seen:
                seen, since = member.owned(), time.monotonic()
        deadline = time.monotonic() + GROUP_WAIT_S
        while True:
            await member.fetch(timeout_s=0.2)  # paused: keeps the member in the group
            committed = {tp: await member.committed(tp) for tp in parts}
            done = {tp for tp, at in committed.items() if at is not None and at >= ends[tp]}
            if len(done) == len(parts):
                return out
            mine = sorted(member.owned() - done)
            if not mine and time.monotonic() > deadline:
                raise ReplayGroupError(
                    f"partitions {sorted(tp.partition for tp in set(parts) - done)} of {events} "
                    f"were not replayed by group {group} within {GROUP_WAIT_S:.0f}s after this "
                    "member finished its own: is another member stuck?"
                )
            for tp in mine:
                out.append(
                    await replay_slice(
                        settings,
                        config,
                        frozenset({tp.partition}),
                        since_ms=since_ms,
                        dry_run=dry_run,
                    )
                )
                # False: revoked meanwhile, whoever has it now replays it again (same bytes).
                await member.commit({tp: ends[tp]})
                deadline = time.monotonic() + GROUP_WAIT_S


class _Paused:
    """A replay member's `Ownership`: pauses every partition the group assigns, so the member
    reads them through `replay_slice`, never through the group's consumer."""

    member: GroupMember | None = None

    async def revoked(self, partitions: list[Partition]) -> None:
        return None

    async def assigned(self, partitions: list[Partition]) -> None:
        assert self.member is not None
        self.member.pause(*partitions)


async def run_replay(
    settings: Settings,
    config: ProcessorConfig,
    *,
    since_ms: int | None = None,
    dry_run: bool = False,
    on_record: Callable[[int], None] | None = None,
    jobs: int = 1,
    group: str | None = None,
) -> ReplaySummary:
    """Replay every partition number, one slice at a time (memory is bounded by the largest
    partition, not by the topic), or `jobs` slices at once in as many processes; with `group`,
    the partition numbers this process is given in that consumer group, until every one of them
    is replayed by some member (`replay_in_group`)."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs}")
    started = time.perf_counter()
    connection = require_connection(settings, Role.READER)
    slices = await replay_slices(connection, settings.topic_prefix)
    parts: list[SliceTotals] = []
    if group is not None:
        parts = await replay_in_group(
            settings, config, group, connection, since_ms=since_ms, dry_run=dry_run
        )
    elif jobs == 1 or len(slices) == 1:
        seen = 0

        def progress(count: int) -> None:
            if on_record is not None:
                on_record(seen + count)

        for part in slices:
            done = await replay_slice(
                settings, config, part, since_ms=since_ms, dry_run=dry_run, on_record=progress
            )
            seen += done.records
            parts.append(done)
    else:
        loop = asyncio.get_running_loop()
        context = multiprocessing.get_context("spawn")  # no forked aiokafka or faust state
        with ProcessPoolExecutor(
            max_workers=jobs, mp_context=context, initializer=tune_collector
        ) as pool:
            pending = [
                loop.run_in_executor(
                    pool, _replay_slice_in_child, settings, config, part, since_ms, dry_run
                )
                for part in slices
            ]
            for finished in asyncio.as_completed(pending):
                parts.append(await finished)
                if on_record is not None:
                    on_record(sum(p.records for p in parts))
    conflicts = [c for p in parts for c in p.conflicts]
    dead_letters: Counter[str] = Counter()
    unopened: Counter[str] = Counter()
    for p in parts:
        dead_letters.update(p.dead_letters)
        unopened.update(p.unopened)
    return ReplaySummary(
        judge_version=config.judge_version,
        rules=config.rules.label,
        filters=config.filters.label,
        rewards=config.rewards,
        records_read=sum(p.records for p in parts),
        sessions=sum(p.sessions for p in parts),
        outputs=sum(p.outputs for p in parts),
        reproduced=sum(p.reproduced for p in parts),
        written=sum(p.written for p in parts),
        conflicts=[
            {"session_id": c.session_id, "stream": c.stream, "seq": c.seq, "detail": c.detail}
            for c in sorted(conflicts, key=lambda c: (c.session_id, c.stream, c.seq))
        ],
        dead_letters=dict(sorted(dead_letters.items())),
        unopened=dict(sorted(unopened.items())),
        llm_requests=sum(p.llm_requests for p in parts),
        llm_adopted=sum(p.llm_adopted for p in parts),
        llm_called=sum(p.llm_called for p in parts),
        seconds=round(time.perf_counter() - started, 3),
        partitions=sorted({n for p in parts for n in p.partitions}),
    )
