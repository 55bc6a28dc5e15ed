"""The projector: folded trajectories published to the compacted trajectories topic.

Runs the live feed (so a trajectory is published once its session is decided by the judge
version) and writes each trajectory, canonically encoded, keyed by session (`sid` for the live
version, `sid@V` for version V): compaction keeps the latest trajectory per session and version,
so the topic is a table of every decided session that any consumer can read from the start. The
value's `trajectory_id` also travels as a header, for consumers that dedupe without parsing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from rolltape.projections._export import Selection
from rolltape.projections._feed import ContentKeys, TrajectoryFeed
from rolltape.projections._trajectory import Trajectory
from rolltape.schemas import DEFAULT_PREFIX, LIVE_JUDGE_VERSION, Stream, canonical_bytes, topic_name
from rolltape.schemas.clients import KafkaConnection, KafkaRecordError, kafka_errors

_log = logging.getLogger(__name__)


def _trajectory_key(session_id: str, judge_version: str) -> bytes:
    key = session_id if judge_version == LIVE_JUDGE_VERSION else f"{session_id}@{judge_version}"
    return key.encode()


def trajectory_record(trajectory: Trajectory) -> tuple[bytes, bytes]:
    """(key, value) of a trajectory on the trajectories topic."""
    key = _trajectory_key(trajectory.session_id, trajectory.judge_version)
    return key, canonical_bytes(trajectory.model_dump(mode="python"))


ERASURE_POLL_S = 1.0
"""How often the projector looks for erased sessions while no trajectory comes."""


async def _take_back_erased(
    producer: Any,
    keys: ContentKeys,
    topic: str,
    judge_version: str,
    stop: asyncio.Event,
    erased: set[str],
) -> None:
    """Tombstone the trajectory of every erased session (compaction then removes the published
    trajectory, content and all), noting each in `erased` first: a trajectory published after
    its tombstone is tombstoned again (`_publish`)."""
    while not stop.is_set():
        for sid in await keys.erased():
            erased.add(sid)
            with kafka_errors("tombstoning an erased session's trajectory"):
                await producer.send_and_wait(topic, None, key=_trajectory_key(sid, judge_version))
            _log.info("session %s erased: its trajectory is tombstoned", sid)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), ERASURE_POLL_S)


async def run_projector(
    connection: KafkaConnection,
    *,
    prefix: str = DEFAULT_PREFIX,
    judge_version: str = LIVE_JUDGE_VERSION,
    group_id: str | None = None,
    stop: asyncio.Event | None = None,
    keys: ContentKeys | None = None,
) -> int:
    """Publish trajectories until `stop` is set; returns how many were published. `keys` opens
    sessions recorded with a subject (without it they are left out), and says which were erased:
    their trajectories are tombstoned."""
    selection = Selection(judge_version=judge_version, include_unfinished=True, include_broken=True)
    stop = stop or asyncio.Event()
    doing = f"publishing trajectories on {connection}"
    feed = TrajectoryFeed(
        connection,
        group_id=group_id or f"{prefix}-projector-{judge_version}",
        prefix=prefix,
        selection=selection,
        keys=keys,
    )
    topic = topic_name(Stream.TRAJECTORIES, prefix)
    # Each trajectory is awaited alone: nothing to linger for (as before the one chain producer).
    async with connection.started(connection.chain_producer(linger_ms=0), doing) as producer, feed:
        eraser = None
        erased: set[str] = set()
        if keys is not None:
            eraser = asyncio.create_task(
                _take_back_erased(producer, keys, topic, judge_version, stop, erased)
            )
            # A failure there (the broker gone) stops the projector, and is raised below.
            eraser.add_done_callback(lambda task: _stop_on_failure(task, stop))
        try:
            published = await _publish(producer, feed, topic, stop, erased)
        finally:
            if eraser is not None:
                eraser.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await eraser
    return published


def _stop_on_failure(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    if not task.cancelled() and task.exception() is not None:
        stop.set()


async def _publish(
    producer: Any, feed: TrajectoryFeed, topic: str, stop: asyncio.Event, erased: set[str]
) -> int:
    published = 0
    async for item in feed.until(stop):
        key, value = trajectory_record(item.trajectory)
        try:
            # Translated here to tell a refused record (skipped) from an outage.
            with kafka_errors("publishing a trajectory"):
                await producer.send_and_wait(
                    topic, value, key=key, headers=[("trajectory_id", item.id.encode())]
                )
        except KafkaRecordError as exc:
            # Mostly the topic's max.message.bytes; the session stays exportable.
            _log.warning(
                "trajectory of %s (%d bytes) not published: %s",
                item.trajectory.session_id,
                len(value),
                exc,
            )
            continue
        if item.trajectory.session_id in erased:  # erased while it was being published
            with kafka_errors("tombstoning an erased session's trajectory"):
                await producer.send_and_wait(topic, None, key=key)
            continue
        published += 1
    return published
