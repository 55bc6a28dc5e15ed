"""The canonical form: pinned by committed vectors, stable under decode/encode, explicit about NaN."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rolltape.schemas import CanonicalEncodingError, Metric, canonical_bytes, decode, parse_payload

VECTORS = Path(__file__).resolve().parents[2] / "schemas" / "vectors" / "canonical.json"


def load_vectors() -> dict:
    return json.loads(VECTORS.read_text(encoding="utf-8"))


def test_vectors__reencoding_each_canonical_value_gives_the_same_bytes_and_hash() -> None:
    for case in load_vectors()["values"]:
        raw = case["canonical"].encode()
        assert canonical_bytes(decode(raw)) == raw, case["name"]
        assert hashlib.sha256(raw).hexdigest() == case["sha256"], case["name"]


def test_vectors__each_float_bit_pattern_has_its_token() -> None:
    for case in load_vectors()["floats"]:
        (value,) = struct.unpack(">d", bytes.fromhex(case["bits"]))
        assert canonical_bytes(value).decode() == case["token"]


def test_vectors__match_what_the_reference_implementation_writes_today() -> None:
    spec = importlib.util.spec_from_file_location(
        "make_vectors", VECTORS.parents[2] / "scripts" / "make_vectors.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.build() == VECTORS.read_bytes()


def test_non_finite_floats__are_written_as_tokens_never_as_null() -> None:
    assert canonical_bytes({"a": math.nan, "b": math.inf, "c": -math.inf}) == (
        b'{"a":"NaN","b":"Infinity","c":"-Infinity"}'
    )


def test_non_finite_tokens__come_back_as_floats_in_typed_payloads() -> None:
    raw = canonical_bytes(Metric(epoch=3, train_loss=math.nan, val_loss=math.inf).model_dump())
    metric = parse_payload("metric", decode(raw))
    assert isinstance(metric, Metric)
    assert math.isnan(metric.train_loss or 0.0)
    assert metric.val_loss == math.inf


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (2**63, "signed 64-bit"),
        (-(2**63) - 1, "signed 64-bit"),
        ({1: "x"}, "not a string"),
        ({"s": "\ud800"}, "surrogates"),
        ({"b": b"bytes"}, "bytes has no canonical JSON form"),
    ],
)
def test_values_without_a_canonical_form__are_rejected_with_their_path(
    value: object, message: str
) -> None:
    with pytest.raises(CanonicalEncodingError, match=message):
        canonical_bytes(value)


def test_integers_and_floats__stay_distinct_kinds() -> None:
    assert canonical_bytes([1, 1.0, 10**16, 1e16]) == b"[1,1.0,10000000000000000,1e+16]"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)


@given(json_values)
def test_round_trip__decoding_then_encoding_reproduces_the_bytes(value: object) -> None:
    raw = canonical_bytes(value)
    assert canonical_bytes(decode(raw)) == raw
    assert b"\n" not in raw


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_round_trip__every_finite_float_decodes_to_the_same_double(value: float) -> None:
    back = decode(canonical_bytes(value))
    assert isinstance(back, float)
    assert struct.pack(">d", back) == struct.pack(">d", value)
