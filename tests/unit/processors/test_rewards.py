"""Programmatic reward functions and the transcript judges read."""

from __future__ import annotations

from rolltape.processors import ProcessorConfig
from rolltape.processors.judges import Composite, FinalReward, TaskPass, Transcript
from rolltape.schemas import Reward
from tests.unit.processors.scripted import Tape, emitted, run


def transcript(**fields: object) -> Transcript:
    return Transcript.model_validate({"session_id": "s", "status": "completed", **fields})


def test_task_pass__scores_a_completed_passed_session_one_and_says_when_it_cannot() -> None:
    assert TaskPass().verdict(transcript(outcome={"passed": True})).scores == {"reward": 1.0}
    assert TaskPass().verdict(transcript(outcome={"passed": False})).scores == {"reward": 0.0}
    failed = TaskPass().verdict(transcript(outcome={}))
    assert failed.status == "error" and failed.scores == {} and "'passed'" in (failed.error or "")


def test_final_reward__is_the_last_reward_named_reward() -> None:
    rewards = [Reward(value=0.2), Reward(value=0.9, name="aux"), Reward(value=0.7)]
    assert FinalReward().verdict(transcript(rewards=rewards)).scores == {"reward": 0.7}
    assert FinalReward().verdict(transcript()).status == "error"


def test_composite__weights_components_and_refuses_missing_ones() -> None:
    reward = Reward(value=1.0, components={"correct": 1.0, "format": 0.5})
    verdict = Composite({"correct": 0.8, "format": 0.2}).verdict(transcript(rewards=[reward]))
    assert verdict.scores == {"reward": 0.9, "component.correct": 1.0, "component.format": 0.5}
    missing = Composite({"style": 1.0}).verdict(transcript(rewards=[reward]))
    assert missing.status == "error" and "style" in (missing.error or "")


def test_transcript__drops_the_middle_past_its_bound_and_says_how_much() -> None:
    tape = Tape()
    sid = "long"
    records = [tape.start(sid)] + [
        tape.event(sid, "turn", role="assistant", content=f"{n:04d}" + "x" * 96) for n in range(50)
    ]
    _, states = run(records, ProcessorConfig(rewards=("final_reward",), transcript_max_chars=1000))
    t = states[sid].transcript
    assert t is not None and t.size <= 1000 and t.truncated == 40
    assert t.items[0].text.startswith("0000") and t.items[-1].text.startswith("0049")
    assert "[... 40 items omitted ...]" in t.render()


def test_rewards__run_inline_at_the_end_of_agent_sessions_only() -> None:
    tape = Tape()
    records = [tape.start("a"), tape.event("a", "reward", value=0.5), *tape.end("a")]
    records += [tape.start("j", trainable=False, linked_session_id="a"), *tape.end("j")]
    outputs, _ = run(records, ProcessorConfig(rewards=("final_reward", "task_pass")))
    verdicts = emitted(outputs, "verdict")
    assert [(v["judge"], v["status"]) for v in verdicts] == [
        ("reward:final_reward", "ok"),
        ("reward:task_pass", "error"),
    ]


def test_config__names_an_unknown_judge() -> None:
    import pytest

    with pytest.raises(ValueError, match=r"unknown judge.*nope.*known: composite"):
        ProcessorConfig(rewards=("nope",))
