"""The raw topics, read in batches: one consumer over the partitions the group gave this worker.

Why not a faust agent over the raw topics: faust hands records to agents one at a time, each
through its conductor, an event, a queue and an acknowledgement (measured: ~10,000 records/s for
an agent that does nothing, against ~130,000/s for a plain consumer on the same records). faust
still runs the group: it assigns the partitions of an empty topic co-partitioned with the raw
ones (`WorkerConfig.assignment_topic`), restores the state table's partitions with them, and
tells this reader what it owns once they are restored. The reader never joins a group itself.

Where a partition is read from: the position saved in the state table with the batch that read
up to it (written after the batch's session states, on the same changelog partition, so a
position that survived a crash means its states did too). Records between that position and a
crash are read again; sessions skip the ones their state already holds.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from rolltape.processors._errors import ProcessorError
from rolltape.schemas.clients import Fetched, KafkaConnection, LogReader, Partition, key_partition

POSITION_KEY_PREFIX = b"~position~"


class ReaderNotStartedError(ProcessorError, RuntimeError):
    """The raw reader was used before its partitions were assigned: a bug in the shell."""


@functools.lru_cache(maxsize=4096)
def position_key(topic: str, partition: int, partitions: int) -> bytes:
    """The state-table key of a raw partition's read position. The table places keys by their
    murmur2 hash, as the raw topics do; this key is chosen to hash to `partition`, so whoever
    owns the raw partition restores its position with its sessions. `~` opens no session id."""
    for n in itertools.count():
        key = POSITION_KEY_PREFIX + f"{topic}~{partition}~{n}".encode()
        if key_partition(key, partitions) == partition:
            return key
    raise AssertionError("unreachable")


class RawReader:
    """One log reader, assigned the owned partitions of the topics it reads."""

    def __init__(self, connection: KafkaConnection, topics: Sequence[str]) -> None:
        self.topics = tuple(topics)
        self._connection = connection
        self._reader: LogReader | None = None
        self._owned: frozenset[int] = frozenset()
        self._assigned = asyncio.Event()
        self._lock = asyncio.Lock()
        """Held while a batch is read and processed: a revocation waits for it."""

    @property
    def owned(self) -> frozenset[int]:
        return self._owned

    @property
    def client(self) -> Any:
        """The reader's connections to the cluster, for the group commits of
        _group_positions.py."""
        return self._require().connections

    def partitions(self, numbers: Iterable[int]) -> list[Partition]:
        """Those partition numbers of every topic read."""
        return [Partition(t, p) for t in self.topics for p in sorted(numbers)]

    async def start(self) -> None:
        # Client objects bind to the running loop: built here, not in __init__.
        self._reader = await LogReader(self._connection, fetch_max_wait_ms=500).start()

    async def stop(self) -> None:
        if self._reader is not None:
            await self._reader.stop()
            self._reader = None

    async def assign(
        self,
        partitions: set[int],
        positions: Mapping[Partition, int],
        *,
        unless: Callable[[], bool] = lambda: False,
    ) -> bool:
        """Read `partitions` of every topic from `positions` (the start of a partition whose
        position is not known); False, reading nothing new, when `unless()` holds once the
        batch in hand is done (a rebalance began while this waited: its revocation released
        the reader, and its own recovery assigns again)."""
        async with self._lock:
            if unless():
                return False
            reader = self._require()
            tps = self.partitions(partitions)
            reader.assign(tps)
            reader.seek({tp: positions[tp] for tp in tps if tp in positions})
            self._owned = frozenset(partitions)
            if tps:
                self._assigned.set()
            else:
                self._assigned.clear()
            return True

    async def release(self) -> None:
        """Stop reading (a rebalance took the partitions), once the batch in hand is done."""
        async with self._lock:
            self._assigned.clear()
            self._owned = frozenset()
            self._require().assign([])

    async def run(
        self,
        process: Callable[[Sequence[Fetched]], Awaitable[None]],
        *,
        max_records: int,
        within_s: float,
    ) -> None:
        """Read and `process` batches of the owned partitions until cancelled. A batch is what
        the reader has fetched (up to `max_records`), or what arrives within `within_s`."""
        while True:
            await self._assigned.wait()
            async with self._lock:
                if not self._assigned.is_set():
                    continue  # released while this task waited for the lock
                records = await self._require().fetch(within_s, max_records)
                if records:
                    await process(records)

    async def lag(self, partitions: set[int], processed: Callable[[Partition], int | None]) -> int:
        """Records on `partitions` (assigned to this reader yet or not) past what `processed`
        says was done with: a batch read but stuck in processing counts as waiting."""
        reader = self._require()
        tps = self.partitions(partitions)
        if not tps:
            return 0
        ends = await reader.end_offsets(tps)
        starts = await reader.beginning_offsets(tps)
        return sum(max(0, ends[tp] - max(processed(tp) or 0, starts[tp])) for tp in tps)

    def _require(self) -> LogReader:
        if self._reader is None:
            raise ReaderNotStartedError("the reader is not started")
        return self._reader
