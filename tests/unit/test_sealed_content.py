"""Sealed content: a payload's content fields under the session's data key, bound to the
envelope's identity; data keys wrapped by a key-encryption key, bound to their session."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest

from rolltape.schemas import CONTENT_FIELDS, PAYLOAD_MODELS, ChainWriter, DataKeyRecord
from rolltape.schemas._payload_plans import dump_payload
from rolltape.schemas.privacy import (
    ContentKey,
    KeyEncryptionKey,
    Keyring,
    SealedContentError,
    open_content,
    seal_content,
    sealed_key_id,
)

ROOT = Path(__file__).resolve().parents[2]
KEY = ContentKey("0123456789abcdef", bytes(range(32)))
AT = {"stream": "events", "session_id": "s-1", "seq": 3}
TURN = dump_payload(
    PAYLOAD_MODELS["turn"],
    {
        "role": "user",
        "content": "my email is jane@example.com",
        "reasoning": None,
        "token_ids": [1, 2, 3],
        "prompt_tokens": 12,
        "completion_tokens": None,
    },
)


def test_sealed_content_opens_to_the_payload_it_was() -> None:
    sealed = seal_content("turn", TURN, KEY, **AT)
    turn = PAYLOAD_MODELS["turn"]
    assert turn.model_validate(open_content("turn", sealed, KEY, **AT)) == turn.model_validate(TURN)


def test_content_leaves_the_clear_payload_and_structure_stays() -> None:
    sealed = seal_content("turn", TURN, KEY, **AT)
    assert sealed["content"] == "" and "token_ids" not in sealed
    assert sealed["role"] == "user" and sealed["prompt_tokens"] == 12
    assert "jane" not in str(sealed) and sealed_key_id(sealed) == KEY.key_id
    PAYLOAD_MODELS["turn"].model_validate(sealed)  # still a valid turn


def test_a_ciphertext_moved_to_another_envelope_does_not_open() -> None:
    sealed = seal_content("turn", TURN, KEY, **AT)
    for moved in ({**AT, "seq": 4}, {**AT, "session_id": "s-2"}, {**AT, "stream": "verdicts"}):
        with pytest.raises(SealedContentError, match="sealed for another record"):
            open_content("turn", sealed, KEY, **moved)
    with pytest.raises(SealedContentError):
        open_content("feedback", {"sealed": sealed["sealed"]}, KEY, **AT)


def test_a_changed_ciphertext_or_another_key_does_not_open() -> None:
    sealed = seal_content("turn", TURN, KEY, **AT)
    blob = bytearray(base64.urlsafe_b64decode(sealed["sealed"].split(".")[2]))
    blob[-1] ^= 1
    changed = {**sealed, "sealed": f"v1.{KEY.key_id}.{base64.urlsafe_b64encode(blob).decode()}"}
    with pytest.raises(SealedContentError, match="changed since"):
        open_content("turn", changed, KEY, **AT)
    other = ContentKey(KEY.key_id, bytes(32))
    with pytest.raises(SealedContentError):
        open_content("turn", sealed, other, **AT)
    with pytest.raises(SealedContentError, match="under data key 0123456789abcdef, not"):
        open_content("turn", sealed, ContentKey.generate(), **AT)


def test_sealing_is_deterministic_and_equal_texts_at_other_records_differ() -> None:
    one = seal_content("turn", TURN, KEY, **AT)
    assert seal_content("turn", dict(TURN), KEY, **AT) == one
    assert seal_content("turn", TURN, KEY, **{**AT, "seq": 4})["sealed"] != one["sealed"]


def test_payloads_without_content_and_sessions_without_a_subject_keep_their_bytes() -> None:
    reward = {"value": 1.0, "name": "reward", "components": {}, "source": None}
    assert seal_content("reward", reward, KEY, **AT) == reward
    empty = dump_payload(PAYLOAD_MODELS["tool_call"], {"id": "c1", "name": "noop"})
    assert seal_content("tool_call", empty, KEY, **AT) == empty
    # `sealed` is left out of a payload that has none: records written before it are unchanged
    assert b"sealed" not in turn_record({"role": "user", "content": "hi"})


def turn_record(payload: dict[str, Any]) -> bytes:
    """The record the one chain writer seals for a turn payload."""
    writer: ChainWriter[str] = ChainWriter()
    record, _ = writer.append_payload(
        "k",
        stream="events",
        session_id="s-1",
        ts_ns=1,
        type="turn",
        model=PAYLOAD_MODELS["turn"],
        payload=payload,
        producer={"name": "t", "version": "1", "principal": "p"},
    )
    return record


def test_a_sealed_payload_is_sealed_into_a_record_like_any_other() -> None:
    record = turn_record(seal_content("turn", TURN, KEY, **AT))
    assert b'"sealed":"v1.0123456789abcdef.' in record and b"jane" not in record


def test_every_content_field_is_a_field_of_its_model_and_the_table_is_documented() -> None:
    spec = (ROOT / "docs" / "canonical-encoding.md").read_text()
    for event_type, fields in CONTENT_FIELDS.items():
        model = PAYLOAD_MODELS[event_type]
        assert "sealed" in model.model_fields
        assert set(fields) <= set(model.model_fields)
        row = re.search(rf"^\| `{event_type}` \| (.*?) \|", spec, re.MULTILINE)
        assert row is not None, f"{event_type} is missing from the sealed-content table"
        assert sorted(re.findall(r"`(\w+)`", row.group(1))) == sorted(fields)


def test_a_wrapped_data_key_unwraps_only_for_its_session_under_its_kek() -> None:
    kek = KeyEncryptionKey.generate()
    wrapped = kek.wrap(KEY, "s-1")
    assert kek.unwrap(wrapped, KEY.key_id, "s-1") == KEY
    assert KEY.secret.hex() not in wrapped
    with pytest.raises(SealedContentError, match="wrapped for another session"):
        kek.unwrap(wrapped, KEY.key_id, "s-2")
    with pytest.raises(SealedContentError, match="retired by a rotation"):
        KeyEncryptionKey.generate().unwrap(wrapped, KEY.key_id, "s-1")


def test_a_rotated_kek_wraps_the_same_data_key() -> None:
    old, new = KeyEncryptionKey.generate(), KeyEncryptionKey.generate()
    rewrapped = new.wrap(old.unwrap(old.wrap(KEY, "s-1"), KEY.key_id, "s-1"), "s-1")
    assert new.unwrap(rewrapped, KEY.key_id, "s-1") == KEY


def test_a_keyring_opens_what_it_holds_and_says_why_it_cannot_open_the_rest() -> None:
    kek = KeyEncryptionKey.generate()
    keyring = Keyring(kek)
    record = DataKeyRecord(
        session_id="s-1", subject="u-1", key_id=KEY.key_id, wrapped=kek.wrap(KEY, "s-1"), ts_ns=1
    )
    sealed = seal_content("turn", TURN, KEY, **AT)
    assert keyring.open_payload("turn", sealed, **AT) == (None, "key unavailable")
    keyring.add(f"s-1/{KEY.key_id}".encode(), record.value())
    opened, access = keyring.open_payload("turn", sealed, **AT)
    assert access == "opened" and opened is not None and opened["content"] == TURN["content"]
    assert keyring.open_payload("turn", sealed, **{**AT, "seq": 9}) == (None, "key unavailable")
    assert keyring.open_payload("turn", TURN, **AT) == (TURN, "clear")
    keyring.add(b"s-1/garbage", b"not a key record")
    assert keyring.unreadable == 1
    keyring.add(f"s-1/{KEY.key_id}".encode(), None)
    assert keyring.open_payload("turn", sealed, **AT) == (None, "erased")
    assert keyring.subjects == {}


def test_an_erasure_receipt_is_signed_over_everything_it_says() -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from rolltape.schemas import Erasure
    from rolltape.schemas.trust import erasure_signed_by, key_id, sign_erasure

    private = Ed25519PrivateKey.generate()
    erasure = sign_erasure(
        private,
        Erasure(
            sessions=("s-1",),
            keys=("s-1/0123456789abcdef",),
            requested_by="admin",
            erased_ns=1,
            seq=0,
            prev_hash="0" * 64,
            key_id=key_id(private.public_key()),
        ),
    )
    assert erasure_signed_by(private.public_key(), erasure)
    for changed in ({"sessions": ("s-2",)}, {"erased_ns": 2}, {"reason": "x"}, {"seq": 1}):
        assert not erasure_signed_by(private.public_key(), erasure.model_copy(update=changed))
    assert not erasure_signed_by(Ed25519PrivateKey.generate().public_key(), erasure)
