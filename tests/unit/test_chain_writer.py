"""The one chain writer: heads move by one seq per sealed record, and only then; every writer
of the package goes through it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rolltape.schemas import (
    GENESIS_HASH,
    CanonicalEncodingError,
    ChainVerifier,
    ChainWriter,
    RecordTooLargeError,
    read_event,
)

PRODUCER = {"name": "test", "version": "0", "principal": "agent"}
ROOT = Path(__file__).resolve().parents[2]


def turn(writer: ChainWriter[str], key: str, text: str) -> bytes:
    value, _ = writer.append(
        key,
        stream="events",
        session_id=key,
        ts_ns=10**18,
        type="turn",
        payload={"role": "user", "content": text},
        producer=PRODUCER,
    )
    return value


def test_append__seals_each_record_on_its_chain_head() -> None:
    writer: ChainWriter[str] = ChainWriter()
    records = [turn(writer, "s1", f"m{n}") for n in range(3)] + [turn(writer, "s2", "other")]
    events = [read_event(r) for r in records]
    assert [(e.session_id, e.seq) for e in events] == [("s1", 0), ("s1", 1), ("s1", 2), ("s2", 0)]
    assert events[0].prev_hash == GENESIS_HASH and events[1].prev_hash == events[0].hash
    assert writer.head("s1") == (3, events[2].hash) and writer.head("new") == (0, GENESIS_HASH)
    verifier = ChainVerifier()
    for r in records:
        verifier.add(r)
    assert all(report.ok for report in verifier.reports())


def test_a_refused_record__leaves_the_head_where_it_was() -> None:
    writer: ChainWriter[str] = ChainWriter(max_record_bytes=600)
    turn(writer, "s1", "short")
    before = writer.head("s1")
    with pytest.raises(RecordTooLargeError, match="over the 600-byte limit"):
        turn(writer, "s1", "x" * 1000)
    with pytest.raises(CanonicalEncodingError):
        writer.append(
            "s1",
            stream="events",
            session_id="s1",
            ts_ns=1,
            type="turn",
            payload={"role": "user", "content": b"bytes"},
            producer=PRODUCER,
        )
    assert writer.head("s1") == before
    assert read_event(turn(writer, "s1", "next")).seq == before[0]  # no gap


def test_heads__live_in_the_callers_mapping_and_can_be_taken_over_and_forgotten() -> None:
    heads: dict[str, object] = {"s1": [5, "ab" * 32]}  # as a saved state holds them
    writer: ChainWriter[str] = ChainWriter(heads)  # type: ignore[arg-type]
    event = read_event(turn(writer, "s1", "continues"))
    assert (event.seq, event.prev_hash) == (5, "ab" * 32) and heads["s1"] == (6, event.hash)
    writer.take_over("s2", 10, "cd" * 32)
    assert read_event(turn(writer, "s2", "resumed")).seq == 10
    writer.forget("s2")
    assert "s2" not in heads


def test_only_the_chain_writer__seals_records() -> None:
    sealing = re.compile(r"(?<![\w.])(?<!def )seal\(")  # calls, not the native core's signature
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("schemas", "processors", "projections", "producers", "infra")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name not in ("_chain_writer.py", "_envelope.py")
        and sealing.search(path.read_text())
    ]
    assert offenders == []
