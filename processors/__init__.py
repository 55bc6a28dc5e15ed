"""rolltape.processors: what the worker computes from the raw streams.

Each piece is a pure, versioned function over events (audit, rules, filters, judges), composed
per session by `SessionProcessor`; `rolltape.processors.worker` is the Kafka shell that runs it
(faust for the group and the state table, a batch reader for the raw topics).
"""

from rolltape.processors._errors import ProcessorError
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
    "ProcessorError",
    "Requested",
    "SessionProcessor",
    "SessionState",
    "handle",
]
