"""The contract of `GroupMember` (rolltape.schemas.clients), on a real broker: what the live
feed, replay's group members and cron's schedulers rely on when they share partitions.

Members of one group own disjoint partitions that cover the topic; a member that joins takes
some over only after they were revoked from their owner; a member that leaves, or dies, loses
its partitions to the others; a member that starts reads from where the group committed."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid

import pytest

from rolltape.schemas import Stream, topic_name
from rolltape.schemas.clients import Fetched, GroupMember, Partition
from tests.support.waiting import Output, wait_until_async

from .conftest import Topics

pytestmark = pytest.mark.integration

PER_PARTITION = 4


class Told:
    """An `Ownership` that keeps what the member was told, in order."""

    def __init__(self) -> None:
        self.said: list[tuple[str, list[int]]] = []

    async def assigned(self, partitions: list[Partition]) -> None:
        self.said.append(("assigned", [p.partition for p in partitions]))

    async def revoked(self, partitions: list[Partition]) -> None:
        self.said.append(("revoked", [p.partition for p in partitions]))


class Reading:
    """A member fetching on a task of its own, as every user does (fetching is what keeps a
    member in its group), keeping what it read."""

    def __init__(self, member: GroupMember) -> None:
        self.member = member
        self.read: list[Fetched] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.read += await self.member.fetch(timeout_s=0.1)

    def __enter__(self) -> Reading:
        self._task = asyncio.ensure_future(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()

    def owned(self) -> set[int]:
        if self._task is not None and self._task.done() and not self._task.cancelled():
            self._task.result()  # a fetch that failed fails the test with its error
        return {p.partition for p in self.member.owned()}


async def _write(topics: Topics, topic: str) -> None:
    async with topics.writer.started(topics.writer.producer(), "writing test records") as out:
        for partition in range(3):
            for n in range(PER_PARTITION):
                await out.send_and_wait(topic, f"{partition}-{n}".encode(), partition=partition)


def test_members_share_the_partitions_hand_them_over_and_start_where_the_group_committed(
    topics: Topics,
) -> None:
    topic = topic_name(Stream.EVENTS, topics.prefix)
    group = f"{topics.prefix}-contract-{uuid.uuid4().hex[:6]}"
    every = {0, 1, 2}

    async def scenario() -> None:
        await _write(topics, topic)
        told_a = Told()
        first = GroupMember(topics.reader, group_id=group, topics=[topic], ownership=told_a)
        async with first:
            with Reading(first) as a:
                await wait_until_async(a.owned, lambda owned: owned == every, what="a owns all")
                await wait_until_async(
                    lambda: len(a.read), lambda n: n == 3 * PER_PARTITION, what="a reads all"
                )
                # Done up to here: the first two records of each partition.
                done = {Partition(topic, p): 2 for p in every}
                assert await first.commit(done)
                assert {await first.committed(p) for p in done} == {2}

                told_b = Told()
                second = GroupMember(
                    topics.reader, group_id=group, topics=[topic], ownership=told_b
                )
                async with second:
                    with Reading(second) as b:
                        await wait_until_async(
                            lambda: (a.owned(), b.owned()),
                            lambda owned: owned[0] and owned[1] and owned[0] | owned[1] == every,
                            what="a and b to share the partitions",
                        )
                        assert not a.owned() & b.owned()
                        # What b got was revoked from a first.
                        revoked = {p for kind, ps in told_a.said if kind == "revoked" for p in ps}
                        assert b.owned() <= revoked
                        # b starts where the group committed: offsets 2 and on.
                        await wait_until_async(
                            lambda: len(b.read),
                            lambda n: n == (PER_PARTITION - 2) * len(b.owned()),
                            what="b reads its partitions from the committed offsets",
                        )
                        assert {r.offset for r in b.read} == set(range(2, PER_PARTITION))
                # b left: a owns everything again.
                await wait_until_async(a.owned, lambda owned: owned == every, what="a owns all")
        assert ("assigned", [0, 1, 2]) in told_a.said

    asyncio.run(scenario())


CHILD = """
import asyncio, sys
from rolltape.infra.broker import require_connection
from rolltape.infra.settings import Settings
from rolltape.schemas import Role
from rolltape.schemas.clients import GroupMember

async def main():
    member = GroupMember(
        require_connection(Settings(), Role.READER), group_id=sys.argv[1], topics=[sys.argv[2]],
        session_timeout_ms=6000, heartbeat_interval_ms=1000,
    )
    async with member:
        while True:
            await member.fetch(timeout_s=0.1)
            print(sorted(p.partition for p in member.owned()), flush=True)

asyncio.run(main())
"""


def test_a_member_that_dies_loses_its_partitions_to_the_survivors(topics: Topics) -> None:
    topic = topic_name(Stream.EVENTS, topics.prefix)
    group = f"{topics.prefix}-contract-{uuid.uuid4().hex[:6]}"

    async def scenario() -> None:
        survivor = GroupMember(topics.reader, group_id=group, topics=[topic])
        async with survivor:
            with Reading(survivor) as a:
                await wait_until_async(a.owned, lambda owned: owned == {0, 1, 2}, what="a owns all")
                child = subprocess.Popen(
                    [sys.executable, "-c", CHILD, group, topic],
                    env=topics.env(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                out = Output(child.stdout, "the child member's stdout")
                err = Output(child.stderr, "the child member's stderr")
                try:
                    await wait_until_async(
                        a.owned,
                        lambda owned: 0 < len(owned) < 3,
                        what="the child member to take some partitions",
                        abort=lambda: None if child.poll() is None else "the child exited",
                        explain=lambda: out.text + err.text,
                    )
                finally:
                    # Dead, not leaving: no goodbye to the group, only a session that expires.
                    child.send_signal(signal.SIGKILL)
                    child.wait()
                await wait_until_async(
                    a.owned,
                    lambda owned: owned == {0, 1, 2},
                    what="the survivor to take over the dead member's partitions",
                )

    asyncio.run(scenario())
