"""Canonical JSON: the byte form every hash in rolltape is computed over.

Invariant: `canonical_bytes(decode(b)) == b` for every `b` that `canonical_bytes` produced, so a
verifier can parse a record, re-encode it and compare hashes without knowing its schema. The
byte-exact rules are written down in docs/canonical-encoding.md and pinned by
vectors/canonical.json; this module is the reference implementation of that text.

orjson does the heavy lifting (sorted keys, string escaping, UTF-8). Two things it gets wrong for
a hash chain are fixed before it runs: it writes NaN/Infinity as `null` (hiding an exploding loss),
and its float format is its own (`0.00001`, `1e-7`), so floats are pre-rendered in Python's
shortest round-trip `repr` form and spliced in as fragments.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pydantic_core

from rolltape.schemas import _accel
from rolltape.schemas._errors import CanonicalEncodingError

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1

NAN = "NaN"
POS_INF = "Infinity"
NEG_INF = "-Infinity"

_OPTS = orjson.OPT_SORT_KEYS


def _float_token(value: float) -> str | orjson.Fragment:
    if math.isfinite(value):
        return orjson.Fragment(repr(value).encode("ascii"))
    if math.isnan(value):
        return NAN
    return POS_INF if value > 0 else NEG_INF


class _NoCanonicalForm(Exception):
    """Raised deep in the walk; collects the path on the way out so the hot path builds none."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.path: list[str] = []

    def where(self) -> str:
        return "$" + "".join(reversed(self.path))


def _prepare(value: Any) -> Any:
    """Return a copy orjson can write canonically; reject what has no canonical form."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        if INT_MIN <= value <= INT_MAX:
            return value
        raise _NoCanonicalForm(
            f"integer {value} is outside the signed 64-bit range; send it as a string"
        )
    if kind is float:
        return _float_token(value)
    if kind is dict or isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NoCanonicalForm(f"object key {key!r} is not a string")
            item_kind = type(item)
            if item_kind is str or item is None or item_kind is bool:
                out[key] = item
                continue
            if item_kind is float:  # leaves inline: most of a payload, and calls are dear
                out[key] = _float_token(item)
                continue
            if item_kind is int and INT_MIN <= item <= INT_MAX:
                out[key] = item
                continue
            try:
                out[key] = _prepare(item)
            except _NoCanonicalForm as exc:
                exc.path.append(f".{key}")
                raise
        return out
    if kind is list or kind is tuple:
        return _prepare_items(value)
    # Subclasses (StrEnum, IntEnum, numpy scalars that subclass float) after the exact checks,
    # which keep the common path cheap.
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return _prepare(int(value))
    if isinstance(value, float):
        return _float_token(float(value))
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return _prepare_items(value)
    raise _NoCanonicalForm(
        f"{type(value).__name__} has no canonical JSON form; "
        "convert it to str, int, float, bool, None, list or dict first"
    )


def _prepare_items(value: Sequence[Any]) -> list[Any]:
    out = []
    for i, item in enumerate(value):
        item_kind = type(item)
        if item_kind is str or (item_kind is int and INT_MIN <= item <= INT_MAX):
            out.append(item)
            continue
        if item_kind is float:
            out.append(_float_token(item))
            continue
        try:
            out.append(_prepare(item))
        except _NoCanonicalForm as exc:
            exc.path.append(f"[{i}]")
            raise
    return out


def prepare(value: Any) -> Any:
    """`value` made ready for `orjson.dumps(..., option=OPT_SORT_KEYS)` to write canonically."""
    try:
        return _prepare(value)
    except _NoCanonicalForm as exc:
        raise CanonicalEncodingError(f"{exc.where()}: {exc.message}") from None


def canonical_bytes(value: Any) -> bytes:
    """Encode a JSON-like value in rolltape's canonical form (see docs/canonical-encoding.md)."""
    native = _accel.native
    if native is not None and (encoded := native.canonical(value)) is not None:
        return encoded
    prepared = prepare(value)
    try:
        return orjson.dumps(prepared, option=_OPTS)
    except orjson.JSONEncodeError as exc:  # lone surrogates, recursion depth
        raise CanonicalEncodingError(f"$: {exc}") from exc


# Number tokens that orjson's plain encoder writes differently from the canonical one: floats
# below 1e-4 and with exponents (orjson always signs its exponents), and integers past the signed
# 64-bit range. In compact JSON a number follows `:`, `,` or an array's `[`, and that `[` itself
# follows `:`, `,`, `[` or the start of the text. Only the places a substring search (C speed)
# finds are looked at, so text in a string ("outside [1e-05, n/a]" in a rule's reason: a space
# before the bracket) costs a glance, not the slow path; text that still looks like a number
# there only costs the slow path, never a wrong answer.
_RISKY_INT = re.compile(rb"[:,\[](?:9[0-9]{18}|[0-9]{20})")
_NUMBER_CHARS = frozenset(b"0123456789.-")
_DIGITS = frozenset(b"0123456789")
_COLON, _COMMA, _BRACKET = b":,["


def _number_starts_at(plain: bytes, start: int) -> bool:
    """Whether a JSON number token could start at `start` (by what precedes it)."""
    if start == 0:
        return False
    before = plain[start - 1]
    if before in (_COLON, _COMMA):
        return True
    return before == _BRACKET and (start == 1 or plain[start - 2] in (_COLON, _COMMA, _BRACKET))


def _has_risky_float(plain: bytes) -> bool:
    for needle, exponent in ((b"e-", True), (b"e+", True), (b"0.0000", False)):
        at = plain.find(needle)
        while at != -1:
            start = at
            while start > 0 and plain[start - 1] in _NUMBER_CHARS:
                start -= 1
            mantissa = plain[start:at].removeprefix(b"-")
            # digits before an exponent; nothing (or a sign) before a 0.0000 that starts a token
            shaped = (bool(mantissa) and mantissa[0] in _DIGITS) if exponent else not mantissa
            if shaped and _number_starts_at(plain, start):
                return True
            at = plain.find(needle, at + 1)
    return False


def plain_is_canonical(plain: bytes) -> bool:
    """Whether bytes orjson wrote with sorted keys (no other options) are also the canonical
    encoding of the same value: true unless a number in them is one the two write differently."""
    if (b"e-" in plain or b"e+" in plain or b"0.0000" in plain) and _has_risky_float(plain):
        return False
    return not ((b":9" in plain or b",9" in plain or b"[9" in plain) and _RISKY_INT.search(plain))


def canonical_dump_bytes(dump: Mapping[str, Any]) -> bytes:
    """`canonical_bytes(dump)` for a pydantic model's `model_dump(mode="python")` (string keys,
    JSON types, str and int enums), by way of native encoders: pydantic-core writes it with
    non-finite floats as the canonical tokens and orjson sorts it; whenever a number could come
    out differently, the canonical walk writes it instead. About a third cheaper than the walk on
    a rule evaluation; the processors seal one output per metric. The native core takes such a
    dump as it is (str and int enums included)."""
    native = _accel.native
    if native is not None and (encoded := native.canonical(dump)) is not None:
        return encoded
    try:
        plain = orjson.dumps(
            orjson.loads(pydantic_core.to_json(dump, inf_nan_mode="strings")),
            option=_OPTS,
        )
    except (ValueError, TypeError, pydantic_core.PydanticSerializationError):
        return canonical_bytes(dump)
    return plain if plain_is_canonical(plain) else canonical_bytes(dump)


def decode(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse canonical (or any strict) JSON. Non-finite floats stay as their string tokens;
    typed models turn them back into floats."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CanonicalEncodingError(f"not valid JSON: {exc}") from exc


def restore_non_finite(value: Any) -> Any:
    """Map the string tokens NaN/Infinity/-Infinity back to floats, for untyped consumers that
    know a field is numeric."""
    if value == NAN:
        return math.nan
    if value == POS_INF:
        return math.inf
    if value == NEG_INF:
        return -math.inf
    return value
