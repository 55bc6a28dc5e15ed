"""Rule sets calibrated on healthy runs: thresholds beyond the healthy quantiles (never tighter
than the base), the relative R2 form against hand computation, the header and digest of a
calibrated rule set, and a rule set's measured false alarms and detections."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from rolltape.infra.commands.rules import write_ruleset
from rolltape.processors.rules import (
    RuleSet,
    RuleState,
    calibrate,
    evaluate,
    fired_per_epoch,
    goals,
    measure,
    quantile,
    smoothed_signals,
)
from rolltape.schemas import Metric


def run(noise: list[float], *, batch: int = 32, ratio: float = 5e-3) -> list[Metric]:
    return [
        Metric(
            epoch=epoch,
            steps=10,
            grad_noise_scale=value,
            grad_noise_scale_simple=value,
            batch_size=batch,
            update_to_param_ratio=ratio,
            min_layer_grad_norm=0.05,
            max_layer_grad_norm=1.0,
            dead_relu_fraction=0.0,
            val_loss=1.0 / (epoch + 1),
            train_acc=min(1.0, 0.2 * epoch),
        )
        for epoch, value in enumerate(noise)
    ]


@pytest.mark.parametrize("q", [0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 1.0])
def test_quantile__interpolates_between_order_statistics_as_numpy_does(q: float) -> None:
    values = [7.0, 1.0, 3.0, 10.0, 4.5, 2.0, 8.25]
    assert quantile(values, q) == pytest.approx(float(np.quantile(values, q)))
    assert quantile([3.0, 1.0], 0.5) == 2.0  # by hand: halfway between 1 and 3


def test_smoothed_signals__are_the_engines_own_emas() -> None:
    noise = [20.0, 10.0, 30.0]
    got = smoothed_signals([run(noise)], RuleSet())["grad_noise_scale"]
    ema = [20.0, 20.0 + 0.1 * (10.0 - 20.0)]
    ema.append(ema[-1] + 0.1 * (30.0 - ema[-1]))
    assert got == pytest.approx(ema)


def test_calibrate__thresholds_sit_beyond_the_healthy_quantiles_and_never_tighter_than_base() -> (
    None
):
    healthy = [run([10.0, 12.0, 8.0, 11.0, 9.0]), run([14.0, 13.0, 15.0, 12.0, 16.0])]
    base = RuleSet()
    rules = calibrate(
        healthy,
        base=base,
        name="t",
        task="digits-cnn",
        scenarios=("baseline",),
        seeds=(0, 1),
        quantiles=(0.05, 0.95),
        margin=2.0,
        relative_r2=False,
    )
    emas = smoothed_signals(healthy, base)["grad_noise_scale"]
    assert rules.r2_noise_scale_low == pytest.approx(quantile(emas, 0.05) / 2.0)
    assert rules.r2_noise_scale_high == base.r2_noise_scale_high  # 2 x q95 is far below 5000
    assert rules.r1_update_ratio_low == base.r1_update_ratio_low  # healthy 5e-3 / 2 is looser
    assert rules.r6_min_grad_norm_low == base.r6_min_grad_norm_low  # 0.025 would be tighter
    assert rules.persistence == base.persistence
    # the val loss improves every epoch: no healthy stall, so R3 waits the persistence window
    assert rules.r3_patience == base.persistence
    header = rules.calibration
    assert header is not None
    assert (header.seeds, header.quantiles, header.base) == ((0, 1), (0.05, 0.95), base.label)
    assert header.ranges["grad_noise_scale"].samples == 10


def test_calibrate__the_relative_r2_form_is_b_simple_over_the_batch_in_use() -> None:
    healthy = [run([16.0] * 6, batch=32)]
    rules = calibrate(
        healthy,
        base=RuleSet(),
        name="t",
        task="x",
        scenarios=("baseline",),
        seeds=(0,),
        relative_r2=True,
    )
    assert rules.r2_relative_to_batch
    assert rules.r2_noise_scale_low == pytest.approx(0.5 / 2.0)  # 16 / 32, halved
    assert rules.r2_noise_scale_high == pytest.approx(0.5 * 2.0)
    assert fired_per_epoch(healthy[0], rules) == [()] * 6


def test_r2_relative__fires_on_the_noise_scale_over_the_batch_size_by_hand() -> None:
    rules = RuleSet(r2_relative_to_batch=True, r2_noise_scale_low=0.25, r2_noise_scale_high=1.0)
    # B_simple 64 at batch 32 is 2.0 batches: outside [0.25, 1] from the first epoch; the EMA is
    # seeded by it and stays there, so R2 fires once three epochs were outside (persistence 3)
    metrics = run([64.0, 64.0, 64.0, 64.0], batch=32)
    state = RuleState()
    fired = [evaluate(rules, state, m, f"{i:064x}")[0] for i, m in enumerate(metrics)]
    assert ["R2" in e.fired for e in fired] == [False, False, True, True]
    assert state.ema["noise_scale_to_batch"] == pytest.approx(2.0)
    assert "grad_noise_scale" not in state.ema  # the absolute signal is not smoothed as well
    # the same noise at batch 128 is half a batch: inside the band, nothing fires
    assert fired_per_epoch(run([64.0] * 4, batch=128), rules) == [()] * 4


def test_ruleset__a_calibrated_set_is_another_set_and_the_old_digests_stand(tmp_path: Path) -> None:
    plain = RuleSet()
    assert RuleSet(r2_relative_to_batch=False).digest == plain.digest
    rules = calibrate(
        [run([10.0] * 4)], base=plain, name="t", task="x", scenarios=("baseline",), seeds=(3,)
    )
    path = tmp_path / "rules.json"
    write_ruleset(rules, path)
    again = RuleSet.from_file(path)
    assert again == rules and again.digest == rules.digest
    assert again.calibration is not None and again.calibration.seeds == (3,)
    other = rules.model_copy(
        update={"calibration": rules.calibration.model_copy(update={"seeds": (4,)})}
    )
    assert other.digest != rules.digest  # the same thresholds from other runs: another set
    # a file written before calibration headers named sessions reads back with its digest
    older = orjson.loads(path.read_bytes())
    del older["calibration"]["sessions"]
    path.write_bytes(orjson.dumps(older))
    assert RuleSet.from_file(path).digest == rules.digest
    from_log = rules.model_copy(
        update={"calibration": rules.calibration.model_copy(update={"sessions": ("s1",)})}
    )
    assert from_log.digest != rules.digest


def test_measure__counts_false_alarms_detections_and_unintended_firings() -> None:
    rules = RuleSet(r2_noise_scale_low=5.0, r2_noise_scale_high=50.0)
    healthy = [run([10.0] * 5), run([2.0] * 5)]  # the second is below the band from the start
    faulty = {"noisy": (("R2",), [run([1.0] * 6), run([20.0] * 6)])}
    figures = measure(rules, healthy, faulty)
    r2 = next(r for r in figures.rules if r.rule == "R2")
    assert (r2.healthy_epochs, r2.false_alarms, r2.longest_streak) == (10, 3, 3)
    assert r2.false_alarm_rate == pytest.approx(0.3)
    (detection,) = figures.detections
    assert (detection.detected, detection.seeds, detection.first_epochs) == (1, 2, (2, None))
    assert figures.ruleset == rules.label and figures.healthy_runs == 2


def test_calibrate__the_relative_form_without_b_simple_says_what_to_measure() -> None:
    unmeasured = [m.model_copy(update={"grad_noise_scale_simple": None}) for m in run([9.0] * 4)]
    with pytest.raises(ValueError, match="noise_scale_simple on"):
        calibrate(
            [unmeasured],
            base=RuleSet(),
            name="t",
            task="x",
            scenarios=("baseline",),
            seeds=(0,),
            relative_r2=True,
        )


def stalled(accs: list[float]) -> list[Metric]:
    return [
        m.model_copy(update={"train_acc": a})
        for m, a in zip(run([10.0] * len(accs)), accs, strict=True)
    ]


def test_r4__a_run_stalled_where_healthy_runs_converge_has_converged_not_run_out_of_capacity() -> (
    None
):
    healthy = [stalled([0.5, 0.9, 0.97, 0.975, 0.98, 0.98]), stalled([0.6, 0.95, 0.99, 0.99, 0.99])]
    base = RuleSet()
    assert any("R4" in f for f in fired_per_epoch(healthy[0], base))  # the reference fires
    rules = calibrate(healthy, base=base, name="t", task="x", scenarios=("b",), seeds=(0, 1))
    # R4's stall held at 0.98, 0.98 (run 1) and 0.99, 0.99 (run 2): the lower quantile
    assert rules.r4_train_acc_below == pytest.approx(quantile([0.98, 0.98, 0.99, 0.99], 0.01))
    assert all("R4" not in f for run_ in healthy for f in fired_per_epoch(run_, rules))
    capped = stalled([0.3, 0.31, 0.31, 0.31, 0.31])  # no capacity: stuck far below
    assert "R4" in fired_per_epoch(capped, rules)[-1]


def test_goals__name_the_rules_and_scenarios_that_miss_them() -> None:
    rules = RuleSet(r2_noise_scale_low=5.0, r2_noise_scale_high=50.0)
    healthy = [run([10.0] * 5), run([2.0] * 5)]
    faulty = {"noisy": (("R2",), [run([1.0] * 6), run([20.0] * 6)])}
    alarms, streaks, detections = goals(measure(rules, healthy, faulty))
    assert (alarms.met, alarms.detail) == (False, "R2 30.0%")
    assert (streaks.met, streaks.detail) == (False, "R2 3 in a row")
    assert (detections.met, detections.detail) == (False, "noisy R2")
    quiet = goals(measure(rules, [run([10.0] * 5)], {"noisy": (("R2",), [run([1.0] * 6)])}))
    assert all(goal.met for goal in quiet)


def test_r3_relative_delta__a_small_step_on_a_large_loss_is_no_improvement() -> None:
    losses = [2.30, 2.298, 2.296, 2.10]  # steps of 0.002 (0.09%), then a real one (8.5%)
    metrics = [Metric(epoch=e, steps=5, val_loss=v) for e, v in enumerate(losses)]
    absolute = RuleSet(r3_patience=2)
    relative = absolute.model_copy(update={"r3_min_relative_delta": 0.01})
    state = RuleState()
    since = [
        evaluate(absolute, state, m, f"{i:064x}") and state.since_best
        for i, m in enumerate(metrics)
    ]
    assert since == [0, 0, 0, 0]  # each step of 0.002 beats the absolute delta of 0.001
    state = RuleState()
    fired = [evaluate(relative, state, m, f"{i:064x}")[0] for i, m in enumerate(metrics)]
    # 1% of 2.30 is 0.023: the small steps are not improvements, the 0.2 one is
    assert [e.rules["R3"].signals["epochs_since_best"] for e in fired] == [0, 1, 2, 0]
    assert ["R3" in e.fired for e in fired] == [False, False, True, False]
    assert "by 0.023 for 2 epochs" in fired[2].rules["R3"].reason


def test_calibrate__r3_is_set_from_the_healthy_val_loss_course() -> None:
    def course(losses: list[float]) -> list[Metric]:
        return [Metric(epoch=e, steps=5, val_loss=v) for e, v in enumerate(losses)]

    # improvements of 50%, 20% and 10% of the best; the longest stall is 4 epochs
    healthy = [course([1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.4]), course([1.0, 0.9, 0.9])]
    rules = calibrate(
        healthy, base=RuleSet(), name="t", task="x", scenarios=("b",), seeds=(0, 1),
        quantiles=(0.0, 1.0), margin=2.0,
    )  # fmt: skip
    assert rules.r3_min_relative_delta == pytest.approx(0.1 / 2.0)  # the smallest, halved
    assert rules.r3_patience == 5  # one past the longest healthy stall
    header = rules.calibration
    assert header is not None
    assert header.ranges["val_loss_relative_improvement"].low == pytest.approx(0.1)
    assert header.ranges["epochs_since_best_val_loss"].high == 4.0
