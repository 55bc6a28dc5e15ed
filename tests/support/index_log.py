"""A log of records made in memory, as the broker hands them to the indexer: chained envelopes
and raw records, offsets counted per partition (for the read model's tests)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rolltape.projections.index import Record
from rolltape.schemas import ChainWriter, Stream, topic_name

PRODUCER = {"name": "test", "version": "1", "principal": "agent"}


class Log:
    """Records as the broker would hand them over: one partition per topic, offsets counted."""

    def __init__(self, partitions: int = 1) -> None:
        self.writer: ChainWriter[tuple[str, str]] = ChainWriter()
        self.offsets: dict[tuple[str, int], int] = {}
        self.partitions = partitions
        self.clock_ms = 1_000
        """The broker's clock: one millisecond per record, across partitions."""

    def record(
        self,
        stream: Stream,
        sid: str,
        type_: str,
        payload: Mapping[str, Any],
        chain: str = "",
        principal: str | None = None,
    ) -> Record:
        """The next record of the chain (`stream`'s own unless named), by `principal` when
        given (a reviewer's records are theirs)."""
        chain = chain or stream.value
        value, _ = self.writer.append(
            (sid, chain),
            stream=chain,
            session_id=sid,
            ts_ns=1,
            type=type_,
            payload=payload,
            producer=PRODUCER if principal is None else {**PRODUCER, "principal": principal},
        )
        return self.raw(stream, sid.encode(), value)

    def raw(self, stream: Stream, key: bytes | None, value: bytes | None) -> Record:
        """A record on the partition its key's last byte chooses (all on 0 by default)."""
        topic = topic_name(stream)
        partition = (key[-1] if key else 0) % self.partitions
        offset = self.offsets.get((topic, partition), 0)
        self.offsets[(topic, partition)] = offset + 1
        self.clock_ms += 1
        return Record(stream, topic, partition, offset, key, value, self.clock_ms)
