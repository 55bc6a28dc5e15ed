"""The jobs topic: writing a key's next revision to its job's partition, reading it all back.

A job and its runs share the job's partition (the Kafka default partitioner's murmur2 of the job
id), so whoever owns the partition sees a job's definition and runs in one order. Records that
do not parse or whose hash does not match their content are skipped with a warning: the
scheduler may not write the dead-letter topic, and a forged job must never fire.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner
from pydantic import BaseModel

from rolltape.producers._errors import NotStartedError
from rolltape.producers.cron._book import JobBook
from rolltape.schemas import (
    ChainWriter,
    EnvelopeError,
    PayloadError,
    Stream,
    read_event,
    topic_name,
)
from rolltape.schemas.clients import (
    KafkaConnection,
    KafkaTopicError,
    KafkaUnavailableError,
    kafka_errors,
)

_log = logging.getLogger("rolltape.producers.cron")
_partitioner = DefaultPartitioner()


def instance_name() -> str:
    """This process, as `fired_by` names it: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def fold_record(book: JobBook, value: bytes | None, where: str) -> bool:
    """Apply one record to the book; a record that is not a sound job or run is skipped."""
    if value is None:
        return False
    try:
        envelope = read_event(value)
        if not envelope.intact:
            raise EnvelopeError("its hash does not match its content")
        if envelope.stream != Stream.JOBS.value:
            raise EnvelopeError(f"it belongs to stream {envelope.stream!r}")
        return book.apply(envelope)
    except (EnvelopeError, PayloadError, ValueError) as exc:
        _log.warning("skipped the record at %s: %s", where, exc)
        return False


class JobsLog:
    """Writes revisions of jobs and runs. One per process; `start` before use."""

    def __init__(self, connection: KafkaConnection, *, prefix: str, principal: str) -> None:
        from rolltape.producers import __version__

        self.topic = topic_name(Stream.JOBS, prefix)
        self._connection = connection
        self._producer: AIOKafkaProducer | None = None
        self._producer_info = {
            "name": "rolltape.producers.cron",
            "version": __version__,
            "principal": connection.principal or principal,
        }
        self._partitions: list[int] = []

    async def start(self) -> None:
        # aiokafka clients bind to the running loop: built here, not in __init__.
        # Each revision is awaited alone (linger 0); a job's definition is small (1 MiB).
        producer = self._connection.chain_producer(linger_ms=0, max_request_size=1 << 20)
        with kafka_errors(f"starting the jobs log's producer on {self._connection}"):
            try:
                await producer.start()
                partitions = await producer.partitions_for(self.topic)
            except BaseException:
                # A producer that failed to start still holds connections: stop it too.
                with contextlib.suppress(Exception):
                    await producer.stop()
                raise
        if not partitions:
            await producer.stop()
            raise KafkaTopicError(_missing(self.topic))
        self._producer = producer
        self._partitions = sorted(partitions)

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    @property
    def producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise NotStartedError("the jobs log is not started: call JobsLog.start() first")
        return self._producer

    def partition_of(self, job_id: str) -> int:
        return int(_partitioner(job_id.encode(), self._partitions, self._partitions))

    async def write(self, book: JobBook, key: str, job_id: str, payload: BaseModel) -> None:
        """Append the next revision of `key` (linked to the book's head of it), wait for the
        broker's acknowledgement, and fold it into the book."""
        head = book.heads.get(key)
        writer: ChainWriter[str] = ChainWriter()
        if head is not None:  # the book holds each key's last revision
            writer.take_over(key, head.seq + 1, head.hash)
        record, _ = writer.append(
            key,
            stream=Stream.JOBS.value,
            session_id=key,
            ts_ns=time.time_ns(),
            type="cron_job" if key == job_id else "cron_run",
            payload=payload.model_dump(mode="json"),
            producer=self._producer_info,
        )
        with kafka_errors(f"writing {key} to {self.topic}"):
            await self.producer.send_and_wait(
                self.topic, record, key=key.encode(), partition=self.partition_of(job_id)
            )
        fold_record(book, record, f"{self.topic} (own write)")

    async def flush(self) -> None:
        await self.producer.flush()


def _missing(topic: str) -> str:
    return f"the topic {topic} does not exist: `rolltape broker up` creates it"


async def read_book(
    connection: KafkaConnection, *, prefix: str, timeout_s: float = 30.0
) -> JobBook:
    """Every job and run the topic holds, read from its start to its current end."""
    topic = topic_name(Stream.JOBS, prefix)
    consumer = connection.consumer(enable_auto_commit=False, auto_offset_reset="earliest")
    async with connection.started(consumer, f"reading {topic} on {connection}"):
        partitions = consumer.partitions_for_topic(topic) or await _partitions(consumer, topic)
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        book = JobBook()
        await read_to_end(consumer, tps, book, timeout_s)
        return book


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    await consumer._client.force_metadata_update()
    partitions = consumer.partitions_for_topic(topic)
    if not partitions:
        raise KafkaTopicError(_missing(topic))
    return set(partitions)


async def read_to_end(
    consumer: AIOKafkaConsumer, tps: list[TopicPartition], book: JobBook, timeout_s: float
) -> None:
    """Fold `tps` from their beginning to the end offsets they have now."""
    ends = await consumer.end_offsets(tps)
    await consumer.seek_to_beginning(*tps)
    waiting = {tp for tp in tps if ends[tp] > 0}
    deadline = time.monotonic() + timeout_s
    while waiting:
        if time.monotonic() > deadline:
            raise KafkaUnavailableError(
                f"reading the jobs topic took over {timeout_s:.0f} s; {KafkaUnavailableError.advice}"
            )
        batch = await consumer.getmany(*waiting, timeout_ms=200, max_records=10_000)
        for tp, messages in batch.items():
            for message in messages:
                fold_record(book, message.value, f"{tp.topic}[{tp.partition}]@{message.offset}")
        for tp in list(waiting):
            if await consumer.position(tp) >= ends[tp]:
                waiting.discard(tp)
