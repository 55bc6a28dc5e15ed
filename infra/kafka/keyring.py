"""The keys topic read into a `Keyring`: what a reader of content opens sealed events with.

Read whole each time (a compacted table: one record per data key, a tombstone per erased one),
as the principal of the reader's role; an agent's principal may not read it (the ACL table).
"""

from __future__ import annotations

from rolltape.infra.kafka.readback import read_records
from rolltape.infra.keys import kek_path, key_encryption_key
from rolltape.infra.settings import Settings
from rolltape.schemas import Stream
from rolltape.schemas.clients import KafkaConnection
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
