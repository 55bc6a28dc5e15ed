"""`rolltape keys rotate-kek`: re-wrap every live data key under a new key-encryption key, and
retire the old one.

Why: a copy of the keys topic taken before an erasure (a backup, a mirror) still holds the
erased subject's data key, wrapped. Wrapped under a KEK that no longer exists, it is useless to
whoever holds it; so erasure is complete once the KEK it was wrapped under is retired.

As the admin (docs/privacy.md, "Rotating the KEK"):

1. the new KEK is made beside the old one (`<kek file>.next`, 0600); a rotation cut short
   finds it there and goes on with it, so no key is ever wrapped under a KEK that is then lost;
2. every live data-key record wrapped under the old KEK is unwrapped and written again, same
   record key, wrapped under the new one; the broker acknowledges each before the next step
   (compaction then drops the old records);
3. the old KEK's file is overwritten with zeros and replaced by the new one;
4. the topic is read again to its end, and a key a recorder wrapped under the old KEK meanwhile
   (a recorder reads the KEK file at each subject session's start) is re-wrapped too.

Records wrapped under a KEK that is neither (another cluster's, one retired before) are left as
they are and counted: nothing here can open them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rolltape.infra.kafka.keyring import read_keys
from rolltape.infra.keys import SecretFileError, _secret_file, kek_path, key_encryption_key
from rolltape.infra.settings import Settings
from rolltape.schemas import Stream, topic_name
from rolltape.schemas.clients import KafkaConnection
from rolltape.schemas.privacy import KeyEncryptionKey, SealedContentError


@dataclass(frozen=True)
class Rotation:
    """What a rotation did: the KEK ids, and how many live data keys it re-wrapped, found
    re-wrapped already (a rotation cut short), or left under a KEK it does not hold."""

    old_kek_id: str
    new_kek_id: str
    rewrapped: int
    already: int
    foreign: int


async def _rewrap(
    connection: KafkaConnection, prefix: str, old: KeyEncryptionKey, new: KeyEncryptionKey
) -> tuple[int, int, int]:
    """One pass over the live data keys: (re-wrapped, under `new` already, under neither)."""
    keyring = await read_keys(connection, prefix, None)
    rewrapped = already = foreign = 0
    producer = connection.chain_producer(linger_ms=0, client_id="rolltape-rotate-kek")
    topic = topic_name(Stream.KEYS, prefix)
    async with connection.started(producer, f"re-wrapping data keys on {connection}") as started:
        for (session_id, key_id), record in sorted(keyring.records.items()):
            kek_id = record.kek_id
            if kek_id == new.kek_id:
                already += 1
                continue
            if kek_id != old.kek_id:
                foreign += 1
                continue
            try:
                key = old.unwrap(record.wrapped, key_id, session_id)
            except SealedContentError:
                foreign += 1  # changed, or moved from another session: not ours to re-wrap
                continue
            moved = record.model_copy(update={"wrapped": new.wrap(key, session_id)})
            await started.send_and_wait(topic, moved.value(), key=f"{session_id}/{key_id}".encode())
            rewrapped += 1
    return rewrapped, already, foreign


def _retire(path: Path, successor: Path) -> None:
    """Overwrite the old KEK's bytes, then put the new one in its place."""
    with open(path, "r+b") as f:
        f.write(b"\x00" * path.stat().st_size)
        f.flush()
        os.fsync(f.fileno())
    os.replace(successor, path)


async def rotate_kek(connection: KafkaConnection, settings: Settings) -> Rotation:
    """Re-wrap the live data keys under a new KEK and retire the old one (module docstring)."""
    path = kek_path(settings)
    old = key_encryption_key(settings, create=False)
    successor = path.with_name(path.name + ".next")
    new = KeyEncryptionKey(_secret_file(successor, "next key-encryption key", 32, exact=True))
    if new.kek_id == old.kek_id:
        raise SecretFileError(f"{successor} holds the KEK in use: remove it and run again")
    prefix = settings.topic_prefix
    rewrapped, already, foreign = await _rewrap(connection, prefix, old, new)
    _retire(path, successor)
    late, _, foreign = await _rewrap(connection, prefix, old, new)
    return Rotation(old.kek_id, new.kek_id, rewrapped + late, already, foreign)
