"""The worker's state store: one contract, held by every adapter. (A stand-in faust table and
producer are fine here: this pins what the adapter does with them; the integration tests run the
worker, its table and its changelog against a real broker.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from rolltape.processors.worker._states import ChangelogTable, MemoryStates, StateStore

CHANGELOG = "worker-sessions-changelog"


class FaustTable:
    """What `ChangelogTable` uses of a faust table: its local store and its changelog topic."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.changelog_topic = SimpleNamespace(get_topic_name=lambda: CHANGELOG)

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self.data.items())


class Producer:
    """Records what it sends; fails the first `failures` sends as an unreachable broker does."""

    def __init__(self, failures: int = 0) -> None:
        self.sent: list[tuple[str, bytes | None, bytes, Any]] = []
        self.failures = failures

    async def send_all(self, records: list[tuple[str, bytes | None, bytes, Any]]) -> None:
        if self.failures:
            self.failures -= 1
            raise KafkaConnectionError()
        self.sent.extend(records)


class Adapter:
    """A store and what a restarted worker would restore from it."""

    def __init__(self, kind: str, producer: Producer) -> None:
        self.producer = producer
        self.memory = MemoryStates()
        self.store: StateStore = (
            self.memory if kind == "memory" else ChangelogTable(FaustTable(), producer)  # type: ignore[arg-type]
        )
        self.kind = kind

    def restored(self) -> dict[bytes, bytes]:
        if self.kind == "memory":
            return dict(self.memory.data)
        assert all(topic == CHANGELOG for topic, _, _, _ in self.producer.sent)
        return {key: value for _, key, value, _ in self.producer.sent if key is not None}


@pytest.fixture(params=["memory", "changelog"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_a_put__is_readable_at_once_and_listed(kind: str) -> None:
    adapter = Adapter(kind, Producer())
    adapter.store.put(b"s1", b"one")
    assert adapter.store.get(b"s1") == b"one" and adapter.store.get(b"s2") is None
    assert dict(adapter.store.items()) == {b"s1": b"one"}


def test_commit__makes_every_put_durable_the_last_value_of_a_key_winning(kind: str) -> None:
    adapter = Adapter(kind, Producer())
    for key, value in ((b"s1", b"one"), (b"s2", b"two"), (b"s1", b"three")):
        adapter.store.put(key, value)
    asyncio.run(adapter.store.commit())
    assert adapter.restored() == {b"s1": b"three", b"s2": b"two"}


def test_changelog__records_leave_in_the_order_they_were_put_and_only_on_commit() -> None:
    producer = Producer()
    store = ChangelogTable(FaustTable(), producer)  # type: ignore[arg-type]
    store.put(b"state", b"s")
    store.put(b"~position~", b"7")
    assert producer.sent == []
    asyncio.run(store.commit())
    assert [key for _, key, _, _ in producer.sent] == [b"state", b"~position~"]


def test_changelog__a_failed_commit_keeps_its_records_for_the_next() -> None:
    producer = Producer(failures=1)
    store = ChangelogTable(FaustTable(), producer)  # type: ignore[arg-type]
    store.put(b"s1", b"one")
    with pytest.raises(KafkaConnectionError):
        asyncio.run(store.commit())
    asyncio.run(store.commit())
    assert [(key, value) for _, key, value, _ in producer.sent] == [(b"s1", b"one")]
