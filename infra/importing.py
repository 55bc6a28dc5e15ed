"""`rolltape import` wiring: imported sessions sealed, sent, and (env_rl) judged by rolltape."""

from __future__ import annotations

from typing import Any

from rolltape.infra.producing import chain_producer
from rolltape.infra.settings import Settings
from rolltape.infra.worker import judging_configs
from rolltape.processors import ProcessorConfig
from rolltape.processors.audit import InputRecord
from rolltape.processors.worker import software_version
from rolltape.projections import replay
from rolltape.projections.importers import ImportedSession
from rolltape.schemas import Stream, decode, topic_name


def importer_producer(settings: Settings, format: str) -> dict[str, str]:
    principal = settings.principal if settings.principal != "anonymous" else "importer"
    return {
        "name": f"rolltape.importers.{format}",
        "version": software_version(),
        "principal": principal,
    }


async def send_sessions(
    bootstrap: str, prefix: str, sessions: list[ImportedSession], producer: dict[str, str]
) -> int:
    """Send every session's chains (idempotent, acks=all); returns the records sent."""
    sender = chain_producer(bootstrap)
    await sender.start()
    sent = 0
    try:
        futures = []
        for session in sessions:
            for stream, value in session.sealed(producer):
                futures.append(
                    await sender.send(
                        topic_name(Stream(stream), prefix), value, key=session.session_id.encode()
                    )
                )
                sent += 1
        for future in futures:
            await future
    finally:
        await sender.stop()
    return sent


def judge_imported(
    session: ImportedSession, producer: dict[str, str], settings: Settings
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
    offsets: dict[str, int] = {}
    records = []
    for stream, value in session.sealed(producer):
        offset = offsets.get(stream, 0)
        offsets[stream] = offset + 1
        records.append(
            InputRecord(stream, f"import.{stream}", 0, offset, session.session_id.encode(), value)
        )
    result = replay(records, config)
    evaluations = sorted(
        (decode(o.value)["payload"] for o in result.chains.get(("rules", session.session_id), [])),
        key=lambda p: p["epoch"],
    )
    verdicts = [
        decode(o.value)["payload"] for o in result.chains.get(("verdicts", session.session_id), [])
    ]
    verdict = next((v for v in verdicts if v.get("judge") == "training_audit"), None)
    return evaluations, verdict
