"""Sealing: a queued event becomes a chained record, or a rejection that says why.

Why a module of its own: this is the sender's per-event work and its one source of rejected
events. It owns the chain heads of every (stream, session) chain this recorder writes and the
data keys of the sessions that name a subject; the thread, the batching and the broker are
elsewhere (_sender.py, _delivery.py), and the takeover of a chain (_takeover.py) seals through it.

Invariant: each queued event either yields one record (its chain's head moved by one seq) or is
rejected (rejected.jsonl, and `stats.rejected_events` until a flush raises them) with the head
where it was: nothing handed to the sender is silently dropped, and a refused event leaves no
gap in its chain. A payload model (`Session.record`) is not validated again: `append_payload`
dumps it as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import ValidationError

from rolltape.producers._errors import RejectedEvent
from rolltape.producers._queued import QueuedEvent, Record, as_reported
from rolltape.producers._sender_config import SenderConfig, SenderStats
from rolltape.schemas import (
    CONTENT_FIELDS,
    PAYLOAD_MODELS,
    CanonicalEncodingError,
    ChainWriter,
    Stream,
    topic_name,
)

_BLOBS = Stream.BLOBS.value
_KEYS = Stream.KEYS.value
_EVENTS = Stream.EVENTS.value


def _withheld(event_type: str, payload: Any, exc: Exception) -> tuple[Any, str]:
    """A refused event of a session whose content is sealed, as the rejected file may keep it:
    its structure without its content fields, and why without the values pydantic quotes."""
    content = CONTENT_FIELDS[event_type]
    if isinstance(payload, Mapping):
        payload = {k: v for k, v in payload.items() if k not in content}
    if isinstance(exc, ValidationError):
        why = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        )
    else:
        why = type(exc).__name__
    return payload, f"{why} (content withheld: the session's content is sealed)"


class Sealer:
    """Seals queued events onto their chains. Used on the sender's loop only."""

    def __init__(self, config: SenderConfig, stats: SenderStats) -> None:
        self.config = config
        self.stats = stats
        self.writer: ChainWriter[tuple[str, str]] = ChainWriter(
            max_record_bytes=config.max_record_bytes
        )
        """(stream, session id) -> the chain's head, for the chains this recorder writes."""
        self.content_keys: dict[str, Any] = {}
        """Session id -> the data key its content is sealed under (sessions naming a subject)."""
        self.topics = {s.value: topic_name(s, config.topic_prefix) for s in Stream}
        self.rejected_path = config.spool_dir / "rejected.jsonl"

    def seal(self, item: QueuedEvent) -> Record | None:
        """The record of a queued event, or None when it is rejected."""
        payload: Any  # a mapping on the blobs and keys streams; a mapping or a model otherwise
        session_id, stream, event_type, payload, ts_ns = item
        if stream == _BLOBS:  # a chunk of a world's file: content-addressed, not chained
            self.stats.sealed += 1
            return self.topics[stream], session_id.encode(), payload["value"]
        if stream == _KEYS:  # a subject session's data key: kept to seal its content, and sent
            # wrapped (the record) to the keys topic, unchained, ahead of that content
            from rolltape.schemas.privacy import ContentKey  # the crypto library, when needed

            key_id = payload["key_id"]
            self.content_keys[session_id] = ContentKey(key_id, payload["secret"])
            self.stats.sealed += 1
            return self.topics[stream], f"{session_id}/{key_id}".encode(), payload["value"]
        key = (stream, session_id)
        content_key = self.content_keys.get(session_id) if self.content_keys else None
        try:
            model = PAYLOAD_MODELS.get(event_type)
            if model is None:
                raise ValueError(f"unknown event type {event_type!r}")
            record, _ = self.writer.append_payload(
                key,
                stream=stream,
                session_id=session_id,
                ts_ns=ts_ns,
                type=event_type,
                model=model,
                payload=payload,
                producer=self.config.producer_info,
                content_key=content_key if event_type in CONTENT_FIELDS else None,
            )
        except (ValidationError, CanonicalEncodingError, ValueError) as exc:
            payload = as_reported(payload)
            if content_key is not None and event_type in CONTENT_FIELDS:
                # rejected.jsonl is on disk and out of erasure's reach: no content in it
                self.reject(session_id, stream, event_type, *_withheld(event_type, payload, exc))
            else:
                self.reject(session_id, stream, event_type, payload, str(exc))
            return None
        if event_type == "session_ended":
            self.writer.forget(key)  # that chain is closed; the session's others may go on
            if stream == _EVENTS:
                self.content_keys.pop(session_id, None)  # its content is all sealed
        self.stats.sealed += 1
        return self.topics[stream], session_id.encode(), record

    def reject(
        self, session_id: str, stream: str, event_type: str, payload: Any, reason: str
    ) -> None:
        event = RejectedEvent.of(session_id, stream, event_type, payload, reason)
        self.stats.rejected += 1
        self.stats.rejected_events.append(event)
        with open(self.rejected_path, "ab") as f:  # nothing handed to us is silently dropped
            f.write(event.model_dump_json().encode() + b"\n")

    def reject_record(self, record: Record, reason: str) -> None:
        """Reject a sealed record the broker refused, as its envelope says it."""
        envelope = orjson.loads(record[2])
        self.reject(
            record[1].decode(),
            envelope.get("stream", record[0]),
            envelope.get("type", "?"),
            envelope,
            reason,
        )
