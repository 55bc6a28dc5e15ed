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
  record of every session not yet yielded whole. `state_dict` saves it with the ids of the
  samples yielded since, and `load_state_dict` reads on from there and drops those ids, so a
  trainer restored from its checkpoint repeats no sample the checkpoint had seen, and gets
  again every sample it saw after the checkpoint (the restored model never learned from them).
- At least once, deduplicated by id: a sample's id is `<trajectory id>:<branch>`, the same on
  every redelivery; within a run a re-sent trajectory is dropped by the feed.

The feed is asynchronous and a dataset's `__iter__` is not: the stream runs the feed on its own
event loop in the caller's thread, one item at a time, so what `state_dict` reports is exactly
what the caller was given (no thread reads ahead of it). A `DataLoader` must use the stream in
its main process (`num_workers=0`): the ranks, not loader workers, share the partitions.

Needs torch (the `torch` extra); `hf_dataset` needs `datasets`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import torch.utils.data

from rolltape.projections._errors import ProjectionError
from rolltape.projections._export import Selection
from rolltape.projections._feed import ContentKeys, FeedItem, TrajectoryFeed
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
    ) -> None:
        """`idle_stop_s`: end the iteration once no sample came for this long (an epoch over
        what the log holds); None follows the log for ever. The other arguments are the feed's
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
        self._feed: TrajectoryFeed | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._restored: dict[Partition, int] = {}
        self._yielded: dict[str, tuple[dict[Partition, int], list[str]]] = {}
        """Per trajectory yielded, its sessions' first offsets and the sample ids yielded."""
        self._dropped: set[str] = set()
        """Sample ids a restored checkpoint had seen: never yielded again."""
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
        began = {**(self._feed.read_from() if self._feed is not None else {}), **self._read_from}
        span = {_key(tp): (began.get(tp, at), at) for tp, at in sorted(now.items())}
        return consumed, span

    def _positions(self) -> dict[Partition, int]:
        return self._feed.positions() if self._feed is not None else dict(self._restored)

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
        if self._feed is not None:
            raise StreamStateError("load_state_dict before iterating, not while reading")
        self._restored = {_partition(k): int(v) for k, v in state["positions"].items()}
        self._dropped = set(state["seen"])

    # -- reading ---------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise RuntimeError(
                "a TokenStream is read by one process per rank: use DataLoader(num_workers=0)"
            )
        self._stopping.clear()
        loop = self._loop = asyncio.new_event_loop()
        feed = TrajectoryFeed(self._connection, **self._feed_args)
        feed.restore(self._restored)
        try:
            loop.run_until_complete(feed.start())
            self._feed = feed
            prune_at = _PRUNE_AT
            self._read_from = dict(self._restored)
            while True:
                item = self._next(loop, feed)
                if item is None:
                    return
                yield from self._rows(item)
                feed.ack(item)
                if len(self._yielded) >= prune_at:
                    self._pruned(feed.positions())
                    prune_at = max(_PRUNE_AT, 2 * len(self._yielded))
        finally:
            self._restored = self._feed.positions() if self._feed is not None else {}
            self._feed = None
            with contextlib.suppress(Exception):
                loop.run_until_complete(feed.stop())
            loop.close()
            self._loop = None

    def stop(self) -> None:
        """End the iteration at the next sample (from any thread): what was yielded stays
        counted in `state_dict`."""
        self._stopping.set()

    def _next(self, loop: asyncio.AbstractEventLoop, feed: TrajectoryFeed) -> FeedItem | None:
        """The next item, or None once stopped or idle for `idle_stop_s`. One wait for the item
        goes on across the checks, so the feed is never interrupted mid-read."""
        ready = feed.next_ready()
        if ready is not None:
            return ready
        waiting = loop.create_task(feed.__anext__())
        idle_since = time.monotonic()
        try:
            while not self._stopping.is_set():
                loop.run_until_complete(asyncio.wait({waiting}, timeout=_CHECK_EVERY_S))
                if waiting.done():
                    return waiting.result()
                idle = time.monotonic() - idle_since
                if self._idle_stop_s is not None and idle >= self._idle_stop_s:
                    break
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(waiting)
            return None
        except BaseException:
            waiting.cancel()
            raise

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
        _, ids = self._yielded.setdefault(item.id, (dict(item.offsets), []))
        for sample, row in rows:
            if sample.sample_id in self._dropped or sample.sample_id in ids:
                self.skipped["duplicate_sample"] += 1
                continue
            ids.append(sample.sample_id)
            self._consumed.append((sample.session_id, sample.trajectory_id))
            yield row


def hf_dataset(stream: TokenStream) -> Any:
    """The stream as a Hugging Face `datasets.IterableDataset` (rows as the stream yields them).
    Its position is the stream's: save `stream.state_dict()` with the checkpoint."""
    from datasets import IterableDataset

    def rows(stream: TokenStream) -> Iterator[dict[str, Any]]:
        yield from stream

    return IterableDataset.from_generator(rows, gen_kwargs={"stream": stream})


__all__ = ["STATE_VERSION", "StreamStateError", "TokenStream", "hf_dataset"]
