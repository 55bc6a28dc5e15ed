"""The decision harness: trains the reference task under the monitor, waits for each epoch's
canonical rule evaluation from the log, has a policy act on the highest-precedence fired rule,
applies the remedy, and records every decision; attempts of a self-refine run carry the earlier
attempts' verdicts forward.

Invariant: the harness never computes firings (it reads the worker's `rule_evaluation` of each
epoch from the rules topic) and never records a decision it did not carry out: an edit it cannot
apply is recorded as `rule_triggered_no_action` with the reason.

When it acts: the policy is asked about the top fired rule when that rule's episode starts, when
a conflict across rule classes appears (the judge's precedence obligation), when the rule was
deferred earlier, or when it keeps firing `retry_after` epochs after its last remedy; a
lower-precedence rule whose episode starts meanwhile gets a deferral citing `deferred_to_R<N>`.
Decisions on the last epoch are recorded as no-action: no epoch is left to train with a change.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from rolltape.producers._errors import HarnessError
from rolltape.producers._follow import LogFollower
from rolltape.producers._recorder import Recorder
from rolltape.producers.training._digits import DigitsData
from rolltape.producers.training._monitor import MonitorConfig, TrainingMonitor
from rolltape.producers.training._policies import (
    AttemptStart,
    DecisionContext,
    Policy,
    PolicyDecision,
)
from rolltape.producers.training._remedies import TrainingRun, apply
from rolltape.producers.training._scenarios import Scenario
from rolltape.schemas import (
    REFERENCE_TASK,
    RULE_CLASS,
    Decision,
    RuleEvaluation,
    RuleId,
    Stream,
    Verdict,
    Violation,
)

TASK = REFERENCE_TASK
MODE = "iterative_self_refine"


class HarnessConfig(BaseModel):
    """How the harness runs attempts. Attempt k initialises with `seed` + k - 1 while the data
    always uses `seed`, so attempts differ by initialisation and policy, not data. The timeouts
    bound the waits for the worker's rule evaluation and the judge's verdict in the log."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epochs: int | None = Field(default=None, ge=1)
    """Epochs per attempt (default: the scenario's)."""
    seed: int = 0
    target_accuracy: float = Field(default=0.9, gt=0, le=1)
    waived_rules: tuple[RuleId, ...] = ()
    """Rules declared waived in the run config (the judge reads them from there)."""
    retry_after: int = Field(default=5, ge=1)
    firing_timeout_s: float = Field(default=60.0, gt=0)
    verdict_timeout_s: float = Field(default=120.0, gt=0)
    monitor: MonitorConfig = MonitorConfig()


class AttemptResult(BaseModel):
    """One attempt: its sessions, what the judge said, and what the harness measured."""

    attempt: int
    session_id: str
    policy_session_id: str | None
    verdict: Verdict
    epochs_run: int
    decisions: int
    applied: int
    downgraded: int
    test_accuracy: float

    @property
    def process_score(self) -> float:
        return self.verdict.scores.get("process_score", 0.0)

    @property
    def accuracy_score(self) -> float:
        return self.verdict.scores.get("accuracy_score", 0.0)


class SelfRefineResult(BaseModel):
    """A self-refine run: its attempts in order, and the best by process score, then accuracy
    (the earlier attempt on a tie), as its summary session records it."""

    run_id: str
    scenario: str
    policy: str
    attempts: list[AttemptResult]
    best: int
    """1-based attempt number with the best (process_score, accuracy_score)."""
    summary_session_id: str


@dataclass
class _Episodes:
    """What the harness remembers of the rules it answered during one attempt."""

    previous: set[str] = field(default_factory=set)
    last_action: dict[str, int] = field(default_factory=dict)
    deferred: set[str] = field(default_factory=set)
    conflict_top: str | None = None


def plan(
    evaluation: RuleEvaluation, waived: tuple[str, ...], episodes: _Episodes, retry_after: int
) -> tuple[RuleId | None, list[RuleId]]:
    """(the rule to act on now or None, the rules to defer now); updates `episodes`."""
    epoch = evaluation.epoch
    fired = [r for r in evaluation.fired if r not in waived]
    started = [r for r in fired if r not in episodes.previous]
    classes = {RULE_CLASS[r] for r in fired}
    conflict = RULE_CLASS[fired[0]] if len(classes) >= 2 else None
    new_conflict = conflict is not None and conflict != episodes.conflict_top
    top: RuleId | None = fired[0] if fired else None
    act = top is not None and (
        top in started
        or top in episodes.deferred
        or new_conflict
        or epoch - episodes.last_action.get(top, -(10**9)) >= retry_after
    )
    deferrals = [r for r in fired[1:] if r in started]
    episodes.previous = set(fired)
    episodes.conflict_top = conflict
    episodes.deferred = {r for r in episodes.deferred if r in fired} | set(deferrals)
    if act and top is not None:
        episodes.last_action[top] = epoch
        episodes.deferred.discard(top)
        return top, deferrals
    return None, deferrals


def no_action(cites: tuple[RuleId, ...], epoch: int, justification: str) -> Decision:
    """A `rule_triggered_no_action` decision: a deferral, or what was decided and not done."""
    return Decision.model_validate(
        {
            "epoch": epoch,
            "event_type": "rule_triggered_no_action",
            "cites": list(cites),
            "justification": justification,
            "remedy_direction": "none",
            "remedy_params": {"lr_new": None, "edit_op": "none", "edit_to": "none"},
        }
    )


def deferral(rule: RuleId, to: RuleId, epoch: int, why: str) -> Decision:
    """A no-action decision answering `rule`'s firing while `to` is acted on; the judge then
    expects `rule` to clear later. The `deferred_to_<to>` prefix is for readers: the judge
    treats every no-action decision as a deferral and does not parse it."""
    return no_action((rule,), epoch, f"deferred_to_{to}: {why}")


def downgraded(decision: Decision, reason: str) -> Decision:
    """A decision that could not be carried out, recorded as what happened: no action."""
    return no_action(
        decision.cites, decision.epoch, f"{decision.justification} Not applied: {reason}."
    )


def feedback_text(result: AttemptResult) -> str:
    """An attempt's verdict as the next attempt's policy reads it."""
    v = result.verdict
    lines = [
        f"Attempt {result.attempt} ({v.status}): process_score "
        f"{v.scores.get('process_score', 0.0):.3f}, accuracy_score "
        f"{v.scores.get('accuracy_score', 0.0):.3f}, {result.decisions} decisions over "
        f"{result.epochs_run} epochs."
    ]
    if not v.violations:
        lines.append("No violations.")
    for violation in v.violations[:20]:
        lines.append(f"- {violation_line(violation)}")
    if len(v.violations) > 20:
        lines.append(f"- ... and {len(v.violations) - 20} more")
    return "\n".join(lines)


def violation_line(v: Violation) -> str:
    where = " ".join(
        part
        for part in (
            f"rule {v.rule}" if v.rule else "",
            f"epoch {v.epoch}" if v.epoch is not None else "",
        )
        if part
    )
    return f"{v.code}" + (f" ({where})" if where else "") + f": {v.message}"


class Harness:
    """Runs attempts of a scenario. `agent` records the training sessions' events (decisions),
    `monitor_recorder` the monitor's metrics (its own principal); `follower` reads the rules and
    verdicts topics back."""

    def __init__(
        self,
        *,
        agent: Recorder,
        monitor_recorder: Recorder,
        follower: LogFollower,
        policy: Policy,
        config: HarnessConfig | None = None,
    ) -> None:
        self.agent = agent
        self.monitor_recorder = monitor_recorder
        self.follower = follower
        self.policy = policy
        self.config = config or HarnessConfig()

    def self_refine(self, scenario: Scenario, attempts: int) -> SelfRefineResult:
        """`attempts` attempts, each a training session linked to the previous one; attempt
        k+1's policy sees attempt k's verdict. The best attempt is recorded in a summary
        session (untrainable)."""
        run_id = f"sr-{scenario.name}-{uuid.uuid4().hex[:8]}"
        results: list[AttemptResult] = []
        for k in range(1, attempts + 1):
            previous = results[-1] if results else None
            results.append(
                self.run_attempt(
                    scenario,
                    attempt=k,
                    run_id=run_id,
                    previous=previous,
                    feedback=tuple(feedback_text(r) for r in results),
                )
            )
        best = max(results, key=lambda r: (r.process_score, r.accuracy_score))
        summary = self._record_summary(run_id, scenario, results, best)
        return SelfRefineResult(
            run_id=run_id,
            scenario=scenario.name,
            policy=self.policy.name,
            attempts=results,
            best=best.attempt,
            summary_session_id=summary,
        )

    def run_attempt(
        self,
        scenario: Scenario,
        *,
        attempt: int = 1,
        run_id: str | None = None,
        previous: AttemptResult | None = None,
        feedback: tuple[str, ...] = (),
        labels: Mapping[str, Any] | None = None,
        tags: tuple[str, ...] = (),
    ) -> AttemptResult:
        """One monitored attempt. `labels` join the session's run config and `tags` its tags
        (a prompt loop's round, version and role)."""
        config = self.config
        run_id = run_id or f"sr-{scenario.name}-{uuid.uuid4().hex[:8]}"
        session_id = f"{run_id}-a{attempt}"
        epochs = config.epochs or scenario.epochs
        seed = config.seed + attempt - 1  # attempts differ by initialisation, not only by policy
        data = DigitsData(config.seed, scenario.train_subset)
        run = scenario.start(data, seed=seed)
        run_config: dict[str, Any] = {
            "task": TASK,
            "scenario": scenario.name,
            "mode": MODE,
            "attempt": attempt,
            "self_refine_run": run_id,
            "policy": self.policy.name,
            "architecture": scenario.architecture.model_dump(),
            "optimizer": "sgd",
            "lr": scenario.lr,
            "momentum": scenario.momentum,
            "batch_size": scenario.batch_size,
            "epochs": epochs,
            "seed": seed,
            "dead_units": scenario.dead_units,
            "train_subset": scenario.train_subset,
            "target_accuracy": config.target_accuracy,
            "waived_rules": list(config.waived_rules),
            **(labels or {}),
        }
        self.follower.watch(session_id)
        session = self.agent.session(
            f"{TASK}/{scenario.name}",
            session_id=session_id,
            kind="training",
            model=TASK,
            run_config=run_config,
            tags=[TASK, scenario.name, MODE, *tags],
            linked_session_id=previous.session_id if previous else None,
            group_id=run_id,
        )
        policy_session_id = self.policy.begin(
            AttemptStart(
                session_id=session_id,
                group_id=run_id,
                feedback=feedback,
                waived=config.waived_rules,
            )
        )
        counts = {"decisions": 0, "applied": 0, "downgraded": 0}
        epochs_run = 0
        try:
            with TrainingMonitor(self.monitor_recorder, session, config=config.monitor) as monitor:
                monitor.attach(
                    run.model, run.optimizer, nn.CrossEntropyLoss(), run.loader, data.val_loader()
                )
                episodes = _Episodes()
                for epoch in range(epochs):
                    _train_epoch(run, monitor)
                    metric = monitor.end_epoch()
                    epochs_run += 1
                    evaluation = self._evaluation(session_id, epoch)
                    top, later = plan(evaluation, config.waived_rules, episodes, config.retry_after)
                    decisions: list[Decision] = []
                    if top is not None:
                        decisions.append(
                            self._act(
                                run,
                                monitor,
                                evaluation,
                                metric,
                                top,
                                last=epoch == epochs - 1,
                                counts=counts,
                            )
                        )
                    owed = [r for r in evaluation.fired if r not in config.waived_rules]
                    to = top or (owed[0] if owed else None)
                    for rule in later:
                        assert to is not None
                        decisions.append(
                            deferral(rule, to, epoch, f"{to} has precedence; {rule} waits")
                        )
                    for decision in decisions:
                        session.record(decision)
                        counts["decisions"] += 1
                    if run.stopped:
                        break
            test_accuracy = data.accuracy(run.model, "test")
            session.end(
                "completed",
                outcome={
                    "epochs_run": epochs_run,
                    "test_acc": test_accuracy,
                    "final_architecture": run.spec.model_dump(),
                    "notes": run.notes,
                },
            )
        except BaseException as exc:
            if not session.ended:
                session.end("failed", error=f"{type(exc).__name__}: {exc}")
            self.policy.end(None)
            raise
        self.agent.flush()
        self.monitor_recorder.flush()
        try:
            verdict = self._verdict(session_id)
        except BaseException:
            self.policy.end(None)  # its conversation ends too, unrewarded
            raise
        self.policy.end(verdict.scores.get("process_score"))
        self.agent.flush()
        return AttemptResult(
            attempt=attempt,
            session_id=session_id,
            policy_session_id=policy_session_id,
            verdict=verdict,
            epochs_run=epochs_run,
            decisions=counts["decisions"],
            applied=counts["applied"],
            downgraded=counts["downgraded"],
            test_accuracy=test_accuracy,
        )

    # -- the parts ---------------------------------------------------------------------------------
    def _evaluation(self, session_id: str, epoch: int) -> RuleEvaluation:
        live = Stream.RULES.value

        def match(env: dict[str, Any]) -> bool:
            return bool(
                env["session_id"] == session_id
                and env["stream"] == live
                and env["type"] == "rule_evaluation"
                and env["payload"].get("epoch") == epoch
            )

        env = self.follower.wait(
            match, self.config.firing_timeout_s, f"rule evaluation for epoch {epoch}"
        )
        return RuleEvaluation.model_validate(env["payload"])

    def _verdict(self, session_id: str) -> Verdict:
        env = self.follower.verdict(session_id, "training_audit", self.config.verdict_timeout_s)
        return Verdict.model_validate(env["payload"])

    def _act(
        self,
        run: TrainingRun,
        monitor: TrainingMonitor,
        evaluation: RuleEvaluation,
        metric: Any,
        rule: RuleId,
        *,
        last: bool,
        counts: dict[str, int],
    ) -> Decision:
        context = DecisionContext(
            epoch=evaluation.epoch,
            rule=rule,
            evaluation=evaluation,
            metric=metric,
            lr=run.lr,
            batch_size=run.batch_size,
            clip=run.clip,
            architecture=run.spec,
        )
        try:
            choice: PolicyDecision = self.policy.decide(context)
        except HarnessError as exc:
            counts["downgraded"] += 1
            return no_action((rule,), evaluation.epoch, f"No decision: {exc}")
        decision = choice.at(evaluation.epoch)
        if decision.event_type == "rule_triggered_no_action":
            return decision
        if last:
            counts["downgraded"] += 1
            return downgraded(
                decision,
                "the run ends after this epoch, so no epoch is left to train with the change",
            )
        notes = len(run.notes)
        reason = apply(decision, run, monitor)
        if reason is not None:
            counts["downgraded"] += 1
            return downgraded(decision, reason)
        counts["applied"] += 1
        if len(run.notes) > notes:
            extra = " ".join(run.notes[notes:])
            return decision.model_copy(
                update={"justification": f"{decision.justification} ({extra})"}
            )
        return decision

    def _record_summary(
        self, run_id: str, scenario: Scenario, results: list[AttemptResult], best: AttemptResult
    ) -> str:
        sid = f"{run_id}-summary"
        attempts = [
            {
                "attempt": r.attempt,
                "session_id": r.session_id,
                "policy_session_id": r.policy_session_id,
                "status": r.verdict.status,
                "process_score": r.process_score,
                "accuracy_score": r.accuracy_score,
                "violations": len(r.verdict.violations),
            }
            for r in results
        ]
        with self.agent.session(
            f"{TASK}/{scenario.name}: self-refine summary",
            session_id=sid,
            kind="agent",
            trainable=False,
            linked_session_id=best.session_id,
            group_id=run_id,
            tags=["self_refine_summary", MODE],
            run_config={"mode": MODE, "self_refine_run": run_id, "attempts": attempts},
        ) as s:
            s.feedback(
                source="harness",
                score=best.process_score,
                text=f"best attempt {best.attempt} ({best.session_id}) by (process_score, "
                "accuracy_score)",
            )
            s.end(
                "completed",
                outcome={"best_attempt": best.attempt, "best_session_id": best.session_id},
            )
        self.agent.flush()
        return sid


def _train_epoch(run: TrainingRun, monitor: TrainingMonitor) -> None:
    model, loss_fn = run.model, monitor.loss_fn
    model.train()
    for inputs, targets in run.loader:
        run.optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        loss.backward()  # type: ignore[no-untyped-call]
        if run.clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), run.clip)
        run.optimizer.step()
