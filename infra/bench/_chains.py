"""Agent sessions' records sealed as a recorder's sender seals them, without a broker: what the
benchmarks of readers (export, evidence) read."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rolltape.schemas import CONTENT_FIELDS, PAYLOAD_MODELS, ChainWriter

if TYPE_CHECKING:
    from rolltape.schemas.privacy import ContentKey

PRODUCER = {"name": "bench", "version": "0", "principal": "agent"}


def chained_session(
    session_id: str,
    n: int,
    payloads: Sequence[tuple[str, dict[str, Any]]],
    content_key: ContentKey | None = None,
) -> list[bytes]:
    """The events chain of session number `n`, one record per (type, payload), its content
    sealed under `content_key` when one is given (a session that names a subject)."""
    writer: ChainWriter[str] = ChainWriter()
    records = []
    for seq, (event_type, payload) in enumerate(payloads):
        value, _ = writer.append_payload(
            session_id,
            stream="events",
            session_id=session_id,
            ts_ns=10**18 + n * 100 + seq,
            type=event_type,
            model=PAYLOAD_MODELS[event_type],
            payload=payload,
            producer=PRODUCER,
            content_key=content_key if event_type in CONTENT_FIELDS else None,
        )
        records.append(value)
    return records
