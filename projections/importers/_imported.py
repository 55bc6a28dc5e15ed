"""A session read from a foreign log, ready to be chained: events per stream, deterministic.

Imports are deterministic (session id from the content, times from the log), so importing the
same file twice writes byte-identical records: readers count the second copy as redeliveries,
never as a fork.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rolltape.schemas import ChainWriter, canonical_bytes


@dataclass
class ImportedSession:
    """A foreign session's events before they are chained. `sealed` chains them deterministically,
    so importing the same log twice is a redelivery, not a fork."""

    session_id: str
    events: list[tuple[str, str, int, dict[str, Any]]] = field(default_factory=list)
    """(stream, type, ts_ns, payload) in chain order per stream."""

    def add(self, stream: str, event_type: str, ts_ns: int, payload: dict[str, Any]) -> None:
        """Add an event; CanonicalEncodingError (a ValueError naming the value's path) when its
        payload has no canonical form (an integer past 64 bits), so the importer reports the
        row it came from instead of failing when the session is sealed."""
        canonical_bytes(payload)
        self.events.append((stream, event_type, ts_ns, payload))

    def sealed(
        self, producer: dict[str, str], principals: Mapping[str, str] | None = None
    ) -> list[tuple[str, bytes]]:
        """(stream, record bytes), each stream its own chain, in the order to send.
        `principals` names the principal of a stream's writer where it differs from
        `producer`'s (events by the agent, metrics by the monitor)."""
        by_stream = {
            stream: {**producer, "principal": principal}
            for stream, principal in (principals or {}).items()
        }
        writer: ChainWriter[str] = ChainWriter()
        out = []
        for stream, event_type, ts_ns, payload in self.events:
            value, _ = writer.append(
                stream,
                stream=stream,
                session_id=self.session_id,
                ts_ns=ts_ns,
                type=event_type,
                payload=payload,
                producer=by_stream.get(stream, producer),
            )
            out.append((stream, value))
        return out
