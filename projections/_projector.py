"""The projector: folded trajectories published to the compacted trajectories topic.

Runs the live feed (so a trajectory is published once its session is decided by the judge
version) and writes each trajectory, canonically encoded, keyed by session (`sid` for the live
version, `sid@V` for version V): compaction keeps the latest trajectory per session and version,
so the topic is a table of every decided session that any consumer can read from the start. The
value's `trajectory_id` also travels as a header, for consumers that dedupe without parsing.
"""

from __future__ import annotations

import asyncio
import logging

from rolltape.projections._export import Selection
from rolltape.projections._feed import TrajectoryFeed
from rolltape.projections._trajectory import Trajectory
from rolltape.schemas import DEFAULT_PREFIX, LIVE_JUDGE_VERSION, Stream, canonical_bytes, topic_name
from rolltape.schemas.clients import KafkaConnection, KafkaRecordError, kafka_errors

_log = logging.getLogger(__name__)


def trajectory_record(trajectory: Trajectory) -> tuple[bytes, bytes]:
    """(key, value) of a trajectory on the trajectories topic."""
    key = trajectory.session_id
    if trajectory.judge_version != LIVE_JUDGE_VERSION:
        key += f"@{trajectory.judge_version}"
    return key.encode(), canonical_bytes(trajectory.model_dump(mode="python"))


async def run_projector(
    connection: KafkaConnection,
    *,
    prefix: str = DEFAULT_PREFIX,
    judge_version: str = LIVE_JUDGE_VERSION,
    group_id: str | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """Publish trajectories until `stop` is set; returns how many were published."""
    selection = Selection(judge_version=judge_version, include_unfinished=True, include_broken=True)
    stop = stop or asyncio.Event()
    published = 0
    doing = f"publishing trajectories on {connection}"
    feed = TrajectoryFeed(
        connection,
        group_id=group_id or f"{prefix}-projector-{judge_version}",
        prefix=prefix,
        selection=selection,
    )
    # Each trajectory is awaited alone: nothing to linger for (as before the one chain producer).
    async with connection.started(connection.chain_producer(linger_ms=0), doing) as producer, feed:
        async for item in feed.until(stop):
            key, value = trajectory_record(item.trajectory)
            try:
                # Translated here to tell a refused record (skipped) from an outage.
                with kafka_errors("publishing a trajectory"):
                    await producer.send_and_wait(
                        topic_name(Stream.TRAJECTORIES, prefix),
                        value,
                        key=key,
                        headers=[("trajectory_id", item.id.encode())],
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
            published += 1
    return published
