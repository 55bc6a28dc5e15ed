"""OTLP log requests read into plain log records (`ExportLogsServiceRequest`, protobuf or JSON).

OpenTelemetry instrumentations send GenAI message content as log records: the legacy per-message
events (`gen_ai.user.message`, `gen_ai.choice`, ...) and the current
`gen_ai.client.inference.operation.details` event. A record names its event in the `event_name`
field (OTLP 1.5 and later) or, from older SDKs, in the `event.name` attribute; it carries the
trace and span id of the span it was emitted in, which is how it finds its inference span.
Values are decoded as on `Span` (the same readers of `AnyValue`), the body included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rolltape.producers.otlp._wire import (
    _HEX,
    Encoding,
    OtlpRequestError,
    _any_value,
    _get,
    _hex_id,
    _json_attributes,
    _json_value,
    _pb_attributes,
    json_request,
    protobuf_request,
)


@dataclass
class LogRecord:
    """One log record: ids as lowercase hex ("" when the record is outside any span), the
    body and attributes as Python values. A value, not frozen: as `Span`, for the cost."""

    trace_id: str
    span_id: str
    event_name: str
    """`event_name`, else the `event.name` attribute, else ""."""
    time_ns: int
    body: Any
    attributes: dict[str, Any]
    resource: Mapping[str, Any] = field(default_factory=dict)
    scope: str = ""
    """The instrumentation scope's name."""
    position: int = 0
    """Its place in the request (records with the same time keep the order they were sent)."""


@dataclass
class DecodedLogs:
    """A request's log records in the order it lists them; `unusable` counts those whose ids
    are malformed (not hex, wrong length), which are answered as rejected."""

    records: list[LogRecord]
    unusable: list[str]


def _ids(trace_id: str, span_id: str) -> tuple[str, str] | str:
    """The ids as a log record may carry them: both, or neither (a record outside a span)."""
    if not _HEX.issuperset(trace_id + span_id):
        return f"ids must be hex: trace {trace_id!r}, span {span_id!r}"
    if trace_id.strip("0") == "":
        trace_id = ""
    if span_id.strip("0") == "":
        span_id = ""
    if trace_id and len(trace_id) != 32:
        return f"trace id {trace_id!r} is not 16 bytes"
    if span_id and len(span_id) != 16:
        return f"span id {span_id!r} is not 8 bytes"
    return trace_id, span_id


def _event_name(field_value: str, attributes: Mapping[str, Any]) -> str:
    if field_value:
        return field_value
    named = attributes.get("event.name")
    return named if isinstance(named, str) else ""


def decode_logs(body: bytes, encoding: Encoding) -> DecodedLogs:
    """Every log record of an ExportLogsServiceRequest; those with malformed ids are counted
    in `unusable`, with why."""
    if encoding == "protobuf":
        return _from_protobuf(body)
    return _from_json(body)


def _from_protobuf(body: bytes) -> DecodedLogs:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    request = protobuf_request(ExportLogsServiceRequest, body)
    records: list[LogRecord] = []
    unusable: list[str] = []
    for resource_logs in request.resource_logs:
        resource = _pb_attributes(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            scope = scope_logs.scope.name
            for r in scope_logs.log_records:
                ids = _ids(r.trace_id.hex(), r.span_id.hex())
                if isinstance(ids, str):
                    unusable.append(ids)
                    continue
                attributes = _pb_attributes(r.attributes)
                records.append(
                    LogRecord(
                        trace_id=ids[0],
                        span_id=ids[1],
                        event_name=_event_name(r.event_name, attributes),
                        time_ns=r.time_unix_nano or r.observed_time_unix_nano,
                        body=_any_value(r.body) if r.HasField("body") else None,
                        attributes=attributes,
                        resource=resource,
                        scope=scope,
                        position=len(records),
                    )
                )
    return DecodedLogs(records, unusable)


def _from_json(body: bytes) -> DecodedLogs:
    request = json_request(body, "ExportLogsServiceRequest")
    records: list[LogRecord] = []
    unusable: list[str] = []
    where = "resourceLogs"
    try:
        for i, resource_logs in enumerate(_get(request, "resourceLogs", "resource_logs") or []):
            where = f"resourceLogs[{i}]"
            resource = _json_attributes(
                (resource_logs.get("resource") or {}).get("attributes") or []
            )
            for j, scope_logs in enumerate(_get(resource_logs, "scopeLogs", "scope_logs") or []):
                scope = str((scope_logs.get("scope") or {}).get("name") or "")
                for k, raw in enumerate(_get(scope_logs, "logRecords", "log_records") or []):
                    where = f"resourceLogs[{i}].scopeLogs[{j}].logRecords[{k}]"
                    ids = _ids(
                        _hex_id(_get(raw, "traceId", "trace_id")),
                        _hex_id(_get(raw, "spanId", "span_id")),
                    )
                    if isinstance(ids, str):
                        unusable.append(ids)
                        continue
                    attributes = _json_attributes(raw.get("attributes") or [])
                    time_ns = _get(raw, "timeUnixNano", "time_unix_nano") or _get(
                        raw, "observedTimeUnixNano", "observed_time_unix_nano"
                    )
                    records.append(
                        LogRecord(
                            trace_id=ids[0],
                            span_id=ids[1],
                            event_name=_event_name(
                                str(_get(raw, "eventName", "event_name") or ""), attributes
                            ),
                            time_ns=int(time_ns or 0),
                            body=_json_value(raw.get("body")),
                            attributes=attributes,
                            resource=resource,
                            scope=scope,
                            position=len(records),
                        )
                    )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise OtlpRequestError(
            f"the body is not an ExportLogsServiceRequest: at {where}: {type(exc).__name__}: {exc}"
        ) from exc
    return DecodedLogs(records, unusable)
