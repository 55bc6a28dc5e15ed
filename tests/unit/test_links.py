"""One link decision, three memories: the offline verifier, the live audit and the fold each ask
`classify_link` what a record is to its chain, and agree on every kind of break."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolltape.processors.audit import (
    Admitted,
    ChainHead,
    InputRecord,
    Position,
    audit,
    parse_record,
)
from rolltape.projections import fold
from rolltape.schemas import (
    GENESIS_HASH,
    BreakKind,
    ChainVerifier,
    Event,
    canonical_bytes,
    classify_link,
    decode,
    read_event,
    seal,
)

ROOT = Path(__file__).resolve().parents[2]
SID = "s-links"
PRODUCER = {"name": "test", "version": "0", "principal": "tester"}
LINK_KINDS = {BreakKind.GAP, BreakKind.BROKEN_LINK, BreakKind.BAD_GENESIS, BreakKind.FORK}
"""The breaks the fold judges: it reads a chain as a set of hashes, so arrival order, content and
what follows session_ended are the audit's to report."""
H = {name: name * 64 for name in "abcdef"}


def record(seq: int, prev: str, kind: str = "turn", text: str = "") -> tuple[bytes, str]:
    payload: dict[str, object] = {"role": "user", "content": text or f"message {seq}"}
    if kind == "session_started":
        payload = {"task": "link cases"}
    elif kind == "session_ended":
        payload = {"status": "completed", "outcome": {}, "error": None}
    return seal(
        stream="events",
        session_id=SID,
        seq=seq,
        ts_ns=10**18 + seq,
        type=kind,
        payload=payload,
        prev_hash=prev,
        producer=PRODUCER,
    )


def chain(n: int = 5, genesis: str = GENESIS_HASH) -> list[bytes]:
    """session_started, turns, session_ended: n records linked from `genesis`."""
    records, prev = [], genesis
    for seq in range(n):
        kind = "session_started" if seq == 0 else "session_ended" if seq == n - 1 else "turn"
        data, prev = record(seq, prev, kind)
        records.append(data)
    return records


def hash_of_record(data: bytes) -> str:
    return str(decode(data)["hash"])


def resealed(data: bytes, **changes: object) -> bytes:
    """The record edited and sealed again, as a forger who knows the format would."""
    obj = {**decode(data), **changes}
    fields = ("stream", "session_id", "seq", "ts_ns", "type", "payload", "prev_hash", "producer")
    return seal(**{k: obj[k] for k in fields})[0]


def tampered(data: bytes) -> bytes:
    """The content edited, the stored hash kept."""
    obj = decode(data)
    obj["ts_ns"] += 1
    return canonical_bytes(obj)


@dataclass(frozen=True)
class Seen:
    verifier: set[BreakKind]
    set_aside: int
    audit: set[BreakKind]
    linked: bool

    @property
    def sound(self) -> tuple[bool, bool]:
        """(the verifier found nothing, the audit found nothing)."""
        return (not self.verifier and not self.set_aside, not self.audit)


def verified(records: list[bytes]) -> tuple[set[BreakKind], int]:
    verifier = ChainVerifier()
    for offset, data in enumerate(records):
        verifier.add(data, position=str(offset), expected_stream="events", key=SID.encode())
    (report,) = verifier.reports()
    assert not verifier.unattributed
    return {b.kind for b in report.breaks}, report.set_aside


def audited(records: list[bytes]) -> set[BreakKind]:
    head, kinds = ChainHead(), set()
    for offset, data in enumerate(records):
        env = parse_record(
            InputRecord("events", SID.encode(), data, Position("rolltape.events", 0, offset))
        )
        assert isinstance(env, Event)
        result = audit(head, env)
        if isinstance(result, Admitted):
            kinds |= {b.kind for b in result.breaks}
    return kinds


def seen(records: list[bytes]) -> Seen:
    kinds, set_aside = verified(records)
    linked = fold([read_event(data) for data in records]).provenance["events"].linked
    return Seen(kinds, set_aside, audited(records), linked)


def cases() -> dict[str, tuple[list[bytes], set[BreakKind], set[BreakKind], bool]]:
    """name -> (log, the verifier's breaks, the audit's breaks, the fold's `linked`)."""
    c = chain()
    hashes = [hash_of_record(data) for data in c]
    fork, fork_hash = record(2, hashes[1], text="a second writer")
    goes_on, _ = record(3, fork_hash, text="the second writer goes on")
    after, _ = record(5, hashes[4], text="after the end")
    forged = resealed(c[2], payload={"role": "user", "content": "forged"})
    kind = BreakKind
    return {
        "intact": (c, set(), set(), True),
        "redelivery": ([*c[:3], c[2], *c[3:], c[1]], set(), set(), True),
        "gap": ([*c[:2], *c[3:]], {kind.GAP}, {kind.GAP}, False),
        # The audit cannot wait for a late record: it reports the gap the moment it sees one.
        "reorder": (
            [c[0], c[1], c[3], c[2], c[4]],
            {kind.REORDERED},
            {kind.GAP, kind.REORDERED},
            True,
        ),
        "fork": ([*c, fork], {kind.FORK}, {kind.FORK}, False),
        "fork continued": ([*c, fork, goes_on], {kind.FORK}, {kind.FORK}, False),
        "bad genesis": (chain(genesis=H["a"]), {kind.BAD_GENESIS}, {kind.BAD_GENESIS}, False),
        "broken link": (
            [*c[:2], resealed(c[2], prev_hash=H["c"]), *c[3:]],
            {kind.BROKEN_LINK, kind.GAP},
            {kind.BROKEN_LINK, kind.GAP},
            False,
        ),
        # Seq 4 continues seq 3, set aside: the verifier counts it, the audit reports each record.
        "forged": (
            [*c[:2], forged, *c[3:]],
            {kind.BROKEN_LINK},
            {kind.BROKEN_LINK, kind.FORK},
            False,
        ),
        "tamper": ([*c[:2], tampered(c[2]), *c[3:]], {kind.TAMPERED}, {kind.TAMPERED}, True),
        # A damaged copy of a member carries the member's hash: the member's successor links to
        # that hash and must still join (setting it aside would let anyone who can append a
        # copy cut a session off).
        "damaged copy": (
            [*c[:3], tampered(c[2]), *c[3:]],
            {kind.TAMPERED},
            {kind.TAMPERED},
            True,
        ),
        "after end": ([*c, after], {kind.AFTER_END}, {kind.AFTER_END}, True),
    }


@pytest.mark.parametrize("name", sorted(cases()))
def test_the_audit_the_verifier_and_the_fold_agree_on_every_link_case(name: str) -> None:
    log, by_verifier, by_audit, linked = cases()[name]
    found = seen(log)
    assert (found.verifier, found.audit, found.linked) == (by_verifier, by_audit, linked)
    # The differences are the audit's bounded memory, never another decision:
    assert found.verifier <= found.audit <= found.verifier | {BreakKind.GAP, BreakKind.FORK}
    assert found.linked == (not found.verifier & LINK_KINDS)


MUTATIONS = ("drop", "swap", "redeliver", "fork", "break", "genesis", "after_end", "tamper")


def mutate(log: list[bytes], op: str, i: int, j: int) -> bool:
    """Apply one mutation in place; True when it edited content under its stored hash."""
    seqs = [int(decode(data)["seq"]) for data in log]
    late = [k for k, seq in enumerate(seqs) if seq > 0]
    if op == "drop" and late:
        del log[late[i % len(late)]]
    elif op == "swap" and len(log) > 1:
        k = i % (len(log) - 1)
        log[k], log[k + 1] = log[k + 1], log[k]
    elif op == "redeliver":
        log.insert(j % (len(log) + 1), log[i % len(log)])
    elif op == "fork" and max(seqs) > 0:
        seq = 1 + i % max(seqs)
        prev = next(
            (hash_of_record(d) for d, s in zip(log, seqs, strict=True) if s == seq - 1), H["d"]
        )
        log.append(record(seq, prev, text=f"fork {j}")[0])
    elif op == "break" and late:
        k = late[i % len(late)]
        log[k] = resealed(log[k], prev_hash=H["c"])
    elif op == "genesis":
        k = seqs.index(0)
        log[k] = resealed(log[k], prev_hash=H["a"])
    elif op == "after_end":
        top = max(seqs)
        log.append(record(top + 1, hash_of_record(log[seqs.index(top)]), text="late")[0])
    elif op == "tamper":
        k = i % len(log)
        log[k] = tampered(log[k])
        return True
    return False


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(min_value=2, max_value=5),
    ops=st.lists(
        st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 99), st.integers(0, 99)), max_size=3
    ),
)
def test_the_three_checkers_agree_whether_any_mutated_chain_is_sound(
    n: int, ops: list[tuple[str, int, int]]
) -> None:
    """Within the audit's window (chains shorter than RECENT), the live audit and the verifier
    agree whether a log is sound, and the fold calls a chain linked exactly when the verifier,
    reading it in seq order as the fold does, finds no link break (content is not the fold's:
    tampered logs are left out of that comparison)."""
    log = chain(n)
    content_edited = False
    for op, i, j in ops:
        content_edited |= mutate(log, op, i, j)
    found = seen(log)
    verifier_sound, audit_sound = found.sound
    assert verifier_sound == audit_sound
    if not content_edited:
        in_seq_order = sorted(log, key=lambda data: int(decode(data)["seq"]))
        assert found.linked == (not verified(in_seq_order)[0] & LINK_KINDS)


@pytest.mark.parametrize(
    ("knowledge", "placement", "breaks"),
    [
        ({"next_seq": 3}, "joins", ()),
        ({"next_seq": 3, "at_seq": H["e"]}, "redelivered", ()),
        ({"next_seq": 3, "at_seq": H["e"], "intact": False}, "damaged_copy", ()),
        ({"next_seq": 3, "at_seq": H["f"]}, "set_aside", (BreakKind.FORK,)),
        ({"next_seq": 3, "continues_aside": True}, "set_aside", (BreakKind.FORK,)),
        ({"next_seq": 3, "before": H["c"]}, "set_aside", (BreakKind.BROKEN_LINK,)),
        ({"next_seq": 3, "before": H["b"]}, "joins", ()),
        ({"next_seq": 5}, "joins", (BreakKind.REORDERED,)),
        ({"next_seq": 5, "fills_holes": False}, "late", (BreakKind.REORDERED,)),
        ({"next_seq": 1}, "joins", (BreakKind.GAP,)),
        ({"next_seq": 1, "ended_seq": 0}, "joins", (BreakKind.AFTER_END, BreakKind.GAP)),
    ],
)
def test_classify_link__applies_its_rules_in_order(
    knowledge: dict[str, object], placement: str, breaks: tuple[BreakKind, ...]
) -> None:
    verdict = classify_link(3, H["b"], H["e"], **knowledge)  # type: ignore[arg-type]
    assert (verdict.placement, verdict.breaks) == (placement, breaks)


def test_classify_link__seq_0_links_to_the_genesis_hash() -> None:
    assert classify_link(0, GENESIS_HASH, H["e"], next_seq=0).clean
    assert classify_link(0, H["a"], H["e"], next_seq=0).breaks == (BreakKind.BAD_GENESIS,)


def test_an_exact_copy_is_a_redelivery_and_no_break_kind_is_called_duplicate() -> None:
    """An identical record at its seq is at-least-once delivery, not a break; the same content at
    another seq is another record (its hash covers the seq), which the chain judges by its link.
    So nothing could produce a DUPLICATE break, and it is no longer declared."""
    c = chain()
    assert (
        classify_link(
            2, hash_of_record(c[1]), hash_of_record(c[2]), next_seq=5, at_seq=hash_of_record(c[2])
        ).placement
        == "redelivered"
    )
    assert "duplicate" not in {kind.value for kind in BreakKind}


def test_every_break_kind_is_produced_by_some_checker() -> None:
    """A kind nobody produces is a promise consumers cannot rely on (DUPLICATE was one)."""
    used: set[str] = set()
    for folder in ("schemas", "processors"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "_derived.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "BreakKind"
                ):
                    used.add(node.attr)
    assert {kind.name for kind in BreakKind} <= used
