"""What travels from a record call to the broker: the queued event, the barrier, the record.

Why a module of its own: the recorder (which queues), the sender thread (which seals and
sends), the sender processes and the socket between them (_shards.py, _shard_main.py,
_wire.py) all name these shapes, and none of them should import another's machinery for it.

A queued event's payload is what the record call was given: a mapping (copied at its top
level), or a payload model of `rolltape.schemas` (`Session.record`), which was validated when
it was made and is dumped once, when it is sealed. Whatever cannot be sealed is reported with
its payload as a mapping (`as_reported`).
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from pydantic import BaseModel

#: A record call's payload: a mapping, or a payload model (`Session.record`).
Payload = dict[str, Any] | BaseModel

#: (session_id, stream, type, payload, ts_ns); on the blobs stream (record key, "blobs", "blob",
#: {"value": the record's bytes}, ts_ns): a chunk that travels (and spools) like an event,
#: unchained.
QueuedEvent = tuple[str, str, str, Payload, int]

#: (topic, key, value)
Record = tuple[str, bytes, bytes]


class Barrier:
    """Queued like an event; resolves once everything queued before it is acknowledged or spooled."""

    def __init__(self) -> None:
        self.future: concurrent.futures.Future[None] = concurrent.futures.Future()


#: What the sender hands on after sealing: a record, or a barrier to settle behind the records.
Outgoing = Record | Barrier


def as_reported(payload: Any) -> Any:
    """A payload as a rejection reports it: a payload model as its dump (its fields, when even
    that fails), anything else as it is."""
    if isinstance(payload, BaseModel):
        try:
            return payload.model_dump()
        except Exception:  # a value the model's serializer refuses: report the fields as they are
            return dict(payload)
    return payload
