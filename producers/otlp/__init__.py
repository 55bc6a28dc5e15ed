"""OTLP GenAI ingest: traces from any OpenTelemetry-instrumented agent become sessions.

`decode` reads an `ExportTraceServiceRequest` and `decode_logs` an `ExportLogsServiceRequest`
(protobuf or JSON, after `unpack` of their gzip); `TraceIngest` applies spans and log records to
sessions through a Recorder (_ingest.py: order, waiting and ending; _traces.py: what waits; _grouping.py: which
session a span belongs to; _applied.py: what a batch did; _events.py: log records
joined to their span; _genai.py: what is read from a span; _span_records.py: what a span
records), and the `Journal` keeps what a restarted receiver must know and what it holds. The
servers around them are `rolltape serve otlp` (rolltape.infra.commands.otlp_serve). Needs the
`otlp` extra for protobuf.
"""

from rolltape.producers.otlp._applied import UNMAPPED_REASONS, Applied
from rolltape.producers.otlp._grouping import (
    CONVERSATION_GROUP,
    CONVERSATION_ID,
    SESSION_GROUP,
    group_key,
    session_id_for,
)
from rolltape.producers.otlp._ingest import TraceIngest
from rolltape.producers.otlp._journal import Journal
from rolltape.producers.otlp._log_records import DecodedLogs, LogRecord, decode_logs
from rolltape.producers.otlp._openinference import SESSION_ID
from rolltape.producers.otlp._wire import (
    JSON,
    PROTOBUF,
    Decoded,
    Encoding,
    OtlpRequestError,
    Rejected,
    Signal,
    Span,
    SpanEvent,
    decode,
    encoding_of,
    status_body,
    success_body,
    unpack,
)

__all__ = [
    "CONVERSATION_GROUP",
    "CONVERSATION_ID",
    "JSON",
    "PROTOBUF",
    "SESSION_GROUP",
    "SESSION_ID",
    "UNMAPPED_REASONS",
    "Applied",
    "Decoded",
    "DecodedLogs",
    "Encoding",
    "Journal",
    "LogRecord",
    "OtlpRequestError",
    "Rejected",
    "Signal",
    "Span",
    "SpanEvent",
    "TraceIngest",
    "decode",
    "decode_logs",
    "encoding_of",
    "group_key",
    "session_id_for",
    "status_body",
    "success_body",
    "unpack",
]
