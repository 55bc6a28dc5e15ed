"""Where the worker keeps session states and read positions: a key-value store whose writes are
durable once `commit` returns.

Invariant: after `commit()` returns, every `put` before it is durable, and puts to one partition
of the store become durable in the order they were made (the shell writes a batch's read
positions after its states, so a position that survived means the states before it did).

Why a port and not faust's table as a mapping: setting a key of a faust table sends one
changelog record through faust's producer buffer (a future, a pending message and a flush that
gives up after 0.1 s), and a worker on many concurrent sessions saves hundreds of states a batch.
`ChangelogTable` keeps faust's table (its changelog topic, its recovery on rebalance) and writes
a batch's records to the changelog in one record batch per partition instead. `MemoryStates` is
the same contract over a dict, for tests and tools that run the shell without Kafka.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from rolltape.processors.worker._producers import OutgoingRecord, OutputProducer


class StateStore(Protocol):
    """Session id bytes (and position keys) -> stored bytes."""

    def get(self, key: bytes) -> bytes | None:
        """The value last put (or restored), None for a key never written."""
        ...

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every key and value held (a recovery reads them all)."""
        ...

    def put(self, key: bytes, value: bytes) -> None:
        """Set `key`: readable at once, durable after the next `commit`."""
        ...

    async def commit(self) -> None:
        """Until every put so far is durable; a KafkaError leaves them to the next commit."""
        ...


class MemoryStates:
    """The store as a dict: durable as soon as it is set (no Kafka)."""

    def __init__(self, data: dict[bytes, bytes] | None = None) -> None:
        self.data: dict[bytes, bytes] = {} if data is None else data

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(list(self.data.items()))

    def put(self, key: bytes, value: bytes) -> None:
        self.data[key] = value

    async def commit(self) -> None:
        return None


class ChangelogTable:
    """A faust table (raw bytes keys and values) written by the worker's own producer: a put
    sets the table's local store and queues the changelog record; `commit` sends the queued
    records in one batch per changelog partition (placed by key, as faust places them) and waits
    for the broker's acknowledgements. faust restores the table from the changelog on every
    assignment, as before."""

    def __init__(self, table: Any, producer: OutputProducer) -> None:
        self._table = table
        self._producer = producer
        self._topic: str = table.changelog_topic.get_topic_name()
        self._pending: list[OutgoingRecord] = []

    def get(self, key: bytes) -> bytes | None:
        value = self._table.get(key)
        return None if value is None else bytes(value)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return iter([(bytes(k), bytes(v)) for k, v in self._table.items() if v is not None])

    def put(self, key: bytes, value: bytes) -> None:
        self._table.data[key] = value  # the local store only: the changelog record is queued
        self._pending.append((self._topic, key, value, None))

    async def commit(self) -> None:
        # A failed send raises with the records still queued: the caller's retry sends them.
        while self._pending:
            records = list(self._pending)
            await self._producer.send_all(records)
            del self._pending[: len(records)]
