"""The recorder's background half: chain, seal, batch and send, or spool while the broker is away.

It runs in its own thread with its own asyncio loop, so sync and async agents alike only pay for
a deque append. Two coroutines share the loop:

- the *chainer* takes queued events in order, validates payloads, assigns seq and prev_hash per
  (stream, session) chain and seals records; sealed records go to the outbox, or to the spool
  once the broker has stopped acknowledging (spool mode);
- the *feeder* packs outbox records into one record batch per partition and hands them to an
  idempotent aiokafka producer (acks=all); when nothing is in flight it drains the spool in order,
  then returns to direct mode.

Order per session holds because records of one session share a key, hence a partition, batches
of a partition are appended in order, and the spool is drained only after every earlier record
was acknowledged. The idempotent producer retries in-flight batches across a broker restart
without duplicating them (aiokafka never expires idempotent batches).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import TopicAuthorizationFailedError
from pydantic import ValidationError

from rolltape.producers._client_log import keep_client_logs_in
from rolltape.producers._errors import (
    ChainConflictError,
    RejectedEvent,
    ResumeError,
    SpoolFullError,
)
from rolltape.producers._resume import first_record_from, read_head
from rolltape.producers._spool import Spool, SpooledRecord
from rolltape.schemas import (
    CONTENT_FIELDS,
    PAYLOAD_MODELS,
    CanonicalEncodingError,
    ChainWriter,
    ProducerInfo,
    Stream,
    topic_name,
)
from rolltape.schemas.clients import KafkaConnection, KeyPartitions, fill_batch

log = logging.getLogger("rolltape.producers")

#: (session_id, stream, type, payload, ts_ns); on the blobs stream (record key, "blobs", "blob",
#: {"value": the record's bytes}, ts_ns): a chunk that travels (and spools) like an event,
#: unchained.
QueuedEvent = tuple[str, str, str, dict[str, Any], int]
_BLOBS = Stream.BLOBS.value
_KEYS = Stream.KEYS.value
_EVENTS = Stream.EVENTS.value
#: (topic, key, value)
Record = tuple[str, bytes, bytes]


class Barrier:
    """Queued like an event; resolves once everything queued before it is acknowledged or spooled."""

    def __init__(self) -> None:
        self.future: concurrent.futures.Future[None] = concurrent.futures.Future()


@dataclass
class SenderStats:
    """The counters behind a flush result: sealed - acked - spooled is what is still in flight.
    Only the sender side writes them (the sharded sender as sums over its shards); recording
    threads read them without a lock. `rejected_events` accumulate until a flush raises them."""

    sealed: int = 0
    acked: int = 0
    spooled: int = 0
    rejected: int = 0
    mode: str = "direct"
    rejected_events: list[RejectedEvent] = field(default_factory=list)


@dataclass
class SenderConfig:
    """What a sender needs to run, built once by the Recorder. Kept picklable: the sharded
    sender sends it to each sender process as is."""

    connection: KafkaConnection | None
    topic_prefix: str
    producer_info: dict[str, str]
    spool_dir: Path
    spool_max_bytes: int
    spool_after_s: float = 2.0
    """How long without an acknowledgement, with records waiting, before new records spool."""
    batch_window_s: float = 0.02
    """How long events gather in the queue before the chainer seals them as one batch: while
    recording goes on, the chainer wakes on this timer and record calls never pay for waking
    it (see Sender._chainer). Flush and close cut a window short; 0 seals at once."""
    outbox_limit: int = 20_000
    """Sealed records waiting for the producer; past it the chainer pauses (the queue absorbs)."""
    max_record_bytes: int = 1_000_000
    linger_ms: int = 5
    max_batch_bytes: int = 1_048_000
    chain_batch: int = 2_000
    send_chunk: int = 5_000


_Outgoing = Record | Barrier


class _InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs what the sender's loop hands to an executor (aiokafka's SASL steps, DNS lookups) on
    the sender thread itself. The process-wide thread pools refuse work once the interpreter
    is shutting down, which is exactly when the recorder's exit hook must still connect and
    flush; the work is a few milliseconds per connection, on the sender's thread, never the
    agent's."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the awaiting coroutine, as a pool would
            future.set_exception(exc)
        return future


def _withheld(event_type: str, payload: Any, exc: Exception) -> tuple[Any, str]:
    """A refused event of a session whose content is sealed, as the rejected file may keep it:
    its structure without its content fields, and why without the values pydantic quotes."""
    content = CONTENT_FIELDS[event_type]
    if isinstance(payload, Mapping):
        payload = {k: v for k, v in payload.items() if k not in content}
    if isinstance(exc, ValidationError):
        why = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        )
    else:
        why = type(exc).__name__
    return payload, f"{why} (content withheld: the session's content is sealed)"


class Sender:
    """Owns the background thread. `wake`, `stop` and the fields are used from recording threads."""

    def __init__(
        self, config: SenderConfig, queue: collections.deque[QueuedEvent | Barrier]
    ) -> None:
        # Checked once here so that seal can write it as is on every record.
        config.producer_info = ProducerInfo.model_validate(config.producer_info).model_dump()
        self.config = config
        self.queue = queue
        self.stats = SenderStats()
        self.error: BaseException | None = None
        """A condition the hot path must raise (spool full); cleared when it passes."""
        self.idle = False
        self.stop_grace_s = 10.0
        self._loop = asyncio.new_event_loop()
        self._loop.set_default_executor(_InlineExecutor())
        self._wake = asyncio.Event()
        self._feed = asyncio.Event()
        self._writer: ChainWriter[tuple[str, str]] = ChainWriter(
            max_record_bytes=config.max_record_bytes
        )
        """(stream, session id) -> the chain's head, for the chains this recorder writes."""
        self._outbox: collections.deque[_Outgoing] = collections.deque()
        # Sealed records that did not fit in a full spool; always newer than everything spooled.
        self._overflow: collections.deque[Record] = collections.deque()
        # In-flight batches by future, with their records in send order: on a stop with the
        # broker away they are spooled (a possible duplicate, dropped downstream by event id,
        # beats a loss).
        self._inflight: dict[asyncio.Future[Any], list[Record]] = {}
        self._placement = KeyPartitions()
        self._content_keys: dict[str, Any] = {}
        """Session id -> the data key its content is sealed under (sessions naming a subject)."""
        self._topics = {s.value: topic_name(s, config.topic_prefix) for s in Stream}
        self._last_progress = time.monotonic()
        self._spool_mode = False
        self._stopping = False
        self._stop_started: float | None = None
        self._producer: AIOKafkaProducer | None = None
        self._feeder_task: asyncio.Task[None]
        self.spool = Spool(config.spool_dir, config.spool_max_bytes)
        self.client_log = keep_client_logs_in(config.spool_dir)
        self._spooled_before_outage = 0
        self._outage_started = time.monotonic()
        self.rejected_path = config.spool_dir / "rejected.jsonl"
        self._thread = threading.Thread(target=self._run, name="rolltape-sender", daemon=True)
        self._done = threading.Event()
        self._thread.start()

    # -- called from recording threads --------------------------------------------------------
    def wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # loop already closed: nothing left to wake
            self._loop.call_soon_threadsafe(self._wake.set)

    def stop(self, timeout_s: float) -> None:
        """Seal what is queued, give in-flight records `timeout_s` to be acknowledged, spool the
        rest, and end the thread."""

        def begin() -> None:
            self._stopping = True
            self._wake.set()
            self._feed.set()

        self.stop_grace_s = timeout_s
        if not self._done.is_set():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(begin)
            self._thread.join(timeout_s + 30)

    def spool_pending(self) -> bool:
        """Records wait in the spool (or its overflow) for the broker."""
        return not self.spool.empty or bool(self._overflow)

    @property
    def holds_unspooled(self) -> bool:
        """Sealed records are held in memory because the spool is full (a barrier settled
        meanwhile does not make them durable)."""
        return bool(self._overflow)

    def resume(
        self,
        stream: str,
        session_id: str,
        first: tuple[str, dict[str, Any]] | None,
        writer: str,
        timeout_s: float,
        data_key: dict[str, Any] | None = None,
    ) -> int:
        """Take over the chain of (`stream`, `session_id`) from its head in the log: append
        `first` when the chain has no record yet (if given), else a `session_resumed` record, and
        make sure it stands (see _resume.py). With `data_key` (a session naming a subject), the
        session's content is sealed under it from then on, and its wrapped record is on the keys
        topic before the takeover's record. Blocks the calling thread; returns the seq of the
        next record this recorder will seal on the chain."""
        if self._done.is_set():
            raise ResumeError("the recorder is closed; create a new Recorder")
        future = asyncio.run_coroutine_threadsafe(
            self._resume(stream, session_id, first, writer, time.monotonic() + timeout_s, data_key),
            self._loop,
        )
        try:
            return future.result(timeout_s + 10)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise ResumeError(f"resuming {session_id} took over {timeout_s:.0f}s") from exc

    async def _resume(
        self,
        stream: str,
        session_id: str,
        first: tuple[str, dict[str, Any]] | None,
        writer: str,
        deadline: float,
        data_key: dict[str, Any] | None = None,
    ) -> int:
        chain = (stream, session_id)
        if chain in self._writer.heads:  # this recorder is its writer already
            if data_key is not None and session_id not in self._content_keys:
                raise ResumeError(
                    f"this recorder is recording {session_id} without a subject; resume it with "
                    "a subject from another recorder, or record a new session"
                )
            return self._writer.head(chain)[0]
        connection = self.config.connection
        if connection is None:
            raise ResumeError(
                "resume reads the session's head from the broker, and this recorder has no "
                "broker configured (ROLLTAPE_BOOTSTRAP)"
            )
        # The head in the log is the head only once this machine's spool has been delivered:
        # it may hold the end of the very chain (a restart after an outage).
        while self._producer is None or not self.spool.empty or self._overflow:
            if time.monotonic() > deadline:
                raise ResumeError(
                    f"cannot resume {session_id}: the broker at {connection} has not taken "
                    f"this machine's spooled records yet ({self.spool.directory}); the head of "
                    "the chain may be among them. Resume once the broker is back."
                )
            await asyncio.sleep(0.05)
        producer = self._producer
        topic = self._topics[stream]
        key = session_id.encode()
        tp = TopicPartition(topic, await self._placement.of(producer, topic, key))
        # Published for the seal below; withdrawn unless the takeover is confirmed (a timeout or
        # a cancel must not leave a chain a retry would take as this recorder's own).
        taken = False
        try:
            consumer = connection.consumer(enable_auto_commit=False, client_id="rolltape-resume")
            await consumer.start()
            try:
                consumer.assign([tp])
                head = await read_head(consumer, tp, session_id, stream, deadline)
                if head.ended:
                    raise ResumeError(
                        f"session {session_id} ended at seq {head.seq} on {stream}; record a new "
                        f"session linked to it (linked_session_id={session_id!r}) instead"
                    )
                if head.report is not None and not head.report.ok:
                    log.warning(
                        "resuming %s on %s from seq %d; its chain has breaks: %s",
                        session_id,
                        stream,
                        head.seq,
                        head.report.break_counts,
                    )
                if head.seq >= 0:
                    event_type, payload = (
                        "session_resumed",
                        {"writer": writer, "head_seq": head.seq},
                    )
                elif first is not None:
                    event_type, payload = first
                else:
                    return 0  # nothing to take over: the chain starts at its genesis
                if data_key is not None:  # the key first: its record, then the sealed ones
                    entry = self._seal((session_id, _KEYS, "data_key", data_key, time.time_ns()))
                    assert entry is not None  # a data key is never refused
                    try:
                        await producer.send_and_wait(entry[0], entry[2], key=entry[1])
                    except Exception as exc:
                        self._content_keys.pop(session_id, None)
                        raise ResumeError(
                            f"the broker did not take the data key of the resumed {session_id}: "
                            f"{exc!r}; resume again"
                        ) from exc
                self._writer.take_over(chain, head.seq + 1, head.hash)
                record = self._seal((session_id, stream, event_type, payload, time.time_ns()))
                if record is None:
                    raise ResumeError(f"the first record of the resumed {session_id} was rejected")
                try:
                    sent = await producer.send_and_wait(
                        topic, record[2], key=key, partition=tp.partition
                    )
                except Exception as exc:
                    raise ResumeError(
                        f"the broker did not take the record resuming {session_id}: {exc!r}; "
                        "resume again (a record that did land is set aside or becomes the head)"
                    ) from exc
                self.stats.acked += 1
                self._last_progress = time.monotonic()
                landed = await first_record_from(
                    consumer, tp, head.end_offset, sent.offset, session_id, deadline
                )
            finally:
                await consumer.stop()
            if landed != record[2]:
                raise ChainConflictError(
                    f"another writer appended to session {session_id} on {stream} while this "
                    "recorder took it over; its records stand and this one's are set aside by every "
                    "reader. Stop the other writer, or resume again to continue after its records."
                )
            taken = True
            return head.seq + 2
        finally:
            if not taken:
                self._writer.forget(chain)

    # -- the thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as exc:  # the thread must never die silently
            log.exception("rolltape sender crashed")
            self.error = exc
        finally:
            self._loop.close()
            self._done.set()

    async def _main(self) -> None:
        feeder = asyncio.create_task(self._feeder())
        self._feeder_task = feeder
        failure: BaseException | None = None
        leftover: list[_Outgoing] = []
        try:
            leftover = await self._chainer()
        finally:
            self._feed.set()
            try:
                await feeder
            except Exception as exc:  # kept for the hot path; the records are spooled below
                log.exception("rolltape sender's feeder crashed")
                failure = exc
            await self._shutdown(leftover)
            self.spool.close()
        if failure is not None:
            self.error = failure

    # -- chainer ---------------------------------------------------------------------------------
    async def _chainer(self) -> list[_Outgoing]:
        """Seal queued events until stopped; returns what it sealed after the feeder ended (the
        stop deadline passed with the broker slow or away), for the shutdown to spool."""
        queue = self.queue
        waited = False  # a window passed with the queue empty since the last batch
        while True:
            if self._feeder_task.done():
                return self._seal_rest()
            self._check_stall()
            window = self.config.batch_window_s
            blocked = len(self._outbox) > self.config.outbox_limit and not self._spool_mode
            if not queue or blocked:
                if self._stopping and not queue:
                    return []
                if window and not waited and not blocked and not self._stopping:
                    # Awake for one more window after a batch: while recording goes on, the next
                    # batch is taken on this timer, and no record call pays for a wake.
                    waited = True
                    await self._wait_window(window)
                    continue
                self.idle = True
                if not queue or blocked:
                    # Re-check after publishing idle: see Recorder._enqueue.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), 0.05)
                    self._wake.clear()
                self.idle = False
                if window and queue and not self._stopping and not isinstance(queue[-1], Barrier):
                    # Woken by the first record after a quiet spell: the caller is recording a
                    # burst (a model call's request and reply); take it as one batch, and keep
                    # off the interpreter while the caller works.
                    await self._wait_window(window)
                continue
            waited = False
            sealed: list[_Outgoing] = []
            for _ in range(min(len(queue), self.config.chain_batch)):
                item = queue.popleft()
                if isinstance(item, Barrier):
                    sealed.append(item)
                else:
                    record = self._seal(item)
                    if record is not None:
                        sealed.append(record)
            if self._spool_mode:
                self._to_spool(sealed)
            else:
                self._outbox.extend(sealed)
                self._feed.set()
            await asyncio.sleep(0)

    async def _wait_window(self, window: float) -> None:
        """Let events gather for `window` seconds; a wake (a flush, close) ends it."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), window)
        self._wake.clear()

    def _seal_rest(self) -> list[_Outgoing]:
        rest: list[_Outgoing] = []
        while self.queue:
            item = self.queue.popleft()
            if isinstance(item, Barrier):
                rest.append(item)
            elif (record := self._seal(item)) is not None:
                rest.append(record)
        return rest

    def _seal(self, item: QueuedEvent) -> Record | None:
        session_id, stream, event_type, payload, ts_ns = item
        if stream == _BLOBS:  # a chunk of a world's file: content-addressed, not chained
            self.stats.sealed += 1
            return self._topics[stream], session_id.encode(), payload["value"]
        if stream == _KEYS:  # a subject session's data key: kept to seal its content, and sent
            # wrapped (the record) to the keys topic, unchained, ahead of that content
            from rolltape.schemas.privacy import ContentKey  # the crypto library, when needed

            key_id = payload["key_id"]
            self._content_keys[session_id] = ContentKey(key_id, payload["secret"])
            self.stats.sealed += 1
            return self._topics[stream], f"{session_id}/{key_id}".encode(), payload["value"]
        key = (stream, session_id)
        content_key = self._content_keys.get(session_id) if self._content_keys else None
        try:
            model = PAYLOAD_MODELS.get(event_type)
            if model is None:
                raise ValueError(f"unknown event type {event_type!r}")
            record, _ = self._writer.append_payload(
                key,
                stream=stream,
                session_id=session_id,
                ts_ns=ts_ns,
                type=event_type,
                model=model,
                payload=payload,
                producer=self.config.producer_info,
                content_key=content_key if event_type in CONTENT_FIELDS else None,
            )
        except (ValidationError, CanonicalEncodingError, ValueError) as exc:
            if content_key is not None and event_type in CONTENT_FIELDS:
                # rejected.jsonl is on disk and out of erasure's reach: no content in it
                self._reject(session_id, stream, event_type, *_withheld(event_type, payload, exc))
            else:
                self._reject(session_id, stream, event_type, payload, str(exc))
            return None
        if event_type == "session_ended":
            self._writer.forget(key)  # that chain is closed; the session's others may go on
            if stream == _EVENTS:
                self._content_keys.pop(session_id, None)  # its content is all sealed
        self.stats.sealed += 1
        return self._topics[stream], session_id.encode(), record

    def _reject(
        self, session_id: str, stream: str, event_type: str, payload: Any, reason: str
    ) -> None:
        event = RejectedEvent.of(session_id, stream, event_type, payload, reason)
        self.stats.rejected += 1
        self.stats.rejected_events.append(event)
        with open(self.rejected_path, "ab") as f:  # nothing handed to us is silently dropped
            f.write(event.model_dump_json().encode() + b"\n")

    def _reject_record(self, record: Record, reason: str) -> None:
        envelope = orjson.loads(record[2])
        self._reject(
            record[1].decode(),
            envelope.get("stream", record[0]),
            envelope.get("type", "?"),
            envelope,
            reason,
        )

    def _check_stall(self) -> None:
        """Enter spool mode when records wait and the broker has not made progress for a while."""
        if self._spool_mode:
            return
        waiting = bool(self._inflight or self._outbox or (self._producer is None and self.queue))
        now = time.monotonic()
        if not waiting:
            # Nothing owed to the broker: an idle spell is not an outage.
            self._last_progress = now
            return
        if self.config.connection is None:
            log.info("no broker configured; recording to the spool at %s", self.spool.directory)
        elif now - self._last_progress > self.config.spool_after_s:
            # One line for the whole outage (the client's own lines go to the debug log).
            log.warning(
                "rolltape: the broker at %s has not acknowledged for %.1fs; spooling records to "
                "%s until it is back (client details: %s)",
                self.config.connection,
                now - self._last_progress,
                self.spool.directory,
                self.client_log,
            )
        else:
            return
        self._spooled_before_outage = self.stats.spooled
        self._outage_started = now
        self._spool_mode = True
        self.stats.mode = "spool"
        pending = list(self._outbox)
        self._outbox.clear()
        self._to_spool(pending)

    def _to_spool(self, items: list[_Outgoing]) -> None:
        records: list[SpooledRecord] = []
        for item in items:
            if isinstance(item, Barrier):
                self._spool_records(records)
                records = []
                self.spool.sync()
                self._settle_barrier(item)
            else:
                records.append(item)
        self._spool_records(records)

    def _spool_records(self, records: list[SpooledRecord]) -> None:
        if not records:
            return
        if self._overflow or not self.spool.has_room(sum(len(r[2]) + 64 for r in records)):
            # Keep them in memory behind everything spooled, and refuse new events meanwhile.
            self._overflow.extend(records)
            self.error = SpoolFullError(
                f"the spool in {self.spool.directory} holds {self.spool.unread_bytes} bytes, its "
                f"limit (ROLLTAPE_SPOOL_MAX_BYTES={self.spool.max_bytes}); the broker at "
                f"{self.config.connection} has not acknowledged for "
                f"{time.monotonic() - self._last_progress:.0f}s. Restore the broker or raise "
                "the limit; the events recorded so far are kept."
            )
            return
        self.spool.append(records)
        self.stats.spooled += len(records)
        self._feed.set()

    def _refill_spool(self) -> None:
        """Move overflow into the spool as room appears; lift the error once it all fits."""
        moved = 0
        while self._overflow and self.spool.has_room(len(self._overflow[0][2]) + 64):
            self.spool.append([self._overflow.popleft()])
            moved += 1
        self.stats.spooled += moved
        if not self._overflow and isinstance(self.error, SpoolFullError):
            self.error = None

    def _settle_barrier(self, barrier: Barrier) -> None:
        pending = list(self._inflight)

        async def settle() -> None:
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            if not barrier.future.done():
                barrier.future.set_result(None)

        self._loop.create_task(settle())

    # -- feeder ----------------------------------------------------------------------------------
    async def _start_producer(self) -> bool:
        if self.config.connection is None:
            return False
        producer = self.config.connection.chain_producer(
            linger_ms=self.config.linger_ms,
            max_batch_size=self.config.max_batch_bytes,
            max_request_size=self.config.max_batch_bytes + 64 * 1024,
            request_timeout_ms=30_000,
            retry_backoff_ms=200,
            client_id="rolltape-recorder",
        )
        try:
            await producer.start()
        except Exception as exc:  # connection refused, DNS: retried until the broker is back
            log.info("broker at %s not reachable yet: %s", self.config.connection, exc)
            with contextlib.suppress(Exception):
                await producer.stop()
            return False
        self._producer = producer
        return True

    async def _feeder(self) -> None:
        backoff = 0.2
        while True:
            if self._stopping and self._stop_deadline_passed():
                break
            if self._producer is None:
                if (
                    self._stopping
                    and not self._outbox
                    and (self.spool.empty or self.config.connection is None)
                ):
                    break
                if not await self._start_producer():
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                    self._check_stall()
                    continue
            if self._outbox:
                await self._send_outbox()
                continue
            if not self.spool.empty and not self._inflight:
                await self._drain_spool_chunk()
                continue
            if self._spool_mode and self.spool.empty and not self._inflight and self._overflow:
                self._refill_spool()
                continue
            if self._spool_mode and self.spool.empty and not self._inflight:
                self._spool_mode = False
                self.stats.mode = "direct"
                if isinstance(self.error, SpoolFullError):
                    self.error = None
                if self.config.connection is not None:
                    log.warning(
                        "rolltape: the broker is back; %d spooled records delivered after %.0fs, "
                        "recording directly again",
                        self.stats.spooled - self._spooled_before_outage,
                        time.monotonic() - self._outage_started,
                    )
                continue
            if self._stopping and not self._inflight and not self.queue:
                break
            self._feed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._feed.wait(), 0.1)

    def _stop_deadline_passed(self) -> bool:
        if self._stop_started is None:
            self._stop_started = time.monotonic()
        return time.monotonic() - self._stop_started > self.stop_grace_s

    async def _shutdown(self, leftover: list[_Outgoing]) -> None:
        """Spool whatever the broker has not acknowledged, oldest first, so the next recorder on
        this spool folder delivers it in order (unacknowledged may mean delivered: a possible
        duplicate, dropped downstream by event id, beats a loss)."""
        unacked = [r for f, records in self._inflight.items() if not f.done() for r in records]
        waiting = [*self._outbox, *self._overflow, *leftover]
        records = [*unacked, *(i for i in waiting if not isinstance(i, Barrier))]
        if records:
            log.warning(
                "stopping with %d records unacknowledged; they stay in the spool at %s",
                len(records),
                self.spool.directory,
            )
            self.spool.append(records)
            self.spool.sync()
            self.stats.spooled += len(records)
        for item in waiting:
            if isinstance(item, Barrier) and not item.future.done():
                item.future.set_result(None)
        self._outbox.clear()
        self._overflow.clear()
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._producer.stop(), 5)

    async def _send_outbox(self) -> None:
        records: list[Record] = []
        while self._outbox and len(records) < self.config.send_chunk:
            item = self._outbox.popleft()
            if isinstance(item, Barrier):
                if records:
                    self._outbox.appendleft(item)
                    break
                self._settle_barrier(item)
                continue
            records.append(item)
        if records:
            unsent = await self._send_records(records)
            self._outbox.extendleft(reversed(unsent))

    async def _send_records(self, records: list[Record]) -> list[Record]:
        """Pack records into one batch per partition and hand them over in order.

        Returns the records the producer did not take (buffer full for request_timeout: the
        broker is away); the caller keeps them, in order, ahead of anything newer.
        """
        producer = self._producer
        assert producer is not None
        groups: dict[tuple[str, int], list[Record]] = {}
        known = self._placement.known
        try:
            for record in records:
                partition = known(record[0], record[1])
                if partition is not None:
                    groups.setdefault((record[0], partition), []).append(record)
                    continue
                try:
                    tp = (record[0], await self._placement.of(producer, record[0], record[1]))
                except TopicAuthorizationFailedError:
                    # Not an outage: this principal may not write that trust domain. Retrying
                    # would spool forever; say so on the record instead.
                    self._reject_record(record, self._unauthorized(record[0]))
                    continue
                groups.setdefault(tp, []).append(record)
        except Exception as exc:  # metadata unavailable: the broker is away
            log.info("no partition metadata yet (%r)", exc)
            return records
        ordered = list(groups.items())
        for index, ((topic, partition), group) in enumerate(ordered):
            start = 0
            while start < len(group):
                batch, end = fill_batch(producer, group, start)
                try:
                    fut = await producer.send_batch(batch, topic, partition=partition)
                except Exception as exc:
                    log.info("the producer did not take a batch (%r); will retry", exc)
                    rest = group[start:] + [r for _, g in ordered[index + 1 :] for r in g]
                    return rest
                self._inflight[fut] = group[start:end]
                fut.add_done_callback(self._acked)
                start = end
        return []

    def _unauthorized(self, topic: str) -> str:
        who = self.config.connection.principal if self.config.connection else None
        return (
            f"the broker does not let {who or 'this client'} write {topic} "
            "(TopicAuthorizationFailed): each principal writes only its own trust domain; record "
            "this stream with a recorder of the principal that owns it (e.g. the monitor's for "
            "metrics: rolltape.infra.open_monitor_recorder())"
        )

    def _acked(self, fut: asyncio.Future[Any]) -> None:
        records = self._inflight.pop(fut, [])
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is None:
            self.stats.acked += len(records)
            self._last_progress = time.monotonic()
            return
        # Not retriable (the idempotent producer retries everything else): keep the records.
        log.error("the broker refused %d record(s): %r", len(records), exc)
        for record in records:
            if isinstance(exc, TopicAuthorizationFailedError):
                self._reject_record(record, self._unauthorized(record[0]))
            else:
                self._reject_record(record, f"broker refused the record: {exc!r}")

    async def _drain_spool_chunk(self) -> None:
        records, token = self.spool.read(self.config.send_chunk)
        if not records:
            self.spool.commit(token)
            return
        unsent = await self._send_records(records)
        futures = list(self._inflight)
        results = await asyncio.gather(*futures, return_exceptions=True)
        if unsent or any(isinstance(r, BaseException) for r in results):
            return  # the cursor stays; the chunk is sent again when the producer recovers
        self.spool.commit(token)
        self._refill_spool()
