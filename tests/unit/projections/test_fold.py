import random
from collections.abc import Mapping
from typing import Any

import pytest

from rolltape.projections import FoldError, fold, tool_failed
from rolltape.schemas import ToolResult, TypedEvent, read_event, seal, versioned_stream
from tests.unit.projections.sessions import HOSTILE, recorded


def test_tool_results_are_matched_to_calls_by_id_not_position() -> None:
    events, derived = recorded()
    trajectory = fold(events["s-good"], derived)
    calls = {c.id: c for m in trajectory.messages for c in m.tool_calls}
    assert calls["c-calc"].result is not None and calls["c-calc"].result.content == "42"
    assert calls["c-search"].result is not None and calls["c-search"].result.content.startswith(
        '{"hits"'
    )
    assert [c.id for c in trajectory.messages[2].tool_calls] == ["c-search", "c-calc"]


def test_contents_reasoning_and_usage_are_kept_verbatim() -> None:
    events, derived = recorded()
    trajectory = fold(events["s-good"], derived)
    roles = [m.role for m in trajectory.messages]
    assert roles == ["system", "user", "assistant", "assistant"]
    assert trajectory.messages[1].content == "What is 6*7? " + HOSTILE
    assert trajectory.messages[2].reasoning == "think " + HOSTILE
    assert (trajectory.messages[2].prompt_tokens, trajectory.messages[2].completion_tokens) == (
        120,
        9,
    )
    assert trajectory.tools[0].name == "search"
    assert trajectory.reward == 1.0 and trajectory.completed and trajectory.accepted is True


def test_tool_calls_without_a_turn_open_an_assistant_message_and_stray_results_are_listed() -> None:
    events, derived = recorded()
    trajectory = fold(events["s-bad"], derived)
    assert [m.role for m in trajectory.messages] == ["user", "assistant", "assistant"]
    opened = trajectory.messages[1]
    assert opened.event_hash is None and opened.content == ""
    assert [c.name for c in opened.tool_calls] == ["rm_rf", "calc"]
    assert (
        opened.tool_calls[1].raw_arguments == "6*7 please" and opened.tool_calls[1].result is None
    )
    stray = next(e for e in events["s-bad"] if e.payload.get("call_id") == "c-unknown")
    assert trajectory.unmatched_results == (stray.hash,)


def test_tool_stats_list_every_declared_tool_and_count_failures() -> None:
    events, derived = recorded()
    stats = fold(events["s-bad"], derived).tool_stats
    assert stats["never_used"].model_dump() == {"count": 0, "success": 0, "failure": 0}
    assert stats["rm_rf"].model_dump() == {"count": 1, "success": 0, "failure": 1}
    # no result recorded: failed
    assert stats["calc"].model_dump() == {"count": 1, "success": 0, "failure": 1}
    assert list(stats) == sorted(stats)


@pytest.mark.parametrize(
    ("content", "success", "error", "failed"),
    [
        ("42", True, None, False),
        ("", True, None, True),
        ("Error: disk full", True, None, True),
        ('{"error": null, "ok": 1}', True, None, False),
        ('{"error": "boom"}', True, None, True),
        ('{"success": false}', True, None, True),
        ("[1, 2]", True, None, False),
        ("fine", False, None, True),
        ("fine", True, "timeout", True),
    ],
)
def test_failure_rule_follows_the_recorder_and_the_content(
    content: str, success: bool, error: str | None, failed: bool
) -> None:
    result = ToolResult(call_id="c", content=content, success=success, error=error)
    assert tool_failed(result) is failed


def test_any_order_and_redelivered_copies_fold_to_the_same_trajectory() -> None:
    events, derived = recorded()
    first = fold(events["s-good"], derived)
    shuffled = events["s-good"] * 2 + events["s-good"][:3]
    noisy_derived = derived * 2
    rng = random.Random(7)
    rng.shuffle(shuffled)
    rng.shuffle(noisy_derived)
    again = fold(shuffled, noisy_derived)
    assert again == first
    assert again.provenance["events"].linked


def test_provenance_names_first_and_last_event_of_every_chain_used() -> None:
    events, derived = recorded()
    trajectory = fold(events["s-good"], derived)
    chain = events["s-good"]
    span = trajectory.provenance["events"]
    assert (span.first_hash, span.last_hash, span.count) == (
        chain[0].hash,
        chain[-1].hash,
        len(chain),
    )
    verdicts = [d for d in derived if d.session_id == "s-good" and d.stream == "verdicts"]
    assert trajectory.provenance["verdicts"].last_hash == verdicts[-1].hash
    assert trajectory.filter_hash == trajectory.provenance["filtered"].last_hash


def test_a_gap_in_the_chain_is_visible_in_provenance() -> None:
    events, derived = recorded()
    holed = [e for e in events["s-good"] if e.seq != 3]
    assert not fold(holed, derived).provenance["events"].linked


def _under_v2(event: TypedEvent, payload: Mapping[str, Any] | None = None) -> TypedEvent:
    """The output as judge version v2 would have sealed it (its payload replaced if given)."""
    value, _ = seal(
        stream=versioned_stream(event.stream, "v2"),
        session_id=event.session_id,
        seq=event.seq,
        ts_ns=event.ts_ns,
        type=event.type,
        payload=dict(event.payload if payload is None else payload),
        prev_hash=event.prev_hash,
        producer=event.mapping["producer"],
        causes=event.causes,
    )
    return read_event(value)


def test_only_the_chosen_judge_versions_verdicts_are_used() -> None:
    events, derived = recorded()
    # The same outputs as a replay under v2 would chain them, its filter refusing the session.
    replayed = [
        _under_v2(d, {**d.payload, "accepted": False} if d.type == "filter_outcome" else None)
        for d in derived
        if d.session_id == "s-good" and d.stream in ("verdicts", "filtered")
    ]
    live = fold(events["s-good"], derived + replayed)
    v2 = fold(events["s-good"], derived + replayed, judge_version="v2")
    assert live.accepted is True and v2.accepted is False
    assert set(v2.provenance) == {"events", "verdicts@v2", "filtered@v2"}
    assert live.trajectory_id != v2.trajectory_id
    assert fold(events["s-good"], [], judge_version="v3").accepted is None


def test_trajectory_id_depends_on_the_events_and_verdicts_only() -> None:
    events, derived = recorded()
    assert (
        fold(events["s-good"], derived).trajectory_id
        == fold(list(reversed(events["s-good"])), derived).trajectory_id
    )
    assert (
        fold(events["s-good"], derived).trajectory_id
        != fold(events["s-good"][:-1], derived).trajectory_id
    )


def test_unfinished_sessions_fold_with_status_unfinished() -> None:
    events, _ = recorded()
    trajectory = fold(events["s-good"][:5])
    assert (
        trajectory.status == "unfinished"
        and trajectory.ended_ns is None
        and not trajectory.completed
    )


def test_folding_without_a_session_start_or_across_sessions_is_an_error() -> None:
    events, _ = recorded()
    with pytest.raises(FoldError, match="not session_started"):
        fold(events["s-good"][1:])
    with pytest.raises(FoldError, match="one session"):
        fold(events["s-good"] + events["s-bad"])
    with pytest.raises(FoldError, match="no events"):
        fold([])


def test_score_sources() -> None:
    events, derived = recorded()
    trajectory = fold(events["s-tok-a"], derived)
    assert trajectory.score("reward") == 0.5
    assert trajectory.score("reward:other") is None
    assert trajectory.score("verdict:reward:final_reward:reward") == 0.5
    with pytest.raises(ValueError, match="score source"):
        trajectory.score("bogus")


def test_a_session_whose_content_is_still_sealed_does_not_fold_into_empty_turns() -> None:
    events, _ = recorded()
    turn = next(e for e in events["s-good"] if e.type == "turn")
    value, _ = seal(
        stream=turn.stream,
        session_id=turn.session_id,
        seq=turn.seq,
        ts_ns=turn.ts_ns,
        type="turn",
        payload={**turn.payload, "content": "", "sealed": "v1.0123456789abcdef.AAAA"},
        prev_hash=turn.prev_hash,
        producer=turn.mapping["producer"],
    )
    sealed = [read_event(value) if e is turn else e for e in events["s-good"]]
    with pytest.raises(FoldError, match="sealed under a data key") as caught:
        fold(sealed)
    assert caught.value.reason == "key_unavailable"


def _reviews(sid: str, *records: tuple[str, str, dict[str, Any], int, str | None]) -> list[Any]:
    """The session's `verdicts@human` chain as reviewers wrote it: (writer, type, payload, seq,
    the hash it links to: None for the head before it)."""
    out: list[Any] = []
    heads: dict[int, str] = {-1: "0" * 64}
    for writer, kind, payload, seq, prev in records:
        value, digest = seal(
            stream="verdicts@human",
            session_id=sid,
            seq=seq,
            ts_ns=seq + 1,
            type=kind,
            payload=payload,
            producer={"name": "t", "version": "1", "principal": writer},
            prev_hash=prev or heads[seq - 1],
        )
        heads.setdefault(seq, digest)
        out.append(read_event(value))
    return out


def test_reviews_fold_from_what_stands_on_the_reviewers_chain_and_speak_only_for_their_writer() -> (
    None
):
    events, derived = recorded()
    chain = _reviews(
        "s-good",
        ("ann", "human_verdict", {"reviewer": "ann", "verdict": "fail", "score": 0.25}, 0, None),
        # bob reviewed at the same moment: his record lost the race and is set aside
        ("bob", "human_verdict", {"reviewer": "bob", "verdict": "pass"}, 0, "0" * 64),
        ("bob", "human_verdict", {"reviewer": "bob", "verdict": "pass"}, 1, None),
        # a review in ann's name that bob wrote counts for no one
        ("bob", "human_verdict", {"reviewer": "ann", "verdict": "pass"}, 2, None),
        (
            "ann",
            "human_preference",
            {"reviewer": "ann", "chosen": "s-good", "rejected": "s-bad"},
            3,
            None,
        ),
    )
    trajectory = fold(events["s-good"], [*derived, *chain])
    assert [(r.reviewer, r.verdict, r.value) for r in trajectory.reviews] == [
        ("ann", "fail", 0.25),
        ("bob", "pass", 1.0),
    ]
    assert trajectory.score("human") == (0.25 + 1.0) / 2
    assert [(p.reviewer, p.rejected) for p in trajectory.preferences] == [("ann", "s-bad")]
    span = trajectory.provenance["verdicts@human"]
    assert (span.count, span.linked) == (4, True)
    assert not trajectory.chain_breaks


def test_a_review_the_worker_flagged_as_written_by_a_non_reviewer_counts_for_no_one() -> None:
    events, derived = recorded()
    chain = _reviews(
        "s-good",
        ("ann", "human_verdict", {"reviewer": "ann", "verdict": "fail"}, 0, None),
        # a judge's credential writing a review in its own name: the audit flags the writer
        ("judge", "human_verdict", {"reviewer": "judge", "verdict": "pass"}, 1, None),
    )
    value, _ = seal(
        stream="verdicts",
        session_id="s-good",
        seq=99,
        ts_ns=99,
        type="chain_broken",
        payload={
            "stream": "verdicts@human",
            "seq": 1,
            "reason": "foreign_principal",
            "detail": "the envelope names principal 'judge', which does not write it",
            "position": None,
            "auditor_version": "t",
        },
        producer={"name": "t", "version": "1", "principal": "processor"},
        prev_hash="0" * 64,
    )
    flagged = fold(events["s-good"], [*derived, *chain, read_event(value)])
    assert [(r.reviewer, r.verdict) for r in flagged.reviews] == [("ann", "fail")]
    assert flagged.score("human") == 0.0 and flagged.reviewers_passed is False
    unflagged = fold(events["s-good"], [*derived, *chain])
    assert [r.reviewer for r in unflagged.reviews] == ["ann", "judge"]
