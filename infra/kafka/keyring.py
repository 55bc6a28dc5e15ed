"""The keys topic read into a `Keyring`: what a reader of content opens sealed events with;
and written by the admin's commands (erasure's tombstones, a rotation's re-wrapped keys).

Read whole each time (a compacted table: one record per data key, a tombstone per erased one),
as the principal of the reader's role; an agent's principal may not read it (the ACL table).
Recorders write their sessions' keys through their own sender.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Self

from rolltape.infra._errors import InfraError
from rolltape.infra.kafka.erasures import read_erasures_log
from rolltape.infra.kafka.readback import read_records
from rolltape.infra.keys import kek_available, key_encryption_key
from rolltape.infra.settings import Settings
from rolltape.schemas import Stream, TypedEvent, topic_name
from rolltape.schemas.clients import KafkaConnection, LogReader, LogStalledError, partitions_of
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


async def write_keys(
    connection: KafkaConnection,
    prefix: str,
    entries: Sequence[tuple[bytes, bytes | None]],
    client_id: str,
) -> None:
    """Write (record key, value) entries to the keys topic, a value of None a tombstone, each
    acknowledged before the next: the admin's writes, which must stand before what follows."""
    if not entries:
        return
    producer = connection.chain_producer(linger_ms=0, client_id=client_id)
    topic = topic_name(Stream.KEYS, prefix)
    async with connection.started(producer, f"writing {topic} on {connection}") as started:
        for key, value in entries:
            await started.send_and_wait(topic, value, key=key)


async def read_keyring(connection: KafkaConnection, settings: Settings) -> Keyring:
    """Every data key on the keys topic, unwrapped with the settings' key-encryption key (a
    missing KEK file is a SecretFileError naming it: it is never created by a reader)."""
    kek = key_encryption_key(settings, create=False)
    return await read_keys(connection, settings.topic_prefix, kek)


async def keyring_if_any(connection: KafkaConnection, settings: Settings) -> Keyring | None:
    """The keyring, or None where this machine has no key-encryption key (sessions with sealed
    content are then left out as `key unavailable`: a reader never creates a KEK)."""
    if not kek_available(settings):
        return None
    return await read_keyring(connection, settings)


class KeysTopicStalledError(InfraError):
    """The keys topic did not reach its end within the time allowed (the broker is away)."""


KEY_GRACE_S = 10.0
"""How long `ready` waits for a key that has no record on the topic yet (a recorder's key and
its session's first records travel to different topics, and the worker may read the second
first); each (session, key) is waited for once, so a key that never comes costs one wait."""
STALL_S = 60.0
"""How long catching up with the keys topic may make no progress before it is an error (a
reader then stops, and its restart reads the unfinished sessions again)."""


class KeysFollower:
    """The keys topic followed live, for the readers that run for days (the feed, the
    projector, tail): `open` catches up with the topic before it says a key is unavailable, so
    a session's key written a moment before its last event is found, and reads the KEK file
    again (`reload`) where a rotation has re-wrapped the keys; `erased` lists the erased
    sessions it has not listed yet: at the first call every session the erasures chain names
    (a projector down at the time of an erasure still takes back what it published), then those
    whose keys are tombstoned as it reads. Implements `rolltape.projections.ContentKeys`."""

    def __init__(
        self,
        connection: KafkaConnection,
        prefix: str,
        kek: KeyEncryptionKey,
        *,
        reload: Callable[[], KeyEncryptionKey] | None = None,
        erasures: bool = True,
    ) -> None:
        self.keyring = Keyring(kek)
        self._connection = connection
        self._prefix = prefix
        self._topic = topic_name(Stream.KEYS, prefix)
        self._reload = reload
        self._reader: LogReader | None = None
        self._stack = contextlib.AsyncExitStack()
        self._erased: dict[str, None] = {}
        self._reading = asyncio.Lock()  # the feed and the projector's eraser share the consumer
        self._waited: set[tuple[str, str]] = set()
        self._erasures = erasures
        """Whether `start` reads the erasures chain for `erased` (the worker lists no erased
        sessions, and its principal does not read that chain)."""

    async def start(self) -> Self:
        if self._erasures:
            for erasure in (await read_erasures_log(self._connection, self._prefix)).erasures():
                self._erased.update(dict.fromkeys(erasure.sessions))
        parts = await partitions_of(self._connection, [self._topic])
        reader = LogReader(self._connection, fetch_max_wait_ms=50)
        self._reader = await self._stack.enter_async_context(reader)
        reader.assign(parts)
        if parts:
            await reader.seek_to_beginning()
        await self.catch_up()
        return self

    async def stop(self) -> None:
        self._reader = None
        await self._stack.aclose()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def catch_up(self) -> None:
        """Read the keys topic up to its end as of now; KeysTopicStalledError when it makes no
        progress for STALL_S."""
        reader = self._reader
        if reader is None:
            raise RuntimeError("the keys follower is not started: use `async with`")
        async with self._reading:
            await self._read_to_end(reader)

    async def _read_to_end(self, reader: LogReader) -> None:
        # Not `read_records`: that reads a topic whole from its start; this goes on from where
        # the follower's own reader stands, for as long as the follower runs.
        try:
            async for batch in reader.read_to_end(stall_s=STALL_S):
                for m in batch:
                    self.keyring.add(m.key, m.value)
                    if m.value is None and m.key is not None:
                        sid = m.key.decode(errors="replace").rpartition("/")[0]
                        self._erased[sid] = None
        except LogStalledError as exc:
            raise KeysTopicStalledError(
                f"{self._topic} made no progress for {STALL_S:.0f}s on "
                f"{self._connection}: is the broker up?"
            ) from exc

    async def open(self, events: Sequence[TypedEvent]) -> tuple[list[TypedEvent] | None, str]:
        """The session's events opened (`Keyring.open_events`), after catching up with the keys
        topic, and reading the KEK file again, when a key is not known yet."""
        opened, access = self.keyring.open_events(events)
        if access == "key unavailable":
            await self._find_keys()
            opened, access = self.keyring.open_events(events)
        return opened, access

    async def ready(self, wanted: set[tuple[str, str]]) -> None:
        """Catch up (and read the KEK file again) when a (session id, key id) of `wanted` is
        not known yet: the worker's shell asks this before stepping a batch
        (rolltape.processors.worker.KeySource)."""
        if any(self.keyring.access(s, k) == "key unavailable" for s, k in wanted):
            await self._find_keys(lambda: [self.keyring.access(s, k) for s, k in wanted])
        keyring = self.keyring
        unwritten = {
            ids
            for ids in wanted - self._waited
            if keyring.access(*ids) == "key unavailable" and ids not in keyring.records
        }
        deadline = time.monotonic() + KEY_GRACE_S
        while unwritten and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            await self.catch_up()
            unwritten = {ids for ids in unwritten if ids not in keyring.records}
        if len(self._waited) > 100_000:
            self._waited.clear()
        self._waited.update(wanted)

    async def _find_keys(self, still: Callable[[], list[str]] | None = None) -> None:
        """Read the keys topic to its end, then the KEK file again if some key is still not
        unwrapped (`still`: the accesses still wanted; None: try the KEK whenever it changed)."""
        await self.catch_up()
        if self._reload is None or (still is not None and "key unavailable" not in still()):
            return
        kek = self._reload()
        if self.keyring.kek is None or kek.kek_id != self.keyring.kek.kek_id:
            self.keyring.use_kek(kek)  # rotated since this reader started

    async def erased(self) -> list[str]:
        """The erased sessions not listed yet (the class docstring)."""
        await self.catch_up()
        out, self._erased = list(self._erased), {}
        return out


def keys_follower_if_any(
    connection: KafkaConnection, settings: Settings, *, erasures: bool = True
) -> KeysFollower | None:
    """A follower of the keys topic with the settings' KEK (read again after a rotation), or
    None where this machine has none (sealed sessions are then left out as `key unavailable`).
    Not started."""
    if not kek_available(settings):
        return None
    return KeysFollower(
        connection,
        settings.topic_prefix,
        key_encryption_key(settings, create=False),
        reload=lambda: key_encryption_key(settings, create=False),
        erasures=erasures,
    )
