"""`rolltape lineage`: the sessions a model learned from and its ancestors, the models that
learned from a subject's sessions, and the evidence of a model's sessions.

The training runs are read from the sessions the read model says hold lineage events (and the
tail it has not indexed), else by a scan of the events topic; both ways give the same runs. A
subject's sessions are the ones its live data keys name (the keys topic): once erased, its
sessions are named by the erasure receipt, which names the models too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from rolltape.infra._errors import InfraError
from rolltape.infra.broker import require_connection
from rolltape.infra.commands.export import (
    ExportOptions,
    Selection,
    collect_judged,
    run_export,
)
from rolltape.infra.index import locate_holding
from rolltape.infra.kafka.keyring import read_keys
from rolltape.infra.kafka.sessions import SessionScan, scan_sessions
from rolltape.infra.settings import Settings
from rolltape.projections import (
    LINEAGE_EVENT_TYPES,
    Lineage,
    Manifest,
    ModelLineage,
    Narrowing,
    fold_lineage,
)
from rolltape.schemas import LIVE_JUDGE_VERSION, Role, Stream, TypedEvent

__all__ = [
    "LineageError",
    "lineage_of",
    "model_evidence",
    "models_of_sessions",
    "read_lineage",
    "subject_sessions",
]


class LineageError(InfraError, LookupError):
    """Nothing to show as asked (no such subject); the message says why."""


def _kept(env: TypedEvent) -> bool:
    if env.type in LINEAGE_EVENT_TYPES or env.type == "session_ended":
        return True
    return env.type == "session_started" and env.payload.get("kind") == "training"


async def read_lineage(settings: Settings, *, say: Callable[[str], None] | None = None) -> Lineage:
    """Every training run the log holds, read as the module docstring says."""
    connection = require_connection(settings, Role.READER)
    located = await locate_holding(settings, connection, LINEAGE_EVENT_TYPES, say=say)
    with await scan_sessions(
        connection,
        [Stream.EVENTS],
        SessionScan(keeps=_kept),
        prefix=settings.topic_prefix,
        located=located,
    ) as scanned:
        pairs = [(s.session_id, e) for s in scanned.sessions() for e in s.events]
    return fold_lineage(pairs)


async def lineage_of(
    settings: Settings, model: str, *, say: Callable[[str], None] | None = None
) -> ModelLineage:
    """The lineage of `model` (its version name or checkpoint sha256); UnknownModelError,
    naming the models the log knows, when no run wrote it."""
    return (await read_lineage(settings, say=say)).of(model)


async def subject_sessions(settings: Settings, subject: str) -> list[str]:
    """The sessions whose live data keys name `subject`, sorted; LineageError when none do."""
    keyring = await read_keys(
        require_connection(settings, Role.READER), settings.topic_prefix, None
    )
    sessions = sorted({r.session_id for r in keyring.records.values() if r.subject == subject})
    if not sessions:
        raise LineageError(
            f"no live data key names subject {subject!r}: it recorded no session, or its "
            "sessions were erased (their receipt names the models: `rolltape log tail --stream "
            "erasures`); ask by session with --session"
        )
    return sessions


async def models_of_sessions(
    settings: Settings, sessions: Iterable[str], *, say: Callable[[str], None] | None = None
) -> list[str]:
    """Every model that learned from one of `sessions`, itself or through an ancestor."""
    return (await read_lineage(settings, say=say)).models_trained_on(sessions)


def model_evidence(
    settings: Settings,
    lineage: ModelLineage,
    out: Path,
    *,
    overwrite: bool = False,
    say: Callable[[str], None] | None = None,
) -> Manifest:
    """An evidence export (`dataset export --evidence`, ShareGPT) of the sessions the model
    learned from and of the run that made it, into `out`: `rolltape dataset verify` checks it
    offline with the judge's public key. The run itself is a training session, so it is in the
    export's `selected.evidence.jsonl`, not in its lines."""
    sessions = (*lineage.sessions, lineage.run.run_id)
    options = ExportOptions(
        format="sharegpt",
        selection=Selection(judge_version=LIVE_JUDGE_VERSION, sessions=sessions),
    )
    narrowing = Narrowing(sessions=sessions)
    with collect_judged(
        settings, LIVE_JUDGE_VERSION, narrowing=narrowing, evidence=True, say=say
    ) as collected:
        return run_export(collected, options, out, overwrite=overwrite, evidence=True)
