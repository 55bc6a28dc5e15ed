"""The step on sessions that name a subject: their content opened with the session's data key
for the filters and judges, what is said about it sealed under the same key, nothing of it at
rest or in transit in clear, and erasure honoured wherever the key is gone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rolltape.processors import (
    JUDGE_RESULTS,
    Emitted,
    JudgeRequest,
    JudgeResult,
    Output,
    ProcessorConfig,
    Requested,
    SessionProcessor,
    SessionState,
    handle,
)
from rolltape.processors._replay import Replayer
from rolltape.processors.audit import InputRecord, Position
from rolltape.processors.judges import REWARDS, RewardFunction, RewardUnavailable, Transcript
from rolltape.processors.worker._keys import sealed_keys
from rolltape.schemas import GENESIS_HASH, PAYLOAD_MODELS, Verdict, canonical_bytes, read_event
from rolltape.schemas.privacy import ContentKey, Keyring, seal_content
from tests.unit.processors.scripted import Tape, dead_letters, emitted, run

SID = "subject-1"
SECRET = "my card is 4111"


class _Echo(RewardFunction):
    """Scores the length of the last assistant turn; its error quotes the user's words."""

    name = "echo_for_tests"
    version = "tests.echo/1"

    def score(self, transcript: Transcript) -> dict[str, float]:
        said = [i.text for i in transcript.items if i.kind == "turn" and i.role == "assistant"]
        if not said or not said[-1]:
            asked = [i.text for i in transcript.items if i.role == "user"]
            raise RewardUnavailable(f"no answer to {asked!r}")
        return {"reward": float(len(said[-1]))}


@pytest.fixture(autouse=True)
def echo_reward() -> Iterator[None]:
    REWARDS.register(_Echo.name, _Echo())
    yield
    REWARDS._plugins.pop(_Echo.name, None)


def _sealed(tape: Tape, key: ContentKey, event_type: str, **payload: Any) -> InputRecord:
    """An event of SID's events stream, its content sealed as the recorder seals it."""
    clean = PAYLOAD_MODELS[event_type].model_validate(payload).model_dump(mode="python")
    seq, _ = tape.heads.get(("events", SID), (0, GENESIS_HASH))
    sealed = seal_content(event_type, clean, key, stream="events", session_id=SID, seq=seq)
    return tape.sealed(SID, "events", event_type, sealed)


def _session(key: ContentKey, answer: str = "four") -> list[InputRecord]:
    tape = Tape()
    return [
        _sealed(tape, key, "session_started", task="sums", tools=[{"name": "calc"}]),
        _sealed(tape, key, "turn", role="user", content=SECRET),
        _sealed(tape, key, "turn", role="assistant", content=answer),
        _sealed(tape, key, "session_ended", status="completed"),
    ]


def _config(keys: Keyring | None, **kwargs: Any) -> ProcessorConfig:
    return ProcessorConfig(rewards=(_Echo.name,), keys=keys, **kwargs)


def _opened(outputs: list[Output], keys: Keyring, event_type: str) -> list[dict[str, Any]]:
    events = [read_event(o.value) for o in outputs if isinstance(o, Emitted)]
    opened = [keys.open_event(e)[0] for e in events if e.type == event_type]
    return [dict(e.payload) for e in opened if e is not None]


def test_subject_session__is_judged_on_its_opened_content() -> None:
    key = ContentKey.generate()
    keys = Keyring.of(SID, {key.key_id: key})
    outputs, _ = run(_session(key), _config(keys))
    assert dead_letters(outputs) == []
    (verdict,) = emitted(outputs, "verdict")
    assert verdict["status"] == "ok" and verdict["scores"] == {"reward": 4.0}
    (outcome,) = emitted(outputs, "filter_outcome")
    assert outcome["accepted"] and outcome["turns"] == 1


def test_what_a_judge_says_about_a_subject_session__is_sealed_under_its_key() -> None:
    key = ContentKey.generate()
    keys = Keyring.of(SID, {key.key_id: key})
    outputs, _ = run(_session(key, answer=""), _config(keys))
    (verdict,) = emitted(outputs, "verdict")
    assert verdict["status"] == "error" and "error" not in verdict
    assert verdict["sealed"].startswith(f"v1.{key.key_id}.")
    assert all(SECRET.encode() not in o.value for o in outputs if isinstance(o, Emitted))
    (opened,) = _opened(outputs, keys, "verdict")
    assert SECRET in opened["error"]  # the reward's explanation, back with the key


def test_subject_session_without_its_key__is_filtered_out_and_not_judged() -> None:
    key = ContentKey.generate()
    for keys, code in ((None, "content_unavailable"), (_erased(key), "content_erased")):
        outputs, _ = run(_session(key), _config(keys))
        assert dead_letters(outputs) == [] and emitted(outputs, "verdict") == []
        (outcome,) = emitted(outputs, "filter_outcome")
        assert not outcome["accepted"]
        assert code in [r["code"] for r in outcome["reasons"]]
        assert "sealed" not in outcome  # nothing of the content was read: nothing to seal


def _erased(key: ContentKey) -> Keyring:
    keys = Keyring(None)
    keys.add(f"{SID}/{key.key_id}".encode(), None)
    return keys


def test_key_erased_mid_session__leaves_what_it_read_out_of_the_outputs() -> None:
    key = ContentKey.generate()
    keys = Keyring.of(SID, {key.key_id: key})
    records = _session(key, answer="")
    processor = SessionProcessor(_config(keys))
    states: dict[str, SessionState] = {}
    outputs: list[Output] = []
    for record in records[:-1]:
        outputs += handle(processor, states, record)[1]
    keys._keys.clear()  # the erasure's tombstone, read by the worker's follower
    keys._erased.add((SID, key.key_id))
    outputs += handle(processor, states, records[-1])[1]
    assert emitted(outputs, "verdict") == []  # what it read may no longer be judged
    (outcome,) = emitted(outputs, "filter_outcome")
    assert not outcome["accepted"] and "sealed" not in outcome
    assert "reasons" not in outcome  # withheld: written after the key was gone, never in clear
    assert all(SECRET.encode() not in o.value for o in outputs if isinstance(o, Emitted))


def test_stored_state_of_a_subject_session__keeps_its_transcript_sealed() -> None:
    key = ContentKey.generate()
    keys = Keyring.of(SID, {key.key_id: key})
    records = _session(key)
    expected, _ = run(records, _config(keys))
    processor = SessionProcessor(_config(keys))
    states: dict[str, SessionState] = {}
    outputs: list[Output] = []
    for record in records:
        outputs += handle(processor, states, record)[1]
        stored = states[SID].to_bytes()
        assert SECRET.encode() not in stored
        states = {SID: SessionState.from_bytes(stored)}  # as a restarted worker reads it
    assert [o.value for o in outputs] == [o.value for o in expected]  # type: ignore[union-attr]


def test_judge_request_and_result_of_a_subject_session__travel_sealed() -> None:
    key = ContentKey.generate()
    keys = Keyring.of(SID, {key.key_id: key})
    outputs, states = run(_session(key), ProcessorConfig(llm_judges=("answer_quality",), keys=keys))
    (requested,) = [o for o in outputs if isinstance(o, Requested)]
    assert SECRET.encode() not in requested.value
    request = JudgeRequest.model_validate_json(requested.value)
    assert request.transcript is None and request.content_key == key.key_id
    opened, access = request.opened(keys)
    assert access == "opened" and opened is not None and opened.transcript is not None
    assert any(i.text == SECRET for i in opened.transcript.items)
    assert request.opened(_erased(key)) == (None, "erased")

    verdict = Verdict(
        judge="llm:answer_quality", judge_version="v", status="ok", details={"why": SECRET}
    )
    result = JudgeResult(
        session_id=SID,
        judge="answer_quality",
        verdict=verdict,
        content_key=key.key_id,
        causes=request.causes,
        ts_ns=request.ts_ns,
    ).sealed(keys)
    value = canonical_bytes(result.model_dump(mode="python"))
    assert SECRET.encode() not in value and result.verdict is None
    record = InputRecord(JUDGE_RESULTS, SID.encode(), value, Position("results", 0, 0))
    _, chained = handle(SessionProcessor(ProcessorConfig(keys=keys)), states, record)
    (emitted_verdict,) = chained
    assert isinstance(emitted_verdict, Emitted) and SECRET.encode() not in emitted_verdict.value
    (opened_verdict,) = _opened(list(chained), keys, "verdict")
    assert opened_verdict["details"] == {"why": SECRET}


def test_replay__leaves_out_subject_sessions_it_cannot_open() -> None:
    key = ContentKey.generate()
    result = Replayer(_config(_erased(key))).run(_session(key))
    assert result.chains == {} and result.unopened == {"erased": 1}
    opened = Replayer(_config(Keyring.of(SID, {key.key_id: key}))).run(_session(key))
    assert opened.unopened == {} and opened.chains


def test_sealed_keys__names_each_sealed_records_session_and_key() -> None:
    key = ContentKey.generate()
    records = _session(key)
    clear = Tape().start("clear")
    assert sealed_keys([*records, clear]) == {(SID, key.key_id)}
