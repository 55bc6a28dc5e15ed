"""`rolltape rules calibrate` and `rolltape rules evaluate`: rule sets calibrated on healthy runs
(of the reference task, trained here; or of any task, read from the log), and any rule set's
false alarms and detections measured on seeded runs of the reference task.

The reference task's scenarios are trained under the monitor here, with nothing acting on the
firings (no broker, no worker: the metrics go straight to the pure rule engine, as the worker's
would).
Evaluation uses other seeds than calibration by default, so a rule set is never scored on the
runs it was fitted to.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import orjson

from rolltape.infra._errors import InfraError
from rolltape.infra.kafka.sessions import SessionScan, scan_sessions
from rolltape.infra.settings import Settings
from rolltape.processors.rules import (
    DIGITS_CALIBRATED,
    REFERENCE_MONITOR,
    RuleBook,
    RuleSet,
    RuleSetError,
    calibrate,
    default_rulebook,
    goals,
    load_ruleset,
    measure,
    shipped_rulesets,
)
from rolltape.schemas import (
    REFERENCE_TASK,
    Metric,
    Role,
    RuleId,
    RulesetEvaluation,
    RuleSetFigures,
    Stream,
)
from rolltape.schemas.clients import KafkaConnection

__all__ = [
    "DIGITS_CALIBRATED",
    "EVALUATION_SEED_OFFSET",
    "HEALTHY",
    "REFERENCE_MONITOR",
    "TASK",
    "CalibrationError",
    "RecordedRuns",
    "RecordedRunsError",
    "RuleBook",
    "RuleSet",
    "RuleSetError",
    "RulesetEvaluation",
    "calibrate_recorded",
    "calibrate_rules",
    "evaluate_rules",
    "load_ruleset",
    "record_evaluations",
    "recorded_runs",
    "rulebook",
    "ruleset_evaluations",
    "shipped_rulesets",
    "write_ruleset",
]

TASK = REFERENCE_TASK
"""The task whose scenarios these commands can run: the reference task (the harness's)."""
HEALTHY = ("baseline",)
"""Scenarios that are healthy runs: calibration reads them, evaluation counts their firings as
false alarms."""
EVALUATION_SEED_OFFSET = 1000
"""Evaluation seeds start here by default, away from the calibration seeds (0, 1, ...)."""


def rulebook(settings: Settings) -> RuleBook:
    """The rule set of each task family: `rules_file` for all of them when set, else the default
    book with `rules_by_task` over it."""
    if settings.rules_file and settings.rules_by_task:
        raise RuleSetError(
            "ROLLTAPE_RULES_FILE sets one rule set for every task, ROLLTAPE_RULES_BY_TASK one per "
            "task family: set one of them"
        )
    if settings.rules_file:
        return RuleBook.only(load_ruleset(settings.rules_file))
    book = default_rulebook()
    if not settings.rules_by_task:
        return book
    nested = [family for family in settings.rules_by_task if "/" in family]
    if nested:
        raise RuleSetError(
            f"ROLLTAPE_RULES_BY_TASK names a task family, the part of a task before its first "
            f"'/': {', '.join(nested)} can never match"
        )
    added = {family: load_ruleset(spec) for family, spec in settings.rules_by_task.items()}
    return RuleBook(tasks={**book.tasks, **added}, fallback=book.fallback)


def _runs(
    scenario: str,
    seeds: Sequence[int],
    epochs: int | None,
    progress: Callable[[str], None],
    simple: bool = False,
) -> list[list[Metric]]:
    from rolltape.producers.training import SCENARIOS, MonitorConfig
    from rolltape.producers.training._offline import monitored_run

    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    runs = []
    for seed in seeds:
        progress(f"{scenario} seed {seed}")
        monitor = MonitorConfig(noise_scale_simple=simple)
        runs.append(monitored_run(SCENARIOS[scenario], seed=seed, epochs=epochs, monitor=monitor))
    return runs


class CalibrationError(InfraError):
    """The runs given do not calibrate (what `calibrate` says of them, or of a scenario that is
    not there): `cannot calibrate: <why>`."""


@contextmanager
def _calibrating() -> Iterator[None]:
    try:
        yield
    except ValueError as exc:
        if isinstance(exc, InfraError):  # RecordedRunsError says what to pass itself
            raise
        raise CalibrationError(f"cannot calibrate: {exc}") from exc


def calibrate_rules(
    *,
    name: str,
    scenarios: Sequence[str] = HEALTHY,
    seeds: Sequence[int],
    epochs: int | None = None,
    quantiles: tuple[float, float] = (0.01, 0.99),
    margin: float = 2.0,
    relative_r2: bool = False,
    base: RuleSet | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> RuleSet:
    """A rule set calibrated on seeded healthy runs of the reference task (CalibrationError
    when they do not calibrate)."""
    with _calibrating():
        runs = [
            run
            for scenario in scenarios
            for run in _runs(scenario, seeds, epochs, progress, simple=relative_r2)
        ]
        return calibrate(
            runs,
            base=base or RuleSet(),
            name=name,
            task=TASK,
            scenarios=scenarios,
            seeds=seeds,
            quantiles=quantiles,
            margin=margin,
            relative_r2=relative_r2,
        )


class RecordedRunsError(InfraError, ValueError):
    """The log holds no recorded runs to calibrate on as asked; the message says what to pass."""


class RecordedRuns(NamedTuple):
    """The recorded runs a calibration reads, and the ones of the task it left out (why)."""

    runs: list[tuple[str, list[Metric]]]
    """(session id, its metrics by epoch, one per epoch) of each run read."""
    skipped: dict[str, str]


def _of_task(task: str, wanted: str) -> bool:
    return task == wanted or task.startswith(wanted + "/")


async def _recorded(
    connection: KafkaConnection, prefix: str, task: str, sessions: Sequence[str]
) -> RecordedRuns:
    from rolltape.projections.reports import fold_training

    keep = {Stream.EVENTS.value, Stream.METRICS.value}
    scan = SessionScan(lambda env: env.stream in keep)
    found = RecordedRuns([], {})
    with await scan_sessions(connection, (Stream.EVENTS, Stream.METRICS), scan, prefix=prefix):
        for records in scan.sessions():
            started = next((e for e in records.events if e.type == "session_started"), None)
            if started is None or started.payload.get("kind") != "training":
                continue  # an agent session (a self-refine summary, a policy's conversation)
            view = fold_training([*records.events, *records.derived])
            named = records.session_id in sessions
            if view is None or not (named or (not sessions and _of_task(view.task, task))):
                continue
            metrics = [e.metric for e in view.epochs if e.metric is not None]
            acted = [
                d for d in view.decisions if d.decision.event_type != "rule_triggered_no_action"
            ]
            if not metrics:
                found.skipped[view.session_id] = "no metric events"
            elif acted and not named:  # a run something changed is not a run left alone
                epochs = ", ".join(str(d.decision.epoch) for d in acted)
                found.skipped[view.session_id] = f"decisions applied at epoch(s) {epochs}"
            else:
                found.runs.append((view.session_id, metrics))
    return found


def recorded_runs(settings: Settings, *, task: str, sessions: Sequence[str] = ()) -> RecordedRuns:
    """The healthy runs of `task` recorded on the topics: every training session whose task is
    `task` or `task/...` and on which no decision was applied, or the `sessions` named (taken as
    they are). RecordedRunsError when there is none to read."""
    from rolltape.infra.broker import require_connection

    connection = require_connection(settings, Role.READER)
    found = asyncio.run(_recorded(connection, settings.topic_prefix, task, sessions))
    read = {sid for sid, _ in found.runs}
    missing = sorted(set(sessions) - read - set(found.skipped))
    if missing:
        raise RecordedRunsError(
            f"no recorded training session {', '.join(missing)} on these topics (check --session)"
        )
    if not found.runs:
        why = "; ".join(f"{sid}: {reason}" for sid, reason in sorted(found.skipped.items()))
        raise RecordedRunsError(
            f"no healthy training run of task {task!r} (or {task}/...) on these topics"
            + (f" (left out: {why})" if why else "")
            + "; record runs under the training monitor first, or name them with --session"
        )
    return found


def calibrate_recorded(
    settings: Settings,
    *,
    name: str,
    task: str,
    sessions: Sequence[str] = (),
    quantiles: tuple[float, float] = (0.01, 0.99),
    margin: float = 2.0,
    relative_r2: bool = False,
    base: RuleSet | None = None,
) -> tuple[RuleSet, RecordedRuns]:
    """A rule set calibrated on healthy runs of any task recorded in the log (`recorded_runs`),
    and the runs it read and left out (CalibrationError when they do not calibrate)."""
    with _calibrating():
        found = recorded_runs(settings, task=task, sessions=sessions)
        rules = calibrate(
            [metrics for _, metrics in found.runs],
            base=base or RuleSet(),
            name=name,
            task=task,
            scenarios=(),
            seeds=(),
            sessions=sorted(sid for sid, _ in found.runs),
            quantiles=quantiles,
            margin=margin,
            relative_r2=relative_r2,
        )
    return rules, found


def write_ruleset(rules: RuleSet, path: Path) -> None:
    """The rule set as the JSON `ROLLTAPE_RULES_FILE` and `RuleSet.from_file` read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        orjson.dumps(rules.model_dump(mode="json"), option=orjson.OPT_INDENT_2) + b"\n"
    )


def evaluate_rules(
    rulesets: Sequence[RuleSet],
    *,
    seeds: Sequence[int],
    scenarios: Sequence[str] | None = None,
    healthy: Sequence[str] = HEALTHY,
    epochs: int | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> list[RuleSetFigures]:
    """Each rule set's false alarms on the healthy scenarios and its detections on the others
    (each scenario's intended rules are the ones it is built to provoke), over `seeds`. The
    runs are trained once and every rule set reads the same ones: the figures compare."""
    from rolltape.producers.training import SCENARIOS

    names = list(scenarios) if scenarios is not None else [s for s in SCENARIOS if s not in healthy]
    simple = any(r.r2_relative_to_batch for r in rulesets)  # that signal needs B_simple
    healthy_runs = [run for h in healthy for run in _runs(h, seeds, epochs, progress, simple)]
    faulty: dict[str, tuple[tuple[RuleId, ...], Sequence[Sequence[Metric]]]] = {}
    for scenario in names:
        runs = _runs(scenario, seeds, epochs, progress, simple)
        faulty[scenario] = (SCENARIOS[scenario].provokes, runs)
    return [measure(rules, healthy_runs, faulty) for rules in rulesets]


def ruleset_evaluations(
    rulesets: Sequence[RuleSet],
    figures: Sequence[RuleSetFigures],
    *,
    seeds: Sequence[int],
    healthy: Sequence[str] = HEALTHY,
    epochs: int | None = None,
) -> list[RulesetEvaluation]:
    """Each rule set with its figures and goals, as the `ruleset_evaluation` event records it."""
    return [
        RulesetEvaluation(
            ruleset=rules.model_dump(mode="json"),
            label=rules.label,
            task=TASK,
            healthy=tuple(healthy),
            seeds=tuple(seeds),
            epochs=epochs,
            figures=measured,
            goals=goals(measured),
        )
        for rules, measured in zip(rulesets, figures, strict=True)
    ]


def record_evaluations(
    evaluations: Sequence[RulesetEvaluation], settings: Settings
) -> tuple[str, bool]:
    """Record the evaluations as one session (not trainable) of `ruleset_evaluation` events, one
    per rule set: (its id, whether the broker took them; else they wait in the spool, sent by
    the next recorder on it)."""
    from rolltape.infra import open_recorder

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    session_id = f"rules.evaluate.{TASK}.{stamp}.{uuid.uuid4().hex[:8]}"
    recorder = open_recorder(settings)
    try:
        with recorder.session(
            f"evaluate rule sets on {TASK}",
            session_id=session_id,
            tags=["ruleset_evaluation", f"task={TASK}"],
            trainable=False,
        ) as session:
            for evaluation in evaluations:
                session.record(evaluation)
    finally:
        flushed = recorder.close()
    return session_id, flushed.acked == flushed.sealed
