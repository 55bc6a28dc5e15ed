"""Delivery: sealed records to the broker, their acknowledgements, and the spool drained in order.

Why a module of its own: this is the sender's half that talks to Kafka, and it is where an
outage is noticed and where it ends. The *feeder* coroutine packs outbox records into one record
batch per partition and hands them to an idempotent aiokafka producer (acks=all); when nothing
is in flight it drains the spool in order, then returns to direct mode (_spool_handoff.py holds
spool mode itself). Sealing is elsewhere (_sealing.py), and so is the thread (_sender.py).

Order per session holds because records of one session share a key, hence a partition, batches
of a partition are appended in order, and the spool is drained only after every earlier record
was acknowledged. The idempotent producer retries in-flight batches across a broker restart
without duplicating them (aiokafka never expires idempotent batches). Acknowledgements count as
`stats.acked`; a record the broker refuses for good (not retriable, or a topic this principal
may not write) is rejected by name, never retried into the spool forever.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from rolltape.producers._queued import Barrier, Outgoing, Record
from rolltape.producers._spool_handoff import SpoolHandoff
from rolltape.schemas.clients import KeyPartitions, Producer, fill_batch, not_authorized

if TYPE_CHECKING:
    from rolltape.producers._sender import Sender

log = logging.getLogger("rolltape.producers")


class Delivery:
    """The producer, the outbox and what is in flight. Used on the sender's loop only."""

    def __init__(self, sender: Sender, loop: asyncio.AbstractEventLoop) -> None:
        self._sender = sender
        self._loop = loop
        self.config = sender.config
        self.stats = sender.stats
        self.spool = sender.spool
        self.feed = asyncio.Event()
        """Set when there is something to send (sealed records, spooled ones, a stop)."""
        self.outbox: collections.deque[Outgoing] = collections.deque()
        # In-flight batches by future, with their records in send order: on a stop with the
        # broker away they are spooled (a possible duplicate, dropped downstream by event id,
        # beats a loss).
        self.inflight: dict[asyncio.Future[Any], list[Record]] = {}
        self.placement = KeyPartitions()
        self.producer: Producer | None = None
        self.last_progress = time.monotonic()
        """When the broker last acknowledged (or nothing was owed to it)."""
        self._stop_started: float | None = None
        self.handoff = SpoolHandoff(sender, self.feed, self.settle_barrier, self._quiet_s)

    def _quiet_s(self) -> float:
        return time.monotonic() - self.last_progress

    def check_stall(self) -> None:
        """Enter spool mode when records wait and the broker has not made progress for a while."""
        handoff = self.handoff
        if handoff.active:
            return
        waiting = bool(
            self.inflight or self.outbox or (self.producer is None and self._sender.queue)
        )
        now = time.monotonic()
        if not waiting:
            # Nothing owed to the broker: an idle spell is not an outage.
            self.last_progress = now
            return
        if self.config.connection is None:
            log.info("no broker configured; recording to the spool at %s", self.spool.directory)
        elif now - self.last_progress > self.config.spool_after_s:
            # One line for the whole outage (the client's own lines go to the debug log).
            log.warning(
                "rolltape: the broker at %s has not acknowledged for %.1fs; spooling records to "
                "%s until it is back (client details: %s)",
                self.config.connection,
                now - self.last_progress,
                self.spool.directory,
                self._sender.client_log,
            )
        else:
            return
        handoff.begin(now)
        pending = list(self.outbox)
        self.outbox.clear()
        handoff.put(pending)

    def settle_barrier(self, barrier: Barrier) -> None:
        """Resolve `barrier` once the batches in flight now are acknowledged (or failed)."""
        pending = list(self.inflight)

        async def settle() -> None:
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            if not barrier.future.done():
                barrier.future.set_result(None)

        self._loop.create_task(settle())

    # -- the feeder ------------------------------------------------------------------------------
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
        self.producer = producer
        return True

    async def feeder(self) -> None:
        sender = self._sender
        handoff = self.handoff
        backoff = 0.2
        while True:
            if sender.stopping and self._stop_deadline_passed():
                break
            if self.producer is None:
                if (
                    sender.stopping
                    and not self.outbox
                    and (self.spool.empty or self.config.connection is None)
                ):
                    break
                if not await self._start_producer():
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                    self.check_stall()
                    continue
            if self.outbox:
                await self._send_outbox()
                continue
            if not self.spool.empty and not self.inflight:
                await self._drain_spool_chunk()
                continue
            if handoff.active and self.spool.empty and not self.inflight and handoff.overflow:
                handoff.refill()
                continue
            if handoff.active and self.spool.empty and not self.inflight:
                handoff.end()
                continue
            if sender.stopping and not self.inflight and not sender.queue:
                break
            self.feed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.feed.wait(), 0.1)

    def _stop_deadline_passed(self) -> bool:
        if self._stop_started is None:
            self._stop_started = time.monotonic()
        return time.monotonic() - self._stop_started > self._sender.stop_grace_s

    async def shutdown(self, leftover: list[Outgoing]) -> None:
        """Spool whatever the broker has not acknowledged, oldest first, so the next recorder on
        this spool folder delivers it in order (unacknowledged may mean delivered: a possible
        duplicate, dropped downstream by event id, beats a loss)."""
        overflow = self.handoff.overflow
        unacked = [r for f, records in self.inflight.items() if not f.done() for r in records]
        waiting = [*self.outbox, *overflow, *leftover]
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
        self.outbox.clear()
        overflow.clear()
        if self.producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.producer.stop(), 5)

    async def _send_outbox(self) -> None:
        records: list[Record] = []
        while self.outbox and len(records) < self.config.send_chunk:
            item = self.outbox.popleft()
            if isinstance(item, Barrier):
                if records:
                    self.outbox.appendleft(item)
                    break
                self.settle_barrier(item)
                continue
            records.append(item)
        if records:
            unsent = await self._send_records(records)
            self.outbox.extendleft(reversed(unsent))

    async def _send_records(self, records: list[Record]) -> list[Record]:
        """Pack records into one batch per partition and hand them over in order.

        Returns the records the producer did not take (buffer full for request_timeout: the
        broker is away); the caller keeps them, in order, ahead of anything newer.
        """
        producer = self.producer
        assert producer is not None
        groups: dict[tuple[str, int], list[Record]] = {}
        known = self.placement.known
        try:
            for record in records:
                partition = known(record[0], record[1])
                if partition is not None:
                    groups.setdefault((record[0], partition), []).append(record)
                    continue
                try:
                    tp = (record[0], await self.placement.of(producer, record[0], record[1]))
                except Exception as exc:
                    if not not_authorized(exc):
                        raise
                    # Not an outage: this principal may not write that trust domain. Retrying
                    # would spool forever; say so on the record instead.
                    self._sender.sealer.reject_record(record, self._unauthorized(record[0]))
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
                self.inflight[fut] = group[start:end]
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
        records = self.inflight.pop(fut, [])
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is None:
            self.stats.acked += len(records)
            self.last_progress = time.monotonic()
            return
        # Not retriable (the idempotent producer retries everything else): keep the records.
        log.error("the broker refused %d record(s): %r", len(records), exc)
        reject_record = self._sender.sealer.reject_record
        for record in records:
            if not_authorized(exc):
                reject_record(record, self._unauthorized(record[0]))
            else:
                reject_record(record, f"broker refused the record: {exc!r}")

    async def _drain_spool_chunk(self) -> None:
        records, token = self.spool.read(self.config.send_chunk)
        if not records:
            self.spool.commit(token)
            return
        unsent = await self._send_records(records)
        futures = list(self.inflight)
        results = await asyncio.gather(*futures, return_exceptions=True)
        if unsent or any(isinstance(r, BaseException) for r in results):
            return  # the cursor stays; the chunk is sent again when the producer recovers
        self.spool.commit(token)
        self.handoff.refill()
