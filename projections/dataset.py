"""The live feed as a training dataset: token samples from Kafka for a PyTorch `DataLoader` or a
Hugging Face `datasets.IterableDataset`, sharded by rank and resumable from a checkpoint.

    stream = TokenStream("localhost:9092", group_id="grpo-run-7", rank=rank, world_size=world,
                         selection=Selection(accepted="accepted"), stack="verl")
    stream.load_state_dict(checkpoint["data"])        # on a restart
    for row in stream:                                 # or DataLoader(stream, batch_size=None)
        step(row)
        if time_to_save: save({"model": ..., "data": stream.state_dict()})

- Sharded through the consumer group: every rank joins group `group_id` with its rank and world
  size, and partition p is read by rank p % world size alone (`GroupMember(rank=...)`), so ranks
  read disjoint sessions whose union is every session of the topic, whichever order they join in.
- Its position is the feed's (`TrajectoryFeed.positions`): per partition, before the first
  record of every session not yet yielded whole. `state_dict` saves it with the samples
  yielded since (by session and branch), and `load_state_dict` reads on from there and drops
  those, so a trainer restored from its checkpoint repeats no sample the checkpoint had seen,
  and gets again every sample it saw after the checkpoint (the restored model never learned
  from them).
- At least once, deduplicated: by session and branch across a restore (a trajectory id also
  digests the derived chains, which may have grown by a verdict when read again), and within
  a run a re-sent trajectory is dropped by the feed.

The feed runs on an event loop in a thread of its own, so the consumer keeps its heartbeats
and its place in the group while the trainer computes; the trajectories it reads ahead wait
unacknowledged and count as unread in `state_dict` until the trainer had them whole. A
`DataLoader` must use the stream in its main process (`num_workers=0`, enforced): the ranks,
not loader workers, share the partitions.

Needs torch (the `torch` extra); `hf_dataset` needs `datasets`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from asyncio import FIRST_COMPLETED
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import torch.utils.data

from rolltape.projections._errors import ProjectionError
from rolltape.projections._export import Selection
from rolltape.projections._feed import (
    ContentKeys,
    FeedItem,
    FeedNotStartedError,
    TrajectoryFeed,
)
from rolltape.projections.exporters import (
    ChatTokenizer,
    SkipSession,
    Stack,
    stack_rows,
)
from rolltape.schemas import DEFAULT_PREFIX
from rolltape.schemas.clients import KafkaConnection, Partition

_CHECK_EVERY_S = 0.2
"""How often a wait for the next item looks whether the stream was stopped or idle too long."""

_PRUNE_AT = 4096
"""Yielded trajectories remembered before those no read meets again are forgotten."""

STATE_VERSION = 1
"""The layout of `state_dict`: a checkpoint of another layout is refused, never misread."""


class StreamStateError(ProjectionError, ValueError):
    """A `load_state_dict` argument that is not a TokenStream state of this version."""


def _key(partition: Partition) -> str:
    return f"{partition.topic}:{partition.partition}"


def _partition(key: str) -> Partition:
    topic, _, number = key.rpartition(":")
    return Partition(topic, int(number))


class TokenStream(torch.utils.data.IterableDataset[dict[str, Any]]):
    """Token samples of judged trajectories from the live feed, one row per branch, in a stack's
    field names (see the module docstring)."""

    def __init__(
        self,
        connection: KafkaConnection | str,
        *,
        group_id: str,
        rank: int = 0,
        world_size: int = 1,
        selection: Selection | None = None,
        stack: Stack = "rolltape",
        tokenizer: ChatTokenizer | None = None,
        tokenizer_label: str | None = None,
        score: str = "reward",
        keys: ContentKeys | None = None,
        prefix: str = DEFAULT_PREFIX,
        wait_for: tuple[str, ...] = (),
        idle_stop_s: float | None = None,
        prefetch: int = 64,
    ) -> None:
        """`idle_stop_s`: end the iteration once no sample came for this long (an epoch over
        what the log holds); None follows the log for ever. `prefetch`: trajectories read
        ahead of the trainer (they count as not read in `state_dict` until it had them). The other arguments are the feed's
        (`TrajectoryFeed`) and the token form's (`token_samples`, `stack_row`)."""
        super().__init__()
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
        self._feed_args: dict[str, Any] = {
            "group_id": group_id,
            "prefix": prefix,
            "selection": selection or Selection(),
            "wait_for": wait_for,
            "auto_ack": False,
            "keys": keys,
            "rank": (rank, world_size),
        }
        self._connection = connection
        self.stack = stack
        self._tokenizer = tokenizer
        self._tokenizer_label = tokenizer_label
        self._score = score
        self._idle_stop_s = idle_stop_s
        self._stopping = threading.Event()
        self._prefetch = prefetch
        self._reader: _Reader | None = None
        self._restored: dict[Partition, int] = {}
        self._yielded: dict[str, tuple[dict[Partition, int], list[str]]] = {}
        """Per session yielded, its first offsets and the `session:branch` keys yielded."""
        self._dropped: set[str] = set()
        """`session:branch` keys a restored checkpoint had seen: never yielded again."""
        self._consumed: list[tuple[str, str]] = []
        """(session id, trajectory id) of the samples yielded since `take_consumed`."""
        self._read_from: dict[Partition, int] = {}
        """Where this stream's reads began on each partition."""
        self.skipped: Counter[str] = Counter()
        """Sessions handed out but not turned into samples, by reason (`needs_tokenizer`, ...),
        and re-sent samples dropped (`duplicate_sample`)."""

    # -- the checkpoint --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where to read on from, and the samples yielded since: save it with the model."""
        positions = self._positions()
        seen = set(self._dropped)
        for _, ids in self._pruned(positions):
            seen.update(ids)
        return {
            "version": STATE_VERSION,
            "positions": {_key(tp): at for tp, at in sorted(positions.items())},
            "seen": sorted(seen),
        }

    def take_consumed(self) -> tuple[list[tuple[str, str]], dict[str, tuple[int, int]]]:
        """The samples yielded since the last call, as (session id, trajectory id), and per
        partition the offsets the stream has read from and up to: what a training run records
        as its lineage (`rolltape.infra.lineage.LineageCallback`)."""
        consumed, self._consumed = self._consumed, []
        now = self._positions()
        began = {
            **(self._reader.read_from() if self._reader is not None else {}),
            **self._read_from,
        }
        span = {_key(tp): (began.get(tp, at), at) for tp, at in sorted(now.items())}
        return consumed, span

    def _positions(self) -> dict[Partition, int]:
        return self._reader.positions() if self._reader is not None else dict(self._restored)

    def _pruned(self, positions: Mapping[Partition, int]) -> list[tuple[str, list[str]]]:
        """The yielded trajectories a read from `positions` would meet again, forgetting the
        others (their sessions start before every position: never read again)."""
        kept = []
        for tid, (offsets, ids) in list(self._yielded.items()):
            if any(at >= positions.get(tp, 0) for tp, at in offsets.items()):
                kept.append((tid, ids))
            else:
                del self._yielded[tid]
        return kept

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Read on from a checkpoint's `state_dict`; call before iterating."""
        if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
            raise StreamStateError(
                f"not a TokenStream state of version {STATE_VERSION}: "
                f"{state.get('version') if isinstance(state, Mapping) else type(state).__name__}"
            )
        if self._reader is not None:
            raise StreamStateError("load_state_dict before iterating, not while reading")
        self._restored = {_partition(k): int(v) for k, v in state["positions"].items()}
        self._dropped = set(state["seen"])

    # -- reading ---------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        if torch.utils.data.get_worker_info() is not None:
            # A worker's copy would advance where the trainer's state_dict never sees it.
            raise RuntimeError(
                "a TokenStream is read in the trainer's own process, one per rank: use "
                "DataLoader(stream, num_workers=0)"
            )
        self._stopping.clear()
        feed = TrajectoryFeed(self._connection, **self._feed_args)
        feed.restore(self._restored)
        reader = _Reader(feed, self._prefetch)
        try:
            reader.start()
            self._reader = reader
            self._read_from = dict(self._restored)
            prune_at = _PRUNE_AT
            while True:
                item = self._next(reader)
                if item is None:
                    return
                yield from self._rows(item)
                reader.ack(item)
                if len(self._yielded) >= prune_at:
                    self._pruned(reader.positions())
                    prune_at = max(_PRUNE_AT, 2 * len(self._yielded))
        finally:
            if self._reader is not None:  # started: read on from here next time
                with contextlib.suppress(Exception):
                    self._restored = reader.positions()
            self._reader = None
            reader.close()

    def stop(self) -> None:
        """End the iteration before the next sample (from any thread): what was yielded stays
        counted in `state_dict`."""
        self._stopping.set()

    def _next(self, reader: _Reader) -> FeedItem | None:
        """The next item, or None once stopped or idle for `idle_stop_s`."""
        idle_since = time.monotonic()
        while not self._stopping.is_set():
            item = reader.next(_CHECK_EVERY_S)
            if item is not None:
                return None if self._stopping.is_set() else item
            idle = time.monotonic() - idle_since
            if self._idle_stop_s is not None and idle >= self._idle_stop_s:
                return None
        return None

    def _rows(self, item: FeedItem) -> Iterator[dict[str, Any]]:
        try:
            rows = stack_rows(
                self.stack,
                item.trajectory,
                self._tokenizer,
                tokenizer_label=self._tokenizer_label,
                score=self._score,
            )
        except SkipSession as exc:
            self.skipped[exc.reason] += 1
            return
        sid = item.trajectory.session_id
        _, keys = self._yielded.setdefault(sid, (dict(item.offsets), []))
        for sample, row in rows:
            # By session and branch, not by sample id: the trajectory id also digests the
            # derived chains, which can hold one more verdict when the session is read again.
            key = f"{sample.session_id}:{sample.branch}"
            if key in self._dropped or key in keys:
                self.skipped["duplicate_sample"] += 1
                continue
            keys.append(key)
            self._consumed.append((sample.session_id, sample.trajectory_id))
            yield row


class _Reader:
    """The feed on an event loop in a thread of its own, so the consumer keeps its heartbeats
    and its group membership while the trainer computes (a step longer than the session timeout
    would otherwise get it evicted); up to `prefetch` items wait, handed out but not
    acknowledged, so they hold the positions back until the trainer had them whole."""

    def __init__(self, feed: TrajectoryFeed, prefetch: int) -> None:
        self.feed = feed
        self.loop = asyncio.new_event_loop()
        self._prefetch = prefetch
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="rolltape-token-stream", daemon=True
        )
        self._thread.start()
        self._queue: asyncio.Queue[FeedItem] | None = None
        self._task: asyncio.Future[None] | None = None
        self._ready: collections.deque[FeedItem] = collections.deque()
        """Items handed over, not yet given to the trainer (they are not acknowledged)."""
        self._acks: list[FeedItem] = []
        """Items the trainer had whole, acknowledged at the next hand-over."""

    def _call(self, coro: Any, timeout: float | None = None) -> Any:
        """Run `coro` on the loop's thread and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> None:
        self._call(self._start())

    async def _start(self) -> None:
        self._queue = asyncio.Queue(maxsize=self._prefetch)
        await self.feed.start()
        self._task = asyncio.ensure_future(self._produce())

    async def _produce(self) -> None:
        assert self._queue is not None
        while True:
            await self._queue.put(await self.feed.__anext__())

    def next(self, timeout_s: float) -> FeedItem | None:
        """An item within `timeout_s`, else None; the feed's own error, when it failed. Items
        come over from the loop's thread in batches (one hand-over per batch, not per item),
        with the acknowledgements waiting to go the other way."""
        if not self._ready:
            acks, self._acks = self._acks, []
            self._ready.extend(self._call(self._take(timeout_s, acks)))
        return self._ready.popleft() if self._ready else None

    async def _take(self, timeout_s: float, acks: list[FeedItem]) -> list[FeedItem]:
        assert self._queue is not None and self._task is not None
        for item in acks:
            self.feed.ack(item)
        if self._queue.empty():
            getter = asyncio.ensure_future(self._queue.get())
            waiting: set[asyncio.Future[Any]] = {getter, self._task}
            await asyncio.wait(waiting, timeout=timeout_s, return_when=FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                if self._task.done():
                    self._task.result()  # the feed's error, raised in the trainer's thread
                return []
            taken = [getter.result()]
        else:
            taken = []
        while not self._queue.empty():
            taken.append(self._queue.get_nowait())
        return taken

    def ack(self, item: FeedItem) -> None:
        """Acknowledged with the next hand-over (before any `positions`)."""
        self._acks.append(item)

    def positions(self) -> dict[Partition, int]:
        """The feed's positions, after every acknowledgement asked for before (one loop)."""
        acks, self._acks = self._acks, []
        return self._call(self._positions(acks))  # type: ignore[no-any-return]

    async def _positions(self, acks: list[FeedItem]) -> dict[Partition, int]:
        for item in acks:
            self.feed.ack(item)
        return self.feed.positions()

    def read_from(self) -> dict[Partition, int]:
        return self._call(self._read_from())  # type: ignore[no-any-return]

    async def _read_from(self) -> dict[Partition, int]:
        return self.feed.read_from()

    def close(self) -> None:
        """Stop reading, leave the group (committing what was acknowledged), end the thread."""
        try:
            if self._task is not None or self._queue is not None:
                acks, self._acks = self._acks, []
                self._call(self._stop(acks), timeout=60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(60)
            self.loop.close()

    async def _stop(self, acks: list[FeedItem]) -> None:
        for item in acks:
            self.feed.ack(item)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        with contextlib.suppress(FeedNotStartedError):
            await self.feed.stop()


def hf_dataset(stream: TokenStream) -> Any:
    """The stream as a Hugging Face `datasets.IterableDataset` (rows as the stream yields them).
    Its position is the stream's: save `stream.state_dict()` with the checkpoint."""
    from datasets import IterableDataset

    def rows(stream: TokenStream) -> Iterator[dict[str, Any]]:
        yield from stream

    return IterableDataset.from_generator(rows, gen_kwargs={"stream": stream})


__all__ = ["STATE_VERSION", "StreamStateError", "TokenStream", "hf_dataset"]
