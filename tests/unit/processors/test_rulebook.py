"""The rule book: each task family judged by its own rule set, the shipped sets loadable by name,
and a session's metrics evaluated under its task's set whichever topic was read first."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest

from rolltape.processors import (
    DeadLetter,
    Emitted,
    ProcessorConfig,
    SessionProcessor,
    SessionState,
    handle,
)
from rolltape.processors.audit import InputRecord
from rolltape.processors.rules import (
    DIGITS_CALIBRATED,
    REFERENCE_MONITOR,
    RuleBook,
    RuleSet,
    RuleSetError,
    default_rulebook,
    load_ruleset,
    shipped_rulesets,
)
from tests.unit.processors.scripted import Tape, dead_letters, emitted, run, spec

HEALTHY = {"steps": 5, "max_layer_grad_norm": 1.0, "min_layer_grad_norm": 1e-3, "lr": 0.1}
STRICT = RuleSet(name="strict", r7_max_grad_norm_high=0.5)  # fires R7 on HEALTHY's grad norm


def test_default_book__judges_the_reference_task_by_its_calibrated_set_and_others_by_the_monitors() -> (
    None
):
    book = default_rulebook()
    assert book.for_task("digits-cnn/dead_relu").name == DIGITS_CALIBRATED
    assert book.for_task("digits-cnn").name == DIGITS_CALIBRATED
    reference = shipped_rulesets()[REFERENCE_MONITOR]
    assert reference == RuleSet()
    assert book.for_task("digits-cnn-v2/x") == reference  # a family, not a prefix
    assert book.for_task("my-task") == reference
    assert book.for_task(None) == reference


def test_shipped_calibrated_set__names_the_task_and_runs_it_came_from() -> None:
    rules = shipped_rulesets()[DIGITS_CALIBRATED]
    assert rules.calibration is not None and rules.calibration.task == "digits-cnn"
    assert rules.calibration.scenarios == ("baseline",) and len(rules.calibration.seeds) == 10
    assert rules.calibration.base == RuleSet().label  # from the reference monitor's thresholds
    assert rules.r2_noise_scale_low < RuleSet().r2_noise_scale_low


def test_load_ruleset__reads_a_file_or_a_shipped_name_and_says_what_exists(tmp_path: Path) -> None:
    assert load_ruleset(REFERENCE_MONITOR) == RuleSet()
    assert RuleSet().label == "default@2713ec7281ea"  # its label since the first rule sets
    path = tmp_path / "strict.json"
    path.write_bytes(orjson.dumps(STRICT.model_dump(mode="json")))
    assert load_ruleset(path) == STRICT
    with pytest.raises(RuleSetError, match="shipped: reference-monitor, digits-cnn-calibrated"):
        load_ruleset(tmp_path / "missing.json")


def test_book_label__names_every_family_and_the_fallback() -> None:
    book = RuleBook(tasks={"b": STRICT, "a": RuleSet()}, fallback=STRICT)
    assert book.label == f"a={RuleSet().label}, b={STRICT.label}, *={STRICT.label}"
    assert RuleBook.only(STRICT).for_task("anything") == STRICT


def _session(tape: Tape, task: str, epochs: int = 3) -> tuple[list[InputRecord], list[InputRecord]]:
    start = tape.start("s", kind="training", task=task)
    metrics = [tape.metric("s", e, **HEALTHY) for e in range(epochs)]
    return [start], metrics


def test_metrics__are_evaluated_under_their_tasks_rule_set() -> None:
    config = ProcessorConfig(rules=RuleBook(tasks={"strict-task": STRICT}))
    start, metrics = _session(Tape(), "strict-task/run-1")
    outputs, _ = run(start + metrics, config)
    evaluations = emitted(outputs, "rule_evaluation")
    assert {e["ruleset"] for e in evaluations} == {STRICT.label}
    assert "R7" in evaluations[-1]["fired"]  # persistent from the third epoch
    start, metrics = _session(Tape(), "other-task")
    outputs, _ = run(start + metrics, config)
    assert {e["ruleset"] for e in emitted(outputs, "rule_evaluation")} == {RuleSet().label}


def test_metrics_read_before_session_started__wait_and_give_the_same_outputs() -> None:
    """The worker reads the metrics and events topics in no fixed order: metrics that arrive
    before the session_started naming their task wait for it, and the rules chain comes out
    byte for byte as if the task had been known first."""
    config = ProcessorConfig(rules=RuleBook(tasks={"strict-task": STRICT}))
    start, metrics = _session(Tape(), "strict-task")
    in_order, _ = run(start + metrics, config)
    metrics_first, _ = run(metrics + start, config)
    waited, _ = run(metrics[:2] + start + metrics[2:], config)
    values = [
        [o.value for o in outs if isinstance(o, Emitted)]
        for outs in (in_order, metrics_first, waited)
    ]
    assert len(values[0]) == 3 and values[0] == values[1] == values[2]


def test_waiting_metrics__survive_the_stored_state() -> None:
    config = ProcessorConfig(rules=RuleBook(tasks={"strict-task": STRICT}))
    tape = Tape()
    start, metrics = _session(tape, "strict-task")
    metrics.append(tape.metric("s", 3, **{**HEALTHY, "val_loss": math.nan, "lr": math.inf}))
    straight, _ = run(metrics + start, config)
    processor, states, restored = SessionProcessor(config), {}, []
    for record in metrics + start:
        states = {sid: SessionState.from_bytes(s.to_bytes()) for sid, s in states.items()}
        restored.extend(handle(processor, states, record)[1])
    assert [o.value for o in straight if isinstance(o, Emitted)] == [
        o.value for o in restored if isinstance(o, Emitted)
    ]


def test_waiting_metric_for_an_epoch_already_waiting__is_dead_lettered_at_once() -> None:
    tape = Tape()
    start, metrics = _session(tape, "t", epochs=2)
    again = tape.metric("s", 1, **HEALTHY)
    outputs, _ = run([*metrics, again, *start])
    assert dead_letters(outputs) == ["epoch_out_of_order"]
    (letter,) = [o for o in outputs if isinstance(o, DeadLetter)]
    assert letter.record.value == again.value
    assert [e["epoch"] for e in emitted(outputs, "rule_evaluation")] == [0, 1]


@pytest.mark.parametrize("restarts", [True, False])
def test_an_edited_network__restarts_the_course_rules_only_where_the_rule_set_says(
    restarts: bool,
) -> None:
    """A dead network's val loss stalls for three epochs; it is repaired (a `changed` model
    spec) and its loss falls epoch by epoch, but not yet below the dead one's. Under a rule set
    that restarts the course, the repaired network's two epochs are its own: R3 (patience 4)
    does not fire; under the reference monitor's rule it fires at epoch 4, right after the
    repair."""
    rules = RuleSet(name="r", r3_patience=4, new_model_restarts_course=restarts)
    tape = Tape()
    records = [tape.start("s", kind="training", task="t")]
    records.append(tape.record("s", "metrics", "model_spec", **spec(0, "attach")))
    losses = [2.30, 2.31, 2.31, 2.40, 2.38, 2.36]
    for epoch, loss in enumerate(losses):
        if epoch == 3:
            repaired = spec(3, "changed", "leaky_relu")
            records.append(tape.record("s", "metrics", "model_spec", **repaired))
        records.append(tape.metric("s", epoch, **HEALTHY, val_loss=loss))
    outputs, _ = run(records, ProcessorConfig(rules=RuleBook.only(rules)))
    r3 = [("R3" in e["fired"]) for e in emitted(outputs, "rule_evaluation")]
    assert r3 == ([False] * 6 if restarts else [False] * 4 + [True, True])
    since = [
        e["rules"]["R3"]["signals"]["epochs_since_best"]
        for e in emitted(outputs, "rule_evaluation")
    ]
    assert since == ([0, 1, 2, 0, 0, 0] if restarts else [0, 1, 2, 3, 4, 5])


def test_a_state_saved_before_tasks_were_kept__goes_on_evaluating_under_the_fallback() -> None:
    """A worker upgraded mid-session reads a state with the session's kind but no task (the
    previous build kept none): its later metrics are evaluated at once, not left waiting for a
    session_started that was read before the upgrade."""
    tape = Tape()
    start, metrics = _session(tape, "digits-cnn/x", epochs=4)
    processor, states = SessionProcessor(ProcessorConfig()), {}
    for record in start + metrics[:2]:
        handle(processor, states, record)
    saved = orjson.loads(states["s"].to_bytes())
    del saved["task"], saved["early"]
    states = {"s": SessionState.from_bytes(orjson.dumps(saved))}
    later = [o for record in metrics[2:] for o in handle(processor, states, record)[1]]
    evaluations = emitted(later, "rule_evaluation")
    assert [e["epoch"] for e in evaluations] == [2, 3]
    assert {e["ruleset"] for e in evaluations} == {RuleSet().label}


def test_metrics_of_a_session_whose_start_never_came__are_evaluated_when_it_ends() -> None:
    tape = Tape()
    _lost, metrics = _session(tape, "t", epochs=3)
    ends = tape.end("s", streams=("metrics",))
    outputs, states = run([*metrics, *ends])  # the session_started was lost
    assert [e["epoch"] for e in emitted(outputs, "rule_evaluation")] == [0, 1, 2]
    assert states["s"].early == [] and states["s"].finished
