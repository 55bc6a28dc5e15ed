"""The live chain audit of raw streams (seq continuity, links, hashes, schema version)."""

from rolltape.processors.audit._chain import (
    AUDITOR_VERSION,
    Admitted,
    AuditResult,
    Break,
    ChainHead,
    DeadLettered,
    InputRecord,
    Parsed,
    Redelivered,
    audit,
    parse_record,
)

__all__ = [
    "AUDITOR_VERSION",
    "Admitted",
    "AuditResult",
    "Break",
    "ChainHead",
    "DeadLettered",
    "InputRecord",
    "Parsed",
    "Redelivered",
    "audit",
    "parse_record",
]
