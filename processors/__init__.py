"""rolltape.processors: what the worker computes from the raw streams.

Each piece is a pure, versioned function over events (audit, rules, filters, judges), composed
per session by `SessionProcessor`; `rolltape.processors.worker` is the thin faust shell that runs
it against Kafka.
"""

from rolltape.processors._session import (
    DeadLetter,
    Emitted,
    JudgeRequest,
    JudgeResult,
    Output,
    ProcessorConfig,
    Requested,
    SessionProcessor,
    SessionState,
    handle,
)

__all__ = [
    "DeadLetter",
    "Emitted",
    "JudgeRequest",
    "JudgeResult",
    "Output",
    "ProcessorConfig",
    "Requested",
    "SessionProcessor",
    "SessionState",
    "handle",
]
