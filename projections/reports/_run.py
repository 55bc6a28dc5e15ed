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
    Decision,
    LiveCheck,
    Metric,
    ModelSpec,
    RuleEvaluation,
    SessionEnded,
    SessionStarted,
    Stream,
    Verdict,
    parse_payload,
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


def _ordered(envelopes: Iterable[dict[str, Any]], stream: str) -> list[dict[str, Any]]:
    by_seq: dict[int, dict[str, Any]] = {}
    for env in envelopes:
        if env.get("stream") == stream:
            by_seq.setdefault(env["seq"], env)
    return [by_seq[s] for s in sorted(by_seq)]


def fold_training(envelopes: Iterable[dict[str, Any]]) -> TrainingView | None:
    """One session's envelopes of every stream (events, metrics, live rules and verdicts) into
    its view; None when its session_started is missing."""
    envs = list(envelopes)
    events = _ordered(envs, Stream.EVENTS.value)
    if not events or events[0]["type"] != "session_started":
        return None
    started = parse_payload("session_started", events[0]["payload"], lenient=True)
    assert isinstance(started, SessionStarted)
    decisions: list[DecisionView] = []
    status, outcome = "unfinished", {}
    for env in events[1:]:
        if env["type"] == "decision":
            decision = parse_payload("decision", env["payload"], lenient=True)
            assert isinstance(decision, Decision)
            decisions.append(DecisionView(decision=decision, hash=env["hash"]))
        elif env["type"] == "session_ended":
            ended = parse_payload("session_ended", env["payload"], lenient=True)
            assert isinstance(ended, SessionEnded)
            status, outcome = ended.status, dict(ended.outcome)
    metrics: dict[int, Metric] = {}
    specs: list[ModelSpec] = []
    live: LiveCheck | None = None
    for env in _ordered(envs, Stream.METRICS.value):
        payload = env["payload"]
        if env["type"] == "metric":
            metric = parse_payload("metric", payload, lenient=True)
            assert isinstance(metric, Metric)
            metrics.setdefault(metric.epoch, metric)
        elif env["type"] == "model_spec":
            spec = parse_payload("model_spec", payload, lenient=True)
            assert isinstance(spec, ModelSpec)
            specs.append(spec)
        elif env["type"] == "live_check":
            check = parse_payload("live_check", payload, lenient=True)
            assert isinstance(check, LiveCheck)
            live = check
    evaluations: dict[int, RuleEvaluation] = {}
    for env in _ordered(envs, Stream.RULES.value):
        if env["type"] == "rule_evaluation":
            evaluation = parse_payload("rule_evaluation", env["payload"], lenient=True)
            assert isinstance(evaluation, RuleEvaluation)
            evaluations.setdefault(evaluation.epoch, evaluation)
    verdict: Verdict | None = None
    breaks: list[ChainBroken] = []
    for env in _ordered(envs, Stream.VERDICTS.value):
        if env["type"] == "verdict" and env["payload"].get("judge") == "training_audit":
            parsed = parse_payload("verdict", env["payload"], lenient=True)
            assert isinstance(parsed, Verdict)
            verdict = parsed
        elif env["type"] == "chain_broken":
            broken = parse_payload("chain_broken", env["payload"], lenient=True)
            assert isinstance(broken, ChainBroken)
            breaks.append(broken)
    epochs = tuple(
        EpochView(epoch=e, metric=metrics.get(e), evaluation=evaluations.get(e))
        for e in sorted(set(metrics) | set(evaluations))
    )
    return TrainingView(
        session_id=events[0]["session_id"],
        task=started.task,
        started_ns=events[0]["ts_ns"],
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
