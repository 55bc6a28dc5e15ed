"""A sender process: the in-thread sender of _sender.py, fed over a socket instead of a deque.

A recorder with `senders=N` starts N of these (spawned with a fresh interpreter, never forked:
the agent's process may hold CUDA contexts and threads). Each owns the chain heads and the Kafka
producer of the sessions routed to it, and the same spool folder as the others (each its own
locked segment, as separate recorders share one). It runs an unmodified `Sender`, so what it
seals is what the in-thread sender would seal for the same calls.

Invariant: the shard acknowledges a batch of events to the recorder ("mark") only once a
barrier queued behind it has settled, that is once every one of its records was acknowledged by
the broker or fsynced to the spool; the recorder keeps a copy of each batch until then, so the
events a shard that dies had not made durable are known and reported.

It ignores SIGINT and SIGTERM: a Ctrl-C or a service manager's stop reaches the whole process
group, and the agent's process decides (its close() drains the shards). When that process ends
without closing, the socket reaches end of file and the shard stops as close() would: seal what
it holds, give the broker a grace period, spool the rest.
"""

from __future__ import annotations

import collections
import dataclasses
import pickle
import select
import signal
import threading
import time
from collections.abc import Iterable
from multiprocessing.connection import Connection
from typing import Any

from rolltape.producers._queued import Barrier, QueuedEvent
from rolltape.producers._sender import Sender
from rolltape.producers._sender_config import SenderConfig
from rolltape.producers._wire import CONTROL, ShardStatus, decode_events, portable_error

_STATUS_EVERY_S = 0.1
_ORPHAN_GRACE_S = 10.0


class _Shard:
    def __init__(self, conn: Connection, config: SenderConfig, closing_fd: int) -> None:
        self.conn = conn
        self._closing_fd = closing_fd
        self._closing = False
        self.queue: collections.deque[QueuedEvent | Barrier] = collections.deque()
        # The recorder's dispatcher batched these events already: a second window would only
        # delay them.
        self.sender = Sender(dataclasses.replace(config, batch_window_s=0.0), self.queue)
        self.backlog_limit = max(4 * config.chain_batch, 8_000)
        """Events waiting to be sealed past which the shard stops reading: the socket fills and
        the recorder's own queue (bounded by max_backlog) absorbs, as with one sender."""
        self._send_lock = threading.Lock()
        self._status_seq = 0
        self._last_status = 0.0
        self._marks_lock = threading.Lock()
        self._received = -1
        self._marking = False
        self._mark_later = False
        """A settled barrier found records held in memory (a full spool): mark them once they
        reach the spool or the broker, checked with each status."""

    # -- to the recorder -------------------------------------------------------------------------
    def send(self, message: tuple[Any, ...]) -> None:
        data = pickle.dumps(message, protocol=5)
        try:
            with self._send_lock:
                self.conn.send_bytes(data)
        except OSError:  # the recorder's process is gone; the read loop will see it too
            pass

    def status(self) -> ShardStatus:
        stats = self.sender.stats
        rejected = stats.rejected_events[:]
        del stats.rejected_events[: len(rejected)]
        with self._send_lock:
            self._status_seq += 1
            seq = self._status_seq
        return ShardStatus(
            stats=dataclasses.replace(stats, rejected_events=rejected),
            error=portable_error(self.sender.error),
            spool_unread_bytes=self.sender.spool.unread_bytes,
            spool_pending=self.sender.spool_pending(),
            seq=seq,
        )

    def maybe_status(self) -> None:
        now = time.monotonic()
        if now - self._last_status >= _STATUS_EVERY_S:
            self._last_status = now
            self.send(("status", self.status()))
            if self._mark_later:
                self._mark_later = False
                with self._marks_lock:
                    latest = self._received
                self._place_mark(latest)

    # -- marks: which batches are durable ------------------------------------------------------
    def received(self, batch: int) -> None:
        with self._marks_lock:
            self._received = batch
            if self._marking:
                return  # the barrier in flight will place the next one when it settles
            self._marking = True
        self._place_mark(batch)

    def _place_mark(self, batch: int) -> None:
        barrier = Barrier()
        barrier.future.add_done_callback(lambda _: self._marked(batch))
        self.enqueue([barrier])

    def _marked(self, batch: int) -> None:
        if self.sender.holds_unspooled:
            self._mark_later = True  # still marking: the status loop places the next barrier
            return
        self.send(("mark", batch))
        with self._marks_lock:
            if self._received == batch:
                self._marking = False
                return
            latest = self._received
        self._place_mark(latest)

    def closing(self) -> bool:
        """The recorder is stopping or gone: read everything, the stop message is behind it."""
        if not self._closing:
            self._closing = bool(select.select([self._closing_fd], [], [], 0)[0])
        return self._closing

    # -- from the recorder -----------------------------------------------------------------------
    def enqueue(self, items: Iterable[QueuedEvent | Barrier]) -> None:
        self.queue.extend(items)
        sender = self.sender
        if sender.idle:
            sender.idle = False
            sender.wake()

    def flush(self, barrier_id: int) -> None:
        barrier = Barrier()
        barrier.future.add_done_callback(
            lambda _: self.send(("flushed", barrier_id, self.status()))
        )
        self.enqueue([barrier])

    def resume(self, request_id: int, args: tuple[Any, ...]) -> None:
        def run() -> None:
            try:
                seq = self.sender.resume(*args)
            except Exception as exc:
                self.send(("resumed", request_id, None, portable_error(exc)))
            else:
                self.send(("resumed", request_id, seq, None))

        threading.Thread(target=run, name="rolltape-shard-resume", daemon=True).start()

    def serve(self) -> None:
        batch = 0
        conn = self.conn
        while True:
            try:
                if not conn.poll(_STATUS_EVERY_S):
                    self.maybe_status()
                    continue
                frame = conn.recv_bytes()
            except (EOFError, OSError):
                # The recorder's process ended without close(): stop as close() would.
                self.sender.stop(_ORPHAN_GRACE_S)
                return
            if frame[:1] != CONTROL:
                events = decode_events(frame)
                while (
                    len(self.queue) > self.backlog_limit
                    and self.sender.error is None
                    and not self.closing()
                ):
                    time.sleep(0.002)
                    self.maybe_status()
                self.enqueue(events)
                self.received(batch)
                batch += 1
            else:
                message = pickle.loads(memoryview(frame)[1:])
                if message[0] == "barrier":
                    self.flush(message[1])
                elif message[0] == "resume":
                    self.resume(message[1], message[2])
                elif message[0] == "stop":
                    self.sender.stop(message[1])
                    self.send(("stopped", self.status()))
                    return
            self.maybe_status()


def serve(fd: int, closing_fd: int) -> None:
    """The body of a sender process: read its configuration, then serve until stopped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn = Connection(fd)
    config: SenderConfig = pickle.loads(conn.recv_bytes())
    _Shard(conn, config, closing_fd).serve()
