"""A payload's content fields sealed under the session's data key, and opened again.

The contract (docs/canonical-encoding.md, "Sealed content"):

- The content fields an event has (schemas/_content_fields.py) are taken out of the payload as
  one object, encoded canonically, and encrypted with AES-256-GCM under the session's data
  key. The payload keeps its other fields in clear, its required content texts as `""`, and
  gains `sealed = "v1.<key id>.<base64url of nonce and ciphertext>"`. The record is then sealed
  (hashed, chained) as any other: chains and checkpoints cover the ciphertext, so they verify
  with or without the key, and after the key is destroyed.
- The associated data is the envelope's identity: stream, session id, seq and event type. A
  ciphertext moved to another record, even of the same session, does not open.
- The nonce is synthetic: the first 12 bytes of an HMAC-SHA256, under a key derived from the
  data key, of the associated data and the plaintext. Sealing is deterministic (the same event
  seals to the same bytes, as everything rolltape writes does), and a nonce repeats only for
  the same plaintext at the same identity, where GCM gives the same ciphertext and reveals
  nothing new; a random nonce would make records differ run to run, and a counter would need
  state a crashed writer loses.
- The encryption and nonce keys are derived from the data key with HKDF-SHA256, each under its
  own label, so the 32 bytes on the keys topic are the only secret per session.

`seal_content` is the reference. Recording seals through `ChainWriter.append_payload`, where the
native core, given a key's derived keys (`ContentKey._native`), seals the content in the payload
plan's pass (schemas/native/src/sealed.rs) byte for byte the same, and leaves to this module
whatever it declines; a differential test holds the two together.
"""

from __future__ import annotations

import base64
import functools
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from rolltape.schemas import _accel
from rolltape.schemas._canonical import canonical_bytes, decode
from rolltape.schemas._content_fields import CONTENT_FIELDS
from rolltape.schemas._errors import SchemaError
from rolltape.schemas._payload_plans import content_spec

VERSION = "v1"
_AAD_LABEL = "rolltape.sealed-content.v1"
_NONCE = 12


class SealedContentError(SchemaError):
    """Sealed content that does not open under the key given: another key, another record's
    identity, or bytes changed since sealing."""


@dataclass(frozen=True)
class ContentKey:
    """A session's data key: 32 random bytes and the id sealed payloads name it by."""

    key_id: str
    secret: bytes = field(repr=False)
    _aead: AESGCM = field(init=False, repr=False, compare=False)
    _nonce_key: bytes = field(init=False, repr=False, compare=False)
    _native: Any = field(init=False, repr=False, compare=False)
    """The same keys for the native core (`ChainWriter.append_payload` seals with them in the
    payload plan's pass); None without it."""

    def __post_init__(self) -> None:
        if len(self.secret) != 32:
            raise ValueError(f"a data key is 32 bytes, not {len(self.secret)}")
        if not (len(self.key_id) == 16 and all(c in "0123456789abcdef" for c in self.key_id)):
            raise ValueError(f"a data key id is 16 lowercase hex digits, not {self.key_id!r}")
        encrypt, nonce = _derive(self.secret, b"encrypt"), _derive(self.secret, b"nonce")
        object.__setattr__(self, "_aead", AESGCM(encrypt))
        object.__setattr__(self, "_nonce_key", nonce)
        native = _accel.native
        sealer = None if native is None else native.ContentSealer(self.key_id, encrypt, nonce)
        object.__setattr__(self, "_native", sealer)

    @classmethod
    def generate(cls) -> ContentKey:
        return cls(secrets.token_hex(8), secrets.token_bytes(32))


def _derive(secret: bytes, label: bytes) -> bytes:
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"rolltape.data-key." + label
    ).derive(secret)


def associated_data(stream: str, session_id: str, seq: int, event_type: str) -> bytes:
    """The envelope's identity a sealed payload is bound to."""
    return f"{_AAD_LABEL}\x00{stream}\x00{session_id}\x00{seq}\x00{event_type}".encode()


def seal_content(
    event_type: str,
    payload: Mapping[str, Any],
    key: ContentKey,
    *,
    stream: str,
    session_id: str,
    seq: int,
) -> dict[str, Any]:
    """`payload` (validated and dumped) with its content fields sealed; as it is when the event
    type has no content fields or none is set."""
    spec = content_spec(event_type) if event_type in CONTENT_FIELDS else ()
    clear = dict(payload)
    content: dict[str, Any] = {}
    for name, required, empty in spec:
        if name not in clear:
            continue
        value = clear.pop(name)
        if value != empty:
            content[name] = value
        if required:
            clear[name] = empty
    if not content:
        return dict(payload)
    aad = associated_data(stream, session_id, seq, event_type)
    clear["sealed"] = _seal(key, aad, canonical_bytes(content))
    return clear


def _seal(key: ContentKey, aad: bytes, plaintext: bytes) -> str:
    """`v1.<key id>.<base64url of the synthetic nonce and the ciphertext>`."""
    nonce = hmac.digest(key._nonce_key, aad + b"\x00" + plaintext, "sha256")[:_NONCE]
    sealed = nonce + key._aead.encrypt(nonce, plaintext, aad)
    return f"{VERSION}.{key.key_id}.{base64.urlsafe_b64encode(sealed).decode()}"


_VALUE_LABEL = "rolltape.sealed-value.v1"


def seal_value(key: ContentKey, purpose: str, plaintext: bytes) -> str:
    """Bytes that are not a record's payload but hold a session's content (the worker's state
    of a session its judges will read, a judge request and its verdict on their internal
    topics) sealed under the session's data key, so that erasing the key erases them as well.
    Bound to `purpose` (what the bytes are, and whose), deterministic as `seal_content` is."""
    return _seal(key, f"{_VALUE_LABEL}\x00{purpose}".encode(), plaintext)


def open_value(key: ContentKey, purpose: str, sealed: str) -> bytes:
    """What `seal_value` sealed for `purpose`; SealedContentError when it does not open."""
    aad = f"{_VALUE_LABEL}\x00{purpose}".encode()
    return _open_reference(sealed, key, aad, purpose)


def withhold_content(event_type: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """`payload` (validated and dumped) with its content fields as sealing leaves them in clear,
    and nothing sealed: what is written about content whose key is gone before it was sealed."""
    clear = {k: v for k, v in payload.items() if k != "sealed"}
    for name, required, empty in content_spec(event_type):
        if name in clear:
            del clear[name]
            if required:
                clear[name] = empty
    return clear


_PREFIX = f"{VERSION}."
_KEY_END = len(_PREFIX) + 16


def _parts(sealed: object) -> tuple[str, str] | None:
    """(key id, base64url blob) of `v1.<16 hex>.<blob>`; None for anything else. Sliced, not
    split: the blob is most of the string, and readers ask this of every sealed event."""
    if (
        isinstance(sealed, str)
        and sealed.startswith(_PREFIX)
        and sealed[_KEY_END : _KEY_END + 1] == "."
        and sealed.find(".", _KEY_END + 1) == -1
    ):
        return sealed[len(_PREFIX) : _KEY_END], sealed[_KEY_END + 1 :]
    return None


def sealed_key_id(payload: Mapping[str, Any]) -> str | None:
    """The id of the data key a payload's content is sealed under; None when it is in clear
    (or not of the sealed form: `open_content` says so)."""
    sealed = payload.get("sealed")
    if (
        isinstance(sealed, str)
        and sealed.startswith(_PREFIX)
        and sealed[_KEY_END : _KEY_END + 1] == "."
    ):
        return sealed[len(_PREFIX) : _KEY_END]
    return None


def open_content(
    event_type: str,
    payload: Mapping[str, Any],
    key: ContentKey,
    *,
    stream: str,
    session_id: str,
    seq: int,
) -> dict[str, Any]:
    """`payload` with its sealed content back in place (and `sealed` gone); as it is when
    nothing is sealed. SealedContentError when it does not open under `key` at this identity."""
    sealed = payload.get("sealed")
    if sealed is None:
        return dict(payload)
    aad = associated_data(stream, session_id, seq, event_type)
    native = key._native
    plaintext = native.open(sealed, aad) if native is not None and isinstance(sealed, str) else None
    if plaintext is None:  # no native core, or it did not open there: the reference decides
        plaintext = _open_reference(sealed, key, aad, f"{event_type} seq {seq} of {session_id}")
    content = decode(plaintext)
    if not isinstance(content, dict) or not content.keys() <= _content_names(event_type):
        raise SealedContentError(f"sealed content of {event_type} holds fields it may not have")
    opened = dict(payload)
    del opened["sealed"]
    opened.update(content)
    return opened


def _open_reference(sealed: object, key: ContentKey, aad: bytes, what: str) -> bytes:
    """The plaintext as the reference opens it, or SealedContentError saying why not."""
    parts = _parts(sealed)
    if parts is None:
        raise SealedContentError(f"sealed content of an unknown form: {str(sealed)[:40]!r}")
    key_id, encoded = parts
    if key_id != key.key_id:
        raise SealedContentError(f"the content is sealed under data key {key_id}, not {key.key_id}")
    try:
        blob = base64.urlsafe_b64decode(encoded)
        return key._aead.decrypt(blob[:_NONCE], blob[_NONCE:], aad)
    except (InvalidTag, ValueError) as exc:
        raise SealedContentError(
            f"the sealed content of {what} does not open under data key {key.key_id}: it was "
            "sealed for another record, or changed since"
        ) from exc


@functools.cache
def _content_names(event_type: str) -> frozenset[str]:
    return frozenset(CONTENT_FIELDS.get(event_type, ()))
