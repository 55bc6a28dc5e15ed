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


def _reviewed(
    t: Trajectory, *reviews: tuple[str, str, float], over: tuple[str, ...] = ()
) -> Trajectory:
    from rolltape.projections import PreferenceRecord, ReviewRecord

    return t.model_copy(
        update={
            "reviews": tuple(
                ReviewRecord(reviewer=who, verdict=v, value=value, event_hash="h")  # type: ignore[arg-type]
                for who, v, value in reviews
            ),
            "preferences": tuple(
                PreferenceRecord(reviewer=who, rejected=other, event_hash="h")
                for who, other in (o.split(">") for o in over)
            ),
        }
    )


def test_dpo__by_human_the_reviewers_preferences_decide_their_pairs_and_verdicts_rank_the_rest() -> (
    None
):
    out = dpo_pairs(
        [
            # s1 over s2 by alice's and bob's choice, though the verdicts rank s2 higher
            _reviewed(
                session("s1", "g", 0.0, Q, ("assistant", "one")),
                ("alice", "fail", 0.0),
                over=("alice>s2", "bob>s2"),
            ),
            _reviewed(
                session("s2", "g", 1.0, Q, ("assistant", "two")),
                ("alice", "pass", 1.0),
                over=("carol>s1",),
            ),
            _reviewed(session("s3", "g", 0.0, Q, ("assistant", "three")), ("bob", "pass", 0.5)),
            session("s4", "g", 1.0, Q, ("assistant", "unreviewed")),
        ],
        score="human",
    )
    assert [(c.session_id, r.session_id) for _, c, r, _ in out.pairs] == [
        ("s1", "s2"),
        ("s2", "s3"),
        ("s3", "s1"),
    ]
    assert ("s4", "no_score") in out.skipped


def test_dpo__by_human_a_pair_the_reviewers_are_split_on_is_skipped_as_tied() -> None:
    out = dpo_pairs(
        [
            _reviewed(session("s1", "g", 0.0, Q, ("assistant", "one")), over=("alice>s2",)),
            _reviewed(session("s2", "g", 0.0, Q, ("assistant", "two")), over=("bob>s1",)),
        ],
        score="human",
    )
    assert out.pairs == []
    assert out.skipped == [
        ("s1|s2", "tied_preferences"),
        ("s1", "no_score"),
        ("s2", "no_score"),
    ]


def test_human_score__is_the_mean_of_each_reviewers_latest_verdict() -> None:
    t = _reviewed(
        session("s1", "g", 0.0, Q, ("assistant", "x")),
        ("alice", "pass", 1.0),
        ("bob", "fail", 0.0),
        ("alice", "fail", 0.25),
    )
    assert t.score("human") == (0.25 + 0.0) / 2
    assert session("s2", "g", 0.0, Q).score("human") is None
