"""The one codec every reader of a record goes through: decode once, check once, type once.

Invariant: `read_event(b)` either raises `UnreadableRecord` (the bytes are no v1 envelope, and
`kind` says how) or returns an `Event` whose header fields have the types the `Envelope` schema
gives them, with `computed_hash` (the hash of its content, None when it has no canonical form)
and `canonical` (the bytes are the canonical encoding) worked out from the received bytes. What
the event *means* (tampered, a fork, out of order) is the reader's business; the codec only
says what the bytes are.

Why not `Envelope.model_validate` on the hot path: measured on the replay benchmark's records,
the header checks written out here cost a third of pydantic's validation of the same envelope,
and a reader meets every record. The `Envelope` model stays the schema (its JSON schema is
what other languages implement) and a test holds this reader to it: both accept and refuse the
same inputs.

Why the canonical check is cheap: for a decoded record `canonical_bytes(obj)` equals
`orjson.dumps(obj, sorted keys)` except in how floats are written (rolltape writes Python's
`repr`, orjson its own form, which differs only for exponents and for magnitudes below 1e-4)
and for integers past 64 bits. So when the plain encode gives back the received bytes and the
bytes hold no number token of those kinds, the bytes are canonical; otherwise the full
canonical encoder decides. The hash is then taken over the received bytes with the hash member
cut out (the inverse of `seal`'s splice): no re-encode at all.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final

import orjson
from pydantic import ValidationError

from rolltape.schemas import _accel
from rolltape.schemas._canonical import canonical_bytes, decode, plain_is_canonical
from rolltape.schemas._derived import BreakKind
from rolltape.schemas._envelope import SCHEMA_VERSION, Envelope
from rolltape.schemas._errors import CanonicalEncodingError, EnvelopeError
from rolltape.schemas._events import EVENT_CLASSES, Producer, TypedEvent, UnknownEvent

_HEADER_KEYS: Final = frozenset(Envelope.model_fields)
_PRODUCER_KEYS: Final = frozenset(("name", "version", "principal"))
_HEADER_TYPES: Final = {"seq": int, "ts_ns": int, "causes": list, "producer": dict}
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_HASH_MEMBER = b',"hash":"'
_CLASSES: Final = dict(EVENT_CLASSES)
_PRODUCERS: dict[tuple[str, str, str], Producer] = {}
"""Producers seen, shared by their events (frozen; a log has a handful of writers)."""
_PRODUCERS_KEPT: Final = 1024


class UnreadableRecord(EnvelopeError):
    """Record bytes that are no v1 envelope; `kind` says how (unparseable / unknown version)."""

    def __init__(self, kind: BreakKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def read_event(data: bytes | bytearray | memoryview) -> TypedEvent:
    """Decode and check one record value into the event class of its `type`;
    UnreadableRecord says why it is no envelope."""
    raw = bytes(data)
    try:
        obj = decode(raw)
    except CanonicalEncodingError as exc:
        raise UnreadableRecord(BreakKind.UNPARSEABLE, str(exc)[:300]) from exc
    if type(obj) is not dict:
        detail = f"envelope must be a JSON object, got {type(obj).__name__}"
        raise UnreadableRecord(BreakKind.UNPARSEABLE, detail)
    version = obj.get("v")
    if version != SCHEMA_VERSION or type(version) is not int:
        if version is None:
            raise UnreadableRecord(BreakKind.UNPARSEABLE, _problem(obj))
        raise UnreadableRecord(
            BreakKind.UNKNOWN_VERSION,
            f"schema version {version!r}; this reader knows v{SCHEMA_VERSION}",
        )
    native = _accel.native
    if not (_well_formed(obj) if native is None else native.well_formed(obj)):
        raise UnreadableRecord(BreakKind.UNPARSEABLE, _problem(obj))
    computed, canonical = _content_hash(obj, raw)
    return _typed(obj, computed, canonical)


def reread_event(data: bytes | bytearray | memoryview, *, canonical: bool) -> TypedEvent:
    """The event of bytes `read_event` read before and found intact, without its checks again:
    the caller kept the bytes and whether they were `canonical`, as an export's spill does
    between filing a record and folding its session (an intact record's content hash is the
    hash it carries). Bytes that were never read, were not intact, or were changed since, must
    go through `read_event`; these are only decoded and typed."""
    try:
        obj = decode(bytes(data))
    except CanonicalEncodingError as exc:
        raise UnreadableRecord(BreakKind.UNPARSEABLE, str(exc)[:300]) from exc
    # A guard against misuse, not the header check: what read_event accepted passes it.
    if type(obj) is not dict or obj.keys() != _HEADER_KEYS or obj["v"] != SCHEMA_VERSION:
        raise UnreadableRecord(BreakKind.UNPARSEABLE, "bytes that read_event never accepted")
    return _typed(obj, obj["hash"], canonical)


def _typed(obj: dict[str, Any], computed: str | None, canonical: bool) -> TypedEvent:
    """The event class of the record's type around a decoded, well-formed record."""
    p = obj["producer"]
    who = (p["name"], p["version"], p["principal"])
    producer = _PRODUCERS.get(who)
    if producer is None:
        if len(_PRODUCERS) >= _PRODUCERS_KEPT:
            _PRODUCERS.clear()
        producer = _PRODUCERS[who] = Producer(*who)
    kind = obj["type"]
    return _CLASSES.get(kind, UnknownEvent)(
        obj["stream"],
        obj["session_id"],
        obj["seq"],
        obj["ts_ns"],
        kind,
        obj["event_id"],
        tuple(obj["causes"]),
        producer,
        obj["payload"],
        obj["prev_hash"],
        obj["hash"],
        computed,
        canonical,
        obj,
        [],
    )


def _well_formed(obj: dict[str, Any]) -> bool:
    """The header checks of the Envelope schema, written out: the reference of the native
    core's `well_formed`, which runs them in a tenth of the time (1.5 µs here, most of it the
    three pattern matches)."""
    if obj.keys() != _HEADER_KEYS:
        return False
    sid, seq, ts, p, causes = (
        obj["session_id"],
        obj["seq"],
        obj["ts_ns"],
        obj["producer"],
        obj["causes"],
    )
    prev, digest = obj["prev_hash"], obj["hash"]
    return bool(
        type(sid) is str
        and type(seq) is int
        and type(ts) is int
        and type(p) is dict
        and type(causes) is list
        and type(prev) is str
        and type(digest) is str
        and type(obj["stream"]) is str
        and type(obj["type"]) is str
        and type(obj["event_id"]) is str
        and type(obj["payload"]) is dict
        and 0 <= seq <= _INT64_MAX
        and _INT64_MIN <= ts <= _INT64_MAX
        and _SESSION_ID.fullmatch(sid)
        and _HEX64.fullmatch(prev)
        and _HEX64.fullmatch(digest)
        and p.keys() == _PRODUCER_KEYS
        and type(p["name"]) is str
        and type(p["version"]) is str
        and type(p["principal"]) is str
        and (not causes or all(type(c) is str for c in causes))
    )


def _problem(obj: dict[str, Any]) -> str:
    """What is wrong with a mapping the hot path refused, in the schema's words where it has
    them (pydantic converts `3.0` or `true` to an int; the codec takes JSON types as written)."""
    try:
        Envelope.model_validate(obj)
    except ValidationError as exc:
        return f"invalid envelope: {exc}"[:300]
    for name, kind in _HEADER_TYPES.items():
        if type(obj[name]) is not kind:
            return f"invalid envelope: {name} is a JSON {type(obj[name]).__name__}, not {kind.__name__}"
    return "invalid envelope: the producer or causes hold a value that is not a string"


def _content_hash(obj: dict[str, Any], raw: bytes) -> tuple[str | None, bool]:
    """(hash of the content, whether `raw` is its canonical encoding)."""
    native = _accel.native
    if native is not None:
        digest = native.content_hash(raw)
        if digest is not None:
            return digest, True
    elif _plainly_canonical(obj, raw):
        return _spliced_hash(raw), True
    try:
        canonical = canonical_bytes(obj)
    except CanonicalEncodingError:
        return None, False
    if canonical == raw:
        return _spliced_hash(raw), True
    body = {k: v for k, v in obj.items() if k != "hash"}
    return hashlib.sha256(canonical_bytes(body)).hexdigest(), False


def _plainly_canonical(obj: dict[str, Any], raw: bytes) -> bool:
    try:
        plain = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return False
    return plain == raw and plain_is_canonical(plain)


def _spliced_hash(raw: bytes) -> str:
    """sha256 of canonical record bytes with the `hash` member cut out. With sorted keys the
    member sits right after `event_id`'s, and no string before it can hold the marker."""
    at = raw.find(_HASH_MEMBER)
    return hashlib.sha256(raw[:at] + raw[at + len(_HASH_MEMBER) + 65 :]).hexdigest()
