"""The contract of `LogReader` (rolltape.schemas.clients), on a real broker: what exports,
reports, verify, replay, the keys follower, cron's book, a resuming recorder, the harness's
follower and the worker's raw reader rely on when they read a topic outside any group.

A read to the end stops at the end offsets taken when it began, and the next read goes on from
there; it starts where the reader stands (its beginning, a seek, a broker time); each partition's
records come in offset order with their keys, headers and broker times; a read that makes no
progress says so; and reading moves no group's committed offsets."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from rolltape.schemas import Stream, topic_name
from rolltape.schemas.clients import (
    Fetched,
    GroupMember,
    LogReader,
    LogStalledError,
    Partition,
    ReaderNotStartedError,
    partitions_of,
)
from tests.support.waiting import wait_until_async

from .conftest import Topics

pytestmark = pytest.mark.integration


async def _write(topics: Topics, topic: str, per_partition: int, tag: str) -> None:
    async with topics.writer.started(topics.writer.producer(), "writing test records") as out:
        for partition in range(3):
            for n in range(per_partition):
                await out.send_and_wait(
                    topic,
                    f"{tag}-{partition}-{n}".encode(),
                    key=f"k{partition}".encode(),
                    partition=partition,
                    headers=[("n", str(n).encode())],
                )


async def _all(reader: LogReader, **kwargs: object) -> list[Fetched]:
    return [m async for batch in reader.read_to_end(**kwargs) for m in batch]  # type: ignore[arg-type]


def test_a_read_to_the_end_stops_at_the_ends_it_began_with_and_the_next_goes_on_from_there(
    topics: Topics,
) -> None:
    topic = topic_name(Stream.EVENTS, topics.prefix)

    async def scenario() -> None:
        await _write(topics, topic, 3, "first")
        partitions = await partitions_of(topics.reader, [topic])
        assert partitions == [Partition(topic, p) for p in range(3)]
        async with LogReader(topics.reader) as reader:
            reader.assign(partitions)
            await reader.seek_to_beginning()
            ends = await reader.end_offsets()
            first = await _all(reader)
            assert len(first) == sum(ends.values())
            for p in partitions:
                mine = [m for m in first if m.partition == p]
                assert [m.offset for m in mine] == list(range(ends[p] - 3, ends[p]))
                assert all(m.key == f"k{p.partition}".encode() for m in mine)
                assert [m.headers for m in mine] == [(("n", str(n).encode()),) for n in range(3)]
                assert all(m.timestamp_ms > 0 for m in mine)
            # Written after the read ended: the next read to the end gives exactly those.
            await _write(topics, topic, 2, "second")
            second = await _all(reader)
            assert sorted(m.value or b"" for m in second) == sorted(
                f"second-{p}-{n}".encode() for p in range(3) for n in range(2)
            )
            assert await _all(reader) == []

    asyncio.run(scenario())


def test_a_read_starts_where_the_reader_stands_and_stops_at_the_offsets_asked(
    topics: Topics,
) -> None:
    topic = topic_name(Stream.EVENTS, topics.prefix)
    before_ms = int(time.time() * 1000) - 1

    async def scenario() -> None:
        await _write(topics, topic, 4, "seek")
        zero = Partition(topic, 0)
        async with LogReader(topics.reader) as reader:
            reader.assign([zero])
            end = (await reader.end_offsets())[zero]
            reader.seek({zero: end - 3})
            read = await _all(reader, until={zero: end - 1})
            assert [m.offset for m in read] == [end - 3, end - 2]
            assert await reader.position(zero) == end - 1  # the next read starts past them
            await reader.seek_to_time(before_ms)
            assert [m.value for m in await _all(reader)] == [
                f"seek-0-{n}".encode() for n in range(4)
            ]
            await reader.seek_to_end()
            assert await _all(reader) == []

    asyncio.run(scenario())


def test_reading_moves_no_group_offsets(topics: Topics) -> None:
    topic = topic_name(Stream.EVENTS, topics.prefix)
    group = f"{topics.prefix}-reader-{uuid.uuid4().hex[:6]}"

    async def scenario() -> None:
        await _write(topics, topic, 2, "group")
        member = GroupMember(topics.reader, group_id=group, topics=[topic])
        async with member:
            every = [Partition(topic, p) for p in range(3)]

            async def owned() -> frozenset[Partition]:
                await member.fetch(timeout_s=0.1)
                return member.owned()

            await wait_until_async(owned, lambda o: o == set(every), what="the member owns all")
            assert await member.commit({p: 1 for p in every})
            before = {p: await member.committed(p) for p in every}
            assert set(before.values()) == {1}
            async with LogReader(topics.reader) as reader:
                reader.assign(every)
                await reader.seek_to_beginning()
                assert await _all(reader)
            assert {p: await member.committed(p) for p in every} == before

    asyncio.run(scenario())


def test_a_read_that_makes_no_progress_says_so(topics: Topics) -> None:
    topic = topic_name(Stream.EVENTS, topics.prefix)

    async def scenario() -> None:
        await _write(topics, topic, 1, "stall")
        zero = Partition(topic, 0)
        async with LogReader(topics.reader) as reader:
            reader.assign([zero])
            end = (await reader.end_offsets())[zero]
            reader.seek({zero: end})
            # Asked to read past the end: nothing can come, and the reader says so.
            with pytest.raises(LogStalledError, match="made no progress"):
                await _all(reader, until={zero: end + 1}, stall_s=0.5)

    asyncio.run(scenario())


def test_a_reader_used_before_it_starts_says_how_to_use_it(topics: Topics) -> None:
    with pytest.raises(ReaderNotStartedError, match="async with"):
        LogReader(topics.reader).assign([])
