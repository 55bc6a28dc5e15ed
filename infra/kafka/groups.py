"""The consumer groups that read rolltape's topics, and how far behind each is: what
`rolltape broker status` shows beside the nodes, from the offsets each group committed (the
worker commits the raw topics' processed positions to its group for this, see
processors/worker/_group_positions.py), as Kafka's `kafka-consumer-groups --describe` reads them.
"""

from __future__ import annotations

import contextlib
from typing import Any, cast

from pydantic import BaseModel

from rolltape.schemas.clients import KafkaClientError, KafkaConnection, LogReader, Partition


class TopicLag(BaseModel):
    """One topic of a group: records past what it committed, over the partitions it committed."""

    topic: str
    partitions: int
    lag: int


class GroupLag(BaseModel):
    """A consumer group reading the prefix's topics, its members, and its lag per topic."""

    group: str
    members: int | None
    """None: the group could not be described (only its offsets were read)."""
    state: str | None = None
    topics: list[TopicLag] = []

    @property
    def lag(self) -> int:
        return sum(t.lag for t in self.topics)


async def group_lags(connection: KafkaConnection, prefix: str) -> list[GroupLag]:
    """Every group `connection` may see that committed offsets on a topic of `prefix` (its
    `prefix.` topics), with each such topic's lag, by group name."""
    doing = f"listing the consumer groups on {connection}"
    found: list[GroupLag] = []
    async with connection.started(connection.admin(), doing) as admin:
        listed = await admin.list_consumer_groups()
        names = sorted({str(g[0]) for g in listed})
        committed: dict[str, dict[Partition, int]] = {}
        for name in names:
            with contextlib.suppress(Exception):  # not authorised to this one: not ours to show
                offsets = await admin.list_consumer_group_offsets(name)
                mine = {
                    Partition(tp.topic, tp.partition): int(o.offset)
                    for tp, o in offsets.items()
                    if tp.topic.startswith(f"{prefix}.") and o.offset >= 0
                }
                if mine:
                    committed[name] = mine
        described: dict[str, tuple[str, int]] = {}
        if committed:
            with contextlib.suppress(Exception):  # members unknown, lag still shown
                for response in await admin.describe_consumer_groups(list(committed)):
                    for entry in cast(Any, response).groups:
                        error, name, state, _, _, members = entry[:6]
                        if error == 0:
                            described[str(name)] = (str(state), len(members))
    if not committed:
        return []
    ends = await _end_offsets(connection, {tp for c in committed.values() for tp in c})
    for name, offsets in sorted(committed.items()):
        by_topic: dict[str, list[int]] = {}
        for tp, at in offsets.items():
            by_topic.setdefault(tp.topic, []).append(max(0, ends.get(tp, at) - at))
        state, members = described.get(name, (None, None))
        found.append(
            GroupLag(
                group=name,
                members=members,
                state=state,
                topics=[
                    TopicLag(topic=t, partitions=len(lags), lag=sum(lags))
                    for t, lags in sorted(by_topic.items())
                ],
            )
        )
    return found


async def _end_offsets(
    connection: KafkaConnection, partitions: set[Partition]
) -> dict[Partition, int]:
    try:
        async with LogReader(connection) as reader:
            return await reader.end_offsets(sorted(partitions))
    except KafkaClientError:
        return {}
