"""An erasures file is checked offline with the judge's public key: a whole, signed chain
reads; a changed, unsigned or truncated one is refused naming the line."""

from __future__ import annotations

import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rolltape.projections import ErasuresFileError, read_erasures
from rolltape.schemas import ERASURES_SESSION, ChainWriter, Erasure, Stream
from rolltape.schemas.trust import key_id, sign_erasure


def _file(private: Ed25519PrivateKey, sessions: list[tuple[str, ...]]) -> list[bytes]:
    writer: ChainWriter[str] = ChainWriter()
    lines = []
    for n, names in enumerate(sessions):
        seq, prev_hash = writer.head(ERASURES_SESSION)
        erasure = sign_erasure(
            private,
            Erasure(
                sessions=names,
                keys=tuple(f"{s}/{n:016x}" for s in names),
                requested_by="admin",
                erased_ns=n,
                seq=seq,
                prev_hash=prev_hash,
                key_id=key_id(private.public_key()),
            ),
        )
        value, _ = writer.append(
            ERASURES_SESSION,
            stream=Stream.ERASURES.value,
            session_id=ERASURES_SESSION,
            ts_ns=n,
            type="erasure",
            payload=erasure.model_dump(mode="json"),
            producer={"name": "test", "version": "0", "principal": "admin"},
        )
        lines.append(value + b"\n")
    return lines


def test_a_whole_signed_chain_names_each_erased_session_with_its_erasure() -> None:
    private = Ed25519PrivateKey.generate()
    lines = _file(private, [("s-a",), ("s-b", "s-c")])
    erased = read_erasures(b"".join(lines), private.public_key())
    assert erased.sessions == {"s-a": 0, "s-b": 1, "s-c": 1}
    assert erased.erased(["s-c", "s-z", "s-a"]) == ["s-c", "s-a"]


def test_another_key_a_changed_line_or_a_missing_first_record_is_refused() -> None:
    private = Ed25519PrivateKey.generate()
    lines = _file(private, [("s-a",), ("s-b",)])
    with pytest.raises(ErasuresFileError, match="line 1: the erasure is not signed"):
        read_erasures(b"".join(lines), Ed25519PrivateKey.generate().public_key())
    changed = [lines[0], lines[1].replace(b"s-b", b"s-x")]
    with pytest.raises(ErasuresFileError, match="line 2"):
        read_erasures(b"".join(changed), private.public_key())
    with pytest.raises(ErasuresFileError, match="starts at seq 1"):
        read_erasures(lines[1], private.public_key())


def test_an_erasure_left_out_and_the_rest_linked_again_is_refused() -> None:
    private = Ed25519PrivateKey.generate()
    lines = _file(private, [("s-a",), ("s-b",), ("s-c",)])
    kept = [lines[0], lines[2]]
    writer: ChainWriter[str] = ChainWriter()
    relinked = []
    for line in kept:  # whoever holds the file re-chains what is left: the hashes agree again
        event = orjson.loads(line)
        value, _ = writer.append(
            ERASURES_SESSION,
            stream=Stream.ERASURES.value,
            session_id=ERASURES_SESSION,
            ts_ns=event["ts_ns"],
            type="erasure",
            payload=event["payload"],
            producer=event["producer"],
        )
        relinked.append(value + b"\n")
    with pytest.raises(ErasuresFileError, match="line 2: the erasure was signed as seq 2"):
        read_erasures(b"".join(relinked), private.public_key())
