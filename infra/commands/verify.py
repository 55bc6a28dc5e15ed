"""`rolltape log verify` wiring: the chains of the chosen streams read back from Kafka as the
reader principal and checked (`rolltape.schemas.ChainVerifier`), answered as one result that the
CLI prints as a table or as the machine-readable report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from rolltape.infra.broker import require_connection
from rolltape.infra.kafka.readback import verify_topics
from rolltape.infra.settings import Settings
from rolltape.schemas import CHAINED_STREAMS as CHAINED_STREAMS
from rolltape.schemas import ChainBreak, ChainReport, Role
from rolltape.schemas import Stream as Stream


@dataclass(frozen=True)
class LogVerification:
    """Every chain read, with its breaks; the breaks of records that belong to no chain (at most
    a few in detail) and how many of those there were, by kind."""

    reports: list[ChainReport]
    unattributed: list[ChainBreak]
    unattributed_counts: dict[str, int]

    def json(self) -> str:
        """The machine-readable report (`log verify --json`): every chain, the unattributed
        breaks and whether all is intact."""
        broken = [r for r in self.reports if not r.ok]
        out = {
            "chains": [r.model_dump(mode="json") for r in self.reports],
            "unattributed": [b.model_dump(mode="json") for b in self.unattributed],
            "unattributed_counts": self.unattributed_counts,
            "ok": not broken and not self.unattributed_counts,
        }
        return orjson.dumps(out, option=orjson.OPT_INDENT_2).decode()


async def verify_log(
    settings: Settings, streams: Sequence[Stream], *, session_id: str | None = None
) -> LogVerification:
    """Read `streams` (of the settings' topic prefix) up to their current end, every session's
    records or `session_id`'s alone, and check their chains."""
    connection = require_connection(settings, Role.READER)
    verifier = await verify_topics(
        connection, streams, prefix=settings.topic_prefix, session_id=session_id
    )
    return LogVerification(verifier.reports(), verifier.unattributed, verifier.unattributed_counts)
