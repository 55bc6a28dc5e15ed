"""Erasure records: what `rolltape privacy erase` destroyed, signed by the judge's key.

An erasure tombstones data keys on the keys topic (schemas._data_keys); this record, chained on
the erasures stream, says which keys of which sessions, when, at whose request, and carries the
judge key's Ed25519 signature over `ERASURE_CONTEXT` followed by its other fields' canonical
bytes, so the receipt can be checked offline with the same public key as the checkpoints. It
names sessions and key ids, never the subject: the point of erasing is that the subject's name
goes too.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rolltape.schemas._canonical import canonical_bytes

ERASURE_CONTEXT = b"rolltape.erasure.v1\n"
ERASURES_SESSION = "erasures"
"""The session id of the one chain of erasure records on the erasures stream."""


class Erasure(BaseModel):
    """One erasure: the data keys tombstoned, by session."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sessions: tuple[str, ...] = Field(min_length=1)
    keys: tuple[str, ...] = Field(min_length=1)
    """`<session id>/<key id>` of every data key tombstoned."""
    requested_by: str
    """The principal that ran the erasure."""
    reason: str | None = None
    models: tuple[str, ...] = Field(default=(), exclude_if=lambda models: not models)
    """The model versions that learned from the erased sessions (themselves or through an
    ancestor; schemas._lineage): what must be retrained. Left out of the signed bytes when
    none, so a receipt signed before lineage existed checks as it was signed."""
    erased_ns: int
    """When the tombstones were acknowledged (ns since the Unix epoch, the eraser's clock)."""
    seq: int = Field(ge=0)
    """Its place on the erasures chain, signed: a list of erasures that leaves one out and links
    the rest again no longer checks (whoever re-links cannot sign)."""
    prev_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    """The hash of the erasures chain's record before it (the genesis hash for the first)."""
    key_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    """The judge key that signed it."""
    signature: str = ""
    """Hex Ed25519 signature of `signed_bytes()`."""

    def signed_bytes(self) -> bytes:
        return ERASURE_CONTEXT + canonical_bytes(self.model_dump(exclude={"signature"}))
