"""The live chain audit of raw streams (seq continuity, links, hashes, schema version)."""

from rolltape.processors.audit._chain import (
    AUDITOR_VERSION,
    Admitted,
    AuditResult,
    ChainHead,
    DeadLettered,
    InputRecord,
    Position,
    Redelivered,
    audit,
    parse_record,
)
from rolltape.processors.audit._checkpoints import (
    CHECKPOINT_INTERVAL_S,
    CHECKPOINT_LOG_PREFIX,
    CHECKPOINT_VERSION,
    CheckpointSigner,
    log_for_partition,
    raw_partition,
)

__all__ = [
    "AUDITOR_VERSION",
    "CHECKPOINT_INTERVAL_S",
    "CHECKPOINT_LOG_PREFIX",
    "CHECKPOINT_VERSION",
    "Admitted",
    "AuditResult",
    "ChainHead",
    "CheckpointSigner",
    "DeadLettered",
    "InputRecord",
    "Position",
    "Redelivered",
    "audit",
    "log_for_partition",
    "parse_record",
    "raw_partition",
]
