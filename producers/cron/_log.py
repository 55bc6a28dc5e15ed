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
    LogReader,
    LogStalledError,
    Partition,
    Producer,
    kafka_errors,
    key_partition,
    partitions_of,
)

_log = logging.getLogger("rolltape.producers.cron")


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
        self._producer: Producer | None = None
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
    def producer(self) -> Producer:
        if self._producer is None:
            raise NotStartedError("the jobs log is not started: call JobsLog.start() first")
        return self._producer

    def partition_of(self, job_id: str) -> int:
        return self._partitions[key_partition(job_id.encode(), len(self._partitions))]

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
    """Every job and run the topic holds, read from its start to its current end;
    KafkaUnavailableError when the read makes no progress for `timeout_s`."""
    topic = topic_name(Stream.JOBS, prefix)
    partitions = await partitions_of(connection, [topic])
    if not partitions:
        raise KafkaTopicError(_missing(topic))
    async with LogReader(connection) as reader:
        reader.assign(partitions)
        book = JobBook()
        await read_to_end(reader, partitions, book, timeout_s)
        return book


async def read_to_end(
    reader: LogReader, partitions: list[Partition], book: JobBook, timeout_s: float
) -> None:
    """Fold `partitions` from their beginning to the end offsets they have now."""
    await reader.seek_to_beginning(*partitions)
    try:
        async for batch in reader.read_to_end(partitions, stall_s=timeout_s, max_records=10_000):
            for m in batch:
                fold_record(
                    book, m.value, f"{m.partition.topic}[{m.partition.partition}]@{m.offset}"
                )
    except LogStalledError as exc:
        raise KafkaUnavailableError(
            f"reading the jobs topic made no progress for {timeout_s:.0f} s; "
            f"{KafkaUnavailableError.advice}"
        ) from exc
