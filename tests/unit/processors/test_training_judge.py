"""The training-run judge on scripted sessions with known violations, padding and untested runs."""

from __future__ import annotations

import math
from typing import Any

from rolltape.processors.audit import InputRecord
from tests.unit.processors.scripted import Tape, emitted, run

OK = {"steps": 5, "max_layer_grad_norm": 1.0, "min_layer_grad_norm": 1e-3, "val_acc": 0.5}
VANISHING = {**OK, "min_layer_grad_norm": 1e-8}


def training(
    metrics: list[dict[str, Any]],
    decisions: list[dict[str, Any]] = (),  # type: ignore[assignment]
    run_config: dict[str, Any] | None = None,
    **outcome: Any,
) -> dict[str, Any]:
    tape, sid = Tape(), "t1"
    records: list[InputRecord] = [tape.start(sid, kind="training", run_config=run_config or {})]
    for epoch, fields in enumerate(metrics):
        records.append(tape.metric(sid, epoch, **fields))
        records += [tape.decision(sid, **d) for d in decisions if d["epoch"] == epoch]
    records += tape.end(sid, streams=("metrics",), **outcome)
    outputs, _ = run(records)
    (verdict,) = emitted(outputs, "verdict")
    return verdict


def codes(verdict: dict[str, Any]) -> list[tuple[str, str | None, int | None]]:
    return [(v["code"], v["rule"], v["epoch"]) for v in verdict["violations"]]


ADD_BN = {
    "event_type": "architecture_change",
    "cites": ["R6"],
    "remedy_direction": "add_bn_or_residual",
    "remedy_params": {"lr_new": None, "edit_op": "add_block", "edit_to": "none"},
}


def test_judge__an_unanswered_firing_is_a_missing_decision_with_evidence() -> None:
    verdict = training([VANISHING] * 7)
    assert codes(verdict) == [("missing_decision", "R6", 2)]
    assert len(verdict["violations"][0]["evidence"]) == 1
    assert verdict["counts"]["obligations"] == 1 and verdict["scores"]["process_score"] == 0.0
    assert verdict["details"]["process_axis_exercised"] is True


def test_judge__a_firing_answered_in_its_window_satisfies_the_obligation() -> None:
    verdict = training([VANISHING] * 7, [{**ADD_BN, "epoch": 4}])
    assert codes(verdict) == [] and verdict["scores"]["process_score"] == 1.0


def test_judge__padding_with_more_decisions_does_not_dilute_a_violation() -> None:
    metrics = [VANISHING, {**VANISHING, "train_loss": math.nan}] + [VANISHING] * 6
    cut_lr = {
        "event_type": "hyperparameter_change",
        "cites": ["R7"],
        "remedy_direction": "decrease_lr",
        "remedy_params": {"lr_new": 0.01, "edit_op": "none", "edit_to": "none"},
    }
    lean = training(metrics, [{**cut_lr, "epoch": 1}])
    padded = training(
        metrics, [{**cut_lr, "epoch": 1}] + [{**cut_lr, "epoch": e} for e in (1, 1, 1, 1)]
    )
    assert codes(lean) == codes(padded) == [("missing_decision", "R6", 2)]
    assert lean["counts"]["obligations"] == padded["counts"]["obligations"] == 2
    assert lean["scores"]["process_score"] == padded["scores"]["process_score"] == 0.5
    assert padded["counts"]["decisions"] == 5


def test_judge__a_run_never_tested_is_not_a_free_perfect_process_score() -> None:
    verdict = training([OK] * 6)
    assert verdict["details"]["process_axis_exercised"] is False
    assert verdict["counts"]["obligations"] == 0 and verdict["violations"] == []


def test_judge__a_firing_whose_window_was_still_open_at_the_end_is_reported_not_counted() -> None:
    verdict = training([OK] * 5 + [{**OK, "train_loss": math.nan}])
    assert verdict["violations"] == [] and verdict["counts"]["window_open"] == 1


def test_judge__a_deferral_at_the_final_epoch_could_not_clear_and_is_not_a_violation() -> None:
    defer = {"event_type": "rule_triggered_no_action", "cites": ["R6"], "remedy_direction": "none"}
    verdict = training([VANISHING] * 5, [{**defer, "epoch": 4}])
    assert codes(verdict) == [] and verdict["counts"]["deferrals_unclearable"] == 1


def test_judge__a_deferral_that_never_clears_is_unresolved() -> None:
    defer = {"event_type": "rule_triggered_no_action", "cites": ["R6"], "remedy_direction": "none"}
    verdict = training([VANISHING] * 8, [{**defer, "epoch": 3}])
    assert codes(verdict) == [("unresolved_deferral", "R6", 3)]


def test_judge__citing_a_rule_that_did_not_fire_is_spurious() -> None:
    bigger_batch = {
        "epoch": 2,
        "event_type": "hyperparameter_change",
        "cites": ["R2"],
        "remedy_direction": "increase_batch_size",
    }
    assert codes(training([OK] * 5, [bigger_batch])) == [("spurious_citation", "R2", 2)]


def test_judge__every_decision_is_checked_for_defensibility() -> None:
    wrong = [
        {
            **ADD_BN,
            "epoch": e,
            "remedy_direction": "increase_batch_size",
            "event_type": "hyperparameter_change",
        }
        for e in range(3, 15)
    ]
    verdict = training([VANISHING] * 15, wrong)
    assert [c for c in codes(verdict) if c[0] == "indefensible_decision"] == [
        ("indefensible_decision", "R6", e) for e in range(3, 15)
    ]


def test_judge__an_edit_logged_but_not_applied_fails_the_architecture_replay() -> None:
    swap = {
        "epoch": 3,
        "event_type": "architecture_change",
        "cites": ["R5"],
        "remedy_direction": "swap_activation",
        "remedy_params": {"lr_new": None, "edit_op": "swap_activation", "edit_to": "gelu"},
    }
    dead = {**OK, "dead_relu_fraction": 0.9}
    config = {"architecture": {"activation": "relu", "blocks": 2}}
    metrics = [dead] * 6
    unapplied = training(metrics, [swap], config, final_spec={"activation": "relu", "blocks": 2})
    assert unapplied["status"] == "failed" and codes(unapplied)[0][0] == "architecture_replay"
    assert unapplied["scores"] == {"accuracy_score": 0.0, "process_score": 0.0}
    applied = training(metrics, [swap], config, final_spec={"activation": "gelu", "blocks": 2})
    assert applied["status"] == "ok" and applied["details"]["architecture_replay"] == {
        "result": "match",
        "source": "agent-reported",
    }


def test_judge__the_top_class_must_be_acted_on_first() -> None:
    both = {**OK, "train_loss": math.inf, "update_to_param_ratio": 0.5}
    lr_only = {
        "epoch": 2,
        "event_type": "hyperparameter_change",
        "cites": ["R1"],
        "remedy_direction": "decrease_lr",
        "remedy_params": {"lr_new": 0.01, "edit_op": "none", "edit_to": "none"},
    }
    verdict = training(
        [both, both, both, OK, OK, OK], [lr_only], {"lr": 0.1, "lr_schedule": "cosine"}
    )
    assert ("precedence_violation", "R7", 2) in codes(verdict)
    assert ("missing_decision", "R7", 0) in codes(verdict)


def test_judge__a_learning_rate_nobody_decided_on_is_config_drift() -> None:
    metrics = [{**OK, "lr": 0.1}, {**OK, "lr": 0.1}, {**OK, "lr": 0.05}, {**OK, "lr": 0.05}]
    assert codes(training(metrics, run_config={"lr": 0.1})) == [
        ("config_drift", None, 2),
        ("config_drift", None, 3),
    ]


def test_judge__accuracy_score_is_the_final_accuracy_against_the_target() -> None:
    verdict = training([OK] * 3, run_config={"target_accuracy": 0.8}, val_acc=0.6)
    assert verdict["scores"]["accuracy_score"] == 0.6 / 0.8
    assert "accuracy_score" not in training([OK] * 3)["scores"]


def test_judge_state__stays_small_however_long_the_run() -> None:
    from rolltape.schemas import canonical_bytes, decode

    tape, sid = Tape(), "long"
    records = [tape.start(sid, kind="training", run_config={"lr": 0.1})]
    records += [tape.metric(sid, e, **OK, lr=0.1) for e in range(3000)]
    records.append(tape.metric(sid, 3000, **{**OK, "train_loss": math.nan}, lr=0.1))
    outputs, states = run(records)
    size = len(canonical_bytes(states[sid].judge.to_dict()))
    assert size < 1000, size  # not 3,000 epochs' worth: runs of equal firings and lr changes
    records += tape.end(sid, streams=("metrics",))
    outputs, _ = run(records)
    (verdict,) = emitted(outputs, "verdict")
    assert verdict["counts"]["epochs_evaluated"] == 3001 and verdict["violations"] == []
    # R7 fired at the last epoch: its answer window was still open when the run ended
    assert verdict["counts"]["window_open"] == 1
    first_metric = decode(records[1].value)["hash"]
    assert first_metric not in str(verdict)  # evidence is only where something happened


def test_judge__a_flood_of_decisions_is_counted_not_kept_and_is_a_violation() -> None:
    from rolltape.processors.judges._training import MAX_DECISIONS_KEPT

    defer = {"event_type": "rule_triggered_no_action", "cites": ["R6"], "remedy_direction": "none"}
    flood = [{**defer, "epoch": 3}] * (MAX_DECISIONS_KEPT + 5)
    verdict = training([VANISHING] * 5, flood)
    assert verdict["counts"]["decisions"] == MAX_DECISIONS_KEPT + 5
    assert ("decision_flood", None, None) in codes(verdict)
