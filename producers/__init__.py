"""rolltape.producers: the SDK that agents and training loops embed to record sessions."""

from rolltape.producers._errors import (
    BacklogFullError,
    ChainConflictError,
    EventsRejectedError,
    FlushTimeoutError,
    HarnessError,
    MonitorError,
    ProducerError,
    RecorderClosedError,
    RecorderError,
    RejectedEvent,
    ResumeError,
    SenderDiedError,
    SpoolFullError,
)
from rolltape.producers._recorder import FlushResult, Recorder, Session
from rolltape.producers._tools import ToolRun, current_session, record_tool

__version__ = "0.1.0"

__all__ = [
    "BacklogFullError",
    "ChainConflictError",
    "EventsRejectedError",
    "FlushResult",
    "FlushTimeoutError",
    "HarnessError",
    "MonitorError",
    "ProducerError",
    "Recorder",
    "RecorderClosedError",
    "RecorderError",
    "RejectedEvent",
    "ResumeError",
    "SenderDiedError",
    "Session",
    "SpoolFullError",
    "ToolRun",
    "__version__",
    "current_session",
    "record_tool",
]
