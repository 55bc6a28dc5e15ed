"""The per-session step: chain audit, dead letters, rule evaluations and end-of-session outputs
composed deterministically, with state that survives a round trip through its stored form."""

from __future__ import annotations

import math

import orjson
import pytest

from rolltape.processors import (
    JUDGE_RESULTS,
    Emitted,
    JudgeResult,
    Output,
    ProcessorConfig,
    SessionProcessor,
    SessionState,
    handle,
)
from rolltape.processors.audit import InputRecord, Position
from rolltape.processors.filters import FilterConfig
from rolltape.schemas import ChainVerifier, Verdict, decode
from tests.support.golden import GOLDEN
from tests.unit.processors.scripted import Tape, dead_letters, emitted, in_log_order, run

HEALTHY = {"steps": 5, "max_layer_grad_norm": 1.0, "min_layer_grad_norm": 1e-3}


def agent_session(tape: Tape, sid: str = "a1") -> list[InputRecord]:
    return [
        tape.start(sid, tools=[{"name": "calc", "parameters": {"type": "object"}}]),
        tape.event(sid, "turn", role="user", content="2+2?"),
        tape.event(sid, "tool_call", id="c1", name="calc", arguments={"expr": "2+2"}),
        tape.event(sid, "tool_result", call_id="c1", content="4"),
        tape.event(sid, "turn", role="assistant", content="4"),
        *tape.end(sid),
    ]


def training_session(tape: Tape, sid: str = "t1", epochs: int = 4) -> list[InputRecord]:
    records = [tape.start(sid, kind="training", run_config={"lr": 0.1})]
    records += [tape.metric(sid, e, **HEALTHY, lr=0.1) for e in range(epochs)]
    return records + tape.end(sid, streams=("metrics",))


def test_agent_session__ends_with_one_accepted_filter_outcome() -> None:
    outputs, _ = run(agent_session(Tape()))
    (result,) = emitted(outputs, "filter_outcome")
    assert result["accepted"] and result["turns"] == 1 and result["tool_calls"] == 1
    assert emitted(outputs, "verdict") == [] and dead_letters(outputs) == []


def test_training_session__one_rule_evaluation_per_epoch_and_a_verdict_at_the_end() -> None:
    outputs, _ = run(training_session(Tape()))
    assert [e["epoch"] for e in emitted(outputs, "rule_evaluation")] == [0, 1, 2, 3]
    (verdict,) = emitted(outputs, "verdict")
    assert verdict["judge"] == "training_audit" and verdict["status"] == "ok"
    assert emitted(outputs, "filter_outcome") == []


def test_training_session__the_verdict_waits_for_the_metrics_chain_to_end() -> None:
    records = training_session(Tape())
    metrics_end, events_end = records[-2], records[-1]
    outputs, _ = run([*records[:-2], events_end])
    assert emitted(outputs, "verdict") == []
    outputs, _ = run([*records[:-2], events_end, metrics_end])
    assert len(emitted(outputs, "verdict")) == 1


def test_end_outputs__do_not_depend_on_which_topic_was_read_last() -> None:
    records = training_session(Tape())
    metrics_end, events_end = records[-2], records[-1]
    one, _ = run(records)
    other, _ = run([*records[:-2], events_end, metrics_end])
    assert [o.value for o in one if isinstance(o, Emitted)] == [
        o.value for o in other if isinstance(o, Emitted)
    ]


def test_outputs__are_chained_per_session_and_verify() -> None:
    tape = Tape()
    outputs, _ = run(
        training_session(tape, "t1") + agent_session(tape, "a1") + training_session(tape, "t2")
    )
    verifier = ChainVerifier()
    for o in outputs:
        assert isinstance(o, Emitted)
        verifier.add(o.value, key=o.session_id.encode(), expected_stream=o.stream)
    reports = verifier.reports()
    assert {(r.stream, r.session_id) for r in reports} == {
        ("rules", "t1"),
        ("verdicts", "t1"),
        ("filtered", "a1"),
        ("rules", "t2"),
        ("verdicts", "t2"),
    }
    assert all(r.ok for r in reports)


def test_outputs__are_byte_identical_when_the_same_records_are_processed_again() -> None:
    tape = Tape()
    records = training_session(tape) + agent_session(tape)
    first, _ = run(records)
    second, _ = run(records)
    assert [o.value for o in first if isinstance(o, Emitted)] == [
        o.value for o in second if isinstance(o, Emitted)
    ]


def _restore_case() -> tuple[list[InputRecord], ProcessorConfig]:
    """Sessions whose states hold non-finite floats (a NaN lr, an infinite remedy, a NaN
    reward) in every part that keeps them."""
    tape = Tape()
    sid = "nan-lr"
    nan_run = [tape.start(sid, kind="training", run_config={"lr": 0.1})]
    nan_run += [tape.metric(sid, e, **HEALTHY, lr=0.1 if e < 2 else math.nan) for e in range(4)]
    nan_run.append(
        tape.decision(
            sid,
            1,
            event_type="hyperparameter_change",
            cites=["R2"],
            remedy_direction="decrease_lr",
            remedy_params={"lr_new": math.inf, "edit_op": "none", "edit_to": "none"},
        )
    )
    nan_run += tape.end(sid, streams=("metrics",), val_acc=math.nan)
    nan_agent = [tape.start("nan-agent"), tape.event("nan-agent", "reward", value=math.nan)]
    nan_agent += tape.end("nan-agent", passed=True, score=math.nan)
    records = training_session(tape, epochs=6) + agent_session(tape) + nan_run + nan_agent
    config = ProcessorConfig(
        rewards=("final_reward", "task_pass"),
        # The saved states predate the content checks, which then judge nothing of a session
        # already running (test_filters pins that); off here, so both runs judge alike.
        filters=FilterConfig(min_reward=0.5, require_content=False),
    )
    return records, config


def test_state__restored_from_its_stored_form_continues_exactly() -> None:
    records, config = _restore_case()
    straight, _ = run(records, config)
    processor = SessionProcessor(config)
    states: dict[str, SessionState] = {}
    resumed = []
    for record in records:
        states = {sid: SessionState.from_bytes(s.to_bytes()) for sid, s in states.items()}
        resumed.extend(handle(processor, states, record)[1])
    assert [getattr(o, "value", None) for o in resumed] == [
        getattr(o, "value", None) for o in straight
    ]


def test_redelivery__a_record_at_an_offset_already_processed_is_skipped() -> None:
    records = training_session(Tape())
    outputs, _ = run([*records[:3], records[1], records[2], *records[3:]])
    assert [e["epoch"] for e in emitted(outputs, "rule_evaluation")] == [0, 1, 2, 3]


def test_duplicate_in_the_topic__a_byte_identical_copy_at_a_new_offset_is_ignored() -> None:
    tape = Tape()
    records = training_session(tape)
    outputs, _ = run(in_log_order([*records[:3], records[2], *records[3:]]))
    assert [e["epoch"] for e in emitted(outputs, "rule_evaluation")] == [0, 1, 2, 3]
    assert emitted(outputs, "chain_broken") == []


def test_garbage__is_dead_lettered_with_the_reason_and_the_original_bytes() -> None:
    tape = Tape()
    bad = [
        tape.raw("events", b"\xff\xfe not json", b"x"),
        tape.raw("events", b'{"v": 2, "stream": "events"}', b"x"),
        tape.raw("events", b'{"v": 1, "seq": "one"}', b"x"),
        tape.raw("events", b"[1,2,3]", None),
    ]
    outputs, states = run(bad)
    assert dead_letters(outputs) == ["unparseable", "unknown_version", "unparseable", "unparseable"]
    assert [o.record.value for o in outputs] == [r.value for r in bad]  # type: ignore[union-attr]
    assert states == {}


def test_misrouted__a_record_keyed_by_another_session_is_dead_lettered() -> None:
    tape = Tape()
    record = tape.start("s1")
    moved = InputRecord(record.stream, b"other", record.value, record.position)
    outputs, _ = run([moved])
    assert dead_letters(outputs) == ["misrouted"]


def test_tampered__emits_chain_broken_and_the_content_is_not_used() -> None:
    tape = Tape()
    records = training_session(tape)
    edited = records[2].value.replace(b'"max_layer_grad_norm":1.0', b'"max_layer_grad_norm":99.0')
    assert edited != records[2].value
    records[2] = InputRecord("metrics", records[2].key, edited, records[2].position)
    outputs, _ = run(records)
    (broken,) = emitted(outputs, "chain_broken")
    assert broken["reason"] == "tampered" and broken["stream"] == "metrics" and broken["seq"] == 1
    assert [e["epoch"] for e in emitted(outputs, "rule_evaluation")] == [0, 2, 3]
    (verdict,) = emitted(outputs, "verdict")
    assert verdict["status"] == "failed" and verdict["violations"][0]["code"] == "chain_integrity"


def test_gap_and_after_end__each_break_is_one_verdict_naming_seq_and_reason() -> None:
    tape = Tape()
    records = agent_session(tape)
    late = tape.event("a1", "turn", role="user", content="after the end")
    outputs, _ = run([records[0], *records[2:], late])
    breaks = [(b["reason"], b["seq"]) for b in emitted(outputs, "chain_broken")]
    assert breaks == [("gap", 1), ("after_end", 6)]
    (result,) = emitted(outputs, "filter_outcome")
    assert not result["accepted"] and "chain_broken" in [r["code"] for r in result["reasons"]]


def test_bad_payloads__are_dead_lettered_while_the_chain_goes_on() -> None:
    tape = Tape()
    sid = "t1"
    records = [tape.start(sid, kind="training"), tape.metric(sid, 0, **HEALTHY)]
    records.append(tape.metric(sid, 0, **HEALTHY))  # the same epoch again
    # a payload the recorder would have refused, sealed by hand into the chain
    seq, prev = tape.heads[("metrics", sid)]
    from rolltape.schemas import seal

    value, digest = seal(
        stream="metrics",
        session_id=sid,
        seq=seq,
        ts_ns=1,
        type="metric",
        payload={"epoch": "one"},
        prev_hash=prev,
        producer={"name": "x", "version": "0", "principal": "p"},
    )
    tape.heads[("metrics", sid)] = (seq + 1, digest)
    records.append(tape.raw("metrics", value, sid.encode()))
    records.append(tape.record(sid, "metrics", "turn", role="user", content="wrong stream"))
    records.append(tape.metric(sid, 1, **HEALTHY))
    outputs, _ = run(records)
    assert dead_letters(outputs) == ["epoch_out_of_order", "invalid_payload", "wrong_stream"]
    assert [e["epoch"] for e in emitted(outputs, "rule_evaluation")] == [0, 1]
    assert emitted(outputs, "chain_broken") == []


def test_event_ids__are_stable_and_distinct_per_output() -> None:
    outputs, _ = run(training_session(Tape()))
    ids = [o.event_id for o in outputs if isinstance(o, Emitted)]
    assert len(set(ids)) == len(ids)
    assert all(decode(o.value)["event_id"] == o.event_id for o in outputs if isinstance(o, Emitted))


def test_second_writer__a_zombie_cannot_interleave_with_the_writer_that_resumed() -> None:
    tape = Tape()
    records = [tape.start("a1"), tape.event("a1", "turn", role="user", content="2+2?")]
    zombie = Tape()
    zombie.heads = dict(tape.heads)
    resumed = tape.event("a1", "session_resumed", writer="host/2/new", head_seq=1)
    late = [zombie.event("a1", "turn", role="assistant", content=str(n)) for n in (5, 6)]
    rest = [tape.event("a1", "turn", role="assistant", content="4"), *tape.end("a1")]
    outputs, _ = run(in_log_order([*records, resumed, *late, *rest]))
    breaks = [(b["reason"], b["seq"]) for b in emitted(outputs, "chain_broken")]
    assert breaks == [("fork", 2), ("fork", 3)]
    (result,) = emitted(outputs, "filter_outcome")
    assert result["turns"] == 1  # the zombie's answers are not part of the session


def test_foreign_principal__a_record_naming_another_domain_s_writer_is_flagged() -> None:
    config = ProcessorConfig(writers={"events": frozenset({"agent-7", "admin"})})
    outputs, _ = run(agent_session(Tape()), config)  # the tape's envelopes name "agent"
    flags = emitted(outputs, "chain_broken")
    assert len(flags) == 6 and {f["reason"] for f in flags} == {"foreign_principal"}
    assert "names principal 'agent'" in flags[0]["detail"]
    (result,) = emitted(outputs, "filter_outcome")  # judged all the same, and rejected
    assert not result["accepted"]
    allowed, _ = run(
        agent_session(Tape()), ProcessorConfig(writers={"events": frozenset({"agent"})})
    )
    assert emitted(allowed, "chain_broken") == []


def _verdict_chain_ok(outputs: list[Output]) -> bool:
    verifier = ChainVerifier()
    for o in outputs:
        if isinstance(o, Emitted):
            env = decode(o.value)
            verifier.add(o.value, key=env["session_id"].encode(), expected_stream=env["stream"])
    return all(report.ok for report in verifier.reports())


def test_newer_producer_field__after_a_gap__the_turn_is_used_and_no_output_is_lost() -> None:
    # The step once parsed a payload leniently, then the filters parsed it strictly: a turn
    # carrying a field from a newer producer raised after the gap's chain_broken was sealed,
    # and the worker dead-lettered the record, dropping that output while its state had moved
    # the verdicts chain on: a permanent gap in the judge's own chain.
    tape = Tape()
    records = [tape.start("newer")]
    tape.event("newer", "turn", role="user", content="never delivered")  # the gap
    turn = {"role": "assistant", "content": "4", "reasoning": "2+2", "sentiment": "calm"}
    records.append(tape.sealed("newer", "events", "turn", turn))
    records += tape.end("newer")
    outputs, _ = run(records, ProcessorConfig(rewards=("final_reward",)))
    assert dead_letters(outputs) == []
    assert [b["reason"] for b in emitted(outputs, "chain_broken")] == ["gap"]
    (result,) = emitted(outputs, "filter_outcome")
    assert result["turns"] == 1  # the turn counted, its unknown field ignored
    assert len(emitted(outputs, "verdict")) == 1
    assert _verdict_chain_ok(outputs)


def test_sealed_content__its_session_is_filtered_but_not_judged_on_empty_fields() -> None:
    def session(first_turn: dict[str, str]) -> list[Output]:
        tape = Tape()
        records = [tape.start("subject")]
        records.append(tape.sealed("subject", "events", "turn", first_turn))
        records.append(tape.event("subject", "turn", role="assistant", content="4"))
        records += tape.end("subject")
        return run(records, ProcessorConfig(rewards=("final_reward",)))[0]

    clear = session({"role": "user", "content": "2+2?"})
    assert len(emitted(clear, "verdict")) == 1
    sealed = session({"role": "user", "content": "", "sealed": "v1.0123456789abcdef.AAAA"})
    assert dead_letters(sealed) == [] and emitted(sealed, "verdict") == []
    assert len(emitted(sealed, "filter_outcome")) == 1


def test_step_that_raises__keeps_the_outputs_it_sealed_and_dead_letters_the_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("a bug in a filter")

    monkeypatch.setattr("rolltape.processors._session.observe", broken)
    tape = Tape()
    records = [tape.start("buggy")]
    tape.event("buggy", "turn", role="user", content="never delivered")  # the gap
    records.append(tape.event("buggy", "turn", role="assistant", content="4"))
    outputs, states = run(records)
    assert [type(o).__name__ for o in outputs] == ["DeadLetter", "Emitted", "DeadLetter"]
    assert dead_letters(outputs) == ["processor_error", "processor_error"]
    assert "a bug in a filter" in outputs[-1].detail  # type: ignore[union-attr]
    assert [b["reason"] for b in emitted(outputs, "chain_broken")] == ["gap"]
    assert states["buggy"].outputs["verdicts"][0] == 1  # the head moved with its output
    assert _verdict_chain_ok(outputs)


def _judged(sid: str, judge: str = "helpfulness") -> JudgeResult:
    verdict = Verdict(judge=f"llm:{judge}", judge_version="llm/1", status="ok", scores={"x": 1.0})
    return JudgeResult(session_id=sid, judge=judge, verdict=verdict, causes=("c",), ts_ns=10**18)


def test_judge_results__take_the_route_of_raw_records__chained_once_skipped_when_redelivered() -> (
    None
):
    processor = SessionProcessor(ProcessorConfig())
    states: dict[str, SessionState] = {}
    for record in agent_session(Tape()):
        handle(processor, states, record)
    value = _judged("a1").model_dump_json().encode()
    result = InputRecord(JUDGE_RESULTS, b"a1", value, Position("t.judge-results", 0, 7))
    sid, outputs = handle(processor, states, result)
    assert sid == "a1" and [o.type for o in outputs if isinstance(o, Emitted)] == ["verdict"]
    assert handle(processor, states, result) == ("a1", [])  # redelivered: same position
    again = InputRecord(JUDGE_RESULTS, b"a1", value, Position("t.judge-results", 0, 8))
    assert handle(processor, states, again) == ("a1", [])  # the judge ran twice: first stands
    garbage = InputRecord(JUDGE_RESULTS, b"a1", b"{}", Position("t.judge-results", 0, 9))
    sid, outputs = handle(processor, states, garbage)
    assert sid is None and dead_letters(outputs) == ["invalid_judge_result"]


def test_inputs_from_no_log__carry_no_position_and_are_never_taken_for_redeliveries() -> None:
    """An import judged before it is sent, a judge a replay called itself: nothing invents a
    topic or an offset for them, and chain_broken reports say there is no position."""
    tape = Tape()
    records = agent_session(tape)
    unplaced = [InputRecord(r.stream, r.key, r.value) for r in [records[0], *records[2:]]]
    outputs, _ = run(unplaced)
    (broken,) = emitted(outputs, "chain_broken")
    assert broken["reason"] == "gap" and broken["position"] is None
    processor = SessionProcessor(ProcessorConfig())
    states = {"a1": SessionState()}
    assert len(processor.judge_result(states["a1"], _judged("a1", "one"), None)) == 1
    assert len(processor.judge_result(states["a1"], _judged("a1", "two"), None)) == 1


def test_state__saved_before_the_stored_form_was_typed__loads_and_continues_exactly() -> None:
    """A worker upgraded mid-session reads the states the previous build saved (chain windows
    as [seq, hash] pairs, outbox records as text, non-finite floats as tokens) and goes on
    exactly as if it had never stopped. The file was written by that build."""
    records, config = _restore_case()
    processor = SessionProcessor(config)
    states: dict[str, SessionState] = {}
    straight = [handle(processor, states, record)[1] for record in records]
    saved = orjson.loads((GOLDEN / "processors" / "states_before_typed.json").read_bytes())
    for cut in saved["cuts"]:
        loaded = {sid: SessionState.from_bytes(v.encode()) for sid, v in cut["states"].items()}
        (pending,) = [entry for state in loaded.values() for entry in state.outbox]
        sent = [o for outs in straight[: cut["after"]] for o in outs if isinstance(o, Emitted)]
        assert pending == (sent[-1].stream, sent[-1].type, sent[-1].event_id, sent[-1].value)
        for state in loaded.values():
            state.outbox = []
        resumed = [handle(processor, loaded, record)[1] for record in records[cut["after"] :]]
        assert [[getattr(o, "value", None) for o in outs] for outs in resumed] == [
            [getattr(o, "value", None) for o in outs] for outs in straight[cut["after"] :]
        ]


@pytest.mark.parametrize("event_type", ["evaluation", "ruleset_evaluation"])
def test_evaluation_events__belong_on_the_events_stream(event_type: str) -> None:
    """An environment's evaluation and a rule set's figures are recorded on the events stream
    of a session of their own; the worker reads them as part of it, not as dead letters."""
    payloads = {
        "evaluation": {"environment": "bugfix", "split": "test", "model": "m", "items": 0,
                       "scored": 0, "passed": 0},
        "ruleset_evaluation": {"ruleset": {"name": "x"}, "label": "x@0", "task": "t",
                               "healthy": ["baseline"], "seeds": [1],
                               "figures": {"ruleset": "x@0", "healthy_runs": 1, "rules": [],
                                           "detections": []},
                               "goals": []},
    }  # fmt: skip
    tape = Tape()
    records = [
        tape.start("e", trainable=False),
        tape.event("e", event_type, **payloads[event_type]),
        *tape.end("e"),
    ]
    outputs, _ = run(records)
    assert dead_letters(outputs) == []
    assert len(emitted(outputs, "filter_outcome")) == 1


WAITS = ProcessorConfig(filters=FilterConfig(require_review=True))


def test_a_filter_that_waits_for_review__decides_at_the_first_reviewers_verdict() -> None:
    tape = Tape()
    ended, _ = run(agent_session(tape), WAITS)
    assert emitted(ended, "filter_outcome") == []  # held from the end until a person looks
    failed, states = run([*agent_session(Tape()), Tape().review("a1", "fail")], WAITS)
    (rejected,) = emitted(failed, "filter_outcome")
    assert not rejected["accepted"]
    assert [r["code"] for r in rejected["reasons"]] == ["reviewer_failed"]
    assert "reviewer ann failed it" in rejected["reasons"][0]["message"]
    assert states["a1"].review_wait is None and states["a1"].filters.findings == {}
    tape = Tape()
    records = [*agent_session(tape), tape.review("a1", "pass"), tape.review("a1", "fail", "bo")]
    passed, _ = run(records, WAITS)
    (accepted,) = emitted(passed, "filter_outcome")  # the first verdict decided; one outcome
    assert accepted["accepted"] and accepted["reasons"] == []
    unmoved, _ = run(records)  # a filter that does not wait: the reviews change nothing
    (default,) = emitted(unmoved, "filter_outcome")
    assert default["accepted"] and len(emitted(unmoved, "filter_outcome")) == 1


def test_a_filter_that_waits_for_review__writes_the_same_outcome_whichever_came_first() -> None:
    tape = Tape()
    session = agent_session(tape)
    review = tape.review("a1", "fail")
    after, _ = run(in_log_order([*session, review]), WAITS)
    before, _ = run(in_log_order([*session[:-1], review, session[-1]]), WAITS)
    outcome = [o.value for o in after if isinstance(o, Emitted) and o.type == "filter_outcome"]
    assert outcome and outcome == [
        o.value for o in before if isinstance(o, Emitted) and o.type == "filter_outcome"
    ]
    (written,) = [decode(v) for v in outcome]
    assert written["causes"][-1] == decode(review.value)["hash"]  # the verdict is a cause


def test_a_filter_that_waits_for_review__keeps_waiting_through_a_saved_state() -> None:
    tape = Tape()
    processor = SessionProcessor(WAITS)
    states: dict[str, SessionState] = {}
    for record in agent_session(tape):
        handle(processor, states, record)
    states = {sid: SessionState.from_bytes(state.to_bytes()) for sid, state in states.items()}
    assert states["a1"].review_wait is not None
    _, outputs = handle(processor, states, tape.review("a1", "pass"))
    assert [o.type for o in outputs if isinstance(o, Emitted)] == ["filter_outcome"]


def test_a_review_by_a_principal_that_does_not_review__decides_nothing() -> None:
    config = ProcessorConfig(
        filters=FilterConfig(require_review=True),
        writers={"verdicts@human": frozenset({"ann", "admin"})},
    )
    tape = Tape()
    forged = tape.review("a1", "fail", "mallory")  # mallory writes as herself: no reviewer
    outputs, states = run([*agent_session(tape), forged], config)
    assert emitted(outputs, "filter_outcome") == []
    assert [f["reason"] for f in emitted(outputs, "chain_broken")] == ["foreign_principal"]
    assert states["a1"].review is None
    # read before the session's end or after it, the forged fail neither rejects the session
    # nor marks its record broken: the reviewer's pass that follows decides
    tape = Tape()
    session = agent_session(tape)
    forged, real = tape.review("a1", "fail", "mallory"), tape.review("a1", "pass")
    for records in ([*session, forged, real], [forged, *session, real], [forged, real, *session]):
        decided, _ = run(in_log_order(records), config)
        (result,) = emitted(decided, "filter_outcome")
        assert result["accepted"] and result["reasons"] == [], result


def test_a_filter_that_waits_for_review__decides_a_rejected_session_at_its_end() -> None:
    tape = Tape()
    session = [
        tape.start("a1"),
        tape.event("a1", "turn", role="user", content="2+2?"),
        tape.event("a1", "turn", role="assistant", content="4"),
        *tape.end("a1", status="failed"),
    ]
    outputs, states = run(session, WAITS)  # no review can accept it: nothing is held
    (rejected,) = emitted(outputs, "filter_outcome")
    assert [r["code"] for r in rejected["reasons"]] == ["not_completed"]
    assert states["a1"].review_wait is None
    again, _ = run(in_log_order([tape.review("a1", "fail"), *session]), WAITS)
    assert emitted(again, "filter_outcome") == emitted(outputs, "filter_outcome")


def test_a_session_held_for_review__is_decided_when_the_setting_is_off_again() -> None:
    tape = Tape()
    processor = SessionProcessor(WAITS)
    states: dict[str, SessionState] = {}
    for record in agent_session(tape):
        handle(processor, states, record)
    assert states["a1"].review_wait is not None
    _, outputs = handle(SessionProcessor(ProcessorConfig()), states, tape.review("a1", "fail"))
    (result,) = [decode(o.value)["payload"] for o in outputs if isinstance(o, Emitted)]
    assert not result["accepted"] and result["reasons"][0]["code"] == "reviewer_failed"


def test_waiting_for_review__is_a_new_config_and_the_others_keep_their_labels() -> None:
    # the labels of configs that do not wait, as every outcome before the setting named them
    assert FilterConfig().label == "default@7717f34e4b09"
    assert FilterConfig(min_reward=0.5).label == "default@f899a9f8381c"
    assert FilterConfig(require_review=True).label != FilterConfig().label
    assert FilterConfig(require_review=False).label == FilterConfig().label
