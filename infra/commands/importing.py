"""`rolltape import` wiring: imported sessions sealed, sent, and (env_rl) judged by rolltape."""

from __future__ import annotations

import contextlib
from typing import Any

from pydantic import BaseModel

from rolltape.infra.broker import current_connection, require_connection
from rolltape.infra.commands.worker import judging_configs
from rolltape.infra.settings import Settings
from rolltape.processors import ProcessorConfig, replay
from rolltape.processors.audit import InputRecord
from rolltape.projections.importers import ImportedSession
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
