"""The keys topic read into a `Keyring`: what a reader of content opens sealed events with.

Read whole each time (a compacted table: one record per data key, a tombstone per erased one),
as the principal of the reader's role; an agent's principal may not read it (the ACL table).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Self

from aiokafka import AIOKafkaConsumer, TopicPartition

from rolltape.infra.kafka.readback import read_records, topic_partitions
from rolltape.infra.keys import kek_path, key_encryption_key
from rolltape.infra.settings import Settings
from rolltape.schemas import Stream, TypedEvent, topic_name
from rolltape.schemas.clients import KafkaConnection, kafka_errors
from rolltape.schemas.privacy import KeyEncryptionKey, Keyring


async def read_keys(
    connection: KafkaConnection, prefix: str, kek: KeyEncryptionKey | None
) -> Keyring:
    """The keys topic read whole into a keyring; without a KEK it holds the live records and
    the tombstones only (what erasure needs), no key."""
    keyring = Keyring(kek)
    async for record in read_records(connection, [Stream.KEYS], prefix=prefix):
        keyring.add(record.key, record.value)
    return keyring


async def read_keyring(connection: KafkaConnection, settings: Settings) -> Keyring:
    """Every data key on the keys topic, unwrapped with the settings' key-encryption key (a
    missing KEK file is a SecretFileError naming it: it is never created by a reader)."""
    kek = key_encryption_key(settings, create=False)
    return await read_keys(connection, settings.topic_prefix, kek)


async def keyring_if_any(connection: KafkaConnection, settings: Settings) -> Keyring | None:
    """The keyring, or None where this machine has no key-encryption key (sessions with sealed
    content are then left out as `key unavailable`: a reader never creates a KEK)."""
    if not kek_path(settings).exists():
        return None
    return await read_keyring(connection, settings)


class KeysFollower:
    """The keys topic followed live, for the readers that run for days (the feed, the
    projector): `open` catches up with the topic before it says a key is unavailable, so a
    session's key written a moment before its last event is found; `erased` lists the sessions
    whose keys were tombstoned since it last looked, so a reader can take back what it already
    published. Implements `rolltape.projections.ContentKeys`."""

    def __init__(self, connection: KafkaConnection, prefix: str, kek: KeyEncryptionKey) -> None:
        self.keyring = Keyring(kek)
        self._connection = connection
        self._topic = topic_name(Stream.KEYS, prefix)
        self._consumer: AIOKafkaConsumer | None = None
        self._stack = contextlib.AsyncExitStack()
        self._parts: list[TopicPartition] = []
        self._erased: list[str] = []
        self._reading = asyncio.Lock()  # the feed and the projector's eraser share the consumer

    async def start(self) -> Self:
        self._parts = await topic_partitions(self._connection, [self._topic])
        consumer = self._connection.consumer(enable_auto_commit=False, fetch_max_wait_ms=50)
        doing = f"reading {self._topic} on {self._connection}"
        self._consumer = await self._stack.enter_async_context(
            self._connection.started(consumer, doing)
        )
        consumer.assign(self._parts)
        if self._parts:
            await consumer.seek_to_beginning(*self._parts)
        await self.catch_up()
        self._erased.clear()  # erased before this reader started: nothing of them was read
        return self

    async def stop(self) -> None:
        self._consumer = None
        await self._stack.aclose()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def catch_up(self) -> None:
        """Read the keys topic up to its end as of now."""
        consumer = self._consumer
        if consumer is None:
            raise RuntimeError("the keys follower is not started: use `async with`")
        async with self._reading:
            await self._read_to_end(consumer)

    async def _read_to_end(self, consumer: AIOKafkaConsumer) -> None:
        with kafka_errors(f"reading {self._topic}"):
            ends = await consumer.end_offsets(self._parts)
            remaining = {tp for tp in self._parts if await consumer.position(tp) < ends[tp]}
            while remaining:
                batch = await consumer.getmany(*remaining, timeout_ms=200, max_records=5000)
                for messages in batch.values():
                    for m in messages:
                        self.keyring.add(m.key, m.value)
                        if m.value is None and m.key is not None:
                            self._erased.append(m.key.decode(errors="replace").rpartition("/")[0])
                for tp in list(remaining):
                    if await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)

    async def open(self, events: Sequence[TypedEvent]) -> tuple[list[TypedEvent] | None, str]:
        """The session's events opened (`Keyring.open_events`), after catching up with the keys
        topic when a key is not known yet."""
        opened, access = self.keyring.open_events(events)
        if access == "key unavailable":
            await self.catch_up()
            opened, access = self.keyring.open_events(events)
        return opened, access

    async def erased(self) -> list[str]:
        """The sessions whose data keys were tombstoned since the last call, in the order read."""
        await self.catch_up()
        out, self._erased = list(dict.fromkeys(self._erased)), []
        return out


async def keys_follower_if_any(
    connection: KafkaConnection, settings: Settings
) -> KeysFollower | None:
    """A follower of the keys topic with the settings' KEK, or None where this machine has none
    (sealed sessions are then left out as `key unavailable`). Not started."""
    if not kek_path(settings).exists():
        return None
    return KeysFollower(
        connection, settings.topic_prefix, key_encryption_key(settings, create=False)
    )
