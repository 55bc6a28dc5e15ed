"""A training session recorded to spools (no broker): an agent recorder and the monitor's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rolltape.producers import Recorder, Session
from rolltape.producers._spool import Spool
from rolltape.schemas import Stream, TypedEvent, decode, read_event, topic_name


def spooled(folder: Path) -> list[dict[str, Any]]:
    """Every envelope a closed recorder left in its spool folder, in order, decoded (reading
    consumes the spool: read once)."""
    return [decode(value) for value in spooled_records(folder)]


def spooled_records(folder: Path) -> list[bytes]:
    """The chained record values a closed recorder left in its spool folder, in order (read
    once); the blobs of recorded worlds are left out (they are no envelopes)."""
    return [value for topic, _, value in spooled_topic_records(folder) if topic != BLOBS_TOPIC]


def spooled_topic_records(folder: Path) -> list[tuple[str, bytes, bytes]]:
    """Every (topic, key, value) a closed recorder left in its spool folder (read once)."""
    spool = Spool(folder, 1 << 30)
    out: list[tuple[str, bytes, bytes]] = []
    while not spool.empty:
        batch, token = spool.read(1000)
        out += [(topic, key, value) for topic, key, value in batch]
        spool.commit(token)
    spool.close()
    return out


BLOBS_TOPIC = topic_name(Stream.BLOBS)


class Spooled:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.agent = Recorder(None, spool_dir=tmp / "agent", spool_after_s=0.0, principal="agent")
        self.monitor = Recorder(
            None, spool_dir=tmp / "monitor", spool_after_s=0.0, principal="monitor"
        )

    def session(self, **kwargs: Any) -> Session:
        return self.agent.session("train", kind="training", **kwargs)

    def envelopes(self) -> list[dict[str, Any]]:
        """Everything both recorders wrote, agent's first (closes them)."""
        return [decode(value) for value in self.records()]

    def events(self) -> list[TypedEvent]:
        """The same, read through the codec."""
        return [read_event(value) for value in self.records()]

    def records(self) -> list[bytes]:
        self.agent.close(10)
        self.monitor.close(10)
        return spooled_records(self.tmp / "agent") + spooled_records(self.tmp / "monitor")

    def payloads(self, event_type: str) -> list[dict[str, Any]]:
        return [e["payload"] for e in self.envelopes() if e["type"] == event_type]
