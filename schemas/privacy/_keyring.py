"""The keys topic as a reader holds it, and events opened with it.

A reader that reads content (the worker's judges, export, replay, the feed, the projector)
builds a `Keyring` from the keys topic with the key-encryption key, then opens each sealed
event. What it cannot open is never an error and never a crash: it is `erased` (the key's
tombstone was read) or `key unavailable` (no key for it yet, or wrapped under a KEK this reader
does not hold), and the reader counts it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import ValidationError

from rolltape.schemas._data_keys import DataKeyRecord
from rolltape.schemas._events import TypedEvent
from rolltape.schemas.privacy._keys import KeyEncryptionKey
from rolltape.schemas.privacy._sealing import (
    ContentKey,
    SealedContentError,
    open_content,
    sealed_key_id,
)

Access = Literal["clear", "opened", "erased", "key unavailable"]


class Keyring:
    """Data keys by (session id, key id), unwrapped with `kek`; the erased ones remembered.
    Feed it the keys topic's records in order (`add`); a later record of a key replaces an
    earlier one, as compaction would."""

    def __init__(self, kek: KeyEncryptionKey | None) -> None:
        self.kek = kek
        self.records: dict[tuple[str, str], DataKeyRecord] = {}
        """The live data-key records by (session id, key id), as compaction leaves the topic
        (what erasure picks from; readable without the KEK)."""
        self._keys: dict[tuple[str, str], ContentKey] = {}
        self._erased: set[tuple[str, str]] = set()
        self.revived: set[tuple[str, str]] = set()
        """Keys whose record came after their tombstone (a KEK rotation that read the key before
        the erasure): `rotate-kek` tombstones them again."""
        self.unreadable = 0
        """Records of the keys topic that are not data-key records, or do not unwrap."""

    @classmethod
    def of(cls, session_id: str, keys: dict[str, ContentKey]) -> Keyring:
        """A keyring holding one session's data keys by key id (what an evidence file carries)."""
        keyring = cls(None)
        keyring._keys = {(session_id, key_id): key for key_id, key in keys.items()}
        return keyring

    def session_keys(self, session_id: str) -> dict[str, ContentKey]:
        """The data keys of one session this keyring holds, by key id."""
        return {kid: key for (sid, kid), key in self._keys.items() if sid == session_id}

    @property
    def subjects(self) -> dict[str, str]:
        """Session id -> the subject it names, for the sessions with a live key."""
        return {sid: record.subject for (sid, _), record in self.records.items()}

    def add(self, key: bytes | None, value: bytes | None) -> None:
        """One record of the keys topic: a wrapped data key, or a tombstone (erased)."""
        session_id, _, key_id = (key or b"").decode(errors="replace").rpartition("/")
        if value is None:
            self.records.pop((session_id, key_id), None)
            self._keys.pop((session_id, key_id), None)
            self._erased.add((session_id, key_id))
            return
        try:
            record = DataKeyRecord.model_validate_json(value)
        except ValidationError:
            self.unreadable += 1
            return
        ids = (record.session_id, record.key_id)
        self.records[ids] = record
        if ids in self._erased:  # a key id is never made twice: written again after its erasure
            self.revived.add(ids)
        self._erased.discard(ids)
        if self.kek is None:
            return
        try:
            self._keys[ids] = self.kek.unwrap(record.wrapped, record.key_id, record.session_id)
        except SealedContentError:
            # Re-wrapped under a KEK this reader does not hold (a rotation): a key it already
            # unwrapped is the same key, and stays; the record is kept for `use_kek`.
            self.unreadable += 1

    def use_kek(self, kek: KeyEncryptionKey) -> None:
        """Unwrap with `kek` from now on (a reader that reads the KEK file again after a
        rotation), and unwrap with it every live record no key was unwrapped from yet."""
        self.kek = kek
        for ids, record in self.records.items():
            if ids not in self._keys:
                try:
                    self._keys[ids] = kek.unwrap(record.wrapped, record.key_id, record.session_id)
                except SealedContentError:
                    continue

    def key(self, session_id: str, key_id: str) -> ContentKey | None:
        """The data key `key_id` of `session_id`, when this keyring holds it."""
        return self._keys.get((session_id, key_id))

    def subject(self, session_id: str) -> str | None:
        """The subject a session names, while one of its keys is live."""
        return next((r.subject for (sid, _), r in self.records.items() if sid == session_id), None)

    def access(self, session_id: str, key_id: str) -> Access:
        if (session_id, key_id) in self._keys:
            return "opened"
        return "erased" if (session_id, key_id) in self._erased else "key unavailable"

    def open_payload(
        self,
        event_type: str,
        payload: Mapping[str, Any],
        *,
        stream: str,
        session_id: str,
        seq: int,
    ) -> tuple[Mapping[str, Any] | None, Access]:
        """The payload with its content in place, and how: `clear` (nothing was sealed),
        `opened`; or None and `erased` / `key unavailable`. A sealed payload that does not open
        under its key (moved from another record, changed) is `key unavailable` too: its
        content cannot be read, and its hash check has already said whether it was changed."""
        key_id = sealed_key_id(payload)
        if key_id is None and "sealed" not in payload:
            return payload, "clear"
        key = self._keys.get((session_id, key_id or ""))
        if key is None:
            return None, self.access(session_id, key_id or "")
        try:
            opened = open_content(
                event_type, payload, key, stream=stream, session_id=session_id, seq=seq
            )
        except SealedContentError:
            return None, "key unavailable"
        return opened, "opened"

    def open_events(self, events: Sequence[TypedEvent]) -> tuple[list[TypedEvent] | None, Access]:
        """A session's events with their content in place, and how (`clear` when none was
        sealed); None and why not when any of them does not open: a reader takes a session
        whole or leaves it out, never folds part of it."""
        if not any("sealed" in e.payload for e in events):
            return list(events), "clear"
        opened: list[TypedEvent] = []
        for event in events:
            done, access = self.open_event(event)
            if done is None:
                return None, access
            opened.append(done)
        return opened, "opened"

    def open_event(self, event: TypedEvent) -> tuple[TypedEvent | None, Access]:
        """The event with its content in place (a new event, its body validated afresh), or
        None and why not."""
        if "sealed" not in event.payload:
            return event, "clear"
        opened, access = self.open_payload(
            event.type,
            event.payload,
            stream=event.stream,
            session_id=event.session_id,
            seq=event.seq,
        )
        if opened is None:
            return None, access
        return event.with_payload(opened), access
