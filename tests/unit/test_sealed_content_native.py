"""A subject session's content sealed by the native core, in the payload plan's pass, is byte
for byte what the reference writes: `seal_content` on pydantic's dump, then the clear payload
validated and sealed into the chain (schemas/native/src/sealed.rs, `ChainWriter.append_payload`).

The property tests hold the two together on generated payloads of every event type that has
content fields, mixing set, empty and absent content with the near misses the plan tests use.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rolltape.schemas import (
    CONTENT_FIELDS,
    PAYLOAD_MODELS,
    CanonicalEncodingError,
    ChainWriter,
    _accel,
    canonical_bytes,
    decode,
)
from rolltape.schemas._payload_plans import dump_payload, payload_plan, plan_fields
from rolltape.schemas.privacy import ContentKey, open_content, seal_content
from tests.unit.test_payload_plans import near_misses, valid

native = _accel.native
needs_native = pytest.mark.skipif(native is None, reason="the native core is not built here")
PRODUCER = {"name": "test", "version": "0", "principal": "agent"}
KEY = ContentKey("0123456789abcdef", bytes(range(32)))
AT = {"stream": "events", "session_id": "s-1", "seq": 7}
CONTENT_TYPES = tuple(CONTENT_FIELDS)
PLANNED = tuple(
    name for name in CONTENT_TYPES if native is not None and payload_plan(PAYLOAD_MODELS[name])
)
ANSWERED: dict[str, int] = {}

texts = st.text(max_size=40) | st.sampled_from(["", "jane@example.com", 'é 😀 \n\t"q"\\'])


_REASONS = st.lists(st.fixed_dictionaries({"code": texts, "message": texts}), max_size=2)
UNPLANNED: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    # Written by the worker about a session (Python sealing only): drawn from their own fields.
    "verdict": st.fixed_dictionaries(
        {"judge": texts, "judge_version": texts, "status": st.sampled_from(["ok", "error"])},
        optional={
            "details": st.dictionaries(texts, texts | st.integers(), max_size=3),
            "error": st.none() | texts,
            "violations": _REASONS,
            "scores": st.dictionaries(texts, st.floats(0, 1), max_size=2),
        },
    ),
    "filter_outcome": st.fixed_dictionaries(
        {
            "filter_version": texts,
            "config": texts,
            "accepted": st.booleans(),
            "status": texts,
            "turns": st.integers(0, 9),
            "tool_calls": st.integers(0, 9),
        },
        optional={"reasons": _REASONS},
    ),
}


def content_value(kind: str) -> st.SearchStrategy[Any]:
    """A value for a content field of plan kind `kind`, often empty."""
    if kind == "str":
        return texts
    return valid(kind, False, None, []) | st.sampled_from([[], (), {}])


@st.composite
def payloads(draw: st.DrawFn, event_type: str) -> dict[str, Any]:
    """A payload of `event_type`: content fields set, empty, None or absent, the other fields
    valid, and now and then a near miss, a `sealed` given or a key the model does not know."""
    model = PAYLOAD_MODELS[event_type]
    content = CONTENT_FIELDS[event_type]
    payload: dict[str, Any] = {}
    for name, kind, nullable, _, default, nonempty, ge, literals in plan_fields(model):
        if name == "sealed":
            if draw(st.integers(min_value=0, max_value=19)) == 0:
                payload[name] = draw(st.none() | texts)
            continue
        if default is not None and draw(st.integers(min_value=0, max_value=2)) == 0:
            continue
        if nullable and draw(st.integers(min_value=0, max_value=4)) == 0:
            payload[name] = None
        elif name in content:
            payload[name] = draw(content_value(kind))
        else:
            payload[name] = draw(valid(kind, nonempty, ge, literals))
        if draw(st.integers(min_value=0, max_value=11)) == 0:
            payload[name] = draw(near_misses)
    if draw(st.integers(min_value=0, max_value=19)) == 0:
        payload[draw(texts)] = draw(near_misses)
    return payload


def append(
    event_type: str, payload: Any, key: ContentKey | None = KEY, *, seq: int = AT["seq"]
) -> bytes | None:
    """The record `append_payload` seals for `payload` at seq `seq`; None when it is refused."""
    writer: ChainWriter[str] = ChainWriter()
    writer.take_over("k", seq, "0" * 64)
    try:
        record, _ = writer.append_payload(
            "k",
            stream=AT["stream"],
            session_id=AT["session_id"],
            ts_ns=1_700_000_000_000_000_000,
            type=event_type,
            model=PAYLOAD_MODELS[event_type],
            payload=payload,
            producer=PRODUCER,
            content_key=key,
        )
    except (ValidationError, CanonicalEncodingError):
        return None
    return record


def reference(event_type: str, payload: Any) -> bytes | None:
    with _accel.reference_only():
        return append(event_type, payload)


def sealed_natively(event_type: str, payload: Any) -> bytes | None:
    """The native core's answer alone (None: it leaves the payload to the reference)."""
    assert native is not None
    sealed = native.seal(
        AT["stream"],
        AT["session_id"],
        AT["seq"],
        1_700_000_000_000_000_000,
        event_type,
        None,
        (),
        PRODUCER,
        payload,
        "0" * 64,
        payload_plan(PAYLOAD_MODELS[event_type]),
        KEY._native,
    )
    return None if sealed is None else sealed[0]


def payload_of(record: bytes) -> dict[str, Any]:
    payload = decode(record)["payload"]
    assert isinstance(payload, dict)
    return payload


@needs_native
def test_plans__seal_content_natively_for_every_planned_type_with_content() -> None:
    assert set(PLANNED) >= {"turn", "tool_call", "tool_result", "model_error", "feedback"}
    assert KEY._native is not None


@needs_native
@pytest.mark.parametrize("event_type", PLANNED)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_native_sealing__writes_the_reference_bytes_or_declines(
    event_type: str, data: st.DataObject
) -> None:
    payload = data.draw(payloads(event_type))
    answer = sealed_natively(event_type, payload)
    expected = reference(event_type, payload)
    sealed = answer is not None and "sealed" in payload_of(answer)
    ANSWERED[event_type] = ANSWERED.get(event_type, 0) + sealed
    if answer is not None:
        assert answer == expected
    # Through the chain writer, declined or not, the bytes are always the reference's.
    assert append(event_type, payload) == expected


@needs_native
def test_native_sealing__many_generated_payloads_were_sealed_natively() -> None:
    # Runs after the property test above (file order): it must have compared real answers
    # with content sealed, not only declines and payloads with nothing to seal.
    if len(ANSWERED) < len(PLANNED):
        pytest.skip("the property test above did not run for every type")
    assert all(ANSWERED[name] >= 40 for name in PLANNED), ANSWERED


@pytest.mark.parametrize("event_type", CONTENT_TYPES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_sealed_record__opens_with_the_reference_to_the_payload_it_was(
    event_type: str, data: st.DataObject
) -> None:
    model = PAYLOAD_MODELS[event_type]
    if event_type == "session_started":  # no plan to draw from: its own fields
        payload: dict[str, Any] = {"task": data.draw(texts)}
    elif event_type in UNPLANNED:
        payload = data.draw(UNPLANNED[event_type])
    else:
        payload = data.draw(payloads(event_type))
        payload.pop("sealed", None)  # a `sealed` of the caller's own does not open
    record = append(event_type, payload)
    if record is None:
        return
    opened = open_content(event_type, payload_of(record), KEY, **AT)
    # Compared as canonical bytes: a drawn tuple comes back from JSON as a list.
    expected = dump_payload(model, payload)
    assert canonical_bytes(dump_payload(model, opened)) == canonical_bytes(expected)


@needs_native
def test_sealed_record__of_a_turn_is_sealed_natively_and_opens() -> None:
    turn = {"role": "user", "content": "my email is jane@example.com", "token_ids": [1, 2]}
    record = sealed_natively("turn", turn)
    assert record is not None and b"jane" not in record
    payload = payload_of(record)
    assert payload["content"] == "" and payload["token_ids"] is None
    assert payload["sealed"].startswith("v1.0123456789abcdef.")
    opened = open_content("turn", payload, KEY, **AT)
    assert opened["content"] == turn["content"] and opened["token_ids"] == [1, 2]


@pytest.mark.parametrize(
    ("event_type", "payload"),
    [
        ("turn", {"role": "assistant", "content": ""}),
        ("turn", {"role": "user", "content": "", "reasoning": None, "logprobs": None}),
        ("tool_call", {"id": "c1", "name": "search", "arguments": {}}),
        ("tool_result", {"call_id": "c1", "content": "", "error": None}),
        ("feedback", {"score": 1.0}),
        ("session_ended", {"status": "completed"}),
    ],
)
def test_a_payload_with_no_content_set__is_not_sealed(
    event_type: str, payload: dict[str, Any]
) -> None:
    record = append(event_type, payload)
    assert record is not None and "sealed" not in payload_of(record)
    assert record == append(event_type, payload, key=None)
    assert record == reference(event_type, payload)
    if native is not None and event_type in PLANNED:
        assert sealed_natively(event_type, payload) == record


@needs_native
def test_a_payload_that_gives_sealed_itself__is_left_to_the_reference() -> None:
    turn = {"role": "user", "content": "hello", "sealed": "v1.0123456789abcdef.AAAA"}
    assert sealed_natively("turn", turn) is None
    assert append("turn", turn) == reference("turn", turn)


def test_sealing__is_bound_to_the_records_seq_as_the_reference_binds_it() -> None:
    turn = {"role": "user", "content": "hello"}
    for seq in (0, 1, 12345):
        record = append("turn", turn, seq=seq)
        assert record is not None
        clear = seal_content(
            "turn",
            dump_payload(PAYLOAD_MODELS["turn"], turn),
            KEY,
            stream=AT["stream"],
            session_id=AT["session_id"],
            seq=seq,
        )
        assert payload_of(record)["sealed"] == clear["sealed"]


def test_a_key_made_without_the_native_core__seals_with_the_reference() -> None:
    with _accel.reference_only():
        key = ContentKey(KEY.key_id, KEY.secret)
    assert key._native is None
    turn = {"role": "user", "content": "hello"}
    assert append("turn", turn, key=key) == reference("turn", turn)


@needs_native
@pytest.mark.parametrize(
    ("key_id", "encrypt", "nonce"),
    [
        ("0123456789ABCDEF", bytes(32), bytes(32)),  # not lowercase
        ("0123", bytes(32), bytes(32)),
        ("0123456789abcdef", bytes(31), bytes(32)),
        ("0123456789abcdef", bytes(32), b""),
    ],
)
def test_content_sealer__refuses_a_malformed_key(key_id: str, encrypt: bytes, nonce: bytes) -> None:
    assert native is not None
    with pytest.raises(ValueError):
        native.ContentSealer(key_id, encrypt, nonce)


@needs_native
def test_native_opening__gives_the_reference_plaintext_and_declines_what_does_not_open() -> None:
    import base64

    from rolltape.schemas.privacy import associated_data

    turn = {"role": "user", "content": "my email is jane@example.com"}
    sealed = seal_content("turn", turn, KEY, **AT)["sealed"]
    encoded = sealed.split(".")[2]
    aad = associated_data(AT["stream"], AT["session_id"], AT["seq"], "turn")
    blob = base64.urlsafe_b64decode(encoded)
    reference = KEY._aead.decrypt(blob[:12], blob[12:], aad)
    assert KEY._native.open(sealed, aad) == reference
    other = associated_data(AT["stream"], AT["session_id"], AT["seq"] + 1, "turn")
    assert KEY._native.open(sealed, other) is None  # another record's identity
    flipped = base64.urlsafe_b64encode(blob[:-1] + bytes([blob[-1] ^ 1])).decode()
    assert KEY._native.open(f"v1.{KEY.key_id}.{flipped}", aad) is None  # a changed tag
    assert KEY._native.open(f"v1.{KEY.key_id}.not base64!", aad) is None
    assert KEY._native.open(f"v1.{'f' * 16}.{encoded}", aad) is None  # another key's
