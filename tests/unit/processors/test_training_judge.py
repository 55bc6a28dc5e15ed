"""The training-run judge on scripted sessions with known violations, padding and untested runs."""

from __future__ import annotations

import math
from typing import Any

from rolltape.processors.audit import InputRecord
from tests.unit.processors.scripted import Tape, emitted, run, spec

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
    import pydantic_core

    from rolltape.schemas import decode

    tape, sid = Tape(), "long"
    records = [tape.start(sid, kind="training", run_config={"lr": 0.1})]
    records += [tape.metric(sid, e, **OK, lr=0.1) for e in range(3000)]
    records.append(tape.metric(sid, 3000, **{**OK, "train_loss": math.nan}, lr=0.1))
    outputs, states = run(records)
    size = len(pydantic_core.to_json(states[sid].judge, inf_nan_mode="strings"))
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


PROBE = {"fc.weight": 0.5, "fc.bias": 0.1}


def monitored(
    metrics: list[dict[str, Any]],
    specs: list[dict[str, Any]],
    decisions: list[dict[str, Any]] = (),  # type: ignore[assignment]
    live: dict[str, Any] | None = None,
    run_config: dict[str, Any] | None = None,
    status: str = "completed",
) -> dict[str, Any]:
    """A training session as the monitor records it: specs, metrics with probe gradients and a
    live check on the metrics chain; decisions on the events chain."""
    tape, sid = Tape(), "m1"
    records: list[InputRecord] = [tape.start(sid, kind="training", run_config=run_config or {})]
    for s in (s for s in specs if s["phase"] != "final"):
        if s["epoch"] == 0:
            records.append(tape.record(sid, "metrics", "model_spec", **s))
    for epoch, fields in enumerate(metrics):
        records += [
            tape.record(sid, "metrics", "model_spec", **s)
            for s in specs
            if s["epoch"] == epoch and s["epoch"] and s["phase"] != "final"
        ]
        records.append(tape.metric(sid, epoch, **{"probe_grad_norm": PROBE, **fields}))
        records += [tape.decision(sid, **d) for d in decisions if d["epoch"] == epoch]
    records += [
        tape.record(sid, "metrics", "model_spec", **s) for s in specs if s["phase"] == "final"
    ]
    if live is not None:
        records.append(tape.record(sid, "metrics", "live_check", **live))
    records += tape.end(sid, status=status, streams=("metrics",))
    outputs, _ = run(records)
    (verdict,) = emitted(outputs, "verdict")
    return verdict


def live_check(epoch: int, weights_epoch: int, **norms: float) -> dict[str, Any]:
    return {
        "epoch": epoch,
        "weights_epoch": weights_epoch,
        "probe_samples": 256,
        "loss": 0.3,
        "per_layer_grad_norm": {**PROBE, **norms},
        "val_loss": 0.3,
        "val_acc": 0.9,
    }


SWAP = {
    "event_type": "architecture_change",
    "cites": ["R5"],
    "remedy_direction": "swap_activation",
    "remedy_params": {"lr_new": None, "edit_op": "swap_activation", "edit_to": "leaky_relu"},
}
DEAD = {**OK, "dead_relu_fraction": 0.9, "val_loss": 1.0}


def test_judge__an_honest_monitored_run_passes_the_replay_and_the_live_check() -> None:
    verdict = monitored(
        [DEAD] * 3 + [{**OK, "val_loss": 0.9}] * 3,
        [spec(0, "attach"), spec(3, "changed", "leaky_relu"), spec(6, "final", "leaky_relu")],
        [{**SWAP, "epoch": 2}],
        live_check(5, 5),
        run_config={"target_accuracy": 0.9},
    )
    assert verdict["status"] == "ok", verdict["violations"]
    assert verdict["details"]["architecture_replay"] == {
        "result": "match",
        "source": "monitor",
        "specs_checked": 2,
    }
    assert verdict["details"]["live_check"]["result"] == "within_tolerance"
    assert verdict["details"]["accuracy_source"] == "monitor live check"
    assert verdict["scores"]["accuracy_score"] == 1.0


def test_judge__a_model_swapped_after_the_last_epoch_fails_both_gates() -> None:
    swapped = monitored(
        [OK] * 4,
        [spec(0, "attach"), spec(4, "final", layers=5)],  # a bigger body double at the end
        live=live_check(3, 3, **{"fc.weight": 2.0}),
        run_config={"target_accuracy": 0.9},
    )
    assert swapped["status"] == "failed" and swapped["scores"] == {
        "accuracy_score": 0.0,
        "process_score": 0.0,
    }
    gates = {v["code"] for v in swapped["violations"]}
    assert gates == {"architecture_replay", "live_check"}
    weights_only = monitored(
        [OK] * 4, [spec(0, "attach"), spec(4, "final")], live=live_check(3, 3, **{"fc.weight": 0.8})
    )
    assert weights_only["status"] == "failed"
    assert weights_only["details"]["live_check"]["result"] == "out_of_tolerance"
    within = monitored(
        [OK] * 4, [spec(0, "attach"), spec(4, "final")], live=live_check(3, 3, **{"fc.weight": 0.6})
    )
    assert within["status"] == "ok"  # 20% off: inside the default +-30%


def test_judge__an_unlogged_structural_change_mid_run_fails_the_replay() -> None:
    verdict = monitored(
        [OK] * 5,
        [spec(0, "attach"), spec(2, "changed", "gelu"), spec(5, "final", "gelu")],
        live=live_check(4, 4),
    )
    assert verdict["status"] == "failed"
    (gate,) = [v for v in verdict["violations"] if v["code"] == "architecture_replay"]
    assert "changed at epoch 2" in gate["message"]


def test_judge__a_restored_best_checkpoint_is_a_legitimate_live_check_reference() -> None:
    metrics = [{**OK, "val_loss": v} for v in (1.0, 0.5, 0.7, 0.8)]
    best = monitored(metrics, [spec(0, "attach"), spec(4, "final")], live=live_check(3, 1))
    assert best["status"] == "ok" and best["details"]["live_check"]["weights_epoch"] == 1
    elsewhere = monitored(metrics, [spec(0, "attach"), spec(4, "final")], live=live_check(3, 2))
    assert elsewhere["status"] == "failed"
    assert elsewhere["details"]["live_check"]["result"] == "no_reference"


def test_judge__a_completed_monitored_run_without_a_live_check_fails() -> None:
    missing = monitored([OK] * 3, [spec(0, "attach"), spec(3, "final")])
    assert missing["status"] == "failed" and missing["details"]["live_check"]["result"] == "missing"
    crashed = monitored([OK] * 3, [spec(0, "attach")], status="failed")
    assert crashed["details"]["live_check"]["result"].startswith("not checked")


def test_judge__the_agents_reported_accuracy_does_not_count_when_a_monitor_measured() -> None:
    verdict = monitored(
        [{**OK, "val_acc": 0.3}] * 3,
        [spec(0, "attach"), spec(3, "final")],
        live={**live_check(2, 2), "val_acc": 0.45},
        run_config={"target_accuracy": 0.9},
    )
    assert verdict["scores"]["accuracy_score"] == 0.5  # the monitor's 0.45 / 0.9


def test_judge__waived_rules_come_from_the_run_config_and_create_no_obligation() -> None:
    noisy = {**OK, "grad_noise_scale": 10.0}
    strict = training([noisy] * 7)
    assert ("missing_decision", "R2", 2) in codes(strict)
    waived = training([noisy] * 7, run_config={"waived_rules": ["R2", "R99"]})
    assert codes(waived) == [] and waived["details"]["waived_rules"] == ["R2"]
    assert waived["details"]["waived_rules_ignored"] == ["R99"]


def test_judge__inserting_batch_norm_is_a_defensible_answer_to_vanishing_gradients() -> None:
    add_bn = {
        **ADD_BN,
        "epoch": 2,
        "remedy_params": {"lr_new": None, "edit_op": "add_batchnorm", "edit_to": "none"},
    }
    verdict = training([VANISHING] * 3 + [OK] * 3, [add_bn])
    assert "indefensible_decision" not in {c[0] for c in codes(verdict)}
