"""rolltape's exception tree: `RolltapeError` above every package's root, so a library user writes
one `except RolltapeError` (importable as `rolltape.schemas.RolltapeError`). Each package's own
root, in the module beside it, draws its leaves:

RolltapeError
├── SchemaError        rolltape.schemas: bad data (below)
├── KafkaClientError   rolltape.schemas.clients: the cluster could not do what was asked
├── PluginError        rolltape.schemas.plugins: a plugin that does not load or is not there
├── ProducerError      rolltape.producers: the recording SDK, capture, OTLP mapping, agents
├── ProcessorError     rolltape.processors: rule sets, judge configs, the engine
├── ProjectionError    rolltape.projections: folds, formats, tokenizers, the Atropos sink
└── InfraError         rolltape.infra: broker, worker setup, exports, reports, the CLI

The roots stay apart below `RolltapeError` on purpose: a handler of bad data (`SchemaError`) must
never catch "the broker is down" (`KafkaClientError`) by accident, nor the other way round. A
library's own exceptions (aiokafka's, pydantic's, an HTTP client's) are translated into one of
these where rolltape calls that library.

The leaves of rolltape.schemas:

SchemaError
├── CanonicalEncodingError   a value has no canonical JSON form (wrong type, int out of range)
├── EnvelopeError            bytes are not a valid envelope (unparseable, missing fields, bad version)
├── PayloadError             an envelope's payload does not validate against its type's model
├── BlobError                a blob record that is not one, or chunks that do not make its sha256
└── VerdictError             a judge's reply or verdict file that is not a valid verdict

The Kafka client's errors have a root of their own (`rolltape.schemas.clients.KafkaClientError`):
the broker being away is not bad data.
"""

from __future__ import annotations


class RolltapeError(Exception):
    """Root of every error rolltape raises on purpose; the message says what to do."""


class SchemaError(RolltapeError):
    """Root of every error raised by rolltape.schemas."""


class CanonicalEncodingError(SchemaError, ValueError):
    """A value cannot be written in the canonical form; the message names the value's path."""


class EnvelopeError(SchemaError, ValueError):
    """Bytes or a mapping are not a valid schema-v1 envelope."""


class PayloadError(SchemaError, ValueError):
    """A payload does not validate against the model of its event type."""
