"""The canonical rule engine on exact metric histories, including the edge cases the reference
monitor gets wrong (NaN, epochs without steps, missing fields, precedence)."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pydantic_core
import pytest
from pydantic import TypeAdapter

from rolltape.processors.rules import (
    EpochOrderError,
    RuleSet,
    RuleSetError,
    RuleState,
    evaluate,
)
from rolltape.schemas import Metric, RuleEvaluation, canonical_bytes

HEALTHY: dict[str, Any] = {
    "steps": 10,
    "update_to_param_ratio": 1e-3,
    "grad_noise_scale": 500.0,
    "dead_relu_fraction": 0.05,
    "min_layer_grad_norm": 1e-3,
    "max_layer_grad_norm": 1.0,
}


def run(history: list[dict[str, Any]], rules: RuleSet | None = None) -> list[RuleEvaluation]:
    rules = rules or RuleSet()
    state = RuleState()
    out = []
    for epoch, fields in enumerate(history):
        evaluation, _ = evaluate(rules, state, Metric(epoch=epoch, **fields), f"h{epoch}")
        out.append(evaluation)
    return out


def fired(history: list[dict[str, Any]], rules: RuleSet | None = None) -> list[tuple[str, ...]]:
    return [e.fired for e in run(history, rules)]


def test_rules__a_healthy_run_fires_nothing() -> None:
    assert fired([HEALTHY] * 8) == [()] * 8


def test_ema__is_seeded_by_the_first_value_and_smoothed_with_alpha() -> None:
    evaluations = run(
        [{**HEALTHY, "max_layer_grad_norm": 1.0}, {**HEALTHY, "max_layer_grad_norm": 2.0}]
    )
    assert evaluations[0].rules["R7"].signals["max_layer_grad_norm.ema"] == 1.0
    assert evaluations[1].rules["R7"].signals["max_layer_grad_norm.ema"] == 1.0 + 0.1 * (2.0 - 1.0)


def test_r6__fires_only_after_the_ema_is_past_the_threshold_for_three_epochs() -> None:
    vanishing = {**HEALTHY, "min_layer_grad_norm": 1e-7}
    assert fired([vanishing] * 4) == [(), (), ("R6",), ("R6",)]


def test_r7__a_nan_loss_fires_at_once_and_never_poisons_the_ema() -> None:
    history = [
        HEALTHY,
        {**HEALTHY, "train_loss": math.nan, "max_layer_grad_norm": math.inf},
        HEALTHY,
    ]
    evaluations = run(history)
    assert [e.fired for e in evaluations] == [(), ("R7",), ()]
    assert evaluations[1].non_finite == ("train_loss", "max_layer_grad_norm")
    assert evaluations[2].rules["R7"].signals["max_layer_grad_norm.ema"] == 1.0


def test_r7__a_non_finite_noise_scale_is_listed_but_is_not_an_explosion() -> None:
    (evaluation,) = run([{**HEALTHY, "grad_noise_scale": math.inf}])
    assert evaluation.non_finite == ("grad_noise_scale",) and evaluation.fired == ()


def test_r7__a_persistently_large_gradient_fires_after_three_epochs() -> None:
    assert fired([{**HEALTHY, "max_layer_grad_norm": 50.0}] * 3) == [(), (), ("R7",)]


def test_no_data__an_epoch_without_steps_fires_nothing_and_moves_no_state() -> None:
    empty = {"steps": 0, "min_layer_grad_norm": 0.0, "grad_noise_scale": 0.0}
    vanishing = {**HEALTHY, "min_layer_grad_norm": 1e-7}
    evaluations = run([vanishing, vanishing, empty, empty, vanishing])
    assert [e.fired for e in evaluations] == [(), (), (), (), ("R6",)]
    assert evaluations[2].no_data and evaluations[2].rules["R6"].reason.startswith("no data")


def test_missing_fields__are_not_measured_rather_than_zero() -> None:
    (evaluation,) = run([{"steps": 10}])
    assert evaluation.fired == ()
    assert evaluation.rules["R6"].reason == "min_layer_grad_norm not measured yet"
    assert evaluation.rules["R3"].reason == "val loss not measured yet"


def test_r1__fires_on_a_val_loss_plateau() -> None:
    losses = [1.0, 0.9, 0.95, 0.92, 0.91]
    assert fired([{**HEALTHY, "val_loss": v} for v in losses]) == [(), (), (), (), ("R1",)]


def test_r1__fires_on_a_persistently_tiny_update_ratio() -> None:
    assert fired([{**HEALTHY, "update_to_param_ratio": 1e-6}] * 3)[-1] == ("R1",)


def test_r2__fires_outside_the_noise_scale_band_on_either_side() -> None:
    assert fired([{**HEALTHY, "grad_noise_scale": 10.0}] * 3)[-1] == ("R2",)
    assert fired([{**HEALTHY, "grad_noise_scale": 1e5}] * 3)[-1] == ("R2",)


def test_r3__an_improvement_smaller_than_min_delta_does_not_reset_patience() -> None:
    losses = [1.0, 0.9995, 0.9993, 0.9992, 0.9991, 0.99905]
    assert fired([{**HEALTHY, "val_loss": v} for v in losses]) == [()] * 5 + [("R3",)]
    assert fired([{**HEALTHY, "val_loss": v} for v in [*losses[:-1], 0.9989]])[-1] == ()


def test_r3__names_the_epoch_that_set_the_best_val_loss_among_its_causes() -> None:
    rules, state = RuleSet(), RuleState()
    causes: tuple[str, ...] = ()
    for epoch in range(9):
        _, causes = evaluate(
            rules, state, Metric(epoch=epoch, **HEALTHY, val_loss=1.0), f"h{epoch}"
        )
    assert causes[0] == "h0" and causes[-1] == "h8"


def test_r4__a_stalled_accuracy_is_a_capacity_problem_only_when_the_net_is_healthy() -> None:
    stalled = [{**HEALTHY, "train_acc": 0.5 + 0.001 * i} for i in range(4)]
    assert fired(stalled)[-1] == ("R4",)
    dead = [{**f, "dead_relu_fraction": 0.9} for f in stalled]
    evaluation = run(dead)[-1]
    assert evaluation.fired == ("R5",)
    assert "R5 fired" in evaluation.rules["R4"].reason
    assert fired(dead, RuleSet(r4_requires_healthy=False))[-1] == ("R5", "R4")


def test_precedence__is_one_total_order_most_urgent_first() -> None:
    everything = {
        **HEALTHY,
        "train_loss": math.nan,
        "dead_relu_fraction": 0.9,
        "update_to_param_ratio": 0.5,
        "grad_noise_scale": 1.0,
        "min_layer_grad_norm": 1e-9,
    }
    evaluation = run([everything] * 3)[-1]
    assert evaluation.fired == ("R7", "R6", "R5", "R1", "R2")
    assert evaluation.top_class == "stability"


def test_epochs__each_is_evaluated_once_and_a_repeat_leaves_the_state_alone() -> None:
    rules, state = RuleSet(), RuleState()
    evaluate(rules, state, Metric(epoch=3, **HEALTHY), "a")
    before = copy.deepcopy(state)
    with pytest.raises(EpochOrderError, match="epoch 3 was already evaluated"):
        evaluate(rules, state, Metric(epoch=3, **HEALTHY), "b")
    assert state == before


def test_state__survives_a_round_trip_through_its_stored_form() -> None:
    rules = RuleSet()
    history = [{**HEALTHY, "val_loss": 1.0 - 0.01 * i, "train_acc": 0.1 * i} for i in range(7)]
    straight = run(history, rules)
    state = RuleState()
    stored = TypeAdapter(RuleState)
    resumed = []
    for epoch, fields in enumerate(history):
        state = stored.validate_json(pydantic_core.to_json(state, inf_nan_mode="strings"))
        resumed.append(evaluate(rules, state, Metric(epoch=epoch, **fields), f"h{epoch}")[0])
    assert [canonical_bytes(e.model_dump()) for e in resumed] == [
        canonical_bytes(e.model_dump()) for e in straight
    ]


def test_ruleset__a_changed_threshold_is_a_new_digest_and_files_are_checked(tmp_path: Path) -> None:
    assert RuleSet().label != RuleSet(r7_max_grad_norm_high=5.0).label
    assert RuleSet().label == RuleSet().label
    path = tmp_path / "rules.json"
    path.write_text('{"name": "strict", "r7_max_grad_norm_high": 5}')
    assert RuleSet.from_file(path).label.startswith("strict@")
    path.write_text('{"r2_noise_scale_low": 9000}')
    with pytest.raises(RuleSetError, match="r2_noise_scale_low must be below"):
        RuleSet.from_file(path)
    with pytest.raises(RuleSetError, match="cannot read"):
        RuleSet.from_file(tmp_path / "missing.json")


def test_r5__fires_on_saturated_smooth_activations_as_it_does_on_dead_relus() -> None:
    saturated = {**HEALTHY, "dead_relu_fraction": None, "saturated_fraction": 0.7}
    assert fired([saturated] * 4) == [(), (), ("R5",), ("R5",)]
    reason = run([saturated] * 3)[-1].rules["R5"].reason
    assert "saturated_fraction EMA above 0.4" in reason


def test_signals__one_that_stops_being_measured_neither_fires_on_stale_values_nor_hides() -> None:
    dead = {**HEALTHY, "dead_relu_fraction": 0.9}
    swapped = {**HEALTHY, "dead_relu_fraction": None, "saturated_fraction": 0.0}
    # after a swap from ReLU to GELU the dead-ReLU signal is gone: R5 does not fire on its
    # old EMA, and the saturated fraction of the new activation is what R5 watches now
    assert fired([dead, dead, dead, swapped, swapped]) == [(), (), ("R5",), (), ()]
    back = fired([dead, dead, dead, swapped, dead, dead])
    assert back[-2:] == [(), ()]  # measured again: its smoothing starts over (3 epochs)
