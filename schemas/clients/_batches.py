"""Records packed into Kafka record batches by partition: the one way rolltape's writers hand
many records to the client at once (the recorder's sender, the worker's outputs and states).

Why not a `send` per record: aiokafka then creates a future, calls its partitioner (murmur2,
pure Python) and looks up its accumulator for every record, which costs more than sealing one.
A writer groups its records by partition instead (keys placed as the Java client places them,
so every producer puts a session on the same partition) and fills record batches itself.
"""

from __future__ import annotations

import time
from typing import Any

from aiokafka.partitioner import DefaultPartitioner, murmur2

from rolltape.schemas import _accel

_partitioner = DefaultPartitioner()
_KEYS_KEPT = 100_000


def key_partition(key: bytes, partitions: int) -> int:
    """The partition of `key` among a topic's `partitions` (numbered from 0), as the Java
    client and aiokafka place keyed records: murmur2, its sign bit cleared, modulo the count.
    Every process that must find a session's, a job's or a checkpoint log's partition without
    asking a producer computes it here."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


class KeyPartitions:
    """The partition of each (topic, key), as the Java client and aiokafka place keys (murmur2;
    a record without a key goes to a random partition), remembered: keys repeat, and a topic's
    partitions are asked of the producer once."""

    def __init__(self) -> None:
        self._topics: dict[str, list[int]] = {}
        self._keys: dict[tuple[str, bytes], int] = {}

    def known(self, topic: str, key: bytes) -> int | None:
        """The partition of a key placed before, without a coroutine (the common case: a
        writer's records keep coming from the same sessions)."""
        return self._keys.get((topic, key))

    async def of(self, producer: Any, topic: str, key: bytes | None) -> int:
        """The partition; the producer's metadata errors (the broker is away) pass through."""
        if key is not None and (known := self.known(topic, key)) is not None:
            return known
        partitions = self._topics.get(topic)
        if partitions is None:
            partitions = self._topics[topic] = sorted(await producer.partitions_for(topic))
        partition = int(_partitioner(key, partitions, partitions))
        if key is not None:
            if len(self._keys) > _KEYS_KEPT:
                self._keys.clear()
            self._keys[(topic, key)] = partition
        return partition


class RecordBatch:
    """A record batch the native core writes (`schemas/native/src/batch.rs`) when the client
    takes it to send: what `AIOKafkaProducer.send_batch` takes, in place of the client's own
    builder. Its records are decided when it is made (`fill_batch`); the idempotent producer's
    state, which the CRC covers, is set by the client just before it is built."""

    def __init__(self, records: list[Any], size: int, *, transactional: bool) -> None:
        self._records = records
        self._count = len(records)
        self._size = size
        self._transactional = transactional
        # One timestamp for the batch (the topics take the broker's append time anyway).
        self._timestamp_ms = int(time.time() * 1000)
        self._state = (-1, -1, 0)  # as the client's builder starts: no producer id yet
        self._buffer: bytes | None = None

    def append(self, **_: Any) -> None:
        """Full: a batch's records are decided when it is made."""
        return None

    def close(self) -> None:
        """Always closed (see append)."""

    def closed(self) -> bool:
        return True

    def record_count(self) -> int:
        return self._count

    def size(self) -> int:
        return self._size

    def _set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int
    ) -> None:
        self._state = (producer_id, producer_epoch, base_sequence)

    def _build(self) -> bytes:
        if self._buffer is None:
            assert _accel.native is not None
            built = _accel.native.record_batch(
                self._records, self._size, self._timestamp_ms, *self._state, self._transactional
            )
            if built is None:  # batch_fit took these records; nothing changed them since
                raise AssertionError("the native core refused a batch it had sized")
            self._buffer = built
            self._records = []
        return self._buffer


def fill_batch(producer: Any, records: list[Any], start: int) -> tuple[Any, int]:
    """A batch of `records` from `start` for `producer.send_batch`, and the index of the first
    record it did not take. Records are the writers' own tuples, `(topic, key, value)` or
    `(topic, key, value, headers)`; a batch takes the first record whatever its size (the broker
    says why if it is too large), then each one while it stays below the producer's batch size.

    The native core writes the batch when the client sends it (about a sixth of the recorder's
    sender CPU per event went to the client's builder, called once per record); without it, or
    for records it does not take (a key or value that is not bytes), the client's builder."""
    limit = int(producer._message_accumulator._batch_size)  # the client keeps it nowhere public
    txn = getattr(producer, "_txn_manager", None)
    transactional = txn is not None and txn.transactional_id is not None
    native = _accel.native
    fit = None if native is None else native.batch_fit(records, start, limit)
    if fit is not None:
        end, size = fit
        return RecordBatch(records[start:end], size, transactional=transactional), end
    builder = producer.create_batch()
    end = start
    while end < len(records):
        key, value = records[end][1], records[end][2]
        headers = records[end][3] if len(records[end]) > 3 else None
        if builder.append(key=key, value=value, timestamp=None, headers=headers or []) is None:
            break
        end += 1
    return builder, end
