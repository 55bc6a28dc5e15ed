"""What the worker opens subject sessions' content with: the keys topic, followed.

The pure step opens content through a `Keyring` (ProcessorConfig.keys), which must already hold
the key when a sealed record is stepped. A recorder sends a session's wrapped key before the
session's first record, but the keys topic and the events topic are read by different consumers:
before each batch the shell asks its key source to be `ready` for the keys the batch's sealed
records name, and the source reads the keys topic to its end (and the KEK file again, after a
rotation) when one of them is not known yet. What is still missing then is `key unavailable`, and
the step says so; it never waits on a key that may never come.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from rolltape.processors.audit import InputRecord
from rolltape.schemas.privacy import Keyring

_SEALED = b'"sealed":"v1.'
_KEY_ID = 16


class KeySource(Protocol):
    """The keys topic followed for the worker (rolltape.infra.kafka.keyring.KeysFollower)."""

    keyring: Keyring

    async def start(self) -> object: ...

    async def stop(self) -> None: ...

    async def ready(self, wanted: set[tuple[str, str]]) -> None:
        """Read on until each (session id, key id) of `wanted` is known, or the topic's end."""
        ...


def sealed_keys(records: Iterable[InputRecord]) -> set[tuple[str, str]]:
    """(session id, key id) of each record whose payload is sealed. Found in the canonical
    bytes, not by decoding: the step decodes every record once, and this runs before it on every
    batch (a record this misreads is opened, or not, by the step all the same)."""
    wanted: set[tuple[str, str]] = set()
    for record in records:
        at = record.value.find(_SEALED)
        if at >= 0 and record.key is not None:
            start = at + len(_SEALED)
            key_id = record.value[start : start + _KEY_ID].decode(errors="replace")
            wanted.add((record.key.decode(errors="replace"), key_id))
    return wanted
