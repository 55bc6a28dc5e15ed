"""`rolltape privacy rotate-kek`: re-wrap every live data key under a new key-encryption key, and
retire the old one.

Why: a copy of the keys topic taken before an erasure (a backup, a mirror) still holds the
erased subject's data key, wrapped. Wrapped under a KEK that no longer exists, it is useless to
whoever holds it; so erasure is complete once the KEK it was wrapped under is retired.

As the admin (docs/privacy.md, "Rotating the KEK"), one rotation at a time (a lock beside the
KEK file), in steps that a rotation cut short takes up again where it stopped. The KEK's three
versions are kept by a `KekStore`: the KEK file (the steps below name its files), or a provider
that rotates (`KekRotation`: its `stage`, `promote`, `retired` and `destroy_retired` are steps 1,
3 and 5 where the key service keeps its keys):

1. the new KEK is made beside the old one (`<kek file>.next`, 0600);
2. every live data-key record wrapped under the old KEK is unwrapped and written again, same
   record key, wrapped under the new one; the broker acknowledges each;
3. the old KEK is kept as `<kek file>.retired` and the new one takes the KEK file's place (one
   rename: a reader of the file sees the old KEK or the new, never a partial one);
4. the topic is read again and a key a recorder wrapped under the old KEK meanwhile (recorders
   read the KEK file at each subject session's start) is re-wrapped too; a key erased while the
   rotation ran, which step 2 may have written again after its tombstone, is tombstoned again;
5. the retired KEK's file is overwritten with zeros and removed.

Records wrapped under a KEK that is neither (another cluster's, one retired before) are left as
they are and counted: nothing here can open them.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rolltape.infra._errors import InfraError
from rolltape.infra.broker import require_connection
from rolltape.infra.kafka.erasures import read_erasures_log
from rolltape.infra.kafka.keyring import read_keys, write_keys
from rolltape.infra.keys import KekStore, SecretFileError, kek_path
from rolltape.infra.settings import Settings
from rolltape.schemas import Role
from rolltape.schemas.clients import KafkaConnection
from rolltape.schemas.privacy import KeyEncryptionKey, SealedContentError


class RotationError(InfraError):
    """A rotation cannot run now (another one holds the lock); the message says what to do."""


@dataclass(frozen=True)
class Rotation:
    """What a rotation did: the KEK ids, and how many live data keys it re-wrapped, found
    re-wrapped already (a rotation cut short), left under a KEK it does not hold, and erased
    again (erased while it ran)."""

    old_kek_id: str
    new_kek_id: str
    rewrapped: int
    already: int
    foreign: int
    erased_again: int


async def _rewrap(
    connection: KafkaConnection, prefix: str, old: KeyEncryptionKey, new: KeyEncryptionKey
) -> tuple[int, int, int]:
    """One pass over the live data keys: (re-wrapped, under `new` already, under neither)."""
    keyring = await read_keys(connection, prefix, None)
    moved: list[tuple[bytes, bytes | None]] = []
    already = foreign = 0
    for (session_id, key_id), record in sorted(keyring.records.items()):
        if record.kek_id == new.kek_id:
            already += 1
            continue
        if record.kek_id != old.kek_id:
            foreign += 1
            continue
        try:
            key = old.unwrap(record.wrapped, key_id, session_id)
        except SealedContentError:
            foreign += 1  # changed, or moved from another session: not ours to re-wrap
            continue
        rewrapped = record.model_copy(update={"wrapped": new.wrap(key, session_id)})
        moved.append((f"{session_id}/{key_id}".encode(), rewrapped.value()))
    await write_keys(connection, prefix, moved, "rolltape-rotate-kek")
    return len(moved), already, foreign


async def _erase_again(connection: KafkaConnection, prefix: str) -> int:
    """Tombstone every data key that is live on the topic although it was erased: written again
    after its tombstone (`Keyring.revived`: a key id is never made twice, so that is a rotation
    that read it before the erasure), or named by an erasure whose tombstone is gone."""
    keyring = await read_keys(connection, prefix, None)
    named = {
        tuple(k.split("/", 1))
        for erasure in (await read_erasures_log(connection, prefix)).erasures()
        for k in erasure.keys
    }
    again = sorted(ids for ids in keyring.records if ids in keyring.revived or ids in named)
    tombstones = [(f"{sid}/{kid}".encode(), None) for sid, kid in again]
    await write_keys(connection, prefix, tombstones, "rolltape-rotate-kek")
    return len(again)


@contextlib.contextmanager
def _one_rotation(store: KekStore) -> Iterator[None]:
    lock = store.lock_path
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise RotationError(
                f"another rotation of {store.name} is running (it holds {lock}); let it finish"
            ) from exc
        yield


async def rotate_kek(connection: KafkaConnection, settings: Settings) -> Rotation:
    """Re-wrap the live data keys under a new KEK and retire the old one (module docstring)."""
    try:
        store = KekStore(settings)
    except SecretFileError as exc:
        raise RotationError(str(exc)) from exc
    prefix = settings.topic_prefix
    with _one_rotation(store):
        rewrapped = already = foreign = 0
        old = store.retired()
        if old is not None:  # a rotation stopped after the swap: finish it
            new = store.current()
        else:
            old, new = store.current(), store.stage()
            if new.kek_id == old.kek_id:
                raise RotationError(
                    f"the next KEK {store.name} staged is the one in use: discard it and run again"
                )
            rewrapped, already, foreign = await _rewrap(connection, prefix, old, new)
            store.promote(old)
        late, _, foreign = await _rewrap(connection, prefix, old, new)
        erased_again = await _erase_again(connection, prefix)
        store.destroy_retired()
    return Rotation(old.kek_id, new.kek_id, rewrapped + late, already, foreign, erased_again)


async def rotate_kek_as_admin(settings: Settings) -> Rotation:
    """`rotate_kek` as the admin principal of the settings' cluster (`privacy rotate-kek`)."""
    return await rotate_kek(require_connection(settings, Role.ADMIN), settings)


def kek_location(settings: Settings) -> str | Path:
    """Where the KEK is kept, as a rotation's summary names it: its provider, or its file."""
    return settings.kek_provider or kek_path(settings)
