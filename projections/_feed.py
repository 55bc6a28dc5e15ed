"""The live feed: judged trajectories as an async iterator, for training pipelines.

    async with TrajectoryFeed(connection, group_id="trainer-1",
                              selection=Selection(accepted="accepted")) as feed:
        async for item in feed:
            train_on(item.trajectory)          # or item.rows("sharegpt")

A consumer group reads the events topic and the verdicts and filtered topics (co-partitioned by
session: the range assignor gives one member the same partition of each). A session is folded
once its events chain has ended and the judge version has decided on it (its filter outcome for
agent sessions, the training audit for training runs, plus any judges named in `wait_for`).

Delivery is at least once. Offsets are committed only below the first record of every session
not yet handed out and processed (an item counts as processed when the next one is asked for), so
a crash or a rebalance re-reads every unfinished session whole. Items already handed out are
dropped by trajectory id within the process (a bounded window); a restarted consumer can hand an
item out again, with the same id, for the pipeline to drop.

A session that never ends (or is never judged) stays buffered and holds its partition's commits
back, unless `abandon_after_s` lets the feed give it up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, defaultdict
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Self

from rolltape.projections._errors import ProjectionError
from rolltape.projections._evidence import CHECKPOINT_TYPE
from rolltape.projections._export import Selection
from rolltape.projections._fold import FoldError, fold
from rolltape.projections._records import checked_event
from rolltape.projections._trajectory import Trajectory
from rolltape.projections.exporters import session_rows
from rolltape.schemas import DEFAULT_PREFIX, Stream, TypedEvent, topic_name, versioned_stream
from rolltape.schemas.clients import GroupMember, KafkaClientError, KafkaConnection, Partition

_log = logging.getLogger(__name__)


class ContentKeys(Protocol):
    """What opens the sealed content of sessions that name a subject, for a reader that runs
    for days (rolltape.infra.kafka.keyring.KeysFollower follows the keys topic)."""

    async def open(self, events: Sequence[TypedEvent]) -> tuple[list[TypedEvent] | None, str]:
        """The events with their content in place and how (`clear`, `opened`), or None and why
        not (`erased`, `key unavailable`)."""
        ...

    async def erased(self) -> list[str]:
        """Sessions whose data keys were destroyed since the last call."""
        ...


class FeedNotStartedError(ProjectionError, RuntimeError):
    """The feed was read before `start()` (or outside `async with TrajectoryFeed(...)`)."""


@dataclass(frozen=True)
class FeedItem:
    """One trajectory handed out by `TrajectoryFeed`. Its `id` is the trajectory id, the same on
    every redelivery, so a pipeline can drop repeats by it."""

    trajectory: Trajectory
    offsets: Mapping[Partition, int] = field(default_factory=dict)
    """Where the session's records start on each partition it was read from."""

    @property
    def id(self) -> str:
        return self.trajectory.trajectory_id

    def rows(self, format: str = "sharegpt") -> list[dict[str, Any]]:
        """The trajectory in an export format (sharegpt, openai, trl, turns)."""
        return session_rows(format, self.trajectory)


@dataclass
class _Open:
    events: list[TypedEvent] = field(default_factory=list)
    derived: list[TypedEvent] = field(default_factory=list)
    offsets: dict[Partition, int] = field(default_factory=dict)
    """The first offset of this session on each partition it was read from."""
    ended: bool = False
    decided: bool = False
    """Folded and queued to be handed out (never abandoned)."""
    last_seen: float = 0.0
    """Monotonic time of the session's latest record (for `abandon_after_s`)."""
    kind: str | None = None
    filtered: bool = False
    judges: set[str] = field(default_factory=set)


class _Revoked:
    """The feed's `Ownership`: before partitions go, commit what was handed out and forget the
    rest (whoever owns the partitions next re-reads them whole)."""

    def __init__(self, feed: TrajectoryFeed) -> None:
        self.feed = feed

    async def revoked(self, partitions: list[Partition]) -> None:
        await self.feed._commit()
        self.feed._open.clear()
        for partition in partitions:
            self.feed._next.pop(partition, None)
        for sid in self.feed._to_open:  # decided, not opened yet: read again with the rest
            self.feed._done.pop(sid, None)
        self.feed._to_open.clear()

    async def assigned(self, partitions: list[Partition]) -> None:
        feed = self.feed
        for partition in partitions:
            at = feed._restored.pop(partition, None)
            if at is not None:  # a trainer's checkpoint: read on from where it was
                feed._member.seek(partition, at)
            # Where it reads from: its position until a record comes, so `positions` names
            # every owned partition, one that stays idle too.
            try:
                start = await feed._member.position(partition)
            except KafkaClientError:
                continue
            feed._next.setdefault(partition, start)
            feed._first.setdefault(partition, start)


class TrajectoryFeed:
    """Judged trajectories from Kafka as an async iterator, delivered at least once (see the module
    docstring). Enter it with `async with`: the consumer has to be made inside the running loop."""

    def __init__(
        self,
        connection: KafkaConnection | str,
        *,
        group_id: str,
        prefix: str = DEFAULT_PREFIX,
        selection: Selection | None = None,
        wait_for: tuple[str, ...] = (),
        from_beginning: bool = True,
        commit_interval_s: float = 1.0,
        dedupe_window: int = 100_000,
        abandon_after_s: float | None = None,
        auto_ack: bool = True,
        keys: ContentKeys | None = None,
        rank: tuple[int, int] | None = None,
    ) -> None:
        """`abandon_after_s`: a session not decided and silent this long is dropped from the
        buffer (counted in `skipped["abandoned"]`) so it stops holding its partition's commits
        back; its later records are ignored. None (the default) waits forever: nothing is lost,
        but a session that never ends holds commits until a restart.

        `auto_ack`: an item counts as processed when the next one is asked for. Pipelines that
        hold items longer (a sink filling groups) pass False and call `ack` when an item's work
        is durable; unacknowledged items hold commits back and come again after a restart.

        `keys`: what opens sessions recorded with a subject. Without it (or where it cannot
        open one) such a session is left out, counted in `skipped` as `key_unavailable` or
        `erased`: a feed never hands out the empty fields sealing leaves in clear.

        `rank`: (rank, world size) of a data-parallel trainer's process: the members of the
        group share the partitions by rank (`GroupMember(rank=...)`), so ranks read disjoint
        sessions."""
        if isinstance(connection, str):
            connection = KafkaConnection.plaintext(connection)
        self._connection = connection
        self.selection = selection or Selection()
        self.wait_for = set(wait_for)
        version = self.selection.judge_version
        self._verdicts = versioned_stream(Stream.VERDICTS, version)
        self._filtered = versioned_stream(Stream.FILTERED, version)
        self._topics = [
            topic_name(s, prefix) for s in (Stream.EVENTS, Stream.VERDICTS, Stream.FILTERED)
        ]
        self._member_instance: GroupMember | None = None
        self._group_id = group_id
        self._from_beginning = from_beginning
        self._open: dict[str, _Open] = {}
        self._done: OrderedDict[str, None] = OrderedDict()
        self._seen_ids: OrderedDict[str, None] = OrderedDict()
        self._window = dedupe_window
        self._abandon_after_s = abandon_after_s
        self._auto_ack = auto_ack
        self._ready: asyncio.Queue[tuple[str, Trajectory]] = asyncio.Queue()
        self._in_hand: str | None = None
        self._commit_every = commit_interval_s
        self._last_commit = time.monotonic()
        self._keys = keys
        self._rank = rank
        self._next: dict[Partition, int] = {}
        """Per partition, the offset after the last record fetched from it."""
        self._first: dict[Partition, int] = {}
        """Per partition, the offset of the first record this feed fetched from it."""
        self._restored: dict[Partition, int] = {}
        """Positions to read on from when a partition is assigned (`restore`)."""
        self._to_open: list[str] = []
        """Sessions decided on whose content is sealed: opened after the batch they ended in."""
        self.skipped: dict[str, int] = defaultdict(int)
        """Sessions decided on but not handed out, by reason (selection, unreadable records)."""

    @property
    def _member(self) -> GroupMember:
        if self._member_instance is None:
            raise FeedNotStartedError(
                "the feed is not started: use `async with TrajectoryFeed(...)`"
            )
        return self._member_instance

    async def start(self) -> Self:
        member = GroupMember(
            self._connection,
            group_id=self._group_id,
            topics=self._topics,
            ownership=_Revoked(self),
            from_beginning=self._from_beginning,
            co_partitioned=True,
            rank=self._rank,
            fetch_max_wait_ms=100,
        )
        self._member_instance = await member.start()
        return self

    async def stop(self, *, commit: bool = True) -> None:
        """Leave the group. With `commit` (the default) the item in hand counts as processed and
        the safe offsets are committed; without it nothing more is committed, as after a crash,
        so the next consumer of the group gets every uncommitted session again."""
        if commit and self._auto_ack:
            self._finish_in_hand()
        try:
            if commit:
                await self._commit()
        finally:
            await self._member.stop()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __aiter__(self) -> AsyncIterator[FeedItem]:
        return self

    def ack(self, item: FeedItem | Trajectory) -> None:
        """Mark an item processed: its records no longer hold commits back."""
        trajectory = item.trajectory if isinstance(item, FeedItem) else item
        self._open.pop(trajectory.session_id, None)

    async def __anext__(self) -> FeedItem:
        while (item := self.next_ready()) is None:
            await self._poll()
        return item

    def next_ready(self) -> FeedItem | None:
        """The next item when one is decided and waiting, else None (nothing is read): what a
        caller that drives the feed from synchronous code takes before it waits."""
        if self._auto_ack:
            self._finish_in_hand()
        if self._ready.empty():
            return None
        sid, trajectory = self._ready.get_nowait()
        self._in_hand = sid
        session = self._open.get(sid)
        return FeedItem(trajectory, dict(session.offsets) if session is not None else {})

    def positions(self) -> dict[Partition, int]:
        """Per owned partition, where a reader must start again to lose nothing handed out
        after the items acknowledged so far: before the first record of every session not
        acknowledged, else after the last record fetched. Sessions acknowledged after that
        point come again on a restart (`FeedItem.offsets` tells which). What a trainer saves
        in its checkpoint (`restore`); the group's commits are the same figure, committed."""
        owned = self._member.owned()
        at = {tp: offset for tp, offset in self._next.items() if tp in owned}
        for session in self._open.values():
            for tp, first in session.offsets.items():
                if tp in at and first < at[tp]:
                    at[tp] = first
        return at

    def read_from(self) -> dict[Partition, int]:
        """Per partition, where this feed's reads began (its first record fetched)."""
        return dict(self._first)

    def restore(self, positions: Mapping[Partition, int]) -> None:
        """Read each partition from `positions` when it is assigned (a trainer's checkpoint,
        from `positions`), instead of from the group's commits. Call before `start`."""
        self._restored = dict(positions)

    async def until(self, stop: asyncio.Event) -> AsyncIterator[FeedItem]:
        """The items, until `stop` is set (a signal handler's event): a wait for the next item
        is cancelled, not finished, when the stop comes first."""
        while not stop.is_set():
            waiter = asyncio.ensure_future(self.__anext__())
            stopper = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if waiter not in done:
                waiter.cancel()
                return
            yield waiter.result()

    # -- internals ---------------------------------------------------------------------------------
    def _remember(self, seen: OrderedDict[str, None], key: str) -> None:
        seen[key] = None
        if len(seen) > self._window:
            seen.popitem(last=False)

    def _finish_in_hand(self) -> None:
        if self._in_hand is not None:
            self._open.pop(self._in_hand, None)
            self._in_hand = None

    async def _poll(self) -> None:
        for record in await self._member.fetch(timeout_s=0.2, max_records=2000):
            self._add(record.partition, record.offset, record.key, record.value)
        if self._to_open:
            await self._open_sealed()
        if time.monotonic() - self._last_commit >= self._commit_every:
            await self._commit()

    def _add(self, tp: Partition, offset: int, key: bytes | None, value: bytes | None) -> None:
        self._next[tp] = max(self._next.get(tp, 0), offset + 1)
        self._first.setdefault(tp, offset)
        if key is None or value is None:
            return
        sid = key.decode("utf-8", "replace")
        if sid in self._done:
            return  # a late verdict or a redelivery of a session already decided
        env, problem = checked_event(value)
        if env is None:
            self.skipped[f"{problem}_record"] += 1
            return
        stream = env.stream
        if stream not in (Stream.EVENTS.value, self._verdicts, self._filtered):
            return  # another judge version's chain: never holds this feed's commits back
        if env.type == CHECKPOINT_TYPE:
            return  # the judge's checkpoint logs are no session
        session = self._open.get(sid)
        if (
            stream == Stream.EVENTS.value
            and env.type != "session_started"
            and (session is None or not session.events)
        ):
            # Its start lies before where this read began, and a session holds the commits
            # (and `positions`) back until it is done: it was handed out or left out before.
            self._open.pop(sid, None)
            self._remember(self._done, sid)
            self.skipped["started_before_read"] += 1
            return
        if session is None:
            session = self._open[sid] = _Open()
        session.offsets[tp] = min(session.offsets.get(tp, offset), offset)
        session.last_seen = time.monotonic()
        if stream == Stream.EVENTS.value:
            session.events.append(env)
            if env.type == "session_started":
                session.kind = env.payload.get("kind", "agent")
            elif env.type == "session_ended":
                session.ended = True
        else:
            session.derived.append(env)
            if env.type == "filter_outcome":
                session.filtered = True
            elif env.type == "verdict":
                session.judges.add(str(env.payload.get("judge")))
        self._maybe_ready(sid, session)

    def _maybe_ready(self, sid: str, session: _Open) -> None:
        if not session.ended or session.kind is None:
            return
        decided = (
            "training_audit" in session.judges if session.kind == "training" else session.filtered
        )
        if not decided or not self.wait_for <= session.judges:
            return
        self._remember(self._done, sid)
        if self._keys is not None and any(
            "sealed" in e.payload for e in (*session.events, *session.derived)
        ):
            self._to_open.append(sid)
            return
        self._hand_out(sid, session, session.events, session.derived)

    async def _open_sealed(self) -> None:
        assert self._keys is not None
        pending, self._to_open = self._to_open, []
        for sid in pending:
            session = self._open.get(sid)
            if session is not None:  # verdicts about its content are sealed too
                given = [*session.events, *session.derived]
                events, access = await self._keys.open(given)
            if session is None or self._open.get(sid) is not session:
                # Revoked meanwhile: whoever owns it next (this feed too) reads it again whole.
                self._done.pop(sid, None)
                continue
            if events is None:
                self.skipped[access.replace(" ", "_")] += 1  # erased, key_unavailable
                self._open.pop(sid, None)
                continue
            count = len(session.events)
            self._hand_out(sid, session, events[:count], events[count:])

    def _hand_out(
        self, sid: str, session: _Open, events: list[TypedEvent], derived: list[TypedEvent]
    ) -> None:
        try:
            trajectory = fold(events, derived, judge_version=self.selection.judge_version)
        except FoldError as exc:
            self.skipped[exc.reason] += 1
            self._open.pop(sid, None)
            return
        reason = self.selection.reason_to_skip(trajectory)
        if reason is None and trajectory.trajectory_id in self._seen_ids:
            reason = "duplicate"
        if reason is not None:
            self.skipped[reason] += 1
            self._open.pop(sid, None)
            return
        self._remember(self._seen_ids, trajectory.trajectory_id)
        session.decided = True
        self._ready.put_nowait((sid, trajectory))

    def _abandon_idle(self, now: float) -> None:
        if self._abandon_after_s is None:
            return
        for sid, session in list(self._open.items()):
            if not session.decided and now - session.last_seen > self._abandon_after_s:
                del self._open[sid]
                self._remember(self._done, sid)
                self.skipped["abandoned"] += 1
                _log.warning(
                    "session %s undecided for %.0f s: abandoned", sid, now - session.last_seen
                )

    async def _drop_started_before_read(self) -> None:
        """Forget the sessions of which only derived records came (a verdict, a filter outcome)
        once their events partition is read to its end: their start lies before where the read
        of the events began (the worker writes a derived record after reading the session's
        start), so they were handed out or left out before, and would hold the commits back."""
        orphans = [sid for sid, s in self._open.items() if not s.events and not s.decided]
        if not orphans:
            return
        events_topic = self._topics[0]
        owned = self._member.owned()
        wanted = {
            Partition(events_topic, tp.partition)
            for sid in orphans
            for tp in self._open[sid].offsets
        } & owned
        try:
            ends = await self._member.end_offsets(wanted)
        except KafkaClientError:
            return
        read = {tp.partition for tp in wanted if self._next.get(tp, -1) >= ends.get(tp, 0)}
        for sid in orphans:
            if all(tp.partition in read for tp in self._open[sid].offsets):
                del self._open[sid]
                self._remember(self._done, sid)
                self.skipped["started_before_read"] += 1

    async def _commit(self) -> None:
        """Commit, per partition, the first offset still needed by an open session (or the
        position when none is)."""
        self._last_commit = time.monotonic()
        self._abandon_idle(self._last_commit)
        await self._drop_started_before_read()
        assignment = self._member.owned()
        if not assignment:
            return
        offsets: dict[Partition, int] = {}
        for tp in assignment:
            try:
                offsets[tp] = await self._member.position(tp)
            except KafkaClientError:
                continue  # no position yet (a partition just assigned): nothing to commit
        for session in self._open.values():
            for tp, first in session.offsets.items():
                if tp in offsets and first < offsets[tp]:
                    offsets[tp] = first
        if offsets:
            await self._member.commit(offsets)  # False: moved meanwhile, its new owner re-reads
