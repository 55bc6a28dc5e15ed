"""The training-run judge: an audit of a finished training session into two scores.

Invariant: the verdict is a pure function of the session's usable events (its run config, the
rule firings recomputed by the canonical engine from its metrics, its decisions, its end) and of
the chain breaks seen on its streams. It never reads the rules topic: firings an agent or a
forged rules record claims are not evidence.

Fixes over env_rl's post-run judge (zubairashfaque/environment_rl @633b4e7, `src/env_rl/judge/`):
- the process score's denominator is the obligations the run created (rule-firing episodes and
  precedence conflicts whose answer window closed), not the number of decisions: padding a log
  with decisions cannot dilute a violation, and a run that was never tested reports
  `process_axis_exercised: false` instead of a free 1.0 that looks earned;
- every decision is checked for defensibility (no sampling);
- a deferral the run had no epoch left to clear, and a firing whose answer window was still open
  when the run ended, are reported, not counted as violations;
- a firing that persists over consecutive epochs is one obligation, answered once;
- waived rules are read from the session's run config (`waived_rules`), never assumed;
- the architecture replay and the live check compare against what the training monitor recorded
  from the live model (its own principal, on the metrics stream), never a spec or an accuracy
  the agent reports (see _gates.py).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

from pydantic import BeforeValidator

from rolltape.processors.judges._gates import (
    AccuracySource,
    ArchitectureEdit,
    Findings,
    SpecSeen,
    architecture_replay,
    live_check,
)
from rolltape.processors.judges._playbook import EDIT_OPS, EVENT_TYPES, REMEDIES
from rolltape.processors.judges._training_config import TrainingJudgeConfig
from rolltape.schemas import (
    PRECEDENCE,
    RULE_CLASS,
    Decision,
    LiveCheck,
    Metric,
    ModelSpec,
    RuleEvaluation,
    RuleId,
    Verdict,
    restore_non_finite,
)

JUDGE_NAME: Final = "training_audit"
JUDGE_VERSION: Final = "rolltape.judges.training/2"
WINDOW: Final = 2
"""A firing at epoch f must be answered by a decision in [f, f + WINDOW]; a citation at d must
refer to a firing in [d - WINDOW, d]."""
MAX_BREAKS_KEPT: Final = 20
MAX_SPECS_KEPT: Final = 64
"""Model specs past this many are counted, not kept (a restart per epoch for a long run)."""
MAX_DECISIONS_KEPT: Final = 2000
"""Decisions past this many are counted, not kept (the state must stay small); a run that logs
more is flooding its log, which is itself a violation."""
_ACTIONS = ("hyperparameter_change", "architecture_change")


_RULE_BITS: Final[dict[RuleId, int]] = {
    "R1": 1, "R2": 2, "R3": 4, "R4": 8, "R5": 16, "R6": 32, "R7": 64,
}  # fmt: skip


def _mask(fired: tuple[RuleId, ...]) -> int:
    return sum(_RULE_BITS[r] for r in fired)


def _unmask(mask: int) -> tuple[RuleId, ...]:
    return tuple(r for r in PRECEDENCE if mask & _RULE_BITS[r])


def _same(a: Any, b: Any) -> bool:
    """Equality that holds for NaN too (a NaN lr logged twice is one run, not two)."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)


# The state's lists hold untyped rows; their float slots come back from the stored form (where
# a NaN lr, say, is the token "NaN": it is evidence) as floats through these.
def _floats_at(*slots: int) -> Callable[[Any], Any]:
    def restore(rows: Any) -> Any:
        return [[restore_non_finite(v) if i in slots else v for i, v in enumerate(r)] for r in rows]

    return restore


def _probe_norms(probes: Any) -> Any:
    return {
        k: [e, {n: restore_non_finite(v) for n, v in norms.items()}, h]
        for k, (e, norms, h) in probes.items()
    }


def _live_check(live: Any) -> Any:
    if live is None:  # the payload's NaN tokens come back as floats through its model
        return None
    return [LiveCheck.model_validate(live[0]).model_dump(mode="python"), live[1]]


@dataclass
class TrainingJudgeState:
    """What the judge keeps of a session until it ends.

    The state is rewritten to a changelog on every update, so it must stay small however long
    the run: epochs are kept as runs of equal firings (`spans`), and the learning rate and batch
    size only where they change. Hashes are kept where they are evidence: where a span begins
    (a firing starts there) and ends, and where a logged value changes.
    """

    run_config: dict[str, Any] | None = None
    spans: list[list[Any]] = field(default_factory=list)
    """[first epoch, last epoch, fired-rules bitmask, no_data, first hash, last hash]."""
    lr_runs: Annotated[list[list[Any]], BeforeValidator(_floats_at(1))] = field(
        default_factory=list
    )
    """[first epoch, lr (None = not logged), metric hash] each time the logged lr changes."""
    batch_runs: list[list[Any]] = field(default_factory=list)
    last_val_acc: float | None = None
    decisions: Annotated[list[list[Any]], BeforeValidator(_floats_at(6))] = field(
        default_factory=list
    )
    """[epoch, event_type, cites, direction, edit_op, edit_to, lr_new, hash] per decision."""
    breaks: list[list[Any]] = field(default_factory=list)
    """[stream, seq, reason, detail] of chain breaks on the session's streams (first few)."""
    break_count: int = 0
    rejected_metrics: int = 0
    decisions_dropped: int = 0
    specs: list[list[Any]] = field(default_factory=list)
    """[epoch, phase, activation, weight_layers, batchnorm_layers, hash] of each model spec the
    monitor recorded (the first MAX_SPECS_KEPT)."""
    specs_dropped: int = 0
    probes: Annotated[dict[str, list[Any]], BeforeValidator(_probe_norms)] = field(
        default_factory=dict
    )
    """"last" and "best" (lowest val loss) -> [epoch, {parameter: probe grad norm}, hash]: the
    epochs whose weights a live check may legitimately find in the final model."""
    best_val_loss: float | None = None
    live: Annotated[list[Any] | None, BeforeValidator(_live_check)] = None
    """[the monitor's live-check payload, its hash]."""

    def add_metric(self, evaluation: RuleEvaluation, metric: Metric, metric_hash: str) -> None:
        """One evaluated epoch: its firings (recomputed by the engine), the logged lr and batch
        size, and the probe gradients a live check may be compared with."""
        self._add_evaluation(evaluation, metric_hash, metric.val_acc, metric.lr, metric.batch_size)
        if metric.steps == 0 or not metric.probe_grad_norm:
            return
        probe = [metric.epoch, dict(metric.probe_grad_norm), metric_hash]
        self.probes["last"] = probe
        loss = metric.val_loss
        finite = loss is not None and math.isfinite(loss)
        if finite and (self.best_val_loss is None or loss < self.best_val_loss):  # type: ignore[operator]
            self.best_val_loss = loss
            self.probes["best"] = probe

    def add_spec(self, spec: ModelSpec, event_hash: str) -> None:
        if len(self.specs) >= MAX_SPECS_KEPT:
            self.specs_dropped += 1
            return
        self.specs.append(
            [
                spec.epoch,
                spec.phase,
                spec.activation,
                spec.weight_layers,
                spec.batchnorm_layers,
                event_hash,
            ]
        )

    def add_live_check(self, check: LiveCheck, event_hash: str) -> None:
        self.live = [check.model_dump(mode="python"), event_hash]

    def _add_evaluation(
        self,
        evaluation: RuleEvaluation,
        metric_hash: str,
        val_acc: float | None,
        lr: float | None,
        batch_size: int | None,
    ) -> None:
        epoch, mask, no_data = evaluation.epoch, _mask(evaluation.fired), evaluation.no_data
        last = self.spans[-1] if self.spans else None
        if last is not None and last[1] == epoch - 1 and last[2] == mask and last[3] == no_data:
            last[1], last[5] = epoch, metric_hash
        else:
            self.spans.append([epoch, epoch, mask, no_data, metric_hash, metric_hash])
        if not self.lr_runs or not _same(self.lr_runs[-1][1], lr):
            self.lr_runs.append([epoch, lr, metric_hash])
        if not self.batch_runs or self.batch_runs[-1][1] != batch_size:
            self.batch_runs.append([epoch, batch_size, metric_hash])
        if val_acc is not None and math.isfinite(val_acc):
            self.last_val_acc = val_acc

    def epochs(self) -> list[_Epoch]:
        """Every evaluated epoch, expanded from the compact form (the judge runs once)."""
        out: list[_Epoch] = []
        lr_at = _value_at(self.lr_runs)
        batch_at = _value_at(self.batch_runs)
        for first, last, mask, no_data, first_hash, last_hash in self.spans:
            fired = _unmask(mask)
            for epoch in range(first, last + 1):
                lr, lr_hash = lr_at(epoch)
                batch, batch_hash = batch_at(epoch)
                out.append(
                    _Epoch(
                        epoch=epoch,
                        fired=fired,
                        hash=last_hash if epoch == last and epoch != first else first_hash,
                        no_data=no_data,
                        lr=lr,
                        lr_hash=lr_hash,
                        batch_size=batch,
                        batch_hash=batch_hash,
                    )
                )
        return out

    def add_decision(self, decision: Decision, event_hash: str) -> None:
        if len(self.decisions) >= MAX_DECISIONS_KEPT:
            self.decisions_dropped += 1
            return
        p = decision.remedy_params
        self.decisions.append(
            [
                decision.epoch,
                decision.event_type,
                list(decision.cites),
                decision.remedy_direction,
                p.edit_op,
                p.edit_to,
                p.lr_new,
                event_hash,
            ]
        )

    def add_break(self, stream: str, seq: int | None, reason: str, detail: str) -> None:
        self.break_count += 1
        if len(self.breaks) < MAX_BREAKS_KEPT:
            self.breaks.append([stream, seq, reason, detail])


def _value_at(runs: list[list[Any]]) -> Any:
    """epoch -> (value, hash of the metric that logged it) from change points in epoch order."""
    firsts = [r[0] for r in runs]

    def at(epoch: int) -> tuple[Any, str | None]:
        i = bisect.bisect_right(firsts, epoch) - 1
        return (runs[i][1], runs[i][2]) if i >= 0 else (None, None)

    return at


@dataclass(frozen=True)
class _Epoch:
    epoch: int
    fired: tuple[RuleId, ...]
    hash: str
    no_data: bool
    lr: float | None
    lr_hash: str | None
    batch_size: int | None
    batch_hash: str | None


@dataclass(frozen=True)
class _Decision:
    epoch: int
    event_type: str
    cites: tuple[RuleId, ...]
    direction: str
    edit_op: str
    edit_to: str
    lr_new: float | None
    hash: str


def judge(
    state: TrainingJudgeState,
    *,
    status: str,
    outcome: dict[str, Any],
    end_hash: str,
    config: TrainingJudgeConfig | None = None,
) -> Verdict:
    """Audit a finished training session; `outcome` is its session_ended outcome (which, for
    runs recorded without a monitor, may report `final_spec` and `val_acc`)."""
    config = config or TrainingJudgeConfig()
    epochs = state.epochs()
    decisions = sorted(
        (_Decision(d[0], d[1], tuple(d[2]), *d[3:]) for d in state.decisions),
        key=lambda d: (d.epoch, d.hash),
    )
    run_config = state.run_config or {}
    found = Findings()
    counts: dict[str, int] = {
        "epochs_evaluated": len(epochs),
        "epochs_without_data": sum(1 for e in epochs if e.no_data),
        "decisions": len(decisions) + state.decisions_dropped,
        "chain_breaks": state.break_count,
        "rejected_metrics": state.rejected_metrics,
        "model_specs": len(state.specs) + state.specs_dropped,
    }
    details: dict[str, Any] = {"status": status, "judge_config": config.label}

    if state.break_count:
        first = "; ".join(f"{b[0]} seq {b[1]}: {b[2]}" for b in state.breaks[:3])
        found.gate("chain_integrity", f"{state.break_count} chain break(s): {first}", (end_hash,))
    specs = [
        SpecSeen(e, phase, act, layers, bn > 0, h) for e, phase, act, layers, bn, h in state.specs
    ]
    edits = [
        ArchitectureEdit(d.epoch, d.edit_op, d.edit_to, d.hash)
        for d in decisions
        if d.event_type == "architecture_change"
    ]
    details["architecture_replay"] = architecture_replay(specs, edits, run_config, outcome, found)
    live = (LiveCheck.model_validate(state.live[0]), state.live[1]) if state.live else None
    details["live_check"] = live_check(
        live, state.probes, bool(specs), status, config.live_check_tolerance, found
    )

    waived = _waived(run_config, details)
    last_epoch = epochs[-1].epoch if epochs else -1
    data_epochs = [e for e in epochs if not e.no_data]
    fired_at = {e.epoch: set(e.fired) for e in data_epochs}
    # Waived rules create no obligation, need not clear after a deferral and take no part in
    # precedence; citing one that fired is still a valid citation.
    owed = [
        dataclasses.replace(e, fired=tuple(r for r in e.fired if r not in waived))
        for e in data_epochs
    ]
    obligations = _firing_obligations(owed, decisions, last_epoch, found, counts)
    obligations += _precedence_obligations(owed, decisions, last_epoch, found, counts)
    _citations(decisions, fired_at, found)
    _deferrals(decisions, owed, found, counts)
    _defensibility(decisions, found)
    _config_drift(run_config, data_epochs, decisions, found)
    if state.decisions_dropped:
        found.add(
            "decision_flood",
            f"{state.decisions_dropped} decisions past the first {MAX_DECISIONS_KEPT} were not "
            "checked: a log that large is padding, not a record of decisions",
        )

    counts["obligations"] = obligations
    counts["violations"] = len(found.violations)
    for v in found.violations:
        counts[f"violations.{v.code}"] = counts.get(f"violations.{v.code}", 0) + 1
    details["process_axis_exercised"] = obligations > 0
    scores: dict[str, float] = {
        "process_score": max(0.0, 1.0 - len(found.violations) / max(obligations, 1)),
    }
    accuracy = _accuracy(run_config, outcome, state.last_val_acc, live, bool(specs), details)
    if accuracy is not None:
        scores["accuracy_score"] = accuracy
    failed = bool(found.gates)
    if failed:
        scores = {name: 0.0 for name in ("accuracy_score", "process_score")}
    return Verdict(
        judge=JUDGE_NAME,
        judge_version=JUDGE_VERSION,
        status="failed" if failed else "ok",
        scores=scores,
        violations=tuple(found.gates + found.violations),
        counts=dict(sorted(counts.items())),
        details=details,
    )


def _waived(run_config: dict[str, Any], details: dict[str, Any]) -> frozenset[RuleId]:
    """The rules the run config declares waived (`waived_rules`: rules its harness cannot act
    on); entries that are not rule ids are reported and ignored."""
    declared = run_config.get("waived_rules") or []
    if not isinstance(declared, list):
        declared = [declared]
    waived: frozenset[RuleId] = frozenset(r for r in declared if r in RULE_CLASS)
    details["waived_rules"] = sorted(waived)
    ignored = [r for r in declared if r not in RULE_CLASS]
    if ignored:
        details["waived_rules_ignored"] = [str(r) for r in ignored]
    return waived


def _episodes(epochs: list[_Epoch]) -> list[tuple[RuleId, _Epoch]]:
    """(rule, first epoch) of each maximal run of consecutive evaluations where the rule fired."""
    starts: list[tuple[RuleId, _Epoch]] = []
    previous: set[RuleId] = set()
    for e in epochs:
        for rule in e.fired:
            if rule not in previous:
                starts.append((rule, e))
        previous = set(e.fired)
    return starts


def _firing_obligations(
    epochs: list[_Epoch],
    decisions: list[_Decision],
    last_epoch: int,
    found: Findings,
    counts: dict[str, int],
) -> int:
    obligations = 0
    counts["window_open"] = 0
    for rule, start in _episodes(epochs):
        answered = any(
            start.epoch <= d.epoch <= start.epoch + WINDOW and rule in d.cites for d in decisions
        )
        if not answered and last_epoch < start.epoch + WINDOW:
            counts["window_open"] += 1  # the run ended before it had to answer
            continue
        obligations += 1
        if not answered:
            found.add(
                "missing_decision",
                f"{rule} fired at epoch {start.epoch} and no decision cited it by epoch "
                f"{start.epoch + WINDOW}",
                epoch=start.epoch,
                rule=rule,
                evidence=(start.hash,),
            )
    return obligations


def _precedence_obligations(
    epochs: list[_Epoch],
    decisions: list[_Decision],
    last_epoch: int,
    found: Findings,
    counts: dict[str, int],
) -> int:
    obligations = 0
    previous_top: str | None = None
    for e in epochs:
        classes = {RULE_CLASS[r] for r in e.fired}
        top = RULE_CLASS[e.fired[0]] if len(classes) >= 2 else None
        if top is None or top == previous_top:
            previous_top = top
            continue
        previous_top = top
        actioned = any(
            e.epoch <= d.epoch <= e.epoch + WINDOW
            and d.event_type in _ACTIONS
            and any(RULE_CLASS[r] == top for r in d.cites)
            for d in decisions
        )
        if not actioned and last_epoch < e.epoch + WINDOW:
            counts["window_open"] += 1
            continue
        obligations += 1
        if not actioned:
            found.add(
                "precedence_violation",
                f"at epoch {e.epoch} {', '.join(e.fired)} fired across classes; the {top} class "
                f"comes first and was not acted on by epoch {e.epoch + WINDOW}",
                epoch=e.epoch,
                rule=e.fired[0],
                evidence=(e.hash,),
            )
    return obligations


def _citations(
    decisions: list[_Decision], fired_at: dict[int, set[RuleId]], found: Findings
) -> None:
    for d in decisions:
        for rule in d.cites:
            if not any(rule in fired_at.get(x, ()) for x in range(d.epoch - WINDOW, d.epoch + 1)):
                found.add(
                    "spurious_citation",
                    f"the decision at epoch {d.epoch} cites {rule}, which did not fire in "
                    f"epochs {max(0, d.epoch - WINDOW)}..{d.epoch}",
                    epoch=d.epoch,
                    rule=rule,
                    evidence=(d.hash,),
                )


def _deferrals(
    decisions: list[_Decision], epochs: list[_Epoch], found: Findings, counts: dict[str, int]
) -> None:
    counts["deferrals_unclearable"] = 0
    for d in decisions:
        if d.event_type != "rule_triggered_no_action":
            continue
        later = [e for e in epochs if e.epoch > d.epoch]
        for rule in d.cites:
            if not later:
                counts["deferrals_unclearable"] += 1  # no epoch left in which it could clear
            elif all(rule in e.fired for e in later):
                found.add(
                    "unresolved_deferral",
                    f"{rule} was deferred at epoch {d.epoch} and fired at every later epoch "
                    f"through {later[-1].epoch}",
                    epoch=d.epoch,
                    rule=rule,
                    evidence=(d.hash, later[-1].hash),
                )


def _defensibility(decisions: list[_Decision], found: Findings) -> None:
    for d in decisions:
        problem = _indefensible(d)
        if problem is not None:
            found.add(
                "indefensible_decision",
                f"the decision at epoch {d.epoch}: {problem}",
                epoch=d.epoch,
                rule=d.cites[0] if d.cites else None,
                evidence=(d.hash,),
            )


def _indefensible(d: _Decision) -> str | None:
    if d.event_type not in EVENT_TYPES.get(d.direction, frozenset()):
        return f"a {d.event_type} cannot carry out {d.direction}"
    if d.direction == "none":
        return None if d.cites else "a deferral that cites no rule"
    if not d.cites:
        return f"{d.direction} cites no rule that calls for it"
    if not any(d.direction in REMEDIES[rule] for rule in d.cites):
        return f"{d.direction} does not address {', '.join(d.cites)}"
    ops = EDIT_OPS.get(d.direction)
    if ops is not None and d.edit_op not in ops:
        return f"{d.direction} logged the edit {d.edit_op!r}"
    if d.direction == "swap_activation" and d.edit_to in ("none", "relu"):
        return f"swap_activation to {d.edit_to!r} does not change a ReLU network"
    if d.direction in ("decrease_lr", "increase_lr") and d.lr_new is None:
        return f"{d.direction} without lr_new"
    return None


def _config_drift(
    run_config: dict[str, Any], epochs: list[_Epoch], decisions: list[_Decision], found: Findings
) -> None:
    lr = run_config.get("lr")
    if isinstance(lr, int | float) and not run_config.get("lr_schedule"):
        changes = sorted(
            (d.epoch, d.lr_new)
            for d in decisions
            if d.lr_new is not None and d.event_type == "hyperparameter_change"
        )
        expected = float(lr)
        for e in epochs:
            while changes and changes[0][0] < e.epoch:
                expected = float(changes.pop(0)[1] or expected)
            if e.lr is not None and not math.isclose(e.lr, expected, rel_tol=1e-6):
                found.add(
                    "config_drift",
                    f"epoch {e.epoch} trained at lr {e.lr!r}; the run config and logged "
                    f"changes say {expected!r}",
                    epoch=e.epoch,
                    evidence=(e.lr_hash or e.hash,),
                )
    batch = run_config.get("batch_size")
    if isinstance(batch, int) and not any("batch_size" in d.direction for d in decisions):
        for e in epochs:
            if e.batch_size is not None and e.batch_size != batch:
                found.add(
                    "config_drift",
                    f"epoch {e.epoch} trained with batch size {e.batch_size}; the run config "
                    f"says {batch} and no decision changed it",
                    epoch=e.epoch,
                    evidence=(e.batch_hash or e.hash,),
                )


def _accuracy(
    run_config: dict[str, Any],
    outcome: dict[str, Any],
    last_measured: float | None,
    live: tuple[LiveCheck, str] | None,
    monitored: bool,
    details: dict[str, Any],
) -> float | None:
    """The monitor's own measurement of the final model when the run had a monitor; the
    accuracy an agent reports counts only for runs recorded without one (imported logs)."""
    reported = outcome.get("val_acc")
    source: AccuracySource
    acc: float | None
    if live is not None and live[0].val_acc is not None and math.isfinite(live[0].val_acc):
        acc, source = live[0].val_acc, "monitor live check"
    elif not monitored and isinstance(reported, int | float) and math.isfinite(reported):
        acc, source = float(reported), "agent-reported outcome"
    else:
        acc, source = last_measured, "last monitored epoch"
    details["final_val_acc"] = acc
    details["accuracy_source"] = source
    target = run_config.get("target_accuracy")
    if not isinstance(target, int | float) or target <= 0:
        details["accuracy_score"] = "not scored: the run config has no positive target_accuracy"
        return None
    if acc is None:
        details["accuracy_score"] = "not scored: no val accuracy was measured or reported"
        return None
    return min(1.0, acc / float(target))
