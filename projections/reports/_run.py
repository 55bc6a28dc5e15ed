"""A training session folded for reading: its epochs (the monitor's metrics with the canonical
rule evaluation of each), decisions, model specs, live check and verdict.

Pure: any read order and any redelivered copies give the same view (each chain is taken in seq
order, first copy of each seq), so the report of a session is the same whenever it is drawn.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from rolltape.schemas import (
    ChainBroken,
    ChainBrokenEvent,
    Decision,
    DecisionEvent,
    LiveCheck,
    LiveCheckEvent,
    Metric,
    MetricEvent,
    ModelSpec,
    ModelSpecEvent,
    RuleEvaluation,
    RuleEvaluationEvent,
    SessionEndedEvent,
    SessionStartedEvent,
    Stream,
    TypedEvent,
    Verdict,
    VerdictEvent,
)


class EpochView(BaseModel):
    """One epoch of a training session: the monitor's metric and the canonical rule evaluation.
    Either one is None when its chain has no record for that epoch."""

    model_config = ConfigDict(frozen=True)

    epoch: int
    metric: Metric | None = None
    evaluation: RuleEvaluation | None = None


class DecisionView(BaseModel):
    """A decision and the hash of the event it was logged as, so a report can cite that exact
    record."""

    model_config = ConfigDict(frozen=True)

    decision: Decision
    hash: str


class TrainingView(BaseModel):
    """One training session as the report draws it."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    task: str
    started_ns: int
    run_config: dict[str, Any]
    group_id: str | None
    status: str
    """completed / interrupted / failed, or unfinished."""
    outcome: dict[str, Any]
    epochs: tuple[EpochView, ...]
    decisions: tuple[DecisionView, ...]
    specs: tuple[ModelSpec, ...]
    live_check: LiveCheck | None
    verdict: Verdict | None
    chain_breaks: tuple[ChainBroken, ...]

    @property
    def attempt(self) -> int | None:
        value = self.run_config.get("attempt")
        return value if isinstance(value, int) else None

    @property
    def waived(self) -> tuple[str, ...]:
        value = self.run_config.get("waived_rules") or []
        return tuple(str(r) for r in value) if isinstance(value, list) else ()


class RunView(BaseModel):
    """The attempts of one self-refine run (a group), or a single training session."""

    model_config = ConfigDict(frozen=True)

    group_id: str | None
    attempts: tuple[TrainingView, ...]

    @property
    def best(self) -> TrainingView | None:
        judged = [a for a in self.attempts if a.verdict is not None]
        if not judged:
            return None
        return max(
            judged,
            key=lambda a: (
                a.verdict.scores.get("process_score", 0.0) if a.verdict else 0.0,
                a.verdict.scores.get("accuracy_score", 0.0) if a.verdict else 0.0,
            ),
        )


def _ordered(events: Iterable[TypedEvent], stream: str) -> list[TypedEvent]:
    by_seq: dict[int, TypedEvent] = {}
    for event in events:
        if event.stream == stream:
            by_seq.setdefault(event.seq, event)
    return [by_seq[s] for s in sorted(by_seq)]


def fold_training(events: Iterable[TypedEvent]) -> TrainingView | None:
    """One session's events of every stream (events, metrics, live rules and verdicts) into
    its view; None when its session_started is missing."""
    given = list(events)
    chain = _ordered(given, Stream.EVENTS.value)
    if not chain or not isinstance(chain[0], SessionStartedEvent):
        return None
    first = chain[0]
    started = first.body
    decisions: list[DecisionView] = []
    status, outcome = "unfinished", {}
    for event in chain[1:]:
        if isinstance(event, DecisionEvent):
            decisions.append(DecisionView(decision=event.body, hash=event.hash))
        elif isinstance(event, SessionEndedEvent):
            status, outcome = event.body.status, dict(event.body.outcome)
    metrics: dict[int, Metric] = {}
    specs: list[ModelSpec] = []
    live: LiveCheck | None = None
    for event in _ordered(given, Stream.METRICS.value):
        if isinstance(event, MetricEvent):
            metrics.setdefault(event.body.epoch, event.body)
        elif isinstance(event, ModelSpecEvent):
            specs.append(event.body)
        elif isinstance(event, LiveCheckEvent):
            live = event.body
    evaluations: dict[int, RuleEvaluation] = {}
    for event in _ordered(given, Stream.RULES.value):
        if isinstance(event, RuleEvaluationEvent):
            evaluations.setdefault(event.body.epoch, event.body)
    verdict: Verdict | None = None
    breaks: list[ChainBroken] = []
    for event in _ordered(given, Stream.VERDICTS.value):
        if isinstance(event, VerdictEvent) and event.payload.get("judge") == "training_audit":
            verdict = event.body
        elif isinstance(event, ChainBrokenEvent):
            breaks.append(event.body)
    epochs = tuple(
        EpochView(epoch=e, metric=metrics.get(e), evaluation=evaluations.get(e))
        for e in sorted(set(metrics) | set(evaluations))
    )
    return TrainingView(
        session_id=first.session_id,
        task=started.task,
        started_ns=first.ts_ns,
        run_config=dict(started.run_config),
        group_id=started.group_id,
        status=status,
        outcome=outcome,
        epochs=epochs,
        decisions=tuple(sorted(decisions, key=lambda d: d.decision.epoch)),
        specs=tuple(specs),
        live_check=live,
        verdict=verdict,
        chain_breaks=tuple(breaks),
    )


def group_runs(views: Iterable[TrainingView]) -> list[RunView]:
    """Sessions of one group (the attempts of a self-refine run) together, by attempt; runs
    newest first."""
    groups: dict[str, list[TrainingView]] = {}
    for view in views:
        groups.setdefault(view.group_id or view.session_id, []).append(view)
    runs = [
        RunView(
            group_id=key,
            attempts=tuple(sorted(members, key=lambda v: (v.attempt or 0, v.started_ns))),
        )
        for key, members in groups.items()
    ]
    return sorted(runs, key=lambda r: -max(a.started_ns for a in r.attempts))
