"""The training judge's hard gates on the model: architecture replay and the live check.

Invariant: both compare the logged decisions with what the training monitor recorded from the
live model (model specs and the end-of-run live check, written under the monitor's principal on
the metrics stream). A spec or an accuracy the agent reports is evidence only for runs recorded
without a monitor (imported logs), and the verdict says which source it used.

A failed gate makes the verdict `failed` with both scores 0, as a hard fail does in env_rl's
judge, whose steps 6 (architecture replay) and 7 (live diagnostic) these gates are
(zubairashfaque/environment_rl @633b4e7, `src/env_rl/judge/__init__.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from rolltape.schemas import LiveCheck, RuleId, Violation


class Findings:
    """Violations (they lower the process score) and failed gates (they fail the verdict)."""

    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self.gates: list[Violation] = []

    def add(
        self,
        code: str,
        message: str,
        *,
        epoch: int | None = None,
        rule: RuleId | None = None,
        evidence: tuple[str, ...] = (),
    ) -> None:
        self.violations.append(
            Violation(code=code, message=message, epoch=epoch, rule=rule, evidence=evidence)
        )

    def gate(self, code: str, message: str, evidence: tuple[str, ...] = ()) -> None:
        self.gates.append(Violation(code=code, message=message, evidence=evidence))


@dataclass(frozen=True)
class SpecSeen:
    """The part of a monitor's model spec the replay compares."""

    epoch: int
    phase: str
    activation: str | None
    weight_layers: int
    batchnorm: bool
    hash: str


@dataclass(frozen=True)
class ArchitectureEdit:
    """A logged architecture_change decision."""

    epoch: int
    op: str
    to: str
    hash: str


_Shape = tuple[str | None, int, bool]


def _apply(shape: _Shape, edit: ArchitectureEdit) -> _Shape:
    activation, layers, batchnorm = shape
    if edit.op == "swap_activation":
        return edit.to, layers, batchnorm
    if edit.op == "add_block":
        return activation, layers + 1, batchnorm
    if edit.op == "remove_block":
        return activation, layers - 1, batchnorm
    if edit.op == "add_batchnorm":
        return activation, layers, True
    return shape


def _describe(shape: _Shape) -> str:
    activation, layers, batchnorm = shape
    return f"activation {activation}, {layers} weight layers, batch norm {'on' if batchnorm else 'off'}"


def architecture_replay(
    specs: list[SpecSeen],
    edits: list[ArchitectureEdit],
    run_config: dict[str, Any],
    outcome: dict[str, Any],
    found: Findings,
) -> dict[str, Any]:
    """Replay the logged edits on the first model the monitor saw; every later spec it recorded
    (a restart, a structural change it found, the final model) must equal the replay of the
    edits logged before that spec's epoch. Returns the verdict's details for the gate."""
    if not specs:
        return _agent_reported_replay(run_config, outcome, edits, found)
    ordered = sorted(specs, key=lambda s: (s.epoch, s.phase != "attach", s.phase == "final"))
    first = ordered[0]
    initial: _Shape = (first.activation, first.weight_layers, first.batchnorm)
    checked = 0
    for spec in ordered[1:]:
        expected = initial
        used = []
        for edit in edits:
            if edit.epoch < spec.epoch:
                expected = _apply(expected, edit)
                used.append(edit.hash)
        seen: _Shape = (spec.activation, spec.weight_layers, spec.batchnorm)
        # Batch norm is replayed as present/absent: an edit that adds it may add it per block.
        checked += 1
        if seen != expected:
            found.gate(
                "architecture_replay",
                f"the monitor saw {_describe(seen)} ({spec.phase} at epoch {spec.epoch}), but "
                f"replaying the {len(used)} architecture edit(s) logged before it on the first "
                f"model ({_describe(initial)}) gives {_describe(expected)}",
                (spec.hash, *used),
            )
            return {"result": "mismatch", "source": "monitor", "specs_checked": checked}
    if not any(s.phase == "final" for s in ordered):
        return {"result": "not checked: the monitor recorded no final model", "source": "monitor"}
    return {"result": "match", "source": "monitor", "specs_checked": checked}


def _agent_reported_replay(
    run_config: dict[str, Any],
    outcome: dict[str, Any],
    edits: list[ArchitectureEdit],
    found: Findings,
) -> dict[str, Any]:
    """Runs recorded without a monitor (imported logs): the run config's `architecture` against
    the `final_spec` the session's end reports, as env_rl's judge replays logged edits on the
    initial spec and compares the result with the submitted model (`src/env_rl/judge/replay.py`)."""
    initial, final = run_config.get("architecture"), outcome.get("final_spec")
    if not isinstance(initial, dict) or not isinstance(final, dict):
        return {
            "result": "not checked: no monitor model specs, and the run config has no "
            "`architecture` or the end reports no `final_spec`",
            "source": "none",
        }
    spec = {"activation": initial.get("activation"), "blocks": initial.get("blocks")}
    for edit in edits:
        if edit.op == "swap_activation":
            spec["activation"] = edit.to
        elif edit.op in ("add_block", "remove_block") and isinstance(spec["blocks"], int):
            spec["blocks"] += 1 if edit.op == "add_block" else -1
    reported = {"activation": final.get("activation"), "blocks": final.get("blocks")}
    if spec != reported:
        found.gate(
            "architecture_replay",
            f"replaying {len(edits)} logged edit(s) on {initial} gives {spec}, but the run "
            f"reports {reported}",
            tuple(e.hash for e in edits),
        )
        return {"result": "mismatch", "source": "agent-reported"}
    return {"result": "match", "source": "agent-reported"}


def live_check(
    live: tuple[LiveCheck, str] | None,
    probes: dict[str, list[Any]],
    monitored: bool,
    status: str,
    tolerance: float,
    found: Findings,
) -> dict[str, Any]:
    """The monitor's end-of-run probe gradients must match, within `tolerance` per parameter,
    the probe it logged after the epoch whose weights the model claims to hold (the last epoch,
    or the best-validation one it restored). A model swapped or edited after the last epoch
    fails; so does a completed monitored run without a live check."""
    details: dict[str, Any] = {"tolerance": tolerance}
    if live is None:
        if monitored and status == "completed":
            found.gate("live_check", "the monitor recorded no live check at the end of the run")
            return {**details, "result": "missing"}
        return {**details, "result": f"not checked: no live check (run {status})"}
    check, check_hash = live
    reference = next((p for p in probes.values() if p[0] == check.weights_epoch), None)
    if reference is None:
        found.gate(
            "live_check",
            f"the live check says the model holds the weights of epoch {check.weights_epoch}, "
            "which is neither the last epoch nor the best-validation epoch the monitor logged",
            (check_hash,),
        )
        return {**details, "result": "no_reference", "weights_epoch": check.weights_epoch}
    epoch, logged, logged_hash = reference
    evidence = (check_hash, logged_hash)
    details.update(weights_epoch=epoch)
    missing = sorted(set(logged) ^ set(check.per_layer_grad_norm))
    if missing:
        found.gate(
            "live_check",
            f"the final model's parameters differ from those logged at epoch {epoch}: "
            f"{', '.join(missing[:5])}",
            evidence,
        )
        return {**details, "result": "parameters_differ"}
    deviations = {
        name: _deviation(check.per_layer_grad_norm[name], value) for name, value in logged.items()
    }
    worst = max(deviations.items(), key=lambda kv: kv[1], default=("", 0.0))
    details["max_deviation"] = worst[1] if math.isfinite(worst[1]) else "Infinity"
    if worst[1] > tolerance:
        over = [n for n, d in deviations.items() if d > tolerance]
        found.gate(
            "live_check",
            f"{len(over)} parameter(s) have probe gradient norms more than {tolerance:.0%} off "
            f"what the monitor logged at epoch {epoch} (worst {worst[0]}: "
            f"{check.per_layer_grad_norm[worst[0]]:.4g} now vs {logged[worst[0]]:.4g})",
            evidence,
        )
        return {**details, "result": "out_of_tolerance"}
    return {**details, "result": "within_tolerance"}


def _deviation(now: float, logged: float) -> float:
    if not (math.isfinite(now) and math.isfinite(logged)):
        return 0.0 if now == logged or (now != now and logged != logged) else math.inf
    if logged == 0.0:
        return 0.0 if now == 0.0 else math.inf
    return abs(now / logged - 1.0)


AccuracySource = Literal["monitor live check", "agent-reported outcome", "last monitored epoch"]
