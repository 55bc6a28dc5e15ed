"""`rolltape serve otlp --workers N`: one receiver spread over N worker processes.

The front process listens, decodes each request and hands each worker the spans and log
records of the traces it owns; every worker maps them to records through its own `OtlpReceiver` (trace ingest,
recorder, sender) and answers once its records are durable; the front answers the request once
every worker it involved has. Mapping spans to records and sealing them is most of a
receiver's work (a single process is one interpreter), so the workers add cores; decoding stays
in the front (about an eighth of the work).

Invariants:

- A trace's spans and log records go to one worker, `worker_of(trace_id, n)` (or the owner
  of the OpenInference session its first spans name, `worker_of("session:<id>", n)`): its
  session has one writer, and a log record meets its span there. A worker records a trace into
  a session across traces only when it owns that session; otherwise the trace is a session of
  its own (never a second writer). Log records outside any trace go to worker 0, which counts
  them.
- What a worker's timer does (spans that waited recorded, log records dropped, sessions
  ended) is reported to the front, which keeps every counter.
- The workers share one journal (SQLite in WAL mode; a writer waits for another's
  transaction): a trace any worker recorded before a restart is known to all, so a restart with
  another number of workers continues traces in linked sessions and never forks them.
- The answer is what one process would give: 503 when any worker could not make its share
  durable (the exporter sends the whole batch again; the shares already recorded are
  redeliveries), the counts and notes of all shares otherwise.
- A worker that dies stops the receiver: the chain heads of its traces are gone with it, and
  the batches it had not acknowledged get a 503, so their exporters send them to the next one.

Workers start with a fresh interpreter (never forked: the front runs an event loop and
threads). Frames on each worker's socket: a 4-byte length and a pickled tuple.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rolltape.infra._gc import RECEIVER_YOUNG_THRESHOLD, tune_collector
from rolltape.infra.commands.otlp_serve import (
    Outcome,
    ReceiverConfig,
    ReceiverFront,
    open_receiver,
)
from rolltape.infra.settings import Settings
from rolltape.producers import fresh_interpreter
from rolltape.producers.otlp import LogRecord, Span, group_key

log = logging.getLogger("rolltape.otlp")
_LENGTH = struct.Struct(">I")
_OWNERS_KEPT = 100_000


def worker_of(trace_id: str, workers: int) -> int:
    """The worker that owns a trace: its id's last 16 hex digits modulo the count (stable
    across processes and restarts, unlike Python's string hash)."""
    try:
        return int(trace_id[-16:], 16) % workers
    except ValueError:  # not hex (a JSON request may carry anything): still one owner
        return sum(trace_id.encode()) % workers


async def _read(reader: asyncio.StreamReader) -> tuple[Any, ...] | None:
    try:
        head = await reader.readexactly(_LENGTH.size)
        body = await reader.readexactly(_LENGTH.unpack(head)[0])
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    message: tuple[Any, ...] = pickle.loads(body)
    return message


def _write(writer: asyncio.StreamWriter, message: tuple[Any, ...]) -> None:
    body = pickle.dumps(message, protocol=5)
    writer.write(_LENGTH.pack(len(body)) + body)


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    pending: dict[int, asyncio.Future[Outcome]] = field(default_factory=dict)
    stopped: asyncio.Future[list[str]] | None = None
    dead: str | None = None


class WorkerPool(ReceiverFront):
    """The front of `otlp serve --workers N`: `record` splits a batch by trace over the
    workers; `start` spawns them, `run` watches them, `shutdown` stops them."""

    def __init__(self, settings: Settings, config: ReceiverConfig, workers: int) -> None:
        super().__init__(config)
        if workers < 2:
            raise ValueError("a pool has two workers at least; one process serves alone")
        self.settings = settings
        self.workers = workers
        self._workers: list[_Worker] = []
        self._ids = itertools.count()
        self._failed: asyncio.Event | None = None
        self._stopped = False
        self._ended: list[str] = []
        self._waits: dict[int, int] = {}
        """Worker -> spans and log records it holds, as it last said."""
        self._owners: collections.OrderedDict[str, int] = collections.OrderedDict()
        """Trace -> the worker it went to."""

    async def start(self) -> None:
        """Spawn the workers and wait until each is ready (its recorder and journal open)."""
        self._failed = asyncio.Event()
        for index in range(self.workers):
            ours, theirs = socket.socketpair()
            proc = fresh_interpreter(
                "rolltape.infra.commands.otlp_workers:serve_worker", theirs.fileno()
            )
            theirs.close()
            reader, writer = await asyncio.open_connection(sock=ours)
            _write(writer, ("start", self.settings, self.config, index, self.workers))
            worker = _Worker(index, proc, reader, writer)
            ready = await _read(reader)
            if ready is None or ready[0] != "ready":
                proc.wait(30)
                raise RuntimeError(
                    f"OTLP worker {index} did not start (exit code {proc.returncode}); its "
                    "error is above"
                )
            self._workers.append(worker)
            asyncio.get_running_loop().create_task(self._listen(worker))

    async def _listen(self, worker: _Worker) -> None:
        while True:
            message = await _read(worker.reader)
            if message is None:
                break
            if message[0] == "done":
                future = worker.pending.pop(message[1], None)
                if future is not None and not future.done():
                    future.set_result(message[2])
            elif message[0] == "tick":
                self.count(self._waited(worker.index, message[1]))
            elif message[0] == "stopped" and worker.stopped is not None:
                if message[2] is not None:
                    self.count(self._waited(worker.index, message[2]))
                worker.stopped.set_result(message[1])
                return
        code = await asyncio.to_thread(worker.proc.wait)
        worker.dead = f"OTLP worker {worker.index} (pid {worker.proc.pid}) exited with code {code}"
        log.error("%s; stopping the receiver (its traces' chains cannot go on)", worker.dead)
        for future in worker.pending.values():
            if not future.done():
                future.set_result(Outcome(503, f"{worker.dead}; send the batch again"))
        worker.pending.clear()
        if worker.stopped is not None and not worker.stopped.done():
            worker.stopped.set_result([])
        if self._failed is not None:
            self._failed.set()

    def _owner(self, trace_id: str, batch: Sequence[Span] = ()) -> int:
        """The worker of a trace: the owner of its session or conversation when its first spans
        name one (`group_key`: so a session across traces has one writer), else of its id; kept for the
        trace's later spans and log records (bounded: the oldest traces are forgotten)."""
        owner = self._owners.get(trace_id)
        if owner is not None:
            self._owners.move_to_end(trace_id)
        else:
            key = trace_id
            for span in batch:
                named = group_key(span) if span.trace_id == trace_id else None
                if named is not None:
                    key = named
                    break
            owner = self._owners[trace_id] = worker_of(key, self.workers)
            if len(self._owners) > _OWNERS_KEPT:
                self._owners.popitem(last=False)
        return owner

    def _waited(self, index: int, outcome: Outcome) -> Outcome:
        """The outcome with the pool's waiting count: every worker's, as each last said."""
        if outcome.waiting is not None:
            self._waits[index] = outcome.waiting
        outcome.waiting = sum(self._waits.values())
        return outcome

    async def record(self, spans: list[Span], logs: list[LogRecord]) -> Outcome:
        if self._stopped:
            return Outcome(
                503, f"{self.failure or 'the receiver is stopping'}; send the batch again"
            )
        shares: dict[int, tuple[list[Span], list[LogRecord]]] = {}
        for span in spans:
            shares.setdefault(self._owner(span.trace_id, spans), ([], []))[0].append(span)
        for record in logs:
            owner = self._owner(record.trace_id) if record.trace_id else 0
            shares.setdefault(owner, ([], []))[1].append(record)
        waits = []
        for index, (share, share_logs) in shares.items():
            worker = self._workers[index]
            if worker.dead is not None:
                return Outcome(503, f"{worker.dead}; send the batch again")
            request = next(self._ids)
            future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
            worker.pending[request] = future
            _write(worker.writer, ("spans", request, share, share_logs))
            waits.append((index, future))
        outcome = Outcome()
        for index, future in waits:
            part = await future
            if part.waiting is not None:
                self._waits[index] = part.waiting
            outcome = outcome.merged(part)
        outcome.waiting = sum(self._waits.values())
        return outcome

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop`, or until a worker dies (then the receiver stops with an error)."""
        assert self._failed is not None
        stopping = asyncio.ensure_future(stop.wait())
        failing = asyncio.ensure_future(self._failed.wait())
        await asyncio.wait({stopping, failing}, return_when=asyncio.FIRST_COMPLETED)
        for task in (stopping, failing):
            task.cancel()
        self._stopped = True
        self._ended = await self._stop_workers()

    async def _stop_workers(self) -> list[str]:
        ended: list[str] = []
        for worker in self._workers:
            if worker.dead is None:
                worker.stopped = asyncio.get_running_loop().create_future()
                _write(worker.writer, ("stop",))
        for worker in self._workers:
            if worker.stopped is not None:
                with contextlib.suppress(TimeoutError):
                    ended += await asyncio.wait_for(worker.stopped, 90)
            worker.writer.close()
            try:
                await asyncio.to_thread(worker.proc.wait, 30)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
        return ended

    @property
    def failure(self) -> str | None:
        """Why the receiver stopped on its own (a worker died), else None."""
        return next((w.dead for w in self._workers if w.dead is not None), None)

    def shutdown(self) -> list[str]:
        return self._ended


def serve_worker(fd: int) -> None:
    """The body of a worker process: open its receiver as the front says, then record the
    shares it is sent until told to stop (or the front is gone), ending what is open.

    It ignores SIGINT and SIGTERM: a Ctrl-C or a service manager's stop reaches the whole
    process group, and the front decides (it stops the workers in order); a front that dies
    closes the socket, which stops the worker the same way."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    tune_collector(RECEIVER_YOUNG_THRESHOLD)  # as the front's (_gc.py)
    asyncio.run(_worker(socket.socket(fileno=fd)))


async def _worker(sock: socket.socket) -> None:
    reader, writer = await asyncio.open_connection(sock=sock)
    start = await _read(reader)
    if start is None or start[0] != "start":
        return
    _, settings, config, index, workers = start
    receiver = open_receiver(
        settings,
        config,
        owns=lambda key: worker_of(key, workers) == index,
    )
    receiver.on_tick = lambda outcome: _write(writer, ("tick", outcome))  # type: ignore[method-assign]
    _write(writer, ("ready", index, os.getpid()))
    stop = asyncio.Event()
    timer = asyncio.get_running_loop().create_task(receiver.run(stop))
    tasks: set[asyncio.Task[None]] = set()

    async def share(request: int, spans: list[Span], logs: list[LogRecord]) -> None:
        _write(writer, ("done", request, await receiver.record(spans, logs)))

    try:
        while True:
            message = await _read(reader)
            if message is None or message[0] == "stop":
                break
            task = asyncio.get_running_loop().create_task(share(message[1], message[2], message[3]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        stop.set()
        with contextlib.suppress(Exception):  # its failure is logged; shutting down goes on
            await timer
        ended = await asyncio.to_thread(receiver.shutdown)
        with contextlib.suppress(ConnectionError):
            _write(writer, ("stopped", ended, receiver.stopped_outcome))
            await writer.drain()
        writer.close()
