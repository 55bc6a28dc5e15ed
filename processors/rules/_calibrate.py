"""Rule sets calibrated on healthy runs, and a rule set's measured false alarms and detections.

Thresholds inherited from another task fire on healthy runs of this one (the reference monitor's
noise-scale band was set on CIFAR-10; the digits task's healthy noise scale sits far below it).
Calibration reads what the rules read, the engine's own smoothed signals over healthy runs, and
places each threshold beyond a stated quantile of that healthy distribution, `margin` times
further out. A calibrated threshold is never tighter than the base rule set's: a handful of seeds
under-samples the healthy tail, and a rule set that fires on healthy runs teaches the policies
that act on it to chase noise.

R2 is calibrated on the monitor's default noise scale unless asked for the relative form
(`RuleSet.r2_relative_to_batch`: McCandlish's B_simple against the batch in use, which needs
runs measured with the monitor's `noise_scale_simple` on); see that field for why.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

from rolltape.processors.rules._engine import RuleState, evaluate
from rolltape.processors.rules._ruleset import Calibration, RuleSet, SignalRange
from rolltape.schemas import (
    PRECEDENCE,
    Detection,
    Goal,
    Metric,
    RuleFigures,
    RuleId,
    RuleSetFigures,
)


def smoothed_signals(runs: Sequence[Sequence[Metric]], rules: RuleSet) -> dict[str, list[float]]:
    """Every smoothed value the engine holds after each epoch of each run, per signal: what
    the band rules compare with their thresholds."""
    out: dict[str, list[float]] = {}
    for epoch in _epochs(runs, rules):
        if epoch.metric.steps:
            for name, value in epoch.state.ema.items():
                out.setdefault(name, []).append(value)
    return out


class _Epoch(NamedTuple):
    """One epoch of a run as the engine left it: what calibration and measurement read."""

    number: int
    """The epoch's place in its run (0 first)."""
    metric: Metric
    state: RuleState
    """The run's rule state after this epoch (the same object all run long)."""
    best_before: float | None
    """The best val loss before this epoch."""
    fired: tuple[RuleId, ...]


def _epochs(runs: Sequence[Sequence[Metric]], rules: RuleSet) -> Iterator[_Epoch]:
    """Every epoch of every run through the engine, each run from a fresh state."""
    for run in runs:
        state = RuleState()
        for index, metric in enumerate(run):
            best = state.best_val
            evaluation, _ = evaluate(rules, state, metric, f"{index:064x}")
            yield _Epoch(index, metric, state, best, evaluation.fired)


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (numpy's default), so
    the same values give the same threshold everywhere."""
    ordered = sorted(v for v in values if math.isfinite(v))
    if not ordered:
        raise ValueError("no finite values to take a quantile of")
    at = q * (len(ordered) - 1)
    below = math.floor(at)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (at - below)


def _range(values: Sequence[float], quantiles: tuple[float, float]) -> SignalRange:
    return SignalRange(
        samples=len(values), low=quantile(values, quantiles[0]), high=quantile(values, quantiles[1])
    )


def calibrate(
    runs: Sequence[Sequence[Metric]],
    *,
    base: RuleSet,
    name: str,
    task: str,
    scenarios: Sequence[str],
    seeds: Sequence[int],
    sessions: Sequence[str] = (),
    quantiles: tuple[float, float] = (0.01, 0.99),
    margin: float = 2.0,
    relative_r2: bool = False,
) -> RuleSet:
    """A rule set whose band thresholds sit beyond the healthy runs' `quantiles`, `margin` times
    further out (divided below, multiplied above), and never tighter than `base`.

    R3 and R4 watch the course of a run, not a band, and are set from the healthy course: an
    improvement of the val loss must be at least the smallest healthy one (its lower quantile,
    relative to the best loss) divided by the margin; R3's patience is one epoch past the
    longest stall without improvement healthy runs reach (the upper quantile), never under the
    persistence window and possibly shorter than the base's (set on runs of another length); R4
    fires only below the training accuracy at which healthy runs stall (its lower quantile: a
    bounded signal, so no margin).
    The persistence window, the EMA and R4's window are kept from `base`. A calibrated set
    restarts the course rules when the network is edited (`new_model_restarts_course`): not a
    threshold, but the reference task's harness repairs networks mid-run."""
    if not runs:
        raise ValueError("calibration needs at least one healthy run")
    if not 0 <= quantiles[0] < quantiles[1] <= 1:
        raise ValueError(f"quantiles must be 0 <= low < high <= 1, got {quantiles}")
    if margin < 1:
        raise ValueError(f"margin must be at least 1, got {margin}")
    absolute = smoothed_signals(runs, base.model_copy(update={"r2_relative_to_batch": False}))
    relative = smoothed_signals(runs, base.model_copy(update={"r2_relative_to_batch": True}))
    signals = {**absolute, **relative}
    ranges = {k: _range(v, quantiles) for k, v in sorted(signals.items()) if v}

    def low(signal: str, floor: float) -> float:
        found = ranges.get(signal)
        return floor if found is None else min(floor, found.low / margin)

    def high(signal: str, ceiling: float) -> float:
        found = ranges.get(signal)
        return ceiling if found is None else max(ceiling, found.high * margin)

    update: dict[str, object] = {
        "name": name,
        "r1_update_ratio_low": low("update_to_param_ratio", base.r1_update_ratio_low),
        "r1_update_ratio_high": high("update_to_param_ratio", base.r1_update_ratio_high),
        "r5_dead_relu_high": min(1.0, high("dead_relu_fraction", base.r5_dead_relu_high)),
        "r5_saturated_high": min(1.0, high("saturated_fraction", base.r5_saturated_high)),
        "r6_min_grad_norm_low": low("min_layer_grad_norm", base.r6_min_grad_norm_low),
        "r7_max_grad_norm_high": high("max_layer_grad_norm", base.r7_max_grad_norm_high),
        "r2_relative_to_batch": relative_r2,
        "new_model_restarts_course": True,
    }
    if relative_r2:
        found = ranges.get("noise_scale_to_batch")
        if found is None:
            raise ValueError(
                "the relative R2 form needs B_simple: run the monitor with noise_scale_simple on"
            )  # no base band in these units to stay within
        update["r2_noise_scale_low"] = found.low / margin
        update["r2_noise_scale_high"] = found.high * margin
    elif not relative_r2:
        update["r2_noise_scale_low"] = low("grad_noise_scale", base.r2_noise_scale_low)
        update["r2_noise_scale_high"] = high("grad_noise_scale", base.r2_noise_scale_high)
    improvements = _val_loss_improvements(runs, base)
    if improvements:  # a change smaller than any healthy improvement (by the margin) is noise
        ranges["val_loss_relative_improvement"] = _range(improvements, quantiles)
        delta = ranges["val_loss_relative_improvement"].low / margin
        update["r3_min_relative_delta"] = max(base.r3_min_relative_delta, delta)
    stalls = _epochs_since_best(runs, RuleSet.model_validate({**base.model_dump(), **update}))
    if stalls:  # one epoch past the stalls healthy runs reach, and never under persistence
        ranges["epochs_since_best_val_loss"] = _range(stalls, quantiles)
        longest = math.floor(ranges["epochs_since_best_val_loss"].high)
        update["r3_patience"] = max(base.persistence, longest + 1)
    stalled = _stalled_accuracies(runs, base)
    if stalled:  # the accuracy healthy runs stop improving at is convergence, not capacity
        ranges["train_acc_when_stalled"] = _range(stalled, quantiles)
        update["r4_train_acc_below"] = ranges["train_acc_when_stalled"].low
    update["calibration"] = Calibration(
        task=task,
        scenarios=tuple(scenarios),
        seeds=tuple(seeds),
        sessions=tuple(sessions),
        epochs=max(len(run) for run in runs),
        quantiles=quantiles,
        margin=margin,
        base=base.label,
        ranges=ranges,
    )
    return RuleSet.model_validate({**base.model_dump(), **update})


def _val_loss_improvements(runs: Sequence[Sequence[Metric]], rules: RuleSet) -> list[float]:
    """Each healthy improvement of the best val loss (by R3's absolute delta), as a fraction of
    the best it improved on."""
    return [
        (e.best_before - e.state.best_val) / abs(e.best_before)
        for e in _epochs(runs, rules)
        if e.best_before and e.state.best_val is not None and e.state.best_val < e.best_before
    ]


def _epochs_since_best(runs: Sequence[Sequence[Metric]], rules: RuleSet) -> list[float]:
    """R3's count of epochs since the best val loss, at every healthy epoch after the first."""
    return [
        float(e.state.since_best)
        for e in _epochs(runs, rules)
        if e.number and e.state.best_val is not None
    ]


def _stalled_accuracies(runs: Sequence[Sequence[Metric]], rules: RuleSet) -> list[float]:
    """The training accuracy at every healthy epoch on which R4's stall condition held."""
    out: list[float] = []
    window = rules.r4_window
    for epoch in _epochs(runs, rules):
        accs = epoch.state.train_accs[-(window + 1) :]
        if len(accs) == window + 1 and epoch.metric.steps:
            moved = max(abs(b - a) for a, b in itertools.pairwise(accs))
            if moved < rules.r4_train_acc_delta:
                out.append(accs[-1])
    return out


# -- a rule set's measured false alarms and detections ---------------------------------------------


def fired_per_epoch(run: Sequence[Metric], rules: RuleSet) -> list[tuple[RuleId, ...]]:
    """The rules that fired at each epoch of one run, as the engine evaluates them."""
    return [epoch.fired for epoch in _epochs([run], rules)]


def measure(
    rules: RuleSet,
    healthy: Sequence[Sequence[Metric]],
    scenarios: Mapping[str, tuple[tuple[RuleId, ...], Sequence[Sequence[Metric]]]],
) -> RuleSetFigures:
    """Per rule, its false alarms on the healthy runs; per scenario (its intended rules and its
    runs, one per seed), how many seeds each intended rule caught, when first, and which other
    rules fired."""
    figures = []
    healthy_fired = [fired_per_epoch(run, rules) for run in healthy]
    for rule in PRECEDENCE:
        epochs = alarms = longest = 0
        for run in healthy_fired:
            streak = 0
            for fired in run:
                epochs += 1
                streak = streak + 1 if rule in fired else 0
                alarms += rule in fired
                longest = max(longest, streak)
        figures.append(
            RuleFigures(
                rule=rule, healthy_epochs=epochs, false_alarms=alarms, longest_streak=longest
            )
        )
    detections = []
    for name, (intended, runs) in scenarios.items():
        per_run = [fired_per_epoch(run, rules) for run in runs]
        others: dict[str, int] = {}
        for run in per_run:
            for fired in run:
                for rule in fired:
                    if rule not in intended:
                        others[rule] = others.get(rule, 0) + 1
        for rule in intended:
            first = tuple(
                next((epoch for epoch, fired in enumerate(run) if rule in fired), None)
                for run in per_run
            )
            detections.append(
                Detection(
                    scenario=name,
                    rule=rule,
                    seeds=len(per_run),
                    detected=sum(f is not None for f in first),
                    first_epochs=first,
                    unintended=dict(sorted(others.items())),
                )
            )
    return RuleSetFigures(
        ruleset=rules.label,
        healthy_runs=len(healthy),
        rules=tuple(figures),
        detections=tuple(detections),
    )


def goals(
    figures: RuleSetFigures,
    *,
    max_false_alarm_rate: float = 0.02,
    min_detected: float = 0.9,
    within_epochs: int = 4,
) -> tuple[Goal, ...]:
    """The goals of a rule set that holds on the reference task: no rule fires on more than 2%
    of healthy epochs, none fires on two healthy epochs in a row, and every scenario's intended
    rule fires in 9 of 10 seeds within 4 epochs of the fault (every scenario's fault is there
    from the first epoch)."""
    noisy = [r for r in figures.rules if r.false_alarm_rate > max_false_alarm_rate]
    persisting = [r for r in figures.rules if r.longest_streak > 1]
    missed = [
        d
        for d in figures.detections
        if sum(1 for e in d.first_epochs if e is not None and e <= within_epochs)
        < min_detected * d.seeds
    ]
    return (
        Goal(
            goal=f"healthy: every rule fires on at most {max_false_alarm_rate:.0%} of epochs",
            met=not noisy,
            detail=", ".join(f"{r.rule} {r.false_alarm_rate:.1%}" for r in noisy) or "all do",
        ),
        Goal(
            goal="healthy: no rule fires on two epochs in a row",
            met=not persisting,
            detail=", ".join(f"{r.rule} {r.longest_streak} in a row" for r in persisting)
            or "none does",
        ),
        Goal(
            goal=f"scenarios: each intended rule in {min_detected:.0%} of seeds by epoch "
            f"{within_epochs}",
            met=not missed,
            detail=", ".join(f"{d.scenario} {d.rule}" for d in missed) or "all are",
        ),
    )
