"""Spans and log records as the journal holds them until they are recorded.

JSON (orjson), never pickle: the journal is a file on disk, and what it holds is the agents'
untrusted content. Attribute values may be bytes, which JSON has not, so they are written as
`{"$bytes": <base64>}` (OTLP attribute maps are keyed by strings, so no attribute map can be
mistaken for one: a map whose only key is `$bytes` is read back as bytes, as written).
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from rolltape.producers.otlp._log_records import LogRecord
from rolltape.producers.otlp._wire import Span, SpanEvent

_BYTES = "$bytes"


def _default(value: Any) -> Any:
    if isinstance(value, bytes):
        return {_BYTES: base64.b64encode(value).decode("ascii")}
    raise TypeError(f"cannot store {type(value).__name__}")


def _restored(node: Any) -> Any:
    if isinstance(node, dict):
        if len(node) == 1 and isinstance(encoded := node.get(_BYTES), str):
            return base64.b64decode(encoded)
        return {k: _restored(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_restored(v) for v in node]
    return node


def stored(item: Span | LogRecord) -> bytes:
    """The item as the journal holds it. Its fields are plain values (attribute maps are trees
    of them), so a shallow copy is enough: `dataclasses.asdict` deep-copies every value, which
    was most of the cost of holding a log record."""
    fields = dict(vars(item))
    if isinstance(item, Span):
        fields["kind"] = "span"
        fields["events"] = [vars(event) for event in item.events]
    else:
        fields["kind"] = "log"
    fields["resource"] = dict(item.resource)
    return orjson.dumps(fields, default=_default)


def restored(body: bytes) -> Span | LogRecord:
    """An item from what `stored` wrote."""
    fields = _restored(orjson.loads(body))
    if fields.pop("kind") == "span":
        fields["events"] = tuple(SpanEvent(**e) for e in fields["events"])
        return Span(**fields)
    return LogRecord(**fields)
