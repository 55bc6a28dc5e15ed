"""The records of the keys topic: one per session that names a subject, keyed by session id.

A record holds the session's data key wrapped by the key-encryption key (never the key itself:
rolltape.schemas.privacy wraps it), its id, and the subject, so that erasing a subject finds its
sessions (and a judge's conversation about a session names that session, so that erasing the
session finds it). A tombstone (a record with no value) is an erasure: the key, and with it the subject's
name on this topic, is gone once compaction has run; the content sealed under the key stays in
the log, unreadable, and every chain over it still verifies.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rolltape.schemas._canonical import canonical_bytes
from rolltape.schemas._content_fields import unset
from rolltape.schemas._envelope import SESSION_ID_PATTERN


class DataKeyRecord(BaseModel):
    """One session's wrapped data key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: int = 1
    session_id: str = Field(pattern=SESSION_ID_PATTERN)
    subject: str = Field(min_length=1, max_length=200)
    """Whose data the session holds (an end user, a tenant), as the recorder was told."""
    key_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    wrapped: str
    """`v1.<kek id>.<...>`: the data key under the key-encryption key."""
    ts_ns: int
    about: str | None = Field(default=None, pattern=SESSION_ID_PATTERN, exclude_if=unset)
    """The session this one is about (a judge's conversation on a subject session): erasing
    that session erases this one too."""

    @property
    def kek_id(self) -> str:
        """The id of the key-encryption key `wrapped` is under ("" when of an unknown form)."""
        parts = self.wrapped.split(".")
        return parts[1] if len(parts) == 3 and parts[0] == "v1" else ""

    def value(self) -> bytes:
        """The record's value on the keys topic."""
        return canonical_bytes(self.model_dump())
