"""rolltape.producers: the SDK that agents and training loops embed to record sessions."""

from rolltape.producers._errors import (
    BacklogFullError,
    EventsRejectedError,
    FlushTimeoutError,
    HarnessError,
    MonitorError,
    RecorderClosedError,
    RecorderError,
    RejectedEvent,
    SpoolFullError,
)
from rolltape.producers._recorder import FlushResult, Recorder, Session

__version__ = "0.1.0"

__all__ = [
    "BacklogFullError",
    "EventsRejectedError",
    "FlushResult",
    "FlushTimeoutError",
    "HarnessError",
    "MonitorError",
    "Recorder",
    "RecorderClosedError",
    "RecorderError",
    "RejectedEvent",
    "Session",
    "SpoolFullError",
    "__version__",
]
