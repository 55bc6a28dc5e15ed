"""Data keys wrapped by a key-encryption key (KEK), as the keys topic will carry them.

A data key is never written anywhere in clear: what leaves the recorder is the key wrapped with
AES-256-GCM under the KEK, bound to its session and key id (a wrapped key copied to another
session does not unwrap). Rotating the KEK means unwrapping every live data key with the old
KEK and wrapping it with the new one; a copy of a key wrapped under a retired KEK is then
useless to anyone who does not also hold that KEK.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from rolltape.schemas.privacy._sealing import ContentKey, SealedContentError

_WRAP_LABEL = b"rolltape.wrapped-data-key.v1"


@dataclass(frozen=True)
class KeyEncryptionKey:
    """32 bytes that wrap data keys; `kek_id` names it in wrapped keys (a digest of it, which
    says nothing about a 256-bit random key)."""

    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.secret) != 32:
            raise ValueError(f"a key-encryption key is 32 bytes, not {len(self.secret)}")

    @classmethod
    def generate(cls) -> KeyEncryptionKey:
        return cls(secrets.token_bytes(32))

    @property
    def kek_id(self) -> str:
        return hashlib.sha256(b"rolltape.kek-id\x00" + self.secret).hexdigest()[:16]

    def wrap(self, key: ContentKey, session_id: str) -> str:
        """`v1.<kek id>.<base64url of nonce and wrapped key>`."""
        nonce = secrets.token_bytes(12)
        wrapped = AESGCM(self.secret).encrypt(
            nonce, key.secret, _aad(self.kek_id, key.key_id, session_id)
        )
        return f"v1.{self.kek_id}.{base64.urlsafe_b64encode(nonce + wrapped).decode()}"

    def unwrap(self, wrapped: str, key_id: str, session_id: str) -> ContentKey:
        """The data key `key_id` of `session_id`; SealedContentError when `wrapped` is not
        under this KEK or not that session's key."""
        parts = wrapped.split(".")
        if len(parts) != 3 or parts[0] != "v1":
            raise SealedContentError(f"a wrapped data key of an unknown form: {wrapped[:40]!r}")
        if parts[1] != self.kek_id:
            raise SealedContentError(
                f"data key {key_id} is wrapped under key-encryption key {parts[1]}, not "
                f"{self.kek_id} (retired by a rotation, or another cluster's)"
            )
        try:
            blob = base64.urlsafe_b64decode(parts[2])
            secret = AESGCM(self.secret).decrypt(
                blob[:12], blob[12:], _aad(self.kek_id, key_id, session_id)
            )
        except (InvalidTag, ValueError) as exc:
            raise SealedContentError(
                f"data key {key_id} does not unwrap for session {session_id}: it was wrapped "
                "for another session or key id, or changed since"
            ) from exc
        return ContentKey(key_id, secret)


def _aad(kek_id: str, key_id: str, session_id: str) -> bytes:
    return b"\x00".join((_WRAP_LABEL, kek_id.encode(), key_id.encode(), session_id.encode()))
