"""The one codec: records are decoded, checked and typed once, by the rules of the Envelope
schema, and the cheap canonical check says what the full canonical encoder would."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rolltape.schemas import (
    GENESIS_HASH,
    BreakKind,
    CanonicalEncodingError,
    Envelope,
    PayloadError,
    SessionStarted,
    Turn,
    UnreadableRecord,
    canonical_bytes,
    canonical_dump_bytes,
    hash_of,
    read_event,
    seal,
)
from rolltape.schemas._canonical import plain_is_canonical

PRODUCER = {"name": "test", "version": "0", "principal": "agent"}
ROOT = Path(__file__).resolve().parents[2]


def sealed(payload: dict[str, Any], event_type: str = "turn", **fields: Any) -> bytes:
    value, _ = seal(
        stream=fields.get("stream", "events"),
        session_id=fields.get("session_id", "s1"),
        seq=fields.get("seq", 0),
        ts_ns=fields.get("ts_ns", 1_700_000_000_000_000_000),
        type=event_type,
        payload=payload,
        prev_hash=GENESIS_HASH,
        producer=PRODUCER,
        causes=fields.get("causes", ()),
    )
    return value


def test_sealed_record__reads_back_field_for_field_intact_and_canonical() -> None:
    value = sealed({"role": "user", "content": "hi ✓"}, causes=("a" * 32,))
    event = read_event(value)
    assert (event.stream, event.session_id, event.seq, event.type) == ("events", "s1", 0, "turn")
    assert event.causes == ("a" * 32,) and event.producer.principal == "agent"
    assert event.intact and event.canonical and event.hash == hash_of(event.mapping)
    assert event.envelope().to_record() == value  # the schema model round-trips the bytes


def test_event__is_frozen() -> None:
    event = read_event(sealed({"role": "user", "content": "hi"}))
    with pytest.raises(AttributeError):
        event.seq = 5  # type: ignore[misc]


def test_body__is_the_typed_payload_parsed_once() -> None:
    event = read_event(sealed({"role": "assistant", "content": "4", "reasoning": "2+2"}))
    assert isinstance(event.body, Turn) and event.body.reasoning == "2+2"
    assert event.body is event.body


def test_body__ignores_fields_a_newer_producer_added_at_any_depth() -> None:
    tool = {"name": "calc", "description": "", "parameters": {}, "cost": 3}
    value = sealed({"task": "t", "tools": [tool], "budget": 5}, "session_started")
    event = read_event(value)
    assert isinstance(event.body, SessionStarted) and event.body.tools[0].name == "calc"
    assert event.payload["budget"] == 5  # the record itself keeps them (its hash covers them)


def test_body__of_a_payload_that_does_not_validate__raises_payload_error() -> None:
    event = read_event(sealed({"role": "user"}))  # no content
    with pytest.raises(PayloadError, match="turn"):
        _ = event.body


def test_non_finite_tokens__become_floats_in_the_body() -> None:
    event = read_event(sealed({"value": math.nan, "name": "reward"}, "reward"))
    assert event.payload["value"] == "NaN" and math.isnan(event.body.value)  # type: ignore[attr-defined]


def _mutations() -> list[tuple[str, Any]]:
    return [
        ("missing_key", lambda o: o.pop("type")),
        ("extra_key", lambda o: o.update(extra=1)),
        ("seq_negative", lambda o: o.update(seq=-1)),
        ("session_id_pattern", lambda o: o.update(session_id="bad id/")),
        ("hash_not_hex", lambda o: o.update(hash="x" * 64)),
        ("prev_hash_short", lambda o: o.update(prev_hash="ab")),
        ("payload_list", lambda o: o.update(payload=[])),
        ("producer_extra", lambda o: o["producer"].update(host="h")),
        ("producer_missing", lambda o: o["producer"].pop("principal")),
        ("causes_not_strings", lambda o: o.update(causes=[1])),
        ("stream_number", lambda o: o.update(stream=5)),
    ]


@pytest.mark.parametrize(("name", "mutate"), _mutations(), ids=[m[0] for m in _mutations()])
def test_codec__refuses_what_the_envelope_schema_refuses(name: str, mutate: Any) -> None:
    obj = orjson.loads(sealed({"role": "user", "content": "hi"}))
    mutate(obj)
    with pytest.raises(ValidationError):
        Envelope.model_validate(obj)
    with pytest.raises(UnreadableRecord) as caught:
        read_event(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS))
    assert caught.value.kind == BreakKind.UNPARSEABLE and "invalid envelope" in caught.value.detail


@pytest.mark.parametrize("value", [3.0, True, "3"])
def test_codec__takes_json_types_as_written_where_the_schema_would_convert(value: Any) -> None:
    obj = orjson.loads(sealed({"role": "user", "content": "hi"}))
    obj["seq"] = value
    Envelope.model_validate(obj)  # pydantic's lax mode converts
    with pytest.raises(UnreadableRecord, match="seq is a JSON"):
        read_event(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS))


def test_unknown_version_and_non_json__are_told_apart() -> None:
    obj = orjson.loads(sealed({"role": "user", "content": "hi"}))
    obj["v"] = 2
    with pytest.raises(UnreadableRecord) as caught:
        read_event(orjson.dumps(obj))
    assert caught.value.kind == BreakKind.UNKNOWN_VERSION
    for junk in (b"not json", b"[1, 2]", b'{"v": 1}'):
        with pytest.raises(UnreadableRecord) as caught:
            read_event(junk)
        assert caught.value.kind == BreakKind.UNPARSEABLE


def test_tampered_content__is_read_but_not_intact() -> None:
    obj = orjson.loads(sealed({"role": "user", "content": "Paris"}))
    obj["payload"]["content"] = "Lyon"
    event = read_event(canonical_bytes(obj))
    assert not event.intact and event.canonical and event.computed_hash == hash_of(obj)


@pytest.mark.parametrize(
    ("value", "plain"),
    [(1e-05, b"0.00001"), (1e-07, b"1e-7"), (2.5e-06, b"0.0000025"), (1e16, b"1e+16")],
)
def test_floats_in_the_plain_encoders_form__are_not_canonical(value: float, plain: bytes) -> None:
    canonical = sealed({"value": value, "name": "reward"}, "reward")
    written = canonical.replace(repr(value).encode(), plain)
    assert written != canonical or repr(value).encode() == plain
    event = read_event(written)
    assert event.canonical == (written == canonical)
    assert event.intact  # the content (the number) is the same: only its spelling differs


def test_integer_past_64_bits__has_no_canonical_form() -> None:
    canonical = sealed({"value": 1.0, "name": "reward", "components": {"n": 1}}, "reward")
    written = canonical.replace(b'"n":1', b'"n":9223372036854775808')
    event = read_event(written)
    assert event.computed_hash is None and not event.canonical and not event.intact


def json_values(*, non_finite: bool) -> st.SearchStrategy[Any]:
    """JSON-like values within the canonical form's types (64-bit integers, string keys)."""
    floats = st.floats(allow_nan=non_finite, allow_infinity=non_finite)
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), floats, st.text()
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)
        ),
        max_leaves=16,
    )


@settings(max_examples=300, deadline=None)
@given(content=json_values(non_finite=False))
def test_cheap_canonical_check__agrees_with_the_canonical_encoder(content: Any) -> None:
    value = sealed({"value": 1.0, "name": "reward", "components": {"x": content}}, "reward")
    assert read_event(value).canonical and read_event(value).intact
    plain = orjson.dumps(orjson.loads(value), option=orjson.OPT_SORT_KEYS)
    event = read_event(plain)
    assert event.canonical == (plain == value)
    assert event.intact


def test_only_the_codec__parses_envelopes() -> None:
    # Every reader goes through read_event (the codec and the events it returns): no other
    # module validates envelopes or decodes a record value itself.
    needles = re.compile(r"Envelope\.model_validate|decode\([\w.]*value\b")
    offenders = [
        f"{path.relative_to(ROOT)}: {found}"
        for package in ("schemas", "processors", "projections", "producers", "infra")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name not in ("_codec.py", "_events.py")
        for found in needles.findall(path.read_text())
    ]
    assert offenders == []


def test_mapping__is_the_decoded_record() -> None:
    value = sealed({"role": "user", "content": "hi"})
    event = read_event(value)
    assert event.mapping == orjson.loads(value)
    assert event.payload is event.mapping["payload"]  # one decode, not a copy


@settings(max_examples=400, deadline=None)
@given(value=st.dictionaries(st.text(max_size=5), json_values(non_finite=True), max_size=5))
def test_canonical_dump_bytes__equals_the_canonical_encoder(value: dict[str, Any]) -> None:
    assert canonical_dump_bytes(value) == canonical_bytes(value)


@pytest.mark.parametrize("number", [1e-05, 1e-07, 1e16, 2.5e-300, 2**63 - 1, -(2**63), 0.1])
def test_canonical_dump_bytes__numbers_the_plain_encoder_writes_otherwise(number: float) -> None:
    value = {"x": number, "nested": [number, {"y": math.nan}]}
    assert canonical_dump_bytes(value) == canonical_bytes(value)


def test_canonical_dump_bytes__refuses_what_has_no_canonical_form() -> None:
    with pytest.raises(CanonicalEncodingError):
        canonical_dump_bytes({"x": 2**63})


NUMBERISH = st.text(alphabet="0123456789.e-+[]:, ", max_size=12)


@settings(max_examples=400, deadline=None)
@given(
    value=st.recursive(
        st.one_of(NUMBERISH, st.floats(allow_nan=False, allow_infinity=False)),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(NUMBERISH, inner, max_size=3)
        ),
        max_leaves=12,
    )
)
def test_cheap_canonical_check__text_that_looks_like_numbers_never_fools_it(value: Any) -> None:
    """Strings full of digits, exponents, brackets and commas beside real numbers: the check
    may send text to the slow path, but never calls bytes canonical that are not."""
    plain = orjson.dumps({"v": value}, option=orjson.OPT_SORT_KEYS)
    if plain_is_canonical(plain):
        assert plain == canonical_bytes({"v": value})


@pytest.mark.parametrize(
    ("value", "fast"),
    [
        ({"reason": "EMA 0.001 not persistently outside [1e-05, n/a]"}, True),
        ({"reason": "x,1e-05"}, False),  # looks like a number after a comma: the slow path
        ({"x": [1e-05]}, False),
        ({"x": [[-1e-07]]}, False),
        ({"x": [0.5, 1e16]}, False),
        ({"x": {"y": 0.00001}}, False),
    ],
)
def test_cheap_canonical_check__tells_numbers_from_text(value: Any, fast: bool) -> None:
    plain = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    assert plain_is_canonical(plain) is fast
    assert canonical_dump_bytes(value) == canonical_bytes(value)
