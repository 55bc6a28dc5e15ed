"""OTLP/HTTP trace requests read into plain spans, and the receiver's answers written back.

Both encodings of `ExportTraceServiceRequest` give the same `Span`s: protobuf through the
`opentelemetry-proto` classes, JSON by hand because OTLP/JSON is not protobuf's JSON mapping
(trace and span ids are hex, not base64; 64-bit integers may be strings or numbers; receivers
ignore unknown fields and also accept the proto field names). Answers use the request's
encoding: `ExportTraceServiceResponse` (with `partial_success` when spans were rejected or
something deserves a warning) on success, `google.rpc.Status` on a failure.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from rolltape.producers._errors import ProducerError

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
Encoding = Literal["protobuf", "json"]

STATUS_ERROR = 2
"""`Status.code` of a span that failed (STATUS_CODE_ERROR)."""
_PARENT_IS_REMOTE = 0x300
"""SpanFlags: the remote bit is known (0x100) and set (0x200)."""
_HEX = frozenset("0123456789abcdef")


class OtlpRequestError(ProducerError, ValueError):
    """The request cannot be read; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class SpanEvent:
    """An event inside a span, attributes decoded as on `Span`. GenAI content can come this
    way: the inference details event and evaluation results."""

    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass
class Span:
    """One span, ids as lowercase hex, attribute values as Python values (arrays as lists,
    key-value lists as dicts, bytes as bytes).

    Treated as a value (a changed span is a new one, `amended`), yet not a frozen dataclass: a
    frozen one sets each field through `object.__setattr__`, four times the cost of building
    it, and the receiver builds every span two or three times (decoded, renamed, joined)."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: tuple[SpanEvent, ...] = ()
    status_code: int = 0
    status_message: str = ""
    resource: Mapping[str, Any] = field(default_factory=dict)
    parent_is_remote: bool = False
    """From the span's flags: its parent lives in another process."""
    scope: str = ""
    """The instrumentation scope's name (`opentelemetry.instrumentation.openai_v2`,
    `openinference.instrumentation.openai`): which instrumentation wrote the span, so a hint
    can name that instrumentation's content setting."""


def amended(span: Span, **changes: Any) -> Span:
    """A copy of `span` with `changes` (`dataclasses.replace` without its per-call reflection
    over the fields, which cost more than building the span)."""
    fields = dict(vars(span))
    fields.update(changes)
    return Span(**fields)


@dataclass(frozen=True)
class Rejected:
    """A span the receiver refused, and why (reported in `partial_success`)."""

    span_id: str
    reason: str


@dataclass
class Decoded:
    """A request's spans in the order it lists them, and those refused for unusable ids: these
    are answered in `partial_success` instead of failing the whole request."""

    spans: list[Span]
    rejected: list[Rejected]


def encoding_of(content_type: str | None) -> Encoding:
    """The encoding a request's Content-Type names (parameters and case ignored), which the
    answer uses too; anything else is an OtlpRequestError with status 415."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind == PROTOBUF:
        return "protobuf"
    if kind == JSON:
        return "json"
    raise OtlpRequestError(
        f"unsupported Content-Type {content_type or '(none)'!r}: send {PROTOBUF} or {JSON}",
        status=415,
    )


def unpack(body: bytes, content_encoding: str | None, max_bytes: int = 1 << 30) -> bytes:
    """The body with its Content-Encoding (gzip, deflate or none) removed, refusing more than
    `max_bytes` once inflated (a small body can inflate to gigabytes)."""
    coding = (content_encoding or "identity").strip().lower()
    if coding in ("identity", ""):
        return body
    if coding not in ("gzip", "deflate"):
        raise OtlpRequestError(
            f"unsupported Content-Encoding {coding!r}: send gzip, deflate or none", status=415
        )
    inflater = zlib.decompressobj(wbits=31 if coding == "gzip" else 15)
    try:
        out = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise OtlpRequestError(f"the body is not valid {coding} data: {exc}") from exc
    if len(out) > max_bytes:
        raise OtlpRequestError(
            f"the body inflates to over {max_bytes} bytes: send smaller batches", status=413
        )
    if not inflater.eof:
        raise OtlpRequestError(f"the body is not valid {coding} data: it ends early")
    return out


def decode(body: bytes, encoding: Encoding) -> Decoded:
    """Every span of an ExportTraceServiceRequest; spans with unusable ids are rejected."""
    if encoding == "protobuf":
        return _from_protobuf(body)
    return _from_json(body)


def _check_ids(trace_id: str, span_id: str, parent: str) -> str | None:
    if not _HEX.issuperset(trace_id + span_id + parent):
        return f"ids must be hex: trace {trace_id!r}, span {span_id!r}, parent {parent!r}"
    if len(trace_id) != 32 or trace_id == "0" * 32:
        return f"trace id {trace_id!r} is not 16 non-zero bytes"
    if len(span_id) != 16 or span_id == "0" * 16:
        return f"span id {span_id!r} is not 8 non-zero bytes"
    if parent and len(parent) != 16:
        return f"parent span id {parent!r} is not 8 bytes"
    return None


# -- protobuf ------------------------------------------------------------------------------------
def _any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _pb_attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return bytes(value.bytes_value)
    return None


def _pb_attributes(pairs: Iterable[Any]) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in pairs}


def protobuf_request(message: Any, body: bytes) -> Any:
    """The body parsed as the protobuf `message` class (ExportTraceServiceRequest...), or why
    not (OtlpRequestError)."""
    from google.protobuf.message import DecodeError

    try:
        return message.FromString(body)
    except DecodeError as exc:
        raise OtlpRequestError(f"the body is not an {message.__name__} in protobuf: {exc}") from exc


def _from_protobuf(body: bytes) -> Decoded:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = protobuf_request(ExportTraceServiceRequest, body)
    spans: list[Span] = []
    rejected: list[Rejected] = []
    for resource_spans in request.resource_spans:
        resource = _pb_attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                trace_id, span_id = s.trace_id.hex(), s.span_id.hex()
                parent = s.parent_span_id.hex()
                problem = _check_ids(trace_id, span_id, parent)
                if problem:
                    rejected.append(Rejected(span_id, problem))
                    continue
                spans.append(
                    Span(
                        trace_id=trace_id,
                        span_id=span_id,
                        parent_span_id=parent,
                        name=s.name,
                        kind=s.kind,
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        attributes=_pb_attributes(s.attributes),
                        events=tuple(
                            SpanEvent(e.name, e.time_unix_nano, _pb_attributes(e.attributes))
                            for e in s.events
                        ),
                        status_code=s.status.code,
                        status_message=s.status.message,
                        resource=resource,
                        parent_is_remote=s.flags & _PARENT_IS_REMOTE == _PARENT_IS_REMOTE,
                        scope=scope_spans.scope.name,
                    )
                )
    return Decoded(spans, rejected)


# -- JSON ----------------------------------------------------------------------------------------
def _get(obj: Mapping[str, Any], camel: str, snake: str) -> Any:
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


def _json_value(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return None
    for key, item in value.items():
        if key in ("stringValue", "string_value"):
            return item
        if key in ("intValue", "int_value"):
            return int(item)
        if key in ("doubleValue", "double_value"):
            return float(item)
        if key in ("boolValue", "bool_value"):
            return bool(item)
        if key in ("arrayValue", "array_value"):
            return [_json_value(v) for v in (item or {}).get("values") or []]
        if key in ("kvlistValue", "kvlist_value"):
            return _json_attributes((item or {}).get("values") or [])
        if key in ("bytesValue", "bytes_value"):
            return base64.b64decode(item)
    return None


def _json_attributes(pairs: Any) -> dict[str, Any]:
    if not isinstance(pairs, list):
        raise TypeError("attributes must be a list of {key, value}")
    return {str(kv["key"]): _json_value(kv.get("value")) for kv in pairs}


def _hex_id(value: Any) -> str:
    return value.lower() if isinstance(value, str) else ""


def _json_span(s: Mapping[str, Any], resource: Mapping[str, Any], scope: str) -> Span:
    status = s.get("status") or {}
    return Span(
        trace_id=_hex_id(_get(s, "traceId", "trace_id")),
        span_id=_hex_id(_get(s, "spanId", "span_id")),
        parent_span_id=_hex_id(_get(s, "parentSpanId", "parent_span_id")),
        name=str(s.get("name", "")),
        kind=int(s.get("kind") or 0),
        start_ns=int(_get(s, "startTimeUnixNano", "start_time_unix_nano") or 0),
        end_ns=int(_get(s, "endTimeUnixNano", "end_time_unix_nano") or 0),
        attributes=_json_attributes(s.get("attributes") or []),
        events=tuple(
            SpanEvent(
                str(e.get("name", "")),
                int(_get(e, "timeUnixNano", "time_unix_nano") or 0),
                _json_attributes(e.get("attributes") or []),
            )
            for e in s.get("events") or []
        ),
        status_code=int(status.get("code") or 0),
        status_message=str(status.get("message") or ""),
        resource=resource,
        parent_is_remote=int(s.get("flags") or 0) & _PARENT_IS_REMOTE == _PARENT_IS_REMOTE,
        scope=scope,
    )


def json_request(body: bytes, message: str) -> dict[str, Any]:
    """The body of an OTLP/JSON request of `message` (ExportTraceServiceRequest...), or why
    not (OtlpRequestError)."""
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise OtlpRequestError(f"the body is not JSON: {exc}") from exc
    if not isinstance(request, dict):
        raise OtlpRequestError(f"the body is not an {message}: expected an object")
    return request


def _from_json(body: bytes) -> Decoded:
    request = json_request(body, "ExportTraceServiceRequest")
    spans: list[Span] = []
    rejected: list[Rejected] = []
    where = "resourceSpans"
    try:
        for i, resource_spans in enumerate(_get(request, "resourceSpans", "resource_spans") or []):
            where = f"resourceSpans[{i}]"
            resource = _json_attributes(
                (resource_spans.get("resource") or {}).get("attributes") or []
            )
            for j, scope_spans in enumerate(
                _get(resource_spans, "scopeSpans", "scope_spans") or []
            ):
                scope = str((scope_spans.get("scope") or {}).get("name") or "")
                for k, raw in enumerate(scope_spans.get("spans") or []):
                    where = f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                    span = _json_span(raw, resource, scope)
                    problem = _check_ids(span.trace_id, span.span_id, span.parent_span_id)
                    if problem:
                        rejected.append(Rejected(span.span_id, problem))
                    else:
                        spans.append(span)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise OtlpRequestError(
            f"the body is not an ExportTraceServiceRequest: at {where}: {type(exc).__name__}: {exc}"
        ) from exc
    return Decoded(spans, rejected)


# -- answers -------------------------------------------------------------------------------------
Signal = Literal["traces", "logs"]


def success_body(
    encoding: Encoding, rejected: int = 0, message: str = "", signal: Signal = "traces"
) -> bytes:
    """An Export{Trace,Logs}ServiceResponse; `partial_success` set when spans (log records) were
    rejected or there is a warning for the sender (OTLP: a rejected count of 0 with a message
    is a warning)."""
    if encoding == "json":
        if not rejected and not message:
            return b"{}"
        count = "rejectedSpans" if signal == "traces" else "rejectedLogRecords"
        return orjson.dumps({"partialSuccess": {count: str(rejected), "errorMessage": message}})
    return bytes(_success_message(rejected, message, signal).SerializeToString())


def _success_message(rejected: int, message: str, signal: Signal) -> Any:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    if signal == "logs":
        response, count = ExportLogsServiceResponse(), "rejected_log_records"
    else:
        response, count = ExportTraceServiceResponse(), "rejected_spans"
    if rejected or message:  # a field set to a non-default value makes partial_success present
        setattr(response.partial_success, count, rejected)
        response.partial_success.error_message = message
    return response


def status_body(encoding: Encoding, http_status: int, message: str) -> bytes:
    """A google.rpc.Status for a failed request (its code: the gRPC code of the HTTP status)."""
    code = {400: 3, 404: 5, 405: 12, 413: 8, 415: 3, 429: 8, 503: 14}.get(http_status, 13)
    if encoding == "json":
        return orjson.dumps({"code": code, "message": message})
    from google.rpc.status_pb2 import Status

    return bytes(Status(code=code, message=message).SerializeToString())
