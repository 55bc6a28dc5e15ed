"""The raw topics' processed positions, committed to the worker's consumer group so Kafka's own
tools see them (`kafka-consumer-groups --describe --group <worker group>` shows each raw
partition's committed offset and lag, as for any consumer).

The worker reads the raw topics with a consumer it assigns by hand (`RawReader`), and where it
reads from is the position saved in its state table with the batch's session states: that is
its exactly-once design, and it stays the only source of truth. A consumer that is no member of
a group cannot commit to it while the group has members (the broker answers UNKNOWN_MEMBER_ID),
and faust's member commits only the partitions faust assigned it (the assignment topic), so the
positions are committed in one OffsetCommit request under faust's member id and generation:
the broker checks those, not which partitions the member was assigned. A commit that races a
rebalance is refused (ILLEGAL_GENERATION) and made again with the next generation; nothing reads
these offsets back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aiokafka.client import ConnectionGroup, CoordinationType
from aiokafka.errors import for_code
from aiokafka.protocol.commit import OffsetCommitRequest

from rolltape.schemas.clients import Partition

log = logging.getLogger("rolltape.worker")

_REBALANCING = frozenset(
    {"IllegalGenerationError", "UnknownMemberIdError", "RebalanceInProgressError"}
)
"""aiokafka's names of the answers that mean: commit again with the next generation."""
_COORDINATOR_MOVED = frozenset(
    {"NotCoordinatorForGroupError", "GroupCoordinatorNotAvailableError", "GroupLoadInProgressError"}
)
"""... and those that mean: find the group's coordinator again."""


class GroupPositions:
    """Commits positions to one group through one client (the raw reader's), as the member
    `member()` names (id and generation), only those that moved since the last commit."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self._committed: dict[Partition, int] = {}
        self._coordinator: int | None = None
        self._warned: set[str] = set()

    async def commit(
        self, client: Any, member: tuple[str, int] | None, positions: Mapping[Partition, int]
    ) -> int:
        """Commit what moved; how many partitions were committed (0 when nothing moved, the
        worker is no member yet, or the broker asked to try again later)."""
        moved = {tp: at for tp, at in positions.items() if self._committed.get(tp) != at}
        if not moved or member is None or member[1] < 0:
            return 0
        member_id, generation = member
        by_topic: dict[str, list[tuple[int, int, str]]] = {}
        for tp, offset in sorted(moved.items()):
            by_topic.setdefault(tp.topic, []).append((tp.partition, offset, ""))
        request = OffsetCommitRequest(
            self.group_id,
            generation,
            member_id,
            OffsetCommitRequest.DEFAULT_RETENTION_TIME,
            list(by_topic.items()),
        )
        try:
            if self._coordinator is None:
                self._coordinator = await client.coordinator_lookup(
                    CoordinationType.GROUP, self.group_id
                )
            response = await client.send(
                self._coordinator, request, group=ConnectionGroup.COORDINATION
            )
        except Exception as exc:  # the broker away, or the coordinator moved: next time
            self._coordinator = None
            log.debug("committing the group's positions: %s", exc)
            return 0
        done = 0
        for topic, partitions in response.topics:
            for partition, code in partitions:
                tp = Partition(topic, partition)
                if code == 0:
                    self._committed[tp] = moved[tp]
                    done += 1
                    continue
                name = for_code(code).__name__
                if name in _COORDINATOR_MOVED:
                    self._coordinator = None
                elif name in _REBALANCING:
                    pass
                elif name not in self._warned:
                    self._warned.add(name)
                    log.warning(
                        "the broker refused the worker's positions for group %s (%s): Kafka's "
                        "tools will not show its lag; the worker's own positions are unaffected",
                        self.group_id,
                        name,
                    )
        return done

    def forget(self, keep: set[Partition]) -> None:
        """Drop what was committed for partitions no longer read (they may come back moved)."""
        self._committed = {tp: at for tp, at in self._committed.items() if tp in keep}
