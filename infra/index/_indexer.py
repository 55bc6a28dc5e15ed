"""The indexer: a consumer group over the raw and derived topics, keeping the read model.

Each member owns some partitions (the one group protocol, `GroupMember`); on assignment it
seeks each to the position its store holds (the tracking record), and every batch's rows are written with the positions they reach in one transaction
(`IndexStore.apply`). So a kill at any moment loses and repeats nothing: the next owner starts
exactly after the last committed batch. The group commits no offsets: the store's positions are
the only ones (an offset committed ahead of them, by a store since replaced, would have a new
owner fetch past records it never indexed), and `rolltape index status` shows the lag.

A batch of a partition the member lost meanwhile is refused by the store
(`PositionConflictError`): the member drops it and seeks its partitions to the stored positions
again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rolltape.infra._errors import ReadModelError
from rolltape.infra.index._store import IndexStore, PositionConflictError
from rolltape.infra.kafka.keyring import KeysFollower
from rolltape.infra.settings import INDEX_BATCH_RECORDS as BATCH_RECORDS
from rolltape.projections.index import IndexChanges, Record, fold_batch
from rolltape.schemas import CHAINED_STREAMS, Stream, TypedEvent, stream_of_topic, topic_name
from rolltape.schemas.clients import (
    Fetched,
    GroupMember,
    KafkaConnection,
    Partition,
    partitions_of,
)
from rolltape.schemas.privacy import sealed_key_id

_log = logging.getLogger(__name__)

INDEXED_STREAMS: tuple[Stream, ...] = (*CHAINED_STREAMS, Stream.BLOBS, Stream.KEYS)
"""What the read model is made of: every chained stream, where worlds' blobs are, and the keys
topic (which sessions name a subject, which were erased)."""


@dataclass
class IndexProgress:
    """What a member has done since it started."""

    records: int = 0
    batches: int = 0
    conflicts: int = 0
    """Batches refused because another member had taken their partition over."""
    owned: list[Partition] = field(default_factory=list)


class Indexer:
    """One member of the indexers' group `group_id`, writing `store`."""

    def __init__(
        self,
        connection: KafkaConnection,
        store: IndexStore,
        *,
        prefix: str,
        group_id: str,
        subject_hash: Callable[[str], str],
        streams: tuple[Stream, ...] = INDEXED_STREAMS,
        batch_records: int = BATCH_RECORDS,
        keys: KeysFollower | None = None,
    ) -> None:
        self._connection = connection
        self._store = store
        self._prefix = prefix
        self._group_id = group_id
        self._subject_hash = subject_hash
        self._topics = [topic_name(s, prefix) for s in streams]
        self._batch = batch_records
        self._keys = keys
        """With the key-encryption key: the keys topic followed, so that a subject's session's
        content is indexed (and searchable) too; its erasure takes it out again."""
        self._at: dict[Partition, int | None] = {}
        """Where each owned partition stands in the store (None: never indexed)."""
        self._member: GroupMember | None = None
        self._failed: BaseException | None = None
        self._seeking = 0
        """Assignments being sought to their positions (no batch is "caught up" meanwhile)."""
        self.progress = IndexProgress()

    @property
    def topics(self) -> list[str]:
        return list(self._topics)

    @property
    def connection(self) -> KafkaConnection:
        return self._connection

    # -- ownership ---------------------------------------------------------------------------------
    async def assigned(self, partitions: list[Partition]) -> None:
        # The client library logs a listener's failure and goes on: kept here, and raised by
        # `run`, so that a member never reads partitions from anywhere but their positions.
        try:
            await self._seek_to_stored(partitions)
        except Exception as exc:
            self._failed = exc
            raise

    async def _seek_to_stored(self, partitions: list[Partition]) -> None:
        """Seek each partition to its stored position; only then is it indexed (records
        fetched for it before are dropped: they came from wherever the consumer stood)."""
        self._seeking += 1
        try:
            for p in partitions:
                self._at.pop(p, None)
            stored = await asyncio.to_thread(self._store.positions)
            assert self._member is not None
            for p in partitions:
                at = stored.get((p.topic, p.partition))
                if at is None:
                    await self._member.seek_to_beginning(p)
                else:
                    self._member.seek(p, at)
                self._at[p] = at
            self.progress.owned = sorted(self._at)
        finally:
            self._seeking -= 1

    async def revoked(self, partitions: list[Partition]) -> None:
        # Nothing is held between batches: each was written whole before the next fetch.
        for p in partitions:
            self._at.pop(p, None)
        self.progress.owned = sorted(self._at)

    # -- running -----------------------------------------------------------------------------------
    async def run(
        self,
        stop: asyncio.Event,
        *,
        until_caught_up: bool = False,
        on_batch: Callable[[IndexProgress], None] | None = None,
    ) -> IndexProgress:
        """Index until `stop` is set, or (`until_caught_up`) until every partition of the
        topics stands at the end offsets it had when the member got it."""
        member = GroupMember(
            self._connection,
            group_id=self._group_id,
            topics=self._topics,
            ownership=self,
            max_poll_records=self._batch,
        )
        self._member = member
        ends: dict[Partition, int] = {}
        async with contextlib.AsyncExitStack() as stack:
            if self._keys is not None:
                await stack.enter_async_context(self._keys)
            await stack.enter_async_context(member)
            if until_caught_up:
                every = await partitions_of(self._connection, self._topics)
                ends = await member.end_offsets(every) if every else {}
            while not stop.is_set():
                fetched = await member.fetch(timeout_s=0.5, max_records=self._batch)
                if self._failed is not None:
                    raise ReadModelError(
                        f"the indexer could not take over its partitions: {self._failed}"
                    ) from self._failed
                if fetched:
                    await self._index(fetched)
                    if on_batch is not None:
                        on_batch(self.progress)
                elif until_caught_up and await self._caught_up(member, ends):
                    break
        self._member = None
        return self.progress

    async def _caught_up(self, member: GroupMember, ends: Mapping[Partition, int]) -> bool:
        """Every partition owned, sought to its position, and read to its end."""
        if self._seeking or not set(ends) <= set(self._at):
            return False
        for p, end in ends.items():
            if await member.position(p) < end:
                return False
        return True

    async def _fold(self, records: list[Record]) -> IndexChanges:
        """The batch's rows; with the keys followed, sealed content opened. A key not read yet
        (a session's key and its first records travel to different topics) is waited for
        once (`KeysFollower.ready`) and the batch folded again."""
        keys = self._keys
        missing: set[tuple[str, str]] = set()

        def opener(event: TypedEvent) -> TypedEvent | None:
            assert keys is not None
            opened, access = keys.keyring.open_event(event)
            if opened is None and access == "key unavailable":
                missing.add((event.session_id, sealed_key_id(event.payload) or ""))
            return opened

        def fold() -> IndexChanges:
            missing.clear()
            return fold_batch(
                records, self._store.heads, self._subject_hash, None if keys is None else opener
            )

        changes = await asyncio.to_thread(fold)
        if keys is not None and missing:
            await keys.ready(set(missing))
            changes = await asyncio.to_thread(fold)
            if missing:
                _log.info(
                    "indexed without their text: %d session key(s) this machine cannot open",
                    len(missing),
                )
        return changes

    async def _index(self, fetched: list[Fetched]) -> None:
        records: list[Record] = []
        expected: dict[tuple[str, int], int | None] = {}
        for f in fetched:
            if f.partition not in self._at:
                continue  # fetched before the partition was sought, or after it was revoked
            at = self._at[f.partition]
            if at is not None and f.offset < at:
                continue  # indexed already
            stream = stream_of_topic(f.partition.topic, self._prefix)
            if stream is None:
                continue
            key = (f.partition.topic, f.partition.partition)
            expected.setdefault(key, self._at[f.partition])
            records.append(
                Record(
                    stream,
                    f.partition.topic,
                    f.partition.partition,
                    f.offset,
                    f.key,
                    f.value,
                    f.timestamp_ms,
                )
            )
        if not records:
            return
        try:
            changes = await self._fold(records)
            await asyncio.to_thread(self._store.apply, changes, expected=expected)
        except PositionConflictError as exc:
            _log.warning("%s; seeking to the stored positions again", exc)
            self.progress.conflicts += 1
            await self._seek_to_stored(sorted(self._at))
            return
        for row in changes.positions:
            self._at[Partition(row.topic, row.partition)] = row.next_offset
        self.progress.records += len(records)
        self.progress.batches += 1
