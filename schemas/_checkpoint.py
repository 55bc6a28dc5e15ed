"""Signed checkpoints: the judge's commitment to the chain heads it has verified.

Each worker partition keeps one append-only log of chain heads (`ChainHeadLeaf`: stream, session,
seq, hash), a Merkle tree in the style of Certificate Transparency (see trust/_merkle.py). A
`checkpoint` event on the verdicts stream appends the heads verified since the last one and
carries the tree head signed with the judge's Ed25519 key, plus the proof that this tree extends
the previous one. Whoever holds the public key can then check, with no access to Kafka, that a
chain head (and so every record linked before it) was seen by the judge, and that the judge
never rewrote what it had committed to.

What is signed is `TREE_HEAD_CONTEXT` followed by the tree head's canonical bytes: the context
keeps a signature made for something else from ever passing as a tree head.

This module holds the records alone (they are payloads on the verdicts stream); signing, keys and
the trees that check a log of checkpoints are `rolltape.schemas.trust`, which loads the crypto
library only where it is used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from rolltape.schemas._canonical import canonical_bytes

TREE_HEAD_CONTEXT = b"rolltape.tree_head.v1\n"
HASH_PATTERN = r"^[0-9a-f]{64}$"  # as _envelope's (which imports the payloads, hence this)


class ChainHeadLeaf(BaseModel):
    """One leaf: a chain's head as the judge verified it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stream: str
    session_id: str
    seq: int = Field(ge=0)
    hash: str = Field(pattern=HASH_PATTERN)

    def leaf_hash(self) -> bytes:
        """The leaf's hash in a checkpoint tree (RFC 9162's leaf hash of its canonical bytes)."""
        from rolltape.schemas.trust._merkle import leaf_hash  # trust/ loads on first use

        return leaf_hash(canonical_bytes(self.model_dump()))


SESSION_LEAF_STREAM = "session"
"""The stream name of a session's binding leaf (see `session_binding`)."""


def session_binding(session_id: str, heads: Mapping[str, tuple[int, str]]) -> ChainHeadLeaf:
    """The leaf that binds all of a session's chains as the judge held them when it decided on
    the session: `seq` is the number of chains, `hash` the SHA-256 of the canonical
    {stream: [seq, hash]} of their heads. Proving it shows that no chain is missing from a
    set of envelopes and that none stops short of where the judge saw it end."""
    digest = hashlib.sha256(
        canonical_bytes({stream: [seq, head] for stream, (seq, head) in heads.items()})
    ).hexdigest()
    return ChainHeadLeaf(
        stream=SESSION_LEAF_STREAM, session_id=session_id, seq=len(heads), hash=digest
    )


class TreeHead(BaseModel):
    """What the judge signs: the size and root of one log's tree at a moment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    log: str
    """The log's name (its checkpoint chain's session id on the verdicts stream)."""
    tree_size: int = Field(ge=0)
    root_hash: str = Field(pattern=HASH_PATTERN)
    timestamp_ms: int = Field(ge=0)
    key_id: str
    """`key_id` of the public key that verifies the signature."""

    def signed_bytes(self) -> bytes:
        return TREE_HEAD_CONTEXT + canonical_bytes(self.model_dump())


class Checkpoint(BaseModel):
    """The `checkpoint` event: new leaves, the signed tree head over all leaves so far, and the
    consistency proof from the previous tree head (RFC 9162 §2.1.4, hex hashes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tree_head: TreeHead
    signature: str = Field(pattern=r"^[0-9a-f]{128}$")
    """Ed25519 over `TreeHead.signed_bytes()`, hex."""
    previous_size: int = Field(ge=0)
    consistency: tuple[str, ...] = ()
    """Proof that the tree of `previous_size` leaves is a prefix of this one (empty when the
    previous tree was empty)."""
    leaves: tuple[ChainHeadLeaf, ...]
    """The leaves appended since the previous checkpoint of this log, in tree order."""
