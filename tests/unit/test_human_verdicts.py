"""Human verdicts as the wire format holds them: what a reviewer may record, and the judge
version reserved for them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rolltape.processors import ProcessorConfig
from rolltape.schemas import EVENT_CLASSES, HumanPreference, HumanVerdict, parse_payload


def test_a_verdict_keeps_its_labels_sorted_once_and_scores_pass_as_one_without_a_score() -> None:
    verdict = HumanVerdict(reviewer="ann", verdict="pass", labels=("tool:misuse", "a", "a"))
    assert verdict.labels == ("a", "tool:misuse")
    assert verdict.value == 1.0
    assert HumanVerdict(reviewer="ann", verdict="fail").value == 0.0
    assert HumanVerdict(reviewer="ann", verdict="pass", score=0.25).value == 0.25


@pytest.mark.parametrize(
    "fields",
    [
        {"verdict": "maybe"},
        {"verdict": "pass", "score": 1.5},
        {"verdict": "pass", "labels": ["Has Space"]},
        {"verdict": "pass", "queue": "somewhere"},
        {"verdict": "pass", "comment": "x" * 10_001},
        {"verdict": "pass", "reviewer": ""},
    ],
)
def test_a_verdict_out_of_bounds_is_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        HumanVerdict.model_validate({"reviewer": "ann", **fields})


def test_a_preference_is_between_two_different_sessions() -> None:
    with pytest.raises(ValidationError, match="two different sessions"):
        HumanPreference(reviewer="ann", chosen="s1", rejected="s1")
    assert HumanPreference(reviewer="ann", chosen="s1", rejected="s2").rejected == "s2"
    with pytest.raises(ValidationError, match="rejected"):
        HumanPreference(reviewer="ann", chosen="s1", rejected="no such/session")


def test_both_are_event_types_with_payload_models() -> None:
    assert EVENT_CLASSES["human_verdict"].__name__ == "HumanVerdictEvent"
    assert EVENT_CLASSES["human_preference"].__name__ == "HumanPreferenceEvent"
    parsed = parse_payload("human_verdict", {"reviewer": "ann", "verdict": "fail"})
    assert isinstance(parsed, HumanVerdict)


def test_no_replay_may_write_under_the_human_judge_version() -> None:
    with pytest.raises(ValueError, match="reserved for human verdicts"):
        ProcessorConfig(judge_version="human")
