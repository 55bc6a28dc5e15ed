"""What records add to the read model (`rolltape.projections.index`): counted once where they
extend their chain, breaks marked, content that is sealed kept out, subjects hashed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rolltape.projections.index import (
    ChainHead,
    ChainKey,
    IndexChanges,
    Record,
    fold_batch,
    keyed_subject,
)
from rolltape.schemas import DataKeyRecord, Stream
from tests.support.index_log import Log

HASH = keyed_subject(b"s" * 32)


def fold(
    records: Iterable[Record], heads: Mapping[ChainKey, ChainHead] | None = None
) -> IndexChanges:
    known = dict(heads or {})
    return fold_batch(list(records), lambda keys: {k: known[k] for k in keys if k in known}, HASH)


def head_after(changes: IndexChanges) -> dict[ChainKey, ChainHead]:
    return {
        (c.session_id, c.chain): ChainHead(c.head_seq, c.head_hash, c.status)
        for c in changes.chains
    }


def test_a_session_becomes_its_rows_with_tags_split_and_tools_and_rewards() -> None:
    log = Log()
    changes = fold(
        [
            log.record(
                Stream.EVENTS,
                "s",
                "session_started",
                {"task": "fix it", "tags": ["env", "env=e1"], "model": "m"},
            ),
            log.record(
                Stream.EVENTS, "s", "turn", {"role": "assistant", "content": "done", "model": "m2"}
            ),
            log.record(
                Stream.EVENTS,
                "s",
                "tool_call",
                {"id": "c", "name": "shell", "arguments": {"cmd": "ls"}},
            ),
            log.record(
                Stream.EVENTS,
                "s",
                "tool_result",
                {"call_id": "c", "content": "a b", "success": False},
            ),
            log.record(Stream.EVENTS, "s", "reward", {"value": 0.5}),
            log.record(Stream.EVENTS, "s", "session_ended", {"status": "completed"}),
        ]
    )
    assert [(t.tag, t.key, t.value) for t in changes.tags] == [
        ("env", "env", ""),
        ("env=e1", "env", "e1"),
    ]
    assert sorted(m.model for m in changes.models) == ["m", "m2"]
    assert [(c.name, c.seq) for c in changes.tool_calls] == [("shell", 2)]
    assert [(r.success, r.result_seq) for r in changes.tool_results] == [(False, 3)]
    assert [(r.name, r.value) for r in changes.rewards] == [("reward", 0.5)]
    assert [(e.status, e.end_seq) for e in changes.session_ends] == [("completed", 5)]
    (chain,) = changes.chains
    assert (chain.events, chain.head_seq, chain.status) == (6, 5, "ok")
    assert (chain.first_offset, chain.last_offset) == (0, 5)
    assert sorted(t.kind for t in changes.texts) == [
        "assistant",
        "task",
        "tool_call",
        "tool_result",
    ]
    (position,) = changes.positions
    assert (position.next_offset, position.records) == (6, 6)


def test_a_copy_of_a_record_already_counted_adds_nothing() -> None:
    log = Log()
    first = log.record(Stream.EVENTS, "s", "session_started", {"task": "t"})
    second = log.record(Stream.EVENTS, "s", "reward", {"value": 1.0})
    done = fold([first, second])
    again = fold([log.raw(Stream.EVENTS, second.key, second.value)], head_after(done))
    assert again.events == [] and again.rewards == [] and again.chains == []
    assert again.positions[0].records == 1  # read, and counted as read only


def test_a_gap_marks_the_chain_and_counting_goes_on_from_there() -> None:
    log = Log()
    start = log.record(Stream.EVENTS, "s", "session_started", {"task": "t"})
    log.record(Stream.EVENTS, "s", "turn", {"role": "user", "content": "lost"})  # never read
    third = log.record(Stream.EVENTS, "s", "reward", {"value": 1.0})
    (chain,) = fold([start, third]).chains
    assert (chain.status, chain.events, chain.head_seq) == ("gap", 2, 2)


def test_a_tampered_record_is_not_counted_and_marks_its_chain() -> None:
    log = Log()
    start = log.record(Stream.EVENTS, "s", "session_started", {"task": "t"})
    turn = log.record(Stream.EVENTS, "s", "turn", {"role": "user", "content": "hello"})
    assert turn.value is not None
    forged = turn._replace(value=turn.value.replace(b"hello", b"hallo"))
    changes = fold([start, forged, log.raw(Stream.EVENTS, b"x", b"not json")])
    (chain,) = changes.chains
    assert (chain.status, chain.events) == ("tampered", 1)
    assert [t.text for t in changes.texts] == ["t"]
    (position,) = changes.positions
    assert (position.records, position.tampered, position.unreadable) == (3, 1, 1)


def test_sealed_content_is_neither_stored_nor_searchable() -> None:
    log = Log()
    changes = fold(
        [
            log.record(Stream.EVENTS, "s", "session_started", {"task": "", "sealed": "v1.abc"}),
            log.record(
                Stream.EVENTS, "s", "turn", {"role": "user", "content": "", "sealed": "v1.def"}
            ),
        ]
    )
    assert changes.sessions[0].task is None
    assert changes.texts == []


def test_a_subject_is_kept_as_its_keyed_hash_and_a_tombstone_erases() -> None:
    log = Log()
    key = DataKeyRecord(
        session_id="s", subject="alice@example.com", key_id="0" * 16, wrapped="v1.k.x", ts_ns=1
    )
    changes = fold(
        [log.raw(Stream.KEYS, b"s/" + b"0" * 16, key.value()), log.raw(Stream.KEYS, b"s", None)]
    )
    (subject,) = changes.subjects
    assert (
        subject.subject_hash
        == HASH("alice@example.com")
        != keyed_subject(b"t" * 32)("alice@example.com")
    )
    assert "alice" not in subject.subject_hash
    assert [e.session_id for e in changes.erased] == ["s"]


def test_verdicts_filters_and_rules_are_filed_under_the_judge_version_of_their_chain() -> None:
    log = Log()
    changes = fold(
        [
            log.record(
                Stream.VERDICTS,
                "s",
                "verdict",
                {
                    "judge": "llm:q",
                    "judge_version": "x",
                    "status": "ok",
                    "scores": {"q": 0.25, "bad": "NaN"},
                },
                chain="verdicts@v2",
            ),
            log.record(
                Stream.FILTERED,
                "s",
                "filter_outcome",
                {
                    "filter_version": "1",
                    "config": "c",
                    "accepted": False,
                    "reasons": [
                        {"code": "tool_failed", "message": "m"},
                        {"code": "tool_failed", "message": "n"},
                    ],
                    "status": "completed",
                    "turns": 1,
                    "tool_calls": 2,
                },
            ),
            log.record(
                Stream.RULES,
                "s",
                "rule_evaluation",
                {
                    "epoch": 3,
                    "rules_version": "1",
                    "ruleset": "r",
                    "no_data": False,
                    "fired": ["R7", "R1"],
                    "top_class": "stability",
                    "rules": {},
                },
                chain="rules@v2",
            ),
        ]
    )
    assert [(v.judge_version, v.judge) for v in changes.verdicts] == [("v2", "llm:q")]
    assert [(s.name, s.value) for s in changes.scores] == [
        ("q", 0.25)
    ]  # a NaN is no bound to filter on
    assert [(f.judge_version, f.accepted) for f in changes.filters] == [("live", False)]
    assert [r.code for r in changes.filter_reasons] == ["tool_failed"]
    assert sorted((r.judge_version, r.epoch, r.rule) for r in changes.rule_firings) == [
        ("v2", 3, "R1"),
        ("v2", 3, "R7"),
    ]


def test_a_checkpoint_covers_each_chain_head_it_lists_and_an_audit_break_is_kept() -> None:
    log = Log()
    leaf = {"stream": "events", "session_id": "s", "seq": 4, "hash": "a" * 64}
    head = {"log": "p0", "tree_size": 9, "root_hash": "b" * 64, "timestamp_ms": 1, "key_id": "k"}
    changes = fold(
        [
            log.record(
                Stream.VERDICTS,
                "checkpoints-p0",
                "checkpoint",
                {"tree_head": head, "signature": "c" * 128, "previous_size": 8, "leaves": [leaf]},
            ),
            log.record(
                Stream.VERDICTS,
                "s",
                "chain_broken",
                {
                    "stream": "events",
                    "seq": 2,
                    "reason": "fork",
                    "detail": "d",
                    "position": None,
                    "auditor_version": "1",
                },
            ),
        ]
    )
    assert [(c.session_id, c.chain, c.seq, c.log, c.tree_size) for c in changes.checkpoints] == [
        ("s", "events", 4, "checkpoints-p0", 9)
    ]
    assert [(b.session_id, b.chain, b.reason) for b in changes.chain_breaks] == [
        ("s", "events", "fork")
    ]
