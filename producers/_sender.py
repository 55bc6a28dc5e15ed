"""The recorder's background half: its thread and loop, and the chainer that seals in batches.

It runs in its own thread with its own asyncio loop, so sync and async agents alike only pay for
a deque append. Two coroutines share the loop:

- the *chainer* (here) takes queued events in order, a batch window at a time, and has each
  sealed (_sealing.py: validation, seq and prev_hash per (stream, session) chain); sealed
  records go to the outbox, or to the spool once the broker has stopped acknowledging (spool
  mode, _spool_handoff.py);
- the *feeder* (_delivery.py) sends the outbox to the broker and drains the spool.

Why this module holds the thread and the chainer together: the batch window is the contract
between a record call and the thread (a record call wakes the thread only when it is idle; see
`Recorder._enqueue`), and `stop` ends both coroutines in an order only the thread knows. A
takeover of a chain (`resume`) runs on the same loop (_takeover.py).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import threading
import time
from typing import Any

from rolltape.producers._client_log import keep_client_logs_in
from rolltape.producers._delivery import Delivery
from rolltape.producers._errors import ResumeError
from rolltape.producers._queued import Barrier, Outgoing, QueuedEvent
from rolltape.producers._sealing import Sealer
from rolltape.producers._sender_config import SenderConfig, SenderStats
from rolltape.producers._spool import Spool
from rolltape.producers._takeover import take_over
from rolltape.schemas import ProducerInfo

log = logging.getLogger("rolltape.producers")


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
        self.stopping = False
        self._loop = asyncio.new_event_loop()
        self._loop.set_default_executor(_InlineExecutor())
        self._wake = asyncio.Event()
        self.sealer = Sealer(config, self.stats)
        self._feeder_task: asyncio.Task[None]
        self.spool = Spool(config.spool_dir, config.spool_max_bytes)
        self.client_log = keep_client_logs_in(config.spool_dir)
        self.delivery = Delivery(self, self._loop)
        self.rejected_path = self.sealer.rejected_path
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
            self.stopping = True
            self._wake.set()
            self.delivery.feed.set()

        self.stop_grace_s = timeout_s
        if not self._done.is_set():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(begin)
            self._thread.join(timeout_s + 30)

    def spool_pending(self) -> bool:
        """Records wait in the spool (or its overflow) for the broker."""
        return self.delivery.handoff.pending

    @property
    def holds_unspooled(self) -> bool:
        """Sealed records are held in memory because the spool is full (a barrier settled
        meanwhile does not make them durable)."""
        return bool(self.delivery.handoff.overflow)

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
            take_over(
                self, stream, session_id, first, writer, time.monotonic() + timeout_s, data_key
            ),
            self._loop,
        )
        try:
            return future.result(timeout_s + 10)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise ResumeError(f"resuming {session_id} took over {timeout_s:.0f}s") from exc

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
        feeder = asyncio.create_task(self.delivery.feeder())
        self._feeder_task = feeder
        failure: BaseException | None = None
        leftover: list[Outgoing] = []
        try:
            leftover = await self._chainer()
        finally:
            self.delivery.feed.set()
            try:
                await feeder
            except Exception as exc:  # kept for the hot path; the records are spooled below
                log.exception("rolltape sender's feeder crashed")
                failure = exc
            await self.delivery.shutdown(leftover)
            self.spool.close()
        if failure is not None:
            self.error = failure

    # -- chainer ---------------------------------------------------------------------------------
    async def _chainer(self) -> list[Outgoing]:
        """Seal queued events until stopped; returns what it sealed after the feeder ended (the
        stop deadline passed with the broker slow or away), for the shutdown to spool."""
        queue = self.queue
        delivery = self.delivery
        handoff = delivery.handoff
        outbox = delivery.outbox
        chain = self.sealer.seal
        waited = False  # a window passed with the queue empty since the last batch
        while True:
            if self._feeder_task.done():
                return self._seal_rest()
            delivery.check_stall()
            window = self.config.batch_window_s
            blocked = len(outbox) > self.config.outbox_limit and not handoff.active
            if not queue or blocked:
                if self.stopping and not queue:
                    return []
                if window and not waited and not blocked and not self.stopping:
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
                if window and queue and not self.stopping and not isinstance(queue[-1], Barrier):
                    # Woken by the first record after a quiet spell: the caller is recording a
                    # burst (a model call's request and reply); take it as one batch, and keep
                    # off the interpreter while the caller works.
                    await self._wait_window(window)
                continue
            waited = False
            sealed: list[Outgoing] = []
            for _ in range(min(len(queue), self.config.chain_batch)):
                item = queue.popleft()
                if isinstance(item, Barrier):
                    sealed.append(item)
                else:
                    record = chain(item)
                    if record is not None:
                        sealed.append(record)
            if handoff.active:
                handoff.put(sealed)
            else:
                outbox.extend(sealed)
                delivery.feed.set()
            await asyncio.sleep(0)

    async def _wait_window(self, window: float) -> None:
        """Let events gather for `window` seconds; a wake (a flush, close) ends it."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), window)
        self._wake.clear()

    def _seal_rest(self) -> list[Outgoing]:
        rest: list[Outgoing] = []
        chain = self.sealer.seal
        while self.queue:
            item = self.queue.popleft()
            if isinstance(item, Barrier):
                rest.append(item)
            elif (record := chain(item)) is not None:
                rest.append(record)
        return rest
