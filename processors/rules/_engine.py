"""The canonical rule engine: R1..R7 over a session's metric events, one epoch at a time.

Invariant: the evaluation of an epoch is a pure function of the rule set and the session's metric
events up to and including it, in chain order. Live processing, replay and the training judge all
call `evaluate` and so agree bit for bit.

Fixes over env_rl's monitor (zubairashfaque/environment_rl @633b4e7, `src/env_rl/monitor/`):
- a NaN/Inf loss, gradient norm or update ratio fires R7 at once and never enters an EMA (the
  other signals keep their EMAs; a non-finite gradient-noise scale, which a single-step epoch
  yields legitimately, is listed but fires nothing);
- an epoch with no optimizer steps (`steps == 0`) is "no data": no EMA or history moves and no
  rule fires from it, instead of zero gradients firing R6 and R2;
- a field left out (None) means "not measured": rules that need it say so and do not fire, and
  its smoothing restarts when it is measured again (a signal that stops being measured, say dead
  ReLUs after a swap to GELU, neither keeps firing on stale values nor clears by going blind);
- R5 watches both the exact-zero fraction of ReLU-family activations and the saturated fraction
  the monitor measures for smooth activations (GELU, SiLU, sigmoid, ...), each with its threshold;
- R4 fires only while the gradients and activations are healthy (R5, R6, R7 silent), as the
  prose of the reference demands and its code does not;
- one total precedence order (PRECEDENCE), applied to `fired`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from rolltape.processors._errors import ProcessorError
from rolltape.processors.rules._ruleset import RuleSet
from rolltape.schemas import PRECEDENCE, RULE_CLASS, Metric, RuleEvaluation, RuleId

RULES_VERSION: Final = "rolltape.rules/2"

#: Smoothed signals and the rule that watches each.
EMA_SIGNALS: Final[tuple[str, ...]] = (
    "update_to_param_ratio",
    "grad_noise_scale",
    "dead_relu_fraction",
    "saturated_fraction",
    "min_layer_grad_norm",
    "max_layer_grad_norm",
)
#: R2's signal under `RuleSet.r2_relative_to_batch`, smoothed in place of grad_noise_scale.
_RELATIVE_SIGNALS: Final[tuple[str, ...]] = tuple(
    "noise_scale_to_batch" if name == "grad_noise_scale" else name for name in EMA_SIGNALS
)
#: Non-finite values here mean the run is exploding (R7).
_EXPLODING_FIELDS: Final[tuple[str, ...]] = (
    "train_loss",
    "val_loss",
    "max_layer_grad_norm",
    "min_layer_grad_norm",
    "update_to_param_ratio",
)
_CHECKED_FIELDS: Final[tuple[str, ...]] = (*Metric.DIAGNOSTICS, "lr")


class EpochOrderError(ProcessorError, ValueError):
    """A metric event for an epoch at or before one already evaluated (rules run once per epoch)."""


@dataclass
class RuleState:
    """What the engine remembers about one session between epochs (small: it is rewritten to a
    changelog on every update)."""

    last_epoch: int = -1
    ema: dict[str, float] = field(default_factory=dict)
    ema_window: dict[str, list[float]] = field(default_factory=dict)
    """The last `persistence` EMA values of each signal, oldest first."""
    val_losses: list[float] = field(default_factory=list)
    best_val: float | None = None
    best_hash: str | None = None
    since_best: int = 0
    train_accs: list[float] = field(default_factory=list)
    recent: list[str] = field(default_factory=list)
    """Hashes of the last `RuleSet.history` metric events with data, oldest first."""


def _g(x: float | None) -> str:
    return "n/a" if x is None else format(x, ".4g")


def _push(window: list[Any], value: Any, size: int) -> None:
    window.append(value)
    del window[:-size]


class _Outcome(NamedTuple):
    """A rule's outcome while the epoch is evaluated. The `RuleOutcome` models are validated
    once, with the whole evaluation, in `_finish`: building each model on its own cost more
    than the rules themselves (pydantic's per-call overhead, eight times an epoch)."""

    fired: bool
    reason: str
    signals: dict[str, float | None]


_SIGNAL_KEYS: dict[str, tuple[str, ...]] = {}


def _signal_keys(name: str) -> tuple[str, ...]:
    """`name.ema`, `name.ema_prev1`, ...: the keys a smoothed signal's outcome lists."""
    keys = _SIGNAL_KEYS.get(name)
    if keys is None:
        keys = _SIGNAL_KEYS[name] = (
            f"{name}.ema",
            *(f"{name}.ema_prev{back}" for back in range(1, 64)),
        )
    return keys


def _ema_signals(state: RuleState, name: str) -> dict[str, float | None]:
    keys = _signal_keys(name)
    out: dict[str, float | None] = {keys[0]: state.ema.get(name)}
    window = state.ema_window.get(name)
    if window:
        for back, value in enumerate(reversed(window[:-1]), start=1):
            out[keys[back] if back < len(keys) else f"{name}.ema_prev{back}"] = value
    return out


def restart_course(rules: RuleSet, state: RuleState) -> None:
    """A new network (rebuilt or edited mid-run): under `RuleSet.new_model_restarts_course`, the
    rules that watch the run's course (R1's plateau, R3, R4) start over; the smoothed gradient
    and activation signals keep their EMAs (they measure the network as it is now)."""
    if not rules.new_model_restarts_course:
        return
    state.val_losses.clear()
    state.train_accs.clear()
    state.best_val = state.best_hash = None
    state.since_best = 0


def epoch_order_error(epoch: int, last: int) -> str:
    """Why a metric for `epoch` cannot be evaluated after `last` was."""
    return (
        f"epoch {epoch} was already evaluated or is older than epoch {last}; rules run once "
        "per (session, epoch)"
    )


def evaluate(
    rules: RuleSet, state: RuleState, metric: Metric, metric_hash: str
) -> tuple[RuleEvaluation, tuple[str, ...]]:
    """Advance `state` by one metric event and return the epoch's evaluation and its causes
    (hashes of the metric events it used, oldest first). Raises EpochOrderError for an epoch that
    is not after the last one evaluated; `state` is then unchanged."""
    if metric.epoch <= state.last_epoch:
        raise EpochOrderError(epoch_order_error(metric.epoch, state.last_epoch))
    state.last_epoch = metric.epoch
    fields = metric.__dict__
    values = {name: fields[name] for name in _CHECKED_FIELDS}
    noise, batch = metric.grad_noise_scale_simple, metric.batch_size
    # McCandlish et al.'s B_simple is a batch size (the critical one): against the batch in use
    # it says whether that batch is small or large for the gradient's noise, whatever the task
    values["noise_scale_to_batch"] = noise / batch if noise is not None and batch else None
    non_finite = [n for n, v in values.items() if v is not None and not math.isfinite(v)]
    if metric.per_layer_grad_norm:
        non_finite += [
            f"per_layer_grad_norm.{layer}"
            for layer, v in sorted(metric.per_layer_grad_norm.items())
            if not math.isfinite(v)
        ]
    exploding = [n for n in non_finite if n in _EXPLODING_FIELDS or n.startswith("per_layer")]
    no_data = metric.steps == 0

    if no_data:
        quiet = _Outcome(False, "no data: the epoch had no optimizer steps", {})
        outcomes = {rule: quiet for rule in PRECEDENCE}
        if exploding:
            outcomes["R7"] = _Outcome(
                True, f"non-finite {', '.join(exploding)} in an epoch without steps", {}
            )
        return _finish(metric, outcomes, tuple(non_finite), True, rules), (metric_hash,)

    _push(state.recent, metric_hash, rules.history)
    alpha, persistence = rules.ema_alpha, rules.persistence
    for name in _RELATIVE_SIGNALS if rules.r2_relative_to_batch else EMA_SIGNALS:
        value = values[name]
        if value is None:
            # not measured this epoch: smoothing restarts when it is measured again
            state.ema.pop(name, None)
            state.ema_window.pop(name, None)
            continue
        if not math.isfinite(value):
            continue  # non-finite: never enters the EMA
        previous = state.ema.get(name)
        smoothed = value if previous is None else previous + alpha * (value - previous)
        state.ema[name] = smoothed
        _push(state.ema_window.setdefault(name, []), smoothed, persistence)

    val_loss, train_acc = values["val_loss"], values["train_acc"]
    if val_loss is not None and math.isfinite(val_loss):
        _push(state.val_losses, val_loss, rules.r1_plateau_window + 1)
        if state.best_val is None or val_loss < state.best_val - _min_improvement(rules, state):
            state.best_val, state.best_hash, state.since_best = val_loss, metric_hash, 0
        else:
            state.since_best += 1
    elif val_loss is not None and state.best_val is not None:
        state.since_best += 1  # a non-finite val loss is no improvement
    if train_acc is not None and math.isfinite(train_acc):
        _push(state.train_accs, train_acc, rules.r4_window + 1)

    outcomes = {
        "R7": _r7(rules, state, exploding),
        "R6": _r6(rules, state),
        "R5": _r5(rules, state),
        "R1": _r1(rules, state),
        "R2": _r2(rules, state),
        "R3": _r3(rules, state, val_loss),
    }
    outcomes["R4"] = _r4(
        rules, state, unhealthy=[r for r in ("R7", "R6", "R5") if outcomes[r].fired]
    )
    causes = list(state.recent)
    if outcomes["R3"].fired and state.best_hash and state.best_hash not in causes:
        causes.insert(0, state.best_hash)
    return _finish(metric, outcomes, tuple(non_finite), False, rules), tuple(causes)


_validate_evaluation = RuleEvaluation.__pydantic_validator__.validate_python


def _finish(
    metric: Metric,
    outcomes: dict[RuleId, _Outcome],
    non_finite: tuple[str, ...],
    no_data: bool,
    rules: RuleSet,
) -> RuleEvaluation:
    fired = tuple(rule for rule in PRECEDENCE if outcomes[rule].fired)
    evaluation: RuleEvaluation = _validate_evaluation(
        {
            "epoch": metric.epoch,
            "rules_version": RULES_VERSION,
            "ruleset": rules.label,
            "no_data": no_data,
            "non_finite": non_finite,
            "fired": fired,
            "top_class": RULE_CLASS[fired[0]] if fired else None,
            "rules": {
                rule: {"fired": o.fired, "reason": o.reason, "signals": o.signals}
                for rule, o in sorted(outcomes.items())
            },
        }
    )
    return evaluation


def _band_rule(
    rules: RuleSet, state: RuleState, name: str, low: float | None, high: float | None
) -> _Outcome:
    signals = _ema_signals(state, name)
    window = state.ema_window.get(name)
    if not window:
        return _Outcome(False, f"{name} not measured yet", signals)
    n = rules.persistence
    recent = window[-n:] if len(window) >= n else None
    if high is not None and recent is not None and all(v > high for v in recent):
        reason = f"{name} EMA above {_g(high)} for {n} epochs (now {_g(window[-1])})"
        return _Outcome(True, reason, signals)
    if low is not None and recent is not None and all(v < low for v in recent):
        reason = f"{name} EMA below {_g(low)} for {n} epochs (now {_g(window[-1])})"
        return _Outcome(True, reason, signals)
    band = f"[{_g(low)}, {_g(high)}]"
    return _Outcome(False, f"{name} EMA {_g(window[-1])} not persistently outside {band}", signals)


def _r1(rules: RuleSet, state: RuleState) -> _Outcome:
    ratio = _band_rule(
        rules, state, "update_to_param_ratio", rules.r1_update_ratio_low, rules.r1_update_ratio_high
    )
    w = rules.r1_plateau_window
    losses = state.val_losses
    signals = ratio.signals  # built for this outcome alone: extended in place
    for back, value in enumerate(reversed(losses)):
        signals[f"val_loss.prev{back}" if back else "val_loss"] = value
    if len(losses) >= w + 1 and all(v >= losses[-(w + 1)] for v in losses[-w:]):
        reason = f"val loss plateau: the last {w} val losses are >= {_g(losses[-(w + 1)])}"
        if ratio.fired:
            reason = f"{ratio.reason}; {reason}"
        return _Outcome(True, reason, signals)
    return _Outcome(ratio.fired, ratio.reason, signals)


def _r2(rules: RuleSet, state: RuleState) -> _Outcome:
    signal = "noise_scale_to_batch" if rules.r2_relative_to_batch else "grad_noise_scale"
    return _band_rule(rules, state, signal, rules.r2_noise_scale_low, rules.r2_noise_scale_high)


def _min_improvement(rules: RuleSet, state: RuleState) -> float:
    """How far below the best val loss a new one must be to count as an improvement."""
    best = state.best_val
    relative = rules.r3_min_relative_delta * abs(best) if best is not None else 0.0
    return max(rules.r3_min_delta, relative)


def _r3(rules: RuleSet, state: RuleState, val_loss: float | None) -> _Outcome:
    signals: dict[str, float | None] = {
        "best_val_loss": state.best_val,
        "epochs_since_best": float(state.since_best),
    }
    if state.best_val is None:
        return _Outcome(False, "val loss not measured yet", signals)
    if state.since_best >= rules.r3_patience:
        reason = (
            f"no val-loss improvement by {_g(_min_improvement(rules, state))} for "
            f"{state.since_best} epochs "
            f"(patience {rules.r3_patience}, best {_g(state.best_val)})"
        )
        return _Outcome(True, reason, signals)
    reason = f"{state.since_best} epochs since the best val loss (patience {rules.r3_patience})"
    if val_loss is None:
        reason += "; val loss not measured this epoch"
    return _Outcome(False, reason, signals)


def _r4(rules: RuleSet, state: RuleState, unhealthy: list[RuleId]) -> _Outcome:
    accs = state.train_accs
    w = rules.r4_window
    signals: dict[str, float | None] = {
        (f"train_acc.prev{back}" if back else "train_acc"): v
        for back, v in enumerate(reversed(accs))
    }
    if len(accs) < w + 1:
        return _Outcome(False, f"train acc measured {len(accs)} of {w + 1} epochs", signals)
    deltas = [abs(b - a) for a, b in zip(accs[-(w + 1) : -1], accs[-w:], strict=True)]
    if max(deltas) >= rules.r4_train_acc_delta:
        return _Outcome(
            False, f"train acc moved {_g(max(deltas))} >= {_g(rules.r4_train_acc_delta)}", signals
        )
    ceiling = rules.r4_train_acc_below
    if ceiling is not None and accs[-1] >= ceiling:
        return _Outcome(
            False,
            f"train acc stalled at {_g(accs[-1])}, at or above {_g(ceiling)}: converged",
            signals,
        )
    if rules.r4_requires_healthy and unhealthy:
        return _Outcome(
            False,
            f"train acc stalled but {', '.join(unhealthy)} fired: not a capacity problem",
            signals,
        )
    return _Outcome(
        True, f"train acc changed < {_g(rules.r4_train_acc_delta)} for {w} epochs", signals
    )


def _r5(rules: RuleSet, state: RuleState) -> _Outcome:
    dead = _band_rule(rules, state, "dead_relu_fraction", None, rules.r5_dead_relu_high)
    saturated = _band_rule(rules, state, "saturated_fraction", None, rules.r5_saturated_high)
    signals = {**dead.signals, **saturated.signals}
    fired = [o.reason for o in (dead, saturated) if o.fired]
    if fired:
        return _Outcome(True, "; ".join(fired), signals)
    return _Outcome(False, f"{dead.reason}; {saturated.reason}", signals)


def _r6(rules: RuleSet, state: RuleState) -> _Outcome:
    return _band_rule(rules, state, "min_layer_grad_norm", rules.r6_min_grad_norm_low, None)


def _r7(rules: RuleSet, state: RuleState, exploding: list[str]) -> _Outcome:
    if exploding:
        return _Outcome(
            True, f"non-finite {', '.join(exploding)}", _ema_signals(state, "max_layer_grad_norm")
        )
    return _band_rule(rules, state, "max_layer_grad_norm", None, rules.r7_max_grad_norm_high)
