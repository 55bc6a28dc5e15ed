"""Sealing and verifying chains: every kind of break is reported, every single-byte change caught."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from rolltape.schemas import (
    GENESIS_HASH,
    BreakKind,
    ChainVerifier,
    canonical_bytes,
    decode,
    hash_of,
    raw_event_id,
    read_event,
    seal,
)

PRODUCER = {"name": "test", "version": "0", "principal": "tester"}


def make_chain(n: int = 5, session_id: str = "s1", end: bool = True) -> list[bytes]:
    records, prev = [], GENESIS_HASH
    for seq in range(n):
        event_type = "session_ended" if end and seq == n - 1 else "turn"
        payload = (
            {"status": "completed", "outcome": {}, "error": None}
            if event_type == "session_ended"
            else {
                "role": "user",
                "content": f"message {seq} ✓",
                "reasoning": None,
                "token_ids": None,
            }
        )
        record, prev = seal(
            stream="events",
            session_id=session_id,
            seq=seq,
            ts_ns=10**18 + seq,
            type=event_type,
            payload=payload,
            prev_hash=prev,
            producer=PRODUCER,
        )
        records.append(record)
    return records


def reseal(obj: dict) -> tuple[bytes, str]:
    """Seal an edited envelope again, as a forger who knows the format would."""
    fields = ("stream", "session_id", "seq", "ts_ns", "type", "payload", "prev_hash", "producer")
    return seal(**{k: obj[k] for k in fields})


def kinds(records: list[bytes]) -> list[BreakKind]:
    verifier = ChainVerifier()
    for i, record in enumerate(records):
        verifier.add(record, position=str(i))
    found = [b.kind for r in verifier.reports() for b in r.breaks]
    return found + [b.kind for b in verifier.unattributed]


def test_seal__splices_the_hash_into_exactly_the_canonical_bytes_of_the_envelope() -> None:
    for record in make_chain():
        obj = decode(record)
        assert canonical_bytes(obj) == record
        assert (
            obj["hash"]
            == hashlib.sha256(
                canonical_bytes({k: v for k, v in obj.items() if k != "hash"})
            ).hexdigest()
        )
        assert hash_of(obj) == obj["hash"]
        assert read_event(record).envelope().to_record() == record


def test_verify__an_intact_chain_has_no_breaks_and_is_ended() -> None:
    verifier = ChainVerifier()
    for record in make_chain():
        verifier.add(record)
    (report,) = verifier.reports()
    assert report.ok and report.ended and report.records == 5 and report.last_seq == 4


def test_verify__a_missing_record_is_a_gap() -> None:
    chain = make_chain()
    assert kinds(chain[:2] + chain[3:]) == [BreakKind.GAP]


def test_verify__a_late_record_is_reordered_not_a_gap() -> None:
    chain = make_chain()
    assert kinds([chain[0], chain[2], chain[1], chain[3], chain[4]]) == [BreakKind.REORDERED]


def test_verify__the_same_record_twice_is_a_redelivery_not_a_break() -> None:
    chain = make_chain()
    verifier = ChainVerifier()
    for record in [*chain[:3], chain[2], chain[2], *chain[3:]]:
        verifier.add(record)
    (report,) = verifier.reports()
    assert report.ok and report.redelivered == 2 and report.records == len(chain) + 2


def test_verify__edited_content_with_the_old_hash_is_tampered() -> None:
    chain = make_chain()
    chain[2] = chain[2].replace(b"message 2", b"message X")
    assert kinds(chain) == [BreakKind.TAMPERED]


def test_verify__a_forged_record_with_a_recomputed_hash_breaks_the_next_link() -> None:
    chain = make_chain()
    obj = decode(chain[2])
    obj["payload"]["content"] = "forged"
    forged, _ = reseal(obj)
    chain[2] = forged
    assert kinds(chain) == [BreakKind.BROKEN_LINK]


def test_verify__a_second_record_for_a_seq_is_a_fork() -> None:
    chain = make_chain()
    other = make_chain()
    obj = decode(other[1])
    obj["payload"]["content"] = "other"
    fork, _ = reseal(obj)
    assert kinds([*chain, fork]) == [BreakKind.FORK]


def test_verify__a_record_appended_after_session_ended_is_reported() -> None:
    chain = make_chain(4)
    extra, _ = seal(
        stream="events",
        session_id="s1",
        seq=4,
        ts_ns=1,
        type="turn",
        payload={"role": "user", "content": "late"},
        prev_hash=decode(chain[-1])["hash"],
        producer=PRODUCER,
    )
    assert kinds([*chain, extra]) == [BreakKind.AFTER_END]


def test_verify__garbage_and_unknown_versions_are_unattributed_breaks() -> None:
    assert kinds([b"\xff\x00not json", b'{"v": 2}', b"[]"]) == [
        BreakKind.UNPARSEABLE,
        BreakKind.UNKNOWN_VERSION,
        BreakKind.UNPARSEABLE,
    ]


def test_verify__reserialised_bytes_are_not_canonical() -> None:
    chain = make_chain()
    chain[1] = chain[1].replace(b'"seq":1', b'"seq": 1')
    assert kinds(chain) == [BreakKind.NOT_CANONICAL]


def test_verify__bad_genesis_and_wrong_key_are_reported() -> None:
    record, _ = seal(
        stream="events",
        session_id="s9",
        seq=0,
        ts_ns=1,
        type="turn",
        payload={"role": "user", "content": "x"},
        prev_hash="1" * 64,
        producer=PRODUCER,
    )
    verifier = ChainVerifier()
    verifier.add(record, key=b"someone-else", expected_stream="metrics")
    found = sorted(b.kind for r in verifier.reports() for b in r.breaks)
    assert found == sorted([BreakKind.BAD_GENESIS, BreakKind.MISROUTED, BreakKind.MISROUTED])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_verify__any_single_byte_change_in_a_chain_is_detected(data: st.DataObject) -> None:
    chain = make_chain(4)
    index = data.draw(st.integers(0, len(chain) - 1))
    record = bytearray(chain[index])
    pos = data.draw(st.integers(0, len(record) - 1))
    new = data.draw(st.integers(0, 255).filter(lambda b: b != record[pos]))
    record[pos] = new
    chain[index] = bytes(record)
    assert kinds(chain), f"byte {pos} of record {index} changed to {new} went unnoticed"


@given(
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,40}", fullmatch=True), st.integers(0, 2**63 - 1)
)
def test_raw_event_id__is_the_hash_of_the_canonical_chain_position(
    session_id: str, seq: int
) -> None:
    expected = hashlib.sha256(canonical_bytes(["events", session_id, seq])).hexdigest()[:32]
    assert raw_event_id("events", session_id, seq) == expected


def test_verify__keeps_a_bounded_number_of_breaks_in_full_and_counts_all() -> None:
    from rolltape.schemas._verify import MAX_DETAILED

    verifier = ChainVerifier()
    for n in range(MAX_DETAILED + 300):
        verifier.add(b"garbage %d" % n)
    chain = make_chain(3, end=False)
    verifier.add(chain[1])
    for n in range(MAX_DETAILED + 5):
        fork, _ = seal(
            stream="events",
            session_id="s1",
            seq=1,
            ts_ns=n,
            type="feedback",
            payload={"source": "user", "score": None, "text": f"fork {n}", "about_seq": None},
            prev_hash=GENESIS_HASH,
            producer=PRODUCER,
        )
        verifier.add(fork)
    assert len(verifier.unattributed) == MAX_DETAILED
    assert verifier.unattributed_counts == {"unparseable": MAX_DETAILED + 300}
    (report,) = verifier.reports()
    assert len(report.breaks) == MAX_DETAILED and not report.ok
    assert report.break_counts == {"fork": MAX_DETAILED + 5, "gap": 1}


def test_verify__links_are_checked_whichever_of_two_neighbours_arrives_first() -> None:
    chain = make_chain(4)
    obj = decode(chain[2])
    obj["payload"]["content"] = "forged"
    chain[2], _ = reseal(obj)
    # 3 waits for 2; 2 arrives (late) and breaks 3's link at once; 1 arrives late too.
    assert kinds([chain[0], chain[3], chain[2], chain[1]]) == [
        BreakKind.REORDERED,
        BreakKind.BROKEN_LINK,
        BreakKind.REORDERED,
    ]


def _continue(chain: list[bytes], seq: int, content: str, prev_hash: str | None = None) -> bytes:
    """A record another writer appends at `seq`, linked to the record at seq-1 of `chain`
    (or to `prev_hash`)."""
    record, _ = seal(
        stream="events",
        session_id="s1",
        seq=seq,
        ts_ns=10**18 + seq,
        type="turn",
        payload={"role": "assistant", "content": content},
        prev_hash=prev_hash or decode(chain[seq - 1])["hash"],
        producer=PRODUCER,
    )
    return record


def test_verify__a_second_writer_is_set_aside_and_the_first_written_chain_stands() -> None:
    first = make_chain(3, end=False)
    resumed = [*first, _continue(first, 3, "resumed writer")]
    zombie = [*first, _continue(first, 3, "zombie writer")]
    zombie.append(_continue(zombie, 4, "zombie goes on"))
    resumed.append(_continue(resumed, 4, "resumed goes on"))
    verifier = ChainVerifier()
    # Log order: the resumed writer's seq 3, then the zombie's 3 and 4, then the resumed 4.
    for record in [*first, resumed[3], zombie[3], zombie[4], resumed[4]]:
        verifier.add(record)
    (report,) = verifier.reports()
    assert [(b.kind, b.seq) for b in report.breaks] == [(BreakKind.FORK, 3)]
    assert report.set_aside == 2 and report.records == 7
    assert report.last_seq == 4 and report.head_hash == decode(resumed[4])["hash"]


def test_verify__a_record_not_linking_to_the_head_does_not_move_it() -> None:
    first = make_chain(3, end=False)
    stranger = _continue(first, 3, "unlinked", prev_hash="ab" * 32)
    verifier = ChainVerifier()
    for record in [*first, stranger, _continue(first, 3, "the writer")]:
        verifier.add(record)
    (report,) = verifier.reports()
    assert [b.kind for b in report.breaks] == [BreakKind.BROKEN_LINK]
    assert report.set_aside == 1 and report.last_seq == 3
