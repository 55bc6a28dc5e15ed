"""The recorder's background half: chain, seal, batch and send, or spool while the broker is away.

It runs in its own thread with its own asyncio loop, so sync and async agents alike only pay for
a deque append. Two coroutines share the loop:

- the *chainer* takes queued events in order, validates payloads, assigns seq and prev_hash per
  (stream, session) chain and seals records; sealed records go to the outbox, or to the spool
  once the broker has stopped acknowledging (spool mode);
- the *feeder* hands outbox records to an idempotent aiokafka producer (acks=all) and, when
  nothing is in flight, drains the spool in order, then returns to direct mode.

Order per session holds because the spool is drained only after every earlier record was
acknowledged, and records of one session share a key, hence a partition. The idempotent producer
retries in-flight batches across a broker restart without duplicating them.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer
from pydantic import BaseModel, ValidationError
from rolltape.producers._errors import RejectedEvent
from rolltape.producers._spool import Spool, SpooledRecord
from rolltape.schemas import (
    GENESIS_HASH,
    PAYLOAD_MODELS,
    CanonicalEncodingError,
    seal,
    topic_name,
)

log = logging.getLogger("rolltape.producers")

#: (session_id, stream, type, payload, ts_ns)
QueuedEvent = tuple[str, str, str, dict[str, Any], int]


class Barrier:
    """Queued like an event; resolves once everything queued before it is acknowledged or spooled."""

    def __init__(self) -> None:
        self.future: concurrent.futures.Future[None] = concurrent.futures.Future()


@dataclass
class SenderStats:
    sealed: int = 0
    acked: int = 0
    spooled: int = 0
    rejected: int = 0
    mode: str = "direct"
    broker_connected: bool = False
    rejected_events: list[RejectedEvent] = field(default_factory=list)


@dataclass
class SenderConfig:
    bootstrap: str | None
    topic_prefix: str
    producer_info: dict[str, str]
    spool_dir: Path
    spool_max_bytes: int
    spool_after_s: float = 2.0
    """How long without an acknowledgement, with records in flight, before new records spool."""
    outbox_limit: int = 50_000
    max_record_bytes: int = 1_000_000
    linger_ms: int = 5
    max_batch_bytes: int = 512 * 1024
    chain_batch: int = 2_000


_Outgoing = tuple[str, bytes, bytes] | Barrier


class Sender:
    """Owns the background thread. Public methods are called from the recording threads."""

    def __init__(
        self, config: SenderConfig, queue: collections.deque[QueuedEvent | Barrier]
    ) -> None:
        self.config = config
        self.queue = queue
        self.stats = SenderStats()
        self.error: BaseException | None = None
        """A condition the hot path must raise (spool full); cleared when it passes."""
        self.idle = False
        self._loop = asyncio.new_event_loop()
        self._wake = asyncio.Event()
        self._feed = asyncio.Event()
        self._chains: dict[tuple[str, str], tuple[int, str]] = {}
        self._outbox: collections.deque[_Outgoing] = collections.deque()
        # In-flight records by future, in send order: on a stop with the broker away they are
        # spooled (a possible duplicate, dropped downstream by event id, beats a loss).
        self._inflight: dict[asyncio.Future[Any], tuple[str, bytes, bytes]] = {}
        self._last_ack = time.monotonic()
        self._spool_mode = False
        self._stopping = False
        self._producer: Any = None
        self.spool = Spool(config.spool_dir, config.spool_max_bytes)
        self._rejected_path = config.spool_dir / "rejected.jsonl"
        self._thread = threading.Thread(target=self._run, name="rolltape-sender", daemon=True)
        self._done = threading.Event()
        self._thread.start()

    # -- called from recording threads --------------------------------------------------------
    def wake(self) -> None:
        self._loop.call_soon_threadsafe(self._wake.set)

    def stop(self, timeout_s: float) -> None:
        """Stop after the queue is sealed; in-flight records get `timeout_s` to be acknowledged."""

        def _begin() -> None:
            self._stopping = True
            self._wake.set()
            self._feed.set()

        if not self._done.is_set():
            self._loop.call_soon_threadsafe(_begin)
            self._thread.join(timeout_s + 15)

    @property
    def rejected_path(self) -> Path:
        return self._rejected_path

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
        try:
            await self._chainer()
        finally:
            self._feed.set()
            await feeder
            self.spool.close()

    # -- chainer ---------------------------------------------------------------------------------
    async def _chainer(self) -> None:
        queue = self.queue
        while True:
            if not queue:
                if self._stopping:
                    return
                self.idle = True
                if not queue:  # re-check after publishing idle: see Recorder._enqueue
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), 0.1)
                    self._wake.clear()
                self.idle = False
                self._check_stall()
                continue
            sealed: list[_Outgoing] = []
            for _ in range(min(len(queue), self.config.chain_batch)):
                item = queue.popleft()
                if isinstance(item, Barrier):
                    sealed.append(item)
                else:
                    record = self._seal(item)
                    if record is not None:
                        sealed.append(record)
            self._check_stall()
            if self._spool_mode:
                self._to_spool(sealed)
            else:
                self._outbox.extend(sealed)
                self._feed.set()
            await asyncio.sleep(0)

    def _seal(self, item: QueuedEvent) -> tuple[str, bytes, bytes] | None:
        session_id, stream, event_type, payload, ts_ns = item
        try:
            model: type[BaseModel] = PAYLOAD_MODELS[event_type]
            clean = model.model_validate(payload).model_dump(mode="python")
            key = (stream, session_id)
            seq, prev = self._chains.get(key, (0, GENESIS_HASH))
            record, digest = seal(
                stream=stream,
                session_id=session_id,
                seq=seq,
                ts_ns=ts_ns,
                type=event_type,
                payload=clean,
                prev_hash=prev,
                producer=self.config.producer_info,
            )
            if len(record) > self.config.max_record_bytes:
                raise ValueError(
                    f"record is {len(record)} bytes, over the {self.config.max_record_bytes}-byte "
                    "limit; store large content elsewhere and record a reference"
                )
        except (ValidationError, CanonicalEncodingError, ValueError, KeyError) as exc:
            self._reject(item, str(exc))
            return None
        if event_type == "session_ended":
            for chain in [k for k in self._chains if k[1] == session_id]:
                del self._chains[chain]
        else:
            self._chains[key] = (seq + 1, digest)
        self.stats.sealed += 1
        return topic_name(stream, self.config.topic_prefix), session_id.encode(), record

    def _reject(self, item: QueuedEvent, reason: str) -> None:
        session_id, stream, event_type, payload, _ = item
        event = RejectedEvent(
            session_id=session_id,
            stream=stream,
            type=event_type,
            reason=reason,
            payload=orjson.loads(orjson.dumps(payload, default=repr)),
        )
        self.stats.rejected += 1
        self.stats.rejected_events.append(event)
        with open(self._rejected_path, "ab") as f:  # nothing handed to us is silently dropped
            f.write(event.model_dump_json().encode() + b"\n")

    def _reject_record(self, record: tuple[str, bytes, bytes], reason: str) -> None:
        topic, key, value = record
        envelope = orjson.loads(value)
        self._reject(
            (key.decode(), envelope.get("stream", topic), envelope.get("type", "?"), envelope, 0),
            reason,
        )

    def _check_stall(self) -> None:
        if self._spool_mode:
            return
        stalled = (
            (
                self._producer is None
                and (self._outbox or self.queue)
                and time.monotonic() - self._last_ack > self.config.spool_after_s
            )
            or (self._inflight and time.monotonic() - self._last_ack > self.config.spool_after_s)
            or len(self._outbox) > self.config.outbox_limit
        )
        if stalled:
            log.warning("broker not acknowledging; spooling records to %s", self.spool.directory)
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
        size = sum(len(t) + len(k) + len(v) + 12 for t, k, v in records)
        if not self.spool.has_room(size):
            # Keep them in memory (in order, ahead of anything newer) and refuse new events.
            from rolltape.producers._errors import SpoolFullError

            self.error = SpoolFullError(
                f"the spool in {self.spool.directory} holds {self.spool.unread_bytes} bytes, its "
                f"limit (ROLLTAPE_SPOOL_MAX_BYTES={self.spool.max_bytes}); the broker at "
                f"{self.config.bootstrap} has not acknowledged for "
                f"{time.monotonic() - self._last_ack:.0f}s. Restore the broker or raise the limit."
            )
            self._outbox.extendleft(reversed(records))
            return
        self.spool.append(records)
        self.stats.spooled += len(records)
        self._feed.set()

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
        if self.config.bootstrap is None:
            return False
        producer = AIOKafkaProducer(
            bootstrap_servers=self.config.bootstrap,
            enable_idempotence=True,
            acks="all",
            linger_ms=self.config.linger_ms,
            max_batch_size=self.config.max_batch_bytes,
            max_request_size=self.config.max_record_bytes + 4096,
            request_timeout_ms=30_000,
            retry_backoff_ms=200,
            client_id="rolltape-recorder",
        )
        try:
            await producer.start()
        except Exception as exc:  # connection refused, DNS: retried until the broker is back
            log.info("broker at %s not reachable yet: %s", self.config.bootstrap, exc)
            with contextlib.suppress(Exception):
                await producer.stop()
            return False
        self._producer = producer
        self.stats.broker_connected = True
        return True

    async def _feeder(self) -> None:
        backoff = 0.2
        while True:
            if self._producer is None:
                if (
                    self._stopping
                    and not self._outbox
                    and (self.spool.empty or self.config.bootstrap is None)
                ):
                    break
                if await self._start_producer():
                    backoff = 0.2
                    continue
                if self._stopping and self._stop_deadline_passed():
                    break
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                self._check_stall()
                continue
            if self._outbox:
                item = self._outbox.popleft()
                if isinstance(item, Barrier):
                    self._settle_barrier(item)
                else:
                    await self._send(item)
                continue
            if not self.spool.empty and not self._inflight:
                await self._drain_spool_chunk()
                continue
            if self._spool_mode and self.spool.empty and not self._inflight:
                self._spool_mode = False
                self.stats.mode = "direct"
                self.error = None
                log.info("spool drained; recording directly to the broker again")
                continue
            if self._stopping and not self._inflight and not self.queue:
                break
            if self._stopping and self._stop_deadline_passed():
                break
            self._feed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._feed.wait(), 0.1)
        unacked = [r for f, r in self._inflight.items() if not f.done()]
        leftover = [i for i in self._outbox if not isinstance(i, Barrier)]
        if unacked or leftover:
            log.warning(
                "stopping with %d records unacknowledged; they stay in the spool at %s",
                len(unacked) + len(leftover),
                self.spool.directory,
            )
            self.spool.append([*unacked, *leftover])
            self.spool.sync()
            self.stats.spooled += len(unacked) + len(leftover)
        for item in self._outbox:
            if isinstance(item, Barrier) and not item.future.done():
                item.future.set_result(None)
        self._outbox.clear()
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._producer.stop(), 5)

    _stop_started: float | None = None

    def _stop_deadline_passed(self) -> bool:
        if self._stop_started is None:
            self._stop_started = time.monotonic()
        return time.monotonic() - self._stop_started > self.stop_grace_s

    stop_grace_s: float = 10.0

    async def _send(self, record: tuple[str, bytes, bytes]) -> asyncio.Future[Any] | None:
        """Hand one record to the producer; None (and the record back at the head of the outbox)
        when the producer could not take it in time."""
        topic, key, value = record
        try:
            fut: asyncio.Future[Any] = await self._producer.send(topic, value=value, key=key)
        except Exception as exc:  # buffer full for request_timeout: the broker is away
            log.info("producer did not take a record (%r); retrying", exc)
            self._outbox.appendleft(record)
            return None
        self._inflight[fut] = record
        fut.add_done_callback(self._acked)
        return fut

    def _acked(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            return
        record = self._inflight.pop(fut, None)
        exc = fut.exception()
        if exc is None:
            self.stats.acked += 1
            self._last_ack = time.monotonic()
        elif record is not None:
            # Not retriable (the idempotent producer retries everything else): keep the record.
            log.error("the broker refused a record: %r", exc)
            self._reject_record(record, f"broker refused the record: {exc!r}")

    async def _drain_spool_chunk(self) -> None:
        records, token = self.spool.read(2_000)
        futures = []
        for record in records:
            fut = await self._send(record)
            if fut is None:  # _send put it in the outbox; the spool keeps it too: take it back
                self._outbox.popleft()
                break
            futures.append(fut)
        results = await asyncio.gather(*futures, return_exceptions=True)
        if len(futures) < len(records) or any(isinstance(r, BaseException) for r in results):
            return  # cursor stays; the chunk is sent again when the producer recovers
        self.spool.commit(token)
