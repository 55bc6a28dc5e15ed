"""DPO pairing: who is paired with whom, what the prompt is, and every skip counted."""

from __future__ import annotations

from rolltape.projections import Message, RewardRecord, Trajectory
from rolltape.projections.exporters import dpo_pairs
from tests.unit.projections.sessions import conversation


def session(
    sid: str, group: str | None, reward: float | None, *turns: tuple[str, str]
) -> Trajectory:
    messages = tuple(
        Message(role=r, content=c, ts_ns=0, event_hash="h")  # type: ignore[arg-type]
        for r, c in turns
    )
    return conversation(list(messages)).model_copy(
        update={
            "session_id": sid,
            "trajectory_id": sid,
            "started_ns": int(sid[-1]),
            "group_id": group,
            "rewards": ()
            if reward is None
            else (RewardRecord(value=reward, name="reward", event_hash="h"),),
        }
    )


Q = ("user", "q")


def test_dpo__every_two_members_with_different_scores_make_a_pair_best_first() -> None:
    out = dpo_pairs(
        [
            session("s1", "g", 0.2, Q, ("assistant", "weak")),
            session("s2", "g", 0.9, Q, ("assistant", "strong")),
            session("s3", "g", 0.5, Q, ("assistant", "middle")),
        ]
    )
    assert [(c.session_id, r.session_id) for _, c, r, _ in out.pairs] == [
        ("s2", "s3"),
        ("s2", "s1"),
        ("s3", "s1"),
    ]
    assert out.pairs[0][3] == {
        "prompt": [{"role": "user", "content": "q"}],
        "chosen": [{"role": "assistant", "content": "strong"}],
        "rejected": [{"role": "assistant", "content": "middle"}],
    }


def test_dpo__ties_lonely_members_and_missing_scores_are_skipped_with_a_reason() -> None:
    out = dpo_pairs(
        [
            session("s1", "g", 0.5, Q, ("assistant", "a")),
            session("s2", "g", 0.5, Q, ("assistant", "b")),
            session("s3", "alone", 1.0, Q, ("assistant", "c")),
            session("s4", "g", None, Q, ("assistant", "d")),
            session("s5", None, 1.0, Q, ("assistant", "e")),
        ]
    )
    assert out.pairs == []
    assert sorted(reason for _, reason in out.skipped) == [
        "no_group",
        "no_score",
        "single_member_group",
        "tied_scores",
    ]


def test_dpo__the_prompt_is_the_shared_prefix_and_a_multi_turn_rest_is_kept() -> None:
    a = session(
        "s1",
        "g",
        1.0,
        ("system", "sys"),
        Q,
        ("assistant", "x"),
        ("user", "more"),
        ("assistant", "y"),
    )
    b = session(
        "s2",
        "g",
        0.0,
        ("system", "sys"),
        Q,
        ("assistant", "x"),
        ("user", "more"),
        ("assistant", "z"),
    )
    ((_, _, _, row),) = dpo_pairs([a, b]).pairs
    assert [m["content"] for m in row["prompt"]] == ["sys", "q", "x", "more"]
    assert row["chosen"] == [{"role": "assistant", "content": "y"}]
    different = session("s3", "h", 1.0, ("user", "other"), ("assistant", "x"))
    other = session("s4", "h", 0.0, Q, ("assistant", "x"))
    assert [r for _, r in dpo_pairs([different, other]).skipped] == ["no_shared_prompt"]


def test_dpo__scores_can_come_from_a_judges_verdict() -> None:
    from rolltape.projections import VerdictRecord

    def judged(sid: str, score: float) -> Trajectory:
        t = session(sid, "g", None, Q, ("assistant", sid))
        return t.model_copy(
            update={
                "verdicts": (
                    VerdictRecord(
                        judge="training_audit",
                        judge_version="x",
                        status="ok",
                        scores={"process_score": score},
                        event_id="e",
                        event_hash="h",
                    ),
                )
            }
        )

    out = dpo_pairs(
        [judged("s1", 0.25), judged("s2", 0.75)], score="verdict:training_audit:process_score"
    )
    assert [(c.session_id, r.session_id) for _, c, r, _ in out.pairs] == [("s2", "s1")]
