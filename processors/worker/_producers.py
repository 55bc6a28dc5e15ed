"""The worker's outputs leave under two identities: the processor's and the judge's.

Why two producers: topics are trust domains. In a cluster with ACLs the processor principal may
write rules, filtered, dead letters and its internal topics, and only the judge principal may
write verdicts (and the LLM judges' own conversations on the events topic). The worker runs both
roles, so each record goes out on the producer of the role that owns its topic. Both are
idempotent with acks=all; each topic is written by exactly one of them, so per-partition order
holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer

from rolltape.schemas import Stream, topic_name
from rolltape.schemas.clients import KafkaConnection, KeyPartitions, fill_batch

OutgoingRecord = tuple[str, bytes | None, bytes, list[tuple[str, bytes]] | None]
"""(topic, key, value, headers) of one record to send."""


class OutputProducer:
    """`send` routes by topic: `judge_topics` to the judge's producer (when there is one)."""

    def __init__(
        self,
        processor: AIOKafkaProducer,
        judge: AIOKafkaProducer | None,
        *,
        judge_topics: Collection[str] = (),
    ) -> None:
        self._processor = processor
        self._judge = judge
        self._judge_topics = frozenset(judge_topics)
        self._placement = KeyPartitions()

    @classmethod
    def for_roles(
        cls,
        processor: KafkaConnection,
        judge: KafkaConnection | None,
        topic_prefix: str,
        make: Callable[[KafkaConnection], AIOKafkaProducer],
    ) -> OutputProducer:
        """The processor's producer, plus the judge's for verdicts and the judges' own
        conversations when the judge authenticates as someone else. `make` builds a producer
        with the caller's settings (the worker's, replay's)."""
        return cls(
            make(processor),
            make(judge) if judge is not None and judge != processor else None,
            judge_topics=(
                topic_name(Stream.VERDICTS, topic_prefix),
                topic_name(Stream.EVENTS, topic_prefix),
            ),
        )

    @property
    def _all(self) -> Sequence[AIOKafkaProducer]:
        return [self._processor] if self._judge is None else [self._processor, self._judge]

    async def start(self) -> None:
        for producer in self._all:
            await producer.start()

    async def stop(self) -> None:
        await asyncio.gather(*(p.stop() for p in self._all))

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self._all))

    async def send(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[Any]:
        """Hand the record over; the returned future resolves on acknowledgement."""
        producer = (
            self._judge
            if self._judge is not None and topic in self._judge_topics
            else self._processor
        )
        future: asyncio.Future[Any] = await producer.send(topic, value, key=key, headers=headers)
        return future

    def _producer_for(self, topic: str) -> AIOKafkaProducer:
        if self._judge is not None and topic in self._judge_topics:
            return self._judge
        return self._processor

    async def send_all(self, records: Sequence[OutgoingRecord]) -> None:
        """Send records in batches, one per partition (each partition's records in the order
        given; see `rolltape.schemas.fill_batch` for why), and wait until every batch is
        acknowledged."""
        groups: dict[tuple[str, int], list[OutgoingRecord]] = {}
        for record in records:
            topic = record[0]
            partition = await self._placement.of(self._producer_for(topic), topic, record[1])
            groups.setdefault((topic, partition), []).append(record)
        futures: list[asyncio.Future[Any]] = []
        for (topic, partition), group in groups.items():
            producer = self._producer_for(topic)
            start = 0
            while start < len(group):
                batch, start = fill_batch(producer, group, start)
                futures.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*futures)
