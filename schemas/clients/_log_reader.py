"""A reader of partitions it assigns itself: the one way rolltape reads a topic outside a group.

Reading back must never move a group's committed offsets (a verify, an export or a tail is no
member of the worker's group), and most reads have a natural end: the end offsets the partitions
had when the read began. Exports and reports scan the raw topics to that end, replay reads the
events and metrics topics, the keys follower reads the keys topic and then goes on from where it
stands, cron reads the jobs topic before its scheduler starts, the worker's faust shell reads the
partitions faust gave it, and `tail` follows past the end. They all read through this class,
which speaks rolltape's terms (`Partition`, `Fetched`) and translates the client library's errors
once, here, so none of them imports aiokafka.

`tests/integration/test_log_reader.py` is the contract every user relies on: a read to the end
stops at the end offsets taken when it began (records written after it are not read), starts
where the reader stands (a seek, or the beginning), gives each partition's records in offset
order with their keys, headers and broker times, reports a stall instead of waiting forever,
and moves no group's offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rolltape.schemas.clients._consumer import HeldConsumer
from rolltape.schemas.clients._errors import KafkaClientError, KafkaUnavailableError, kafka_errors
from rolltape.schemas.clients._group import Fetched, Partition, fetched, theirs

if TYPE_CHECKING:
    from rolltape.schemas.clients._connection import KafkaConnection


class ReaderNotStartedError(KafkaClientError):
    """The reader was used before `start()` (or `async with`): a mistake in the caller."""


class LogStalledError(KafkaUnavailableError):
    """A read to the end made no progress for the time allowed (the broker is away, or the
    partition's leader is moving)."""


async def partitions_of(connection: KafkaConnection, topics: Sequence[str]) -> list[Partition]:
    """The partitions of those of `topics` that exist, by topic and number (a missing topic
    has none: the caller says what that means for it)."""
    if not topics:
        return []
    doing = f"describing {', '.join(topics)} on {connection}"
    async with connection.started(connection.admin(), doing) as admin:
        described = await admin.describe_topics(list(topics))
    return sorted(
        Partition(t["topic"], p["partition"])
        for t in described
        if t["error_code"] == 0
        for p in t["partitions"]
    )


class LogReader(HeldConsumer):
    """One consumer with no group, reading the partitions given to `assign`; enter it with
    `async with`. `settings` go to the consumer (fetch sizes and waits)."""

    not_started = ReaderNotStartedError

    def __init__(self, connection: KafkaConnection, **settings: Any) -> None:
        super().__init__(
            connection,
            {
                "enable_auto_commit": False,
                "auto_offset_reset": "earliest",
                "fetch_max_wait_ms": 100,
                "max_partition_fetch_bytes": 4 << 20,
                **settings,
            },
        )
        self._owned: tuple[Partition, ...] = ()
        self._doing = f"reading on {connection}"

    @property
    def connections(self) -> Any:
        """The consumer's connections to the cluster: the worker's faust shell commits its
        positions to faust's group over them (`processors/worker/_group_positions.py`)."""
        return self._consumer._client

    # -- where it reads --------------------------------------------------------------------------
    def assign(self, partitions: Iterable[Partition]) -> None:
        """Read these partitions (and no others) from where each stands: its committed offset
        for no group, so its beginning, until a seek says otherwise."""
        self._owned = tuple(sorted(set(partitions)))
        topics = sorted({p.topic for p in self._owned})
        self._doing = f"reading {', '.join(topics) or 'nothing'} on {self._connection}"
        self._consumer.assign([theirs(p) for p in self._owned])

    def owned(self) -> tuple[Partition, ...]:
        """The partitions assigned, in order."""
        return self._owned

    def seek(self, positions: Mapping[Partition, int]) -> None:
        """Read each partition of `positions` from that offset next."""
        consumer = self._consumer
        for partition, offset in positions.items():
            consumer.seek(theirs(partition), offset)

    async def seek_to_beginning(self, *partitions: Partition) -> None:
        """Read these partitions (all assigned ones when none are named) from their start."""
        with kafka_errors(self._doing):
            await self._consumer.seek_to_beginning(*(theirs(p) for p in partitions or self._owned))

    async def seek_to_end(self, *partitions: Partition) -> None:
        """Read only what is written from now on to these partitions (all assigned ones when
        none are named)."""
        with kafka_errors(self._doing):
            await self._consumer.seek_to_end(*(theirs(p) for p in partitions or self._owned))

    async def seek_to_time(self, since_ms: int) -> None:
        """Read each assigned partition from its first record at or after `since_ms` (broker
        time), or from its end where it has none yet."""
        with kafka_errors(self._doing):
            found = await self._consumer.offsets_for_times(
                {theirs(p): since_ms for p in self._owned}
            )
            for partition in self._owned:
                at = found.get(theirs(partition))
                if at is None:
                    await self._consumer.seek_to_end(theirs(partition))
                else:
                    self._consumer.seek(theirs(partition), at.offset)

    async def position(self, partition: Partition) -> int:
        """The offset of the next record read from `partition`."""
        with kafka_errors(self._doing):
            return int(await self._consumer.position(theirs(partition)))

    async def end_offsets(self, partitions: Iterable[Partition] = ()) -> dict[Partition, int]:
        """Each partition's end (the offset its next record will have); the assigned ones
        when none are named."""
        asked = [theirs(p) for p in (partitions or self._owned)]
        if not asked:
            return {}
        with kafka_errors(self._doing):
            await self._know_leaders(asked)
            ends = await self._consumer.end_offsets(asked)
        return {Partition(tp.topic, tp.partition): int(end) for tp, end in ends.items()}

    async def beginning_offsets(self, partitions: Iterable[Partition] = ()) -> dict[Partition, int]:
        """Each partition's first offset still held (retention may have removed earlier ones)."""
        asked = [theirs(p) for p in (partitions or self._owned)]
        if not asked:
            return {}
        with kafka_errors(self._doing):
            await self._know_leaders(asked)
            starts = await self._consumer.beginning_offsets(asked)
        return {Partition(tp.topic, tp.partition): int(at) for tp, at in starts.items()}

    async def _know_leaders(self, asked: list[Any]) -> None:
        """Learn the leaders of `asked` before asking them for offsets. The client asks for
        offsets only of partitions whose leader it knows; for the others it refreshes its
        metadata and sleeps its retry backoff (100 ms) before trying again, so a fresh reader's
        first offsets cost a few hundred milliseconds of sleep (every page of the console, every
        located read). One metadata request instead."""
        client = self._consumer._client
        unknown = sorted(
            {tp.topic for tp in asked if client.cluster.leader_for_partition(tp) is None}
        )
        if not unknown:
            return
        for topic in unknown:
            client.add_topic(topic)
        # Best effort, bounded: where the update does not come, the offsets' own retries (and
        # their timeout) go on as before.
        timeout_s = getattr(client, "_request_timeout_ms", 40_000) / 1000
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(client.force_metadata_update(), timeout_s)

    # -- reading ---------------------------------------------------------------------------------
    async def fetch(
        self,
        timeout_s: float = 0.2,
        max_records: int = 5000,
        partitions: Iterable[Partition] = (),
    ) -> list[Fetched]:
        """The records ready on the assigned partitions (or on those named), none after
        `timeout_s`; each partition's in offset order."""
        with kafka_errors(self._doing):
            batch = await self._consumer.getmany(
                *(theirs(p) for p in partitions),
                timeout_ms=max(1, int(timeout_s * 1000)),
                max_records=max_records,
            )
        return fetched(batch)

    async def read_to_end(
        self,
        partitions: Iterable[Partition] = (),
        *,
        until: Mapping[Partition, int] | None = None,
        stall_s: float | None = 30.0,
        max_records: int = 5000,
    ) -> AsyncIterator[list[Fetched]]:
        """Batches of the assigned partitions (or of those named) from where each stands up to
        `until` (each partition's end offset as it is now, by default), excluded; records past
        it are left for a later read. LogStalledError when no record arrives for `stall_s`
        while some are still to come."""
        wanted = tuple(partitions) or self._owned
        ends = dict(until) if until is not None else await self.end_offsets(wanted)
        waiting = {p for p in wanted if await self.position(p) < ends[p]}
        progress = time.monotonic()
        while waiting:
            batch = await self.fetch(0.2, max_records, waiting)
            if batch:
                progress = time.monotonic()
                within = [f for f in batch if f.offset < ends[f.partition]]
                if len(within) < len(batch):  # read past the end: the next read starts there
                    past = {f.partition for f in batch if f.offset >= ends[f.partition]}
                    self.seek({p: ends[p] for p in past})
                yield within
            for p in list(waiting):
                if await self.position(p) >= ends[p]:
                    waiting.discard(p)
            if waiting and stall_s is not None and time.monotonic() - progress > stall_s:
                raise LogStalledError(
                    f"reading {', '.join(sorted({p.topic for p in waiting}))} made no progress "
                    f"for {stall_s:.0f} s on {self._connection}; {LogStalledError.advice}"
                )


__all__ = ["LogReader", "LogStalledError", "ReaderNotStartedError", "partitions_of"]
