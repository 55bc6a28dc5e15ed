"""rolltape.producers: the SDK that agents and training loops embed to record sessions."""

from rolltape.producers._client_log import keep_client_logs_in
from rolltape.producers._errors import (
    BacklogFullError,
    ChainConflictError,
    EventsRejectedError,
    FlushTimeoutError,
    HarnessError,
    MonitorError,
    ProducerError,
    PromptLoopError,
    RecorderClosedError,
    RecorderError,
    RejectedEvent,
    ResumeError,
    SandboxError,
    SenderDiedError,
    SpoolFullError,
)
from rolltape.producers._follow import LogFollower, rules_and_verdicts_follower
from rolltape.producers._recorder import (
    FlushResult,
    Recorder,
    default_state_dir,
    spool_dir_in,
)
from rolltape.producers._resume import HeadInLog, first_record_from, read_head
from rolltape.producers._sender_config import SPOOL_MAX_BYTES, HeadLocator
from rolltape.producers._session import Session
from rolltape.producers._spawn import fresh_interpreter
from rolltape.producers._tools import ToolRun, current_session, record_tool
from rolltape.producers._world import (
    WorldError,
    WorldLimits,
    reset_world,
    restore_snapshot,
    take_snapshot,
)
from rolltape.schemas import software_version

__version__ = software_version()

__all__ = [
    "SPOOL_MAX_BYTES",
    "BacklogFullError",
    "ChainConflictError",
    "EventsRejectedError",
    "FlushResult",
    "FlushTimeoutError",
    "HarnessError",
    "HeadInLog",
    "HeadLocator",
    "LogFollower",
    "MonitorError",
    "ProducerError",
    "PromptLoopError",
    "Recorder",
    "RecorderClosedError",
    "RecorderError",
    "RejectedEvent",
    "ResumeError",
    "SandboxError",
    "SenderDiedError",
    "Session",
    "SpoolFullError",
    "ToolRun",
    "WorldError",
    "WorldLimits",
    "__version__",
    "current_session",
    "default_state_dir",
    "first_record_from",
    "fresh_interpreter",
    "keep_client_logs_in",
    "read_head",
    "record_tool",
    "reset_world",
    "restore_snapshot",
    "rules_and_verdicts_follower",
    "spool_dir_in",
    "take_snapshot",
]
