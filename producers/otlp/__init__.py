"""OTLP GenAI ingest: traces from any OpenTelemetry-instrumented agent become sessions.

`decode` reads an OTLP/HTTP `ExportTraceServiceRequest` (protobuf or JSON, after `unpack` of
its gzip), `TraceIngest` applies the spans to sessions through a Recorder (see _ingest.py for
the mapping and _genai.py for what is read from a span), and the `Journal` keeps what a
restarted receiver must know. The HTTP server around them is `rolltape otlp serve`
(rolltape.infra.commands.otlp_serve). Needs the `otlp` extra for protobuf.
"""

from rolltape.producers.otlp._ingest import Applied, TraceIngest, session_id_for
from rolltape.producers.otlp._journal import Journal
from rolltape.producers.otlp._wire import (
    JSON,
    PROTOBUF,
    Decoded,
    Encoding,
    OtlpRequestError,
    Rejected,
    Span,
    SpanEvent,
    decode,
    encoding_of,
    status_body,
    success_body,
    unpack,
)

__all__ = [
    "JSON",
    "PROTOBUF",
    "Applied",
    "Decoded",
    "Encoding",
    "Journal",
    "OtlpRequestError",
    "Rejected",
    "Span",
    "SpanEvent",
    "TraceIngest",
    "decode",
    "encoding_of",
    "session_id_for",
    "status_body",
    "success_body",
    "unpack",
]
