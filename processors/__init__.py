"""rolltape.processors: what the worker computes from the raw streams.

Each piece is a pure, versioned function over events (audit, rules, filters, judges), composed
per session by `SessionProcessor`; `rolltape.processors.worker` is the Kafka shell that runs it
(faust for the group and the state table, a batch reader for the raw topics).
"""

from rolltape.processors._errors import ProcessorError
from rolltape.processors._judge_messages import JUDGE_RESULTS, JudgeRequest, JudgeResult
from rolltape.processors._outputs import DeadLetter, Emitted, Output, Refused, Requested, StepOutput
from rolltape.processors._processor_config import ProcessorConfig
from rolltape.processors._replay import (
    Conflict,
    ReplayedSession,
    Replayer,
    ReplayRecord,
    ReplayResult,
    WritePlan,
    plan_writes,
    replay,
    replay_order,
)
from rolltape.processors._session import SessionProcessor, handle
from rolltape.processors._session_state import SessionState

__all__ = [
    "JUDGE_RESULTS",
    "Conflict",
    "DeadLetter",
    "Emitted",
    "JudgeRequest",
    "JudgeResult",
    "Output",
    "ProcessorConfig",
    "ProcessorError",
    "Refused",
    "ReplayRecord",
    "ReplayResult",
    "ReplayedSession",
    "Replayer",
    "Requested",
    "SessionProcessor",
    "SessionState",
    "StepOutput",
    "WritePlan",
    "handle",
    "plan_writes",
    "replay",
    "replay_order",
]
