"""`rolltape report` wiring: read the topics, pick the sessions, fold them, write one HTML file.

The pure parts (folds and the page) are rolltape.projections; this reads Kafka (hash-checked
records of the live chains) and writes the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rolltape.infra._errors import InfraError
from rolltape.infra.kafka.sessions import SessionScan, scan_sessions
from rolltape.processors.audit import CHECKPOINT_LOG_PREFIX
from rolltape.projections import FoldError, PromptTarget, Trajectory, fold
from rolltape.projections.reports import (
    RunView,
    TrainingView,
    fold_training,
    group_runs,
    render_prompts,
    render_report,
)
from rolltape.schemas import Stream, TypedEvent
from rolltape.schemas.clients import KafkaConnection

_STREAMS = (Stream.EVENTS, Stream.METRICS, Stream.RULES, Stream.VERDICTS, Stream.FILTERED)
_LIVE = {s.value for s in _STREAMS}


class ReportError(InfraError, ValueError):
    """The report cannot be drawn as asked; the message says what to change."""


@dataclass
class ReportResult:
    """What the page written at `path` shows: the training runs (newest first) and the agent
    sessions (in start order), for the caller's summary line."""

    path: Path
    runs: list[RunView] = field(default_factory=list)
    agents: list[Trajectory] = field(default_factory=list)


def _reported(env: TypedEvent) -> bool:
    """A record of a live chain of a session (a checkpoint log is not a session)."""
    return env.stream in _LIVE and not env.session_id.startswith(CHECKPOINT_LOG_PREFIX)


async def read_sessions(connection: KafkaConnection, prefix: str) -> dict[str, list[TypedEvent]]:
    """Every session's usable events on the live chains (tampered records left out), each
    chain's events in the order they were read."""
    with await scan_sessions(connection, _STREAMS, SessionScan(_reported), prefix=prefix) as scan:
        return {s.session_id: [*s.events, *s.derived] for s in scan.sessions()}


def _started(events: list[TypedEvent]) -> Mapping[str, Any] | None:
    for event in events:
        if event.stream == Stream.EVENTS.value and event.seq == 0:
            return event.payload
    return None


def select(
    sessions: dict[str, list[TypedEvent]],
    *,
    session: str | None,
    task: str | None,
    runs: int,
) -> tuple[list[RunView], list[Trajectory]]:
    """The training runs and agent sessions the report shows."""
    if session is not None:
        chosen = [session] if session in sessions else []
        if not chosen:
            raise ReportError(f"no session {session!r} on these topics (check --session)")
    else:
        chosen = sorted(
            sid for sid, envs in sessions.items() if (_started(envs) or {}).get("task") == task
        )
        if not chosen:
            raise ReportError(f"no session has the task {task!r} (the task text it started with)")
    training: list[TrainingView] = []
    agents: list[Trajectory] = []
    for sid in chosen:
        envs = sessions[sid]
        started = _started(envs) or {}
        if started.get("kind") == "training":
            view = fold_training(envs)
            if view is not None:
                training.append(view)
            continue
        events = [e for e in envs if e.stream == Stream.EVENTS.value]
        derived = [e for e in envs if e.stream != Stream.EVENTS.value]
        try:
            agents.append(fold(events, derived))
        except FoldError:
            continue
    agents.sort(key=lambda t: (t.started_ns, t.session_id))
    return group_runs(training)[:runs], agents


def write_report(
    sessions: dict[str, list[TypedEvent]],
    out: Path,
    *,
    session: str | None = None,
    task: str | None = None,
    runs: int = 5,
) -> ReportResult:
    """Write the page about one session, or every session started with `task` (then the newest
    `runs` training runs), to `out`, creating its folder. The same sessions give the same bytes.
    Raises `ReportError` unless exactly one of `session` and `task` is given, or if none match."""
    if (session is None) == (task is None):
        raise ReportError("choose what to report on: --session ID or --task NAME")
    chosen_runs, agents = select(sessions, session=session, task=task, runs=runs)
    title = f"rolltape report: {session or task}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_report(chosen_runs, agents, title=title), encoding="utf-8")
    return ReportResult(out, chosen_runs, agents)


def write_prompts_report(history: PromptTarget, out: Path) -> Path:
    """Write the page about one prompt target (its lineage, scoreboard and rounds) to `out`,
    creating its folder. The same history gives the same bytes."""
    out.parent.mkdir(parents=True, exist_ok=True)
    title = f"rolltape report: prompt target {history.name}"
    out.write_text(render_prompts(history, title=title), encoding="utf-8")
    return out
