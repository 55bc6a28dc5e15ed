"""`rolltape import` wiring: foreign logs read into sessions, sealed, sent, and (env_rl) judged
by rolltape."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rolltape.infra.broker import current_connection, require_connection
from rolltape.infra.commands.worker import judging_configs
from rolltape.infra.settings import Settings
from rolltape.processors import ProcessorConfig, replay
from rolltape.processors.audit import InputRecord
from rolltape.projections.importers import (
    EnvRlRun,
    ImportedSession,
    RowError,
    env_rl_session,
    hermes_sessions,
    read_env_rl,
    rule_disagreements,
    their_rule_evaluations,
)
from rolltape.schemas import Role, Stream, read_event, software_version, topic_name


class ImportIdentity(BaseModel):
    """Who writes an import: the producer named in its envelopes and, per stream, the principal
    of the role that owns the stream's topic (events: agent, metrics: monitor)."""

    producer: dict[str, str]
    principals: dict[str, str]


_WRITERS = {Stream.EVENTS.value: Role.AGENT, Stream.METRICS.value: Role.MONITOR}


def import_identity(settings: Settings, format: str) -> ImportIdentity:
    """The identity an import is sealed under (a dry run, without a broker, too)."""
    fallback = settings.principal if settings.principal != "anonymous" else "importer"
    connections = {stream: current_connection(settings, role) for stream, role in _WRITERS.items()}
    return ImportIdentity(
        producer={
            "name": f"rolltape.importers.{format}",
            "version": software_version(),
            "principal": fallback,
        },
        principals={
            stream: c.principal
            for stream, c in connections.items()
            if c is not None and c.principal is not None
        },
    )


async def send_sessions(
    settings: Settings, identity: ImportIdentity, sessions: list[ImportedSession]
) -> int:
    """Send every session's chains (idempotent, acks=all), each stream on its role's
    connection; returns the records sent."""
    prefix = settings.topic_prefix
    sent = 0
    async with contextlib.AsyncExitStack() as stack:
        senders = {}
        for stream, role in _WRITERS.items():
            connection = require_connection(settings, role)
            doing = f"importing sessions to {topic_name(Stream(stream), prefix)} on {connection}"
            senders[stream] = await stack.enter_async_context(
                connection.started(connection.chain_producer(), doing)
            )
        futures = []
        for session in sessions:
            for stream, value in session.sealed(identity.producer, identity.principals):
                futures.append(
                    await senders[stream].send(
                        topic_name(Stream(stream), prefix), value, key=session.session_id.encode()
                    )
                )
                sent += 1
        for future in futures:
            await future
    return sent


def judge_imported(
    session: ImportedSession, identity: ImportIdentity, settings: Settings
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """rolltape's rule evaluations (by epoch) and training verdict for an imported session, from
    the same sealed records the import sends (the processors' pure step, no broker)."""
    configs = judging_configs(settings)
    config = ProcessorConfig(
        rules=configs.rules,
        filters=configs.filters,
        training_judge=configs.training_judge,
        software_version=software_version(),
    )
    key = session.session_id.encode()
    records = [  # not yet in any log: no positions (nothing is redelivered here)
        InputRecord(stream, key, value)
        for stream, value in session.sealed(identity.producer, identity.principals)
    ]
    result = replay(records, config)
    evaluations = sorted(
        (
            read_event(o.value).mapping["payload"]
            for o in result.chains.get(("rules", session.session_id), [])
        ),
        key=lambda p: p["epoch"],
    )
    verdicts = [
        read_event(o.value).mapping["payload"]
        for o in result.chains.get(("verdicts", session.session_id), [])
    ]
    verdict = next((v for v in verdicts if v.get("judge") == "training_audit"), None)
    return evaluations, verdict


@dataclass(frozen=True)
class HermesRows:
    """A Hermes JSONL file read: the rows that are sessions, and those that are not (by line)."""

    sessions: list[ImportedSession]
    errors: list[RowError]


def read_hermes(path: Path) -> HermesRows:
    """Every row of the Hermes file at `path`, as a session or as the reason it is none."""
    sessions: list[ImportedSession] = []
    errors: list[RowError] = []
    for item in hermes_sessions(path.read_bytes().splitlines()):
        (errors if isinstance(item, RowError) else sessions).append(item)  # type: ignore[arg-type]
    return HermesRows(sessions, errors)


def read_env_rl_logs(folder: Path) -> EnvRlRun:
    """The env_rl judge_logs `folder` verified with env_rl's own hash formula: check `verified`
    (and its `problems`) before importing it."""
    return read_env_rl(folder)


@dataclass(frozen=True)
class EnvRlImport:
    """An env_rl run imported (or, on a dry run, only judged): the session, the records sent,
    how many epochs each judge evaluated rules for, where their rule firings differ (epoch,
    rule, env_rl, rolltape, why) and rolltape's training verdict."""

    session_id: str
    sent: int
    their_epochs: int
    our_epochs: int
    disagreements: list[dict[str, Any]]
    verdict: dict[str, Any] | None


def import_env_rl(settings: Settings, run: EnvRlRun, *, source: str, dry_run: bool) -> EnvRlImport:
    """`run` (verified) as a training session named after `source`: judged by rolltape's rule
    engine and judge, compared with env_rl's rule firings and, unless `dry_run`, sent."""
    session = env_rl_session(run, source=source)
    identity = import_identity(settings, "env_rl")
    ours, verdict = judge_imported(session, identity, settings)
    sent = 0
    if not dry_run:
        sent = asyncio.run(send_sessions(settings, identity, [session]))
    theirs = their_rule_evaluations(run)
    return EnvRlImport(
        session_id=session.session_id,
        sent=sent,
        their_epochs=len(theirs),
        our_epochs=len(ours),
        disagreements=rule_disagreements(theirs, ours),
        verdict=verdict,
    )
