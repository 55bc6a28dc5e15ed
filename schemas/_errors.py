"""The one exception root of rolltape.schemas.

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


class SchemaError(Exception):
    """Root of every error raised by rolltape.schemas."""


class CanonicalEncodingError(SchemaError, ValueError):
    """A value cannot be written in the canonical form; the message names the value's path."""


class EnvelopeError(SchemaError, ValueError):
    """Bytes or a mapping are not a valid schema-v1 envelope."""


class PayloadError(SchemaError, ValueError):
    """A payload does not validate against the model of its event type."""
