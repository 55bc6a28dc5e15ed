"""`rolltape report` wiring: read the topics, pick the sessions, fold them, write one HTML file.

The pure parts (folds and the page) are rolltape.projections; this reads Kafka (hash-checked
records of the live chains) and writes the file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rolltape.infra._errors import InfraError
from rolltape.infra.broker import require_connection
from rolltape.infra.index import locate_sessions
from rolltape.infra.kafka.sessions import LIVE_STREAMS, read_sessions
from rolltape.infra.settings import Settings
from rolltape.projections import FoldError, Narrowing, PromptTarget, Trajectory, fold
from rolltape.projections.reports import (
    RunView,
    TrainingView,
    fold_training,
    group_runs,
    render_prompts,
    render_report,
)
from rolltape.schemas import Role, Stream, TypedEvent

_STREAMS = LIVE_STREAMS


class ReportError(InfraError, ValueError):
    """The report cannot be drawn as asked; the message says what to change."""


@dataclass
class ReportResult:
    """What the page written at `path` shows: the training runs (newest first) and the agent
    sessions (in start order), for the caller's summary line."""

    path: Path
    runs: list[RunView] = field(default_factory=list)
    agents: list[Trajectory] = field(default_factory=list)
    sealed: list[str] = field(default_factory=list)
    """Sessions left out: content sealed under a key this reader could not use."""


async def read_reported_sessions(
    settings: Settings,
    *,
    session: str | None = None,
    task: str | None = None,
    say: Callable[[str], None] | None = None,
) -> dict[str, list[TypedEvent]]:
    """`read_sessions` as `rolltape report` reads them: as the reader principal of the
    settings' cluster, on their topic prefix, opened with this machine's keys. Asked for a
    `session` or a `task`, it reads only the records the read model locates for them; where it
    cannot (no read model, or one behind the log) it reads the whole log and tells `say` why.
    `select` picks the same sessions from either, so the page is the same bytes."""
    connection = require_connection(settings, Role.READER)
    located = None
    if session is not None or task is not None:
        narrowing = Narrowing(
            sessions=() if session is None else (session,),
            tasks=() if task is None else (task,),
        )
        located = await locate_sessions(settings, connection, _STREAMS, narrowing, say=say)
    return await read_sessions(
        connection, settings.topic_prefix, keys_from=settings, located=located
    )


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
) -> tuple[list[RunView], list[Trajectory], list[str]]:
    """The training runs and agent sessions the report shows, and the sessions left out because
    their content is sealed and was not opened (erased, or no key here)."""
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
    sealed: list[str] = []
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
        except FoldError as exc:
            if exc.reason == "key_unavailable":  # sealed, not opened: said, not shown empty
                sealed.append(sid)
    if session is not None and sealed:
        raise ReportError(
            f"session {session} was recorded with a subject and its content cannot be opened "
            "here: it is erased, or this machine has no key-encryption key (ROLLTAPE_KEK_FILE)"
        )
    agents.sort(key=lambda t: (t.started_ns, t.session_id))
    return group_runs(training)[:runs], agents, sealed


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
    chosen_runs, agents, sealed = select(sessions, session=session, task=task, runs=runs)
    title = f"rolltape report: {session or task}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_report(chosen_runs, agents, title=title), encoding="utf-8")
    return ReportResult(out, chosen_runs, agents, sealed)


def write_prompts_report(history: PromptTarget, out: Path) -> Path:
    """Write the page about one prompt target (its lineage, scoreboard and rounds) to `out`,
    creating its folder. The same history gives the same bytes."""
    out.parent.mkdir(parents=True, exist_ok=True)
    title = f"rolltape report: prompt target {history.name}"
    out.write_text(render_prompts(history, title=title), encoding="utf-8")
    return out
