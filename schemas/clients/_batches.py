"""Records packed into Kafka record batches by partition: the one way rolltape's writers hand
many records to the client at once (the recorder's sender, the worker's outputs and states).

Why not a `send` per record: aiokafka then creates a future, calls its partitioner (murmur2,
pure Python) and looks up its accumulator for every record, which costs more than sealing one.
A writer groups its records by partition instead (keys placed as the Java client places them,
so every producer puts a session on the same partition) and fills record batches itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiokafka.partitioner import DefaultPartitioner

_partitioner = DefaultPartitioner()
_KEYS_KEPT = 100_000


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


def fill_batch(
    builder: Any,
    records: Sequence[tuple[bytes | None, bytes, Sequence[tuple[str, bytes]] | None]],
    start: int,
) -> int:
    """Append (key, value, headers) records from `start` to a batch builder until it is full;
    the index of the first record it did not take (`start`: one record over the batch size)."""
    end = start
    while end < len(records):
        key, value, headers = records[end]
        if builder.append(key=key, value=value, timestamp=None, headers=headers or []) is None:
            break
        end += 1
    return end
