"""The schema-v1 envelope that wraps every record value, and its hash.

Invariant: `hash == sha256_hex(canonical_bytes(envelope without "hash"))` and the record value on
the wire is `canonical_bytes(envelope)`, so a chain can be verified from the bytes alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from rolltape.schemas import _accel
from rolltape.schemas._canonical import INT_MAX, INT_MIN, canonical_bytes, prepare
from rolltape.schemas._errors import CanonicalEncodingError

SCHEMA_VERSION = 1
GENESIS_HASH = "0" * 64
HASH_PATTERN = r"^[0-9a-f]{64}$"
#: Session ids are Kafka keys and appear in file names of exports: keep them boring.
SESSION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}$"


class ProducerInfo(BaseModel):
    """Who wrote the event: software name and version, and the authenticated principal."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    version: str
    principal: str


class Envelope(BaseModel):
    """The schema of one record value. Readers get an `Event` from `read_event` (the codec,
    held to this schema by a test); writers build records with `seal`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: int
    stream: str
    session_id: str = Field(pattern=SESSION_ID_PATTERN)
    seq: int = Field(ge=0)
    ts_ns: int
    """Producer wall clock in integer nanoseconds; the broker's LogAppendTime attests it."""
    type: str
    event_id: str
    causes: tuple[str, ...] = ()
    producer: ProducerInfo
    payload: dict[str, Any]
    prev_hash: str = Field(pattern=HASH_PATTERN)
    hash: str = Field(pattern=HASH_PATTERN)

    def to_record(self) -> bytes:
        """The canonical bytes of this envelope, as they travel on Kafka."""
        return canonical_bytes(self.model_dump(mode="python"))


def hash_of(body: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical bytes of an envelope mapping, ignoring any `hash` key."""
    if "hash" in body:
        body = {k: v for k, v in body.items() if k != "hash"}
    return hashlib.sha256(canonical_bytes(body)).hexdigest()


def raw_event_id(stream: str, session_id: str, seq: int) -> str:
    """The id of an event a producer recorded: a function of its chain position only, so a
    resent copy has the same id and consumers can drop it.

    It is `sha256(canonical([stream, session_id, seq]))[:32]`; the bytes are written by hand
    because stream names and session ids (SESSION_ID_PATTERN) never need escaping.
    """
    key = f'["{stream}","{session_id}",{seq}]'.encode()
    return hashlib.sha256(key).hexdigest()[:32]


def derived_event_id(
    stream: str,
    session_id: str,
    event_type: str,
    producer_version: str,
    causes: Sequence[str],
    part: str = "",
) -> str:
    """The id of an event a processor derived: a function of its inputs (`causes`) and the
    processor version, so reprocessing after a crash or a replay with the same version writes
    the same id and consumers drop the copy. `part` tells apart several events derived from the
    same inputs (two breaks of one record).

    It is `sha256(canonical([stream, session_id, type, producer_version, causes, part]))[:32]`.
    """
    key = canonical_bytes([stream, session_id, event_type, producer_version, list(causes), part])
    return hashlib.sha256(key).hexdigest()[:32]


_PAYLOAD_SPLICE = b',"payload":'


_checked_producers: dict[int, Mapping[str, Any]] = {}


def _plain_strings(mapping: Mapping[str, Any]) -> bool:
    """True when the producer mapping needs no walk. A recorder passes the same dict for every
    record, so the answer is remembered by identity (the dict is kept alive by the cache)."""
    if _checked_producers.get(id(mapping)) is mapping:
        return True
    if type(mapping) is dict and all(type(v) is str for v in mapping.values()):
        if len(_checked_producers) > 1024:
            _checked_producers.clear()
        _checked_producers[id(mapping)] = mapping
        return True
    return False


def seal(
    *,
    stream: str,
    session_id: str,
    seq: int,
    ts_ns: int,
    type: str,
    payload: Mapping[str, Any] | bytes,
    prev_hash: str,
    producer: Mapping[str, str],
    event_id: str | None = None,
    causes: tuple[str, ...] | list[str] = (),
) -> tuple[bytes, str]:
    """Build, hash and encode one envelope; returns (record bytes, hash). A `payload` given as
    bytes is taken as its canonical encoding already (`canonical_dump_bytes`).

    The hash is spliced into the hashed bytes rather than encoding twice: with sorted keys `hash`
    sits right before `payload`, and `,"payload":` cannot occur earlier because the only values
    before it (causes, event_id) are strings, whose quotes are always escaped.
    """
    if not (0 <= seq <= INT_MAX and INT_MIN <= ts_ns <= INT_MAX):
        raise CanonicalEncodingError(f"seq {seq} or ts_ns {ts_ns} outside the signed 64-bit range")
    native = _accel.native
    if native is not None:
        sealed = native.seal(
            stream, session_id, seq, ts_ns, type, event_id, causes, producer, payload, prev_hash
        )
        if sealed is not None:
            return sealed
    # Only the payload needs the full walk: every other field has a fixed JSON type.
    body = {
        "v": SCHEMA_VERSION,
        "stream": stream,
        "session_id": session_id,
        "seq": seq,
        "ts_ns": ts_ns,
        "type": type,
        "event_id": event_id if event_id is not None else raw_event_id(stream, session_id, seq),
        "causes": list(causes),
        "producer": producer if _plain_strings(producer) else prepare(producer),
        "payload": orjson.Fragment(payload) if isinstance(payload, bytes) else prepare(payload),
        "prev_hash": prev_hash,
    }
    try:
        hashed = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as exc:
        raise CanonicalEncodingError(f"$: {exc}") from exc
    digest = hashlib.sha256(hashed).hexdigest()
    at = hashed.index(_PAYLOAD_SPLICE)
    record = b"".join((hashed[:at], b',"hash":"', digest.encode("ascii"), b'"', hashed[at:]))
    return record, digest
