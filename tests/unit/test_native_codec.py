"""The codec's native core answers exactly as the reference implementation does, or not at all.

Every function of `rolltape.schemas._native` either returns what the reference (the Python walk
in `_canonical` and `_envelope`) returns for the same input, or None, leaving the decision to
the reference. These tests hold it to that on generated values, on records mutated into every
non-canonical form we could think of, and on the committed vectors.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import os
import struct
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolltape.schemas import (
    GENESIS_HASH,
    CanonicalEncodingError,
    _accel,
    canonical_bytes,
    read_event,
    seal,
)

native = _accel.native
needs_native = pytest.mark.skipif(native is None, reason="the native core is not built here")
VECTORS = Path(__file__).resolve().parents[2] / "schemas" / "vectors" / "canonical.json"
PRODUCER = {"name": "test", "version": "0", "principal": "agent"}


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


def reference_canonical(value: Any) -> bytes | None:
    with _accel.reference_only():
        try:
            return canonical_bytes(value)
        except CanonicalEncodingError:
            return None


def reference_seal(**fields: Any) -> tuple[bytes, str]:
    with _accel.reference_only():
        return seal(**fields)


def test_native_core__is_built_where_the_test_command_requires_it() -> None:
    if os.environ.get("ROLLTAPE_REQUIRE_NATIVE"):
        assert native is not None, "the native core did not build: is cargo on the PATH?"
        assert _accel.implementation() == "native"


def test_reference_only__switches_the_native_core_off_inside_the_block() -> None:
    before = _accel.implementation()
    with _accel.reference_only():
        assert _accel.implementation() == "python"
    assert _accel.implementation() == before


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),  # past the 64-bit range too
    st.floats(),  # NaN, infinities, subnormals, -0.0
    st.text(),  # lone surrogates, control characters, U+2028, astral planes
    st.sampled_from([Colour.RED, Level.HIGH, b"bytes", 1j]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
        st.dictionaries(st.integers(0, 3), inner, min_size=1, max_size=2),  # non-string keys
    ),
    max_leaves=20,
)


@needs_native
@settings(max_examples=1500)
@given(value=values)
def test_canonical__is_the_reference_bytes_or_leaves_the_value_to_it(value: Any) -> None:
    assert native is not None
    answer = native.canonical(value)
    reference = reference_canonical(value)
    if answer is not None:
        assert answer == reference
    # where the reference writes bytes, the public function writes the same either way
    if reference is not None:
        assert canonical_bytes(value) == reference


@needs_native
@pytest.mark.parametrize(
    "value",
    [2**63, -(2**63) - 1, {1: "x"}, {"s": "\ud800"}, b"bytes", 1j],
)
def test_canonical__leaves_every_value_without_a_canonical_form_to_the_reference(
    value: Any,
) -> None:
    assert native is not None
    assert reference_canonical(value) is None
    assert native.canonical(value) is None


@needs_native
def test_canonical__deeper_than_it_walks_is_the_references_to_decide() -> None:
    assert native is not None
    deep: Any = 0
    for _ in range(200):
        deep = [deep]
    assert native.canonical(deep) is None
    assert canonical_bytes(deep) == b"[" * 200 + b"0" + b"]" * 200


@needs_native
def test_vectors__the_native_core_writes_every_value_and_float_token() -> None:
    assert native is not None
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))
    for case in vectors["values"]:
        raw = case["canonical"].encode()
        assert native.canonical(orjson.loads(raw)) == raw, case["name"]
    for case in vectors["floats"]:
        (value,) = struct.unpack(">d", bytes.fromhex(case["bits"]))
        assert native.canonical(value) == case["token"].encode()


def is_canonical(raw: bytes) -> bool:
    """The definition: re-encoding the parsed value gives the same bytes."""
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return reference_canonical(parsed) == raw


def content_hash_by_definition(raw: bytes) -> str:
    parsed = orjson.loads(raw)
    body = {k: v for k, v in parsed.items() if k != "hash"}
    encoded = reference_canonical(body)
    assert encoded is not None
    return hashlib.sha256(encoded).hexdigest()


def rewrites(raw: bytes) -> list[bytes]:
    """The same content written the ways other encoders write it."""
    value = orjson.loads(raw)
    return [
        orjson.dumps(value, option=orjson.OPT_SORT_KEYS),  # orjson's own float forms
        orjson.dumps(value),  # insertion order
        json.dumps(value, sort_keys=True, separators=(",", ":")).encode(),  # \u escapes
        json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode(),
        json.dumps(value, sort_keys=True).encode(),  # whitespace
        raw.replace(b"1.0", b"1.00"),
        raw.replace(b"e-0", b"E-0"),
        raw.replace(b":0", b":-0"),
        raw.replace(b"\\n", b"\\u000a"),
        raw.replace(b"\\u001f", b"\\u001F"),
        raw.replace(b'"}', b'" }'),
        raw + b" ",
    ]


records = st.dictionaries(
    st.text(max_size=6).filter(lambda k: k != "hash"),
    st.recursive(
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-(2**63), 2**63 - 1),
            st.floats(allow_nan=False, allow_infinity=False),
            st.floats(min_value=-1e-3, max_value=1e-3),
            st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
        ),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
        ),
        max_leaves=12,
    ),
    max_size=5,
)


@needs_native
@settings(max_examples=600)
@given(content=records, digest=st.one_of(st.none(), st.text(alphabet="0123456789abcdef")))
def test_content_hash__says_canonical_exactly_when_re_encoding_gives_the_bytes(
    content: dict[str, Any], digest: str | None
) -> None:
    assert native is not None
    if digest is not None:
        content = {**content, "hash": digest}
    raw = reference_canonical(content)
    assert raw is not None
    for candidate in [raw, *rewrites(raw)]:
        answer = native.content_hash(candidate)
        if is_canonical(candidate):
            assert answer == content_hash_by_definition(candidate)
        else:
            assert answer is None


@needs_native
@settings(max_examples=600)
@given(
    content=records,
    at=st.integers(min_value=0),
    edit=st.sampled_from([b" ", b"0", b"-", b"e", b"E", b"+", b".", b"\\", b'"', b",", b"/", b"}"]),
    replace=st.booleans(),
)
def test_content_hash__no_single_byte_edit_passes_for_canonical_unless_it_is(
    content: dict[str, Any], at: int, edit: bytes, replace: bool
) -> None:
    assert native is not None
    raw = reference_canonical({**content, "hash": GENESIS_HASH})
    assert raw is not None
    at %= len(raw)
    edited = raw[:at] + edit + raw[at + 1 if replace else at :]
    answer = native.content_hash(edited)
    if answer is not None:
        assert is_canonical(edited)
        assert answer == content_hash_by_definition(edited)


@needs_native
@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":1,"a":2}',  # a repeated key
        b'{"b":1,"a":2}',  # out of order
        b'{"a":"\\/"}',  # an escape JSON allows and the encoder never writes
        b'{"a":"\\u0041"}',
        b'{"a":"\\u000A"}',
        b'{"a":01}',
        b'{"a":-0}',
        b'{"a":1e5}',
        b'{"a":100000.0e0}',
        b'{"a":1.0E+16}',
        b'{"a":9223372036854775808}',
        b'{"hash":1}',  # a hash that is no string
        b"[1]",  # not an object
        b'{"a":"\xff"}',  # not UTF-8
        b'{"a":"\xed\xa0\x80"}',  # an encoded surrogate
    ],
)
def test_content_hash__refuses_bytes_the_encoder_would_not_write(raw: bytes) -> None:
    assert native is not None
    assert native.content_hash(raw) is None


@needs_native
def test_content_hash__cuts_the_hash_member_wherever_it_sits() -> None:
    assert native is not None
    for content in (
        {"hash": "x"},
        {"a": 1, "hash": "x"},
        {"hash": "x", "z": 1},
        {"a": 1, "hash": "x", "z": [2]},
    ):
        raw = reference_canonical(content)
        assert raw is not None
        assert native.content_hash(raw) == content_hash_by_definition(raw)


@needs_native
@settings(max_examples=400)
@given(
    payload=st.one_of(records, records.map(lambda r: reference_canonical(r) or b"{}")),
    session_id=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,20}", fullmatch=True),
    seq=st.integers(0, 2**63 - 1),
    ts_ns=st.integers(-(2**63), 2**63 - 1),
    event_type=st.text(max_size=12),
    event_id=st.one_of(st.none(), st.text(max_size=8)),
    causes=st.lists(st.text(alphabet='0123456789abcdef"\\\n', max_size=6), max_size=3),
    as_tuple=st.booleans(),
    producer=st.fixed_dictionaries(
        {
            "name": st.text(max_size=5),
            "version": st.text(max_size=5),
            "principal": st.text(max_size=5),
        }
    ),
)
def test_seal__writes_the_references_record_and_hash(
    payload: Any,
    session_id: str,
    seq: int,
    ts_ns: int,
    event_type: str,
    event_id: str | None,
    causes: list[str],
    as_tuple: bool,
    producer: dict[str, str],
) -> None:
    assert native is not None
    fields: dict[str, Any] = {
        "stream": "events",
        "session_id": session_id,
        "seq": seq,
        "ts_ns": ts_ns,
        "type": event_type,
        "event_id": event_id,
        "causes": tuple(causes) if as_tuple else causes,
        "producer": producer,
        "payload": payload,
        "prev_hash": GENESIS_HASH,
    }
    answer = native.seal(*fields.values())
    assert answer is not None
    assert answer == reference_seal(**fields)
    record, digest = answer
    event = read_event(record)
    assert event.canonical and event.intact and event.hash == digest


@needs_native
def test_seal__leaves_payloads_it_does_not_walk_to_the_reference() -> None:
    assert native is not None
    args = ("events", "s", 0, 1, "turn", None, (), PRODUCER)
    assert native.seal(*args, {"x": 2**63}, GENESIS_HASH) is None
    assert native.seal(*args, {"x": math.inf}, GENESIS_HASH) is not None
    with pytest.raises(CanonicalEncodingError, match="signed 64-bit"):
        seal(stream="events", session_id="s", seq=0, ts_ns=1, type="turn",
             payload={"x": 2**63}, prev_hash=GENESIS_HASH, producer=PRODUCER)  # fmt: skip


@needs_native
@pytest.mark.parametrize("special", ['"', "\\", "\x00", "\x1f", "\n", "\x7f", "é", "\u2028"])
def test_canonical__escapes_a_character_wherever_it_sits_in_a_word(special: str) -> None:
    # the walk looks at text eight bytes at a time: every offset around those words
    assert native is not None
    for length in (1, 7, 8, 9, 16, 17, 40):
        for at in range(length):
            text = "x" * at + special + "y" * (length - at - 1)
            assert native.canonical(text) == reference_canonical(text), (length, at)


HEX = "0123456789abcdef"
_ANY_JSON = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=4)
)
_HEADER_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "v": st.just(1),
    "stream": st.one_of(st.sampled_from(["events", "metrics"]), _ANY_JSON),
    "session_id": st.one_of(
        st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}", fullmatch=True),
        st.text(alphabet="aZ9._:@+- /é\n", min_size=0, max_size=3),
        st.integers(199, 202).map(lambda n: "s" * n),
        st.just("ok\n"),
        st.just("\ud800x"),
        _ANY_JSON,
    ),
    "seq": st.one_of(
        st.integers(-2, 2**64),
        st.sampled_from([2**63 - 1, 2**63, -(2**63)]),
        st.booleans(),
        st.floats(0, 10),
    ),
    "ts_ns": st.one_of(
        st.integers(-(2**64), 2**64), st.sampled_from([-(2**63), -(2**63) - 1, 2**63]), _ANY_JSON
    ),
    "type": st.one_of(st.just("turn"), _ANY_JSON),
    "event_id": st.one_of(st.just("e1"), _ANY_JSON),
    "causes": st.one_of(
        st.lists(st.text(max_size=3), max_size=3),
        st.lists(_ANY_JSON, max_size=3),
        st.tuples(st.just("a")),
        _ANY_JSON,
    ),
    "producer": st.one_of(
        st.fixed_dictionaries(
            {"name": st.just("w"), "version": st.just("0"), "principal": st.just("agent")}
        ),
        st.dictionaries(st.sampled_from(["name", "version", "principal", "host"]), _ANY_JSON),
        _ANY_JSON,
    ),
    "payload": st.one_of(st.just({}), st.just([]), _ANY_JSON),
    "prev_hash": st.one_of(
        st.text(alphabet=HEX, min_size=63, max_size=65),
        st.just("A" * 64),
        st.just("0" * 63 + "\u0660"),
        _ANY_JSON,
    ),
    "hash": st.one_of(st.text(alphabet=HEX + "g", min_size=64, max_size=64), _ANY_JSON),
}


def _valid_header() -> dict[str, Any]:
    return {
        "v": 1,
        "stream": "events",
        "session_id": "s-1",
        "seq": 0,
        "ts_ns": 1,
        "type": "turn",
        "event_id": "e1",
        "causes": [],
        "producer": dict(PRODUCER),
        "payload": {},
        "prev_hash": "0" * 64,
        "hash": "f" * 64,
    }


@needs_native
@settings(max_examples=3000, deadline=None)
@given(
    changes=st.lists(
        st.sampled_from(sorted(_HEADER_FIELDS)).flatmap(
            lambda name: st.tuples(st.just(name), _HEADER_FIELDS[name])
        ),
        max_size=2,
    ),
    drop=st.sampled_from([None, *_HEADER_FIELDS]),
    extra=st.booleans(),
)
def test_well_formed__answers_what_the_reference_header_check_answers(
    changes: list[tuple[str, Any]], drop: str | None, extra: bool
) -> None:
    """From an intact header, one or two fields changed (each to a value either side of its
    rule's edges), or one dropped or one added: the two checks never disagree."""
    from rolltape.schemas._codec import _well_formed

    header = _valid_header()
    header.update(changes)
    if drop is not None and not changes:
        del header[drop]
    if extra and not changes and drop is None:
        header["extra"] = 1
    assert native is not None
    assert native.well_formed(header) == _well_formed(header), header


@needs_native
def test_well_formed__takes_an_intact_record_and_no_dict_subclass() -> None:
    assert native is not None
    obj = orjson.loads(
        seal(
            stream="events",
            session_id="s",
            seq=0,
            ts_ns=1,
            type="turn",
            payload={"role": "user", "content": "hi"},
            producer=PRODUCER,
            prev_hash=GENESIS_HASH,
        )[0]
    )
    assert native.well_formed(obj)

    class Mapping(dict[str, Any]):
        pass

    assert not native.well_formed(Mapping(obj))
    assert not native.well_formed([obj])


@needs_native
def test_well_formed__refuses_a_key_of_another_type_without_running_its_code() -> None:
    """A key that is not a str could run `__eq__` inside a lookup and change the dict under
    the check; the native check refuses such a dict before it looks anything up."""
    assert native is not None
    header: dict[Any, Any] = _valid_header()
    ran: list[str] = []
    armed = False

    class Shadow:
        def __hash__(self) -> int:
            return hash("hash")  # a lookup of "hash" meets it and compares

        def __eq__(self, other: object) -> bool:
            if armed:
                ran.append("eq")
                header["producer"] = None
            return False

    del header["hash"]
    header[Shadow()] = "f" * 64  # twelve keys again, one of them not a str
    armed = True
    assert not native.well_formed(header)
    assert ran == []
    assert header["producer"] == PRODUCER
