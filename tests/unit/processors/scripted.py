"""Scripted sessions sealed into Kafka-like input records, as a recorder would write them."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rolltape.processors import (
    DeadLetter,
    Emitted,
    Output,
    ProcessorConfig,
    SessionProcessor,
    SessionState,
    handle,
)
from rolltape.processors.audit import InputRecord, Position
from rolltape.schemas import GENESIS_HASH, HUMAN_CHAIN, PAYLOAD_MODELS, decode, seal

PRODUCER = {"name": "test", "version": "0", "principal": "agent"}
DECISION_DEFAULTS: dict[str, Any] = {
    "justification": "scripted",
    "remedy_params": {"lr_new": None, "edit_op": "none", "edit_to": "none"},
}


class Tape:
    """Seals events per (stream, session) chain and hands out topic offsets."""

    def __init__(self) -> None:
        self.heads: dict[tuple[str, str], tuple[int, str]] = {}
        self.offsets: dict[str, int] = defaultdict(int)
        self.clock = 10**18

    def raw(self, stream: str, value: bytes, key: bytes | None) -> InputRecord:
        topic = f"t.{stream}.v1"
        offset = self.offsets[topic]
        self.offsets[topic] += 1
        return InputRecord(stream, key, value, Position(topic, 0, offset))

    def record(self, sid: str, stream: str, event_type: str, /, **payload: Any) -> InputRecord:
        clean = PAYLOAD_MODELS[event_type].model_validate(payload).model_dump(mode="python")
        return self.sealed(sid, stream, event_type, clean)

    def sealed(
        self,
        sid: str,
        stream: str,
        event_type: str,
        payload: dict[str, Any],
        principal: str = "agent",
    ) -> InputRecord:
        """The payload sealed as given (a newer producer's fields and all)."""
        seq, prev = self.heads.get((stream, sid), (0, GENESIS_HASH))
        self.clock += 1000
        value, digest = seal(
            stream=stream,
            session_id=sid,
            seq=seq,
            ts_ns=self.clock,
            type=event_type,
            payload=payload,
            prev_hash=prev,
            producer={**PRODUCER, "principal": principal},
        )
        self.heads[(stream, sid)] = (seq + 1, digest)
        return self.raw(stream, value, sid.encode())

    # conveniences ---------------------------------------------------------------------------
    def start(self, sid: str, **payload: Any) -> InputRecord:
        return self.record(sid, "events", "session_started", **{"task": "t", **payload})

    def event(self, sid: str, event_type: str, /, **payload: Any) -> InputRecord:
        return self.record(sid, "events", event_type, **payload)

    def review(
        self, sid: str, verdict: str, reviewer: str = "ann", *, written_as: str | None = None
    ) -> InputRecord:
        """A reviewer's human verdict on the reviewers' chain, written as `reviewer` (or as
        `written_as`: someone else's principal)."""
        payload = PAYLOAD_MODELS["human_verdict"].model_validate(
            {"reviewer": reviewer, "verdict": verdict}
        )
        return self.sealed(
            sid,
            HUMAN_CHAIN,
            "human_verdict",
            payload.model_dump(mode="python"),
            principal=written_as or reviewer,
        )

    def metric(self, sid: str, epoch: int, **fields: Any) -> InputRecord:
        return self.record(sid, "metrics", "metric", epoch=epoch, **fields)

    def decision(self, sid: str, epoch: int, **fields: Any) -> InputRecord:
        return self.event(sid, "decision", epoch=epoch, **{**DECISION_DEFAULTS, **fields})

    def end(
        self, sid: str, status: str = "completed", streams: tuple[str, ...] = (), **outcome: Any
    ) -> list[InputRecord]:
        records = [
            self.record(sid, s, "session_ended", status=status, outcome=outcome) for s in streams
        ]
        records.append(
            self.record(
                sid, "events", "session_ended", status=status, outcome=outcome, streams=streams
            )
        )
        return records


def in_log_order(records: list[InputRecord]) -> list[InputRecord]:
    """The records as a topic would hold them in this order: offsets renumbered per topic."""
    offsets: dict[str, int] = defaultdict(int)
    out = []
    for r in records:
        assert r.position is not None
        topic = r.position.topic
        at = Position(topic, r.position.partition, offsets[topic])
        out.append(InputRecord(r.stream, r.key, r.value, at))
        offsets[topic] += 1
    return out


def run(
    records: list[InputRecord], config: ProcessorConfig | None = None
) -> tuple[list[Output], dict[str, SessionState]]:
    processor = SessionProcessor(config or ProcessorConfig())
    states: dict[str, SessionState] = {}
    outputs: list[Output] = []
    for record in records:
        outputs.extend(handle(processor, states, record)[1])
    return outputs, states


def emitted(outputs: list[Output], event_type: str) -> list[dict[str, Any]]:
    """Payloads of the emitted events of one type, in order."""
    return [
        decode(o.value)["payload"]
        for o in outputs
        if isinstance(o, Emitted) and o.type == event_type
    ]


def dead_letters(outputs: list[Output]) -> list[str]:
    return [o.reason for o in outputs if isinstance(o, DeadLetter)]


def spec(
    epoch: int, phase: str, activation: str = "relu", layers: int = 3, bn: int = 0
) -> dict[str, Any]:
    """A `model_spec` payload: the monitor's summary of the network at `epoch`."""
    return {
        "epoch": epoch,
        "phase": phase,
        "layers": [],
        "activations": {activation: 3},
        "activation": activation,
        "weight_layers": layers,
        "batchnorm_layers": bn,
        "parameter_count": 100,
    }
