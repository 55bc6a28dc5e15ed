"""The recorder's background half spread over sender processes (`Recorder(senders=N)`, N > 1).

One sender thread seals ~100k events/s at best (validation, canonical JSON, two SHA-256 per
event, ~10 µs in Python); sessions are independent chains, so they shard. In the recording
process a *dispatcher* thread takes queued events in order, routes each by its session id to one
of N sender processes (_shard_main.py) and ships them in batches; a *listener* thread reads what
the shards report. Each shard is a whole in-thread sender: chain heads, producer, spool segment.

Guarantees, as with one sender:

- Order and one writer per chain: a session's events all go to one shard, in queue order, over
  one socket; its resume goes there too, after every shard's spool is empty (they share the
  folder, and an adopted segment may hold the chain's head).
- flush(): a barrier is broadcast behind everything queued before it and resolves when every
  shard settled its own (acknowledged by the broker or fsynced to the spool).
- close(): ships what is queued, then each shard stops as the in-thread sender does (grace
  period, then the rest to the spool).
- Errors: each shard reports its counters, rejected events and its hot-path error (a full
  spool) about every 0.1 s and with every barrier; the recorder raises them as with one sender.
- A shard that dies: `SenderDiedError` on the next record, flush and close. Its own spool
  segment stays for the next recorder on the folder; the events it had not yet made durable
  (the recorder keeps each batch until the shard marks it so) go to the rejected-events file,
  and the error says how many: reported, never silently lost.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import itertools
import logging
import os
import pickle
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from rolltape.producers._errors import RejectedEvent, ResumeError, SenderDiedError
from rolltape.producers._queued import Barrier, QueuedEvent, as_reported
from rolltape.producers._sender_config import SenderConfig, SenderStats
from rolltape.producers._spawn import fresh_interpreter
from rolltape.producers._wire import (
    Event,
    ShardStatus,
    decode_events,
    encode_control,
    encode_events,
    shard_of,
)
from rolltape.schemas import ProducerInfo

log = logging.getLogger("rolltape.producers")

_DISPATCH_BATCH = 4_096


@dataclass
class SpoolSummary:
    """The shards' spool, as they last reported it (they share one folder)."""

    directory: Path
    shards: list[_ShardHandle]

    @property
    def unread_bytes(self) -> int:
        return sum(s.status.spool_unread_bytes for s in self.shards)


@dataclass
class _ShardHandle:
    index: int
    proc: subprocess.Popen[bytes]
    conn: Connection
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    state_lock: threading.Lock = field(default_factory=threading.Lock)
    unacked: collections.deque[tuple[int, bytes]] = field(default_factory=collections.deque)
    """(batch number, frame) of batches sent and not yet marked durable by the shard."""
    closing_fd: int = -1
    """Write end of a pipe the shard watches: closed when the recorder stops (or its process
    ends), so a shard holding back reads for backpressure takes everything and stops."""
    next_batch: int = 0
    status: ShardStatus = field(default_factory=ShardStatus)
    dead: bool = False
    stopped: bool = False


def _spawn(index: int, config: SenderConfig) -> _ShardHandle:
    """Start a sender process with a fresh interpreter and this process's import path."""
    ours, theirs = socket.socketpair()
    closing_read, closing_write = os.pipe()
    proc = fresh_interpreter("rolltape.producers._shard_main:serve", theirs.fileno(), closing_read)
    theirs.close()
    os.close(closing_read)
    conn = Connection(ours.detach())
    conn.send_bytes(pickle.dumps(config, protocol=5))
    return _ShardHandle(index, proc, conn, closing_fd=closing_write)


class ShardedSender:
    """Stands where `Sender` does in a Recorder: same fields and calls, N processes behind."""

    def __init__(
        self, config: SenderConfig, queue: collections.deque[QueuedEvent | Barrier], shards: int
    ) -> None:
        config.producer_info = ProducerInfo.model_validate(config.producer_info).model_dump()
        config.spool_dir.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.queue = queue
        self.stats = SenderStats()
        self.error: BaseException | None = None
        """What the hot path must raise: a shard's death, else a shard's condition (full spool)."""
        self.idle = False
        self.rejected_path = config.spool_dir / "rejected.jsonl"
        self._fatal: SenderDiedError | None = None
        self._lock = threading.Lock()
        self._barrier_ids = itertools.count()
        self._barriers: dict[int, tuple[Barrier, set[int]]] = {}
        self._requests: dict[int, concurrent.futures.Future[int]] = {}
        self._local_rejected = 0
        self._stopping = False
        self._statuses = threading.Condition(self._lock)
        self._shards = [_spawn(i, config) for i in range(shards)]
        self.spool = SpoolSummary(config.spool_dir, self._shards)
        self._wake = threading.Event()
        self._dispatcher = threading.Thread(
            target=self._dispatch, name="rolltape-dispatcher", daemon=True
        )
        self._listener = threading.Thread(
            target=self._listen, name="rolltape-shard-listener", daemon=True
        )
        self._dispatcher.start()
        self._listener.start()

    # -- called from recording threads -----------------------------------------------------------
    def wake(self) -> None:
        self._wake.set()

    def spool_pending(self) -> bool:
        return any(s.status.spool_pending for s in self._shards)

    def stop(self, timeout_s: float) -> None:
        """Ship what is queued, stop every shard as the in-thread sender stops, and wait for
        them (a shard that does not end in time is killed and reported)."""
        self._stopping = True
        self._wake.set()
        for shard in self._shards:
            with contextlib.suppress(OSError):
                os.close(shard.closing_fd)
        self._dispatcher.join(timeout_s + 30)
        for shard in self._shards:
            if not shard.dead:
                self._send(shard, encode_control(("stop", timeout_s)))
        self._listener.join(timeout_s + 30)
        for shard in self._shards:
            if shard.proc.poll() is None:
                shard.proc.kill()
                shard.proc.wait(10)
                self._died(shard, "did not stop in time and was killed")
        with self._lock:
            for barrier, _ in self._barriers.values():
                self._settle(barrier)
            self._barriers.clear()

    def resume(
        self,
        stream: str,
        session_id: str,
        first: tuple[str, dict[str, Any]] | None,
        writer: str,
        timeout_s: float,
        data_key: dict[str, Any] | None = None,
    ) -> int:
        """`Sender.resume`, run by the shard that owns the session once no shard's spool holds
        records (one of them may be the chain's head)."""
        if self._fatal is not None:
            raise self._fatal
        if self._stopping:
            raise ResumeError("the recorder is closed; create a new Recorder")
        deadline = time.monotonic() + timeout_s
        self._await_spools_drained(session_id, deadline)
        shard = self._shards[shard_of(session_id, len(self._shards))]
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        with self._lock:
            request = next(self._barrier_ids)
            self._requests[request] = future
        remaining = max(0.0, deadline - time.monotonic())
        args = (stream, session_id, first, writer, remaining, data_key)
        self._send(shard, encode_control(("resume", request, args)))
        try:
            return future.result(remaining + 15)
        except concurrent.futures.TimeoutError as exc:
            raise ResumeError(f"resuming {session_id} took over {timeout_s:.0f}s") from exc
        finally:
            with self._lock:
                self._requests.pop(request, None)

    def _await_spools_drained(self, session_id: str, deadline: float) -> None:
        with self._statuses:
            seen = [s.status.seq for s in self._shards]
            while any(
                s.status.seq <= seq or s.status.spool_pending
                for s, seq in zip(self._shards, seen, strict=True)
                if not s.dead
            ):
                if self._fatal is not None:
                    raise self._fatal
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ResumeError(
                        f"cannot resume {session_id}: the broker has not taken this machine's "
                        f"spooled records yet ({self.config.spool_dir}); the head of the chain "
                        "may be among them. Resume once the broker is back."
                    )
                self._statuses.wait(min(left, 0.2))

    # -- the dispatcher thread -------------------------------------------------------------------
    def _dispatch(self) -> None:
        queue = self.queue
        count = len(self._shards)
        wake = self._wake
        waited = False  # a window passed with the queue empty since the last batch
        while True:
            window = self.config.batch_window_s
            if not queue:
                if self._stopping:
                    return
                if window and not waited:  # batches on a timer while recording goes on
                    waited = True
                    wake.wait(window)
                    wake.clear()
                    continue
                self.idle = True
                if not queue:  # re-checked after publishing idle: see Recorder._enqueue
                    wake.wait(0.05)
                    wake.clear()
                self.idle = False
                if window and queue and not self._stopping and not isinstance(queue[-1], Barrier):
                    wake.wait(window)  # the rest of the caller's burst, in one batch
                    wake.clear()
                continue
            waited = False
            routed: list[list[Event]] = [[] for _ in range(count)]
            popleft = queue.popleft
            for _ in range(min(len(queue), _DISPATCH_BATCH)):
                item = popleft()
                if isinstance(item, Barrier):
                    self._ship(routed)
                    routed = [[] for _ in range(count)]
                    self._broadcast(item)
                else:
                    routed[shard_of(item[0], count)].append(item)
            self._ship(routed)

    def _ship(self, routed: list[list[Event]]) -> None:
        for shard, events in zip(self._shards, routed, strict=True):
            if not events:
                continue
            if shard.dead:
                self._reject(events, self._lost_reason(shard))
                continue
            frame, refused = encode_events(events)
            if refused:
                for event, reason in refused:
                    self._reject([event], reason)
            with shard.state_lock:
                number = shard.next_batch
                shard.next_batch += 1
                shard.unacked.append((number, frame))
            if not self._send(shard, frame):
                self._died(shard, "closed its connection")

    def _broadcast(self, barrier: Barrier) -> None:
        with self._lock:
            if self._fatal is not None:
                barrier.future.set_exception(self._fatal)
                return
            bid = next(self._barrier_ids)
            owing = {s.index for s in self._shards if not s.dead}
            self._barriers[bid] = (barrier, owing)
        for shard in self._shards:
            if not shard.dead:
                self._send(shard, encode_control(("barrier", bid)))

    def _send(self, shard: _ShardHandle, frame: bytes) -> bool:
        try:
            with shard.send_lock:
                shard.conn.send_bytes(frame)
        except OSError:
            return False
        return True

    # -- the listener thread ---------------------------------------------------------------------
    def _listen(self) -> None:
        by_conn = {id(s.conn): s for s in self._shards}
        while True:
            live = [s.conn for s in self._shards if not s.dead and not s.stopped]
            if not live:
                return
            for conn in wait(live, timeout=0.5):
                assert isinstance(conn, Connection)
                shard = by_conn[id(conn)]
                try:
                    message = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    shard.proc.wait(10)
                    self._died(shard, f"exited with code {shard.proc.returncode}")
                    continue
                self._handle(shard, message)

    def _handle(self, shard: _ShardHandle, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "mark":
            with shard.state_lock:
                while shard.unacked and shard.unacked[0][0] <= message[1]:
                    shard.unacked.popleft()
        elif kind == "status":
            self._take_status(shard, message[1])
        elif kind == "flushed":
            self._take_status(shard, message[2])
            with self._lock:
                entry = self._barriers.get(message[1])
                if entry is not None:
                    entry[1].discard(shard.index)
                    if not entry[1]:
                        del self._barriers[message[1]]
                        self._settle(entry[0])
        elif kind == "resumed":
            with self._lock:
                future = self._requests.get(message[1])
            if future is not None and not future.done():
                if message[3] is not None:
                    future.set_exception(message[3])
                else:
                    future.set_result(message[2])
        elif kind == "stopped":
            self._take_status(shard, message[1])
            shard.stopped = True
            shard.proc.wait(30)
            shard.conn.close()

    def _take_status(self, shard: _ShardHandle, status: ShardStatus) -> None:
        with self._statuses:
            shard.status = status
            stats = self.stats
            stats.rejected_events.extend(status.stats.rejected_events)
            status.stats.rejected_events = []
            shards = [s.status.stats for s in self._shards]
            stats.sealed = sum(s.sealed for s in shards)
            stats.acked = sum(s.acked for s in shards)
            stats.spooled = sum(s.spooled for s in shards)
            stats.rejected = sum(s.rejected for s in shards) + self._local_rejected
            stats.mode = "spool" if any(s.mode == "spool" for s in shards) else "direct"
            errors = (s.status.error for s in self._shards if s.status.error)
            self.error = self._fatal or next(errors, None)
            self._statuses.notify_all()

    def _settle(self, barrier: Barrier) -> None:
        if barrier.future.done():
            return
        if self._fatal is not None:
            barrier.future.set_exception(self._fatal)
        else:
            barrier.future.set_result(None)

    # -- failures ----------------------------------------------------------------------------------
    def _lost_reason(self, shard: _ShardHandle) -> str:
        return (
            f"the sender process of shard {shard.index} (pid {shard.proc.pid}) died before this "
            "event was acknowledged by the broker or spooled; it may not be recorded"
        )

    def _died(self, shard: _ShardHandle, how: str) -> None:
        with shard.state_lock:
            if shard.dead or shard.stopped:
                return
            shard.dead = True
            frames = list(shard.unacked)
            shard.unacked.clear()
        lost = [event for _, frame in frames for event in decode_events(frame)]
        self._reject(lost, self._lost_reason(shard))
        error = SenderDiedError(
            f"the sender process of shard {shard.index} of {len(self._shards)} (pid "
            f"{shard.proc.pid}) {how}. {len(lost)} event(s) it had not made durable are listed "
            f"in {self.rejected_path} (they may or may not have reached the broker: check with "
            "`rolltape log verify`); what it had spooled stays in "
            f"{self.config.spool_dir} for the next recorder. Create a new Recorder."
        )
        log.error("rolltape: %s", error)
        with self._statuses:
            if self._fatal is None:
                self._fatal = error
            self.error = self._fatal
            for bid in [b for b, (_, owing) in self._barriers.items() if shard.index in owing]:
                barrier, _ = self._barriers.pop(bid)
                self._settle(barrier)
            for future in self._requests.values():
                if not future.done():
                    future.set_exception(self._fatal)
            self._statuses.notify_all()

    def _reject(self, events: list[Event], reason: str) -> None:
        if not events:
            return
        rejected = [
            RejectedEvent.of(sid, stream, event_type, as_reported(payload), reason)
            for sid, stream, event_type, payload, _ in events
        ]
        with open(self.rejected_path, "ab") as f:
            f.write(b"".join(r.model_dump_json().encode() + b"\n" for r in rejected))
        with self._statuses:
            self._local_rejected += len(rejected)
            self.stats.rejected += len(rejected)
            self.stats.rejected_events.extend(rejected)
