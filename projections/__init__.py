"""rolltape.projections: folds events into trajectories, exporters, replay.

`fold` turns one session's events (+ a judge version's verdicts and filter outcome) into a
`Trajectory`; `rolltape.projections.exporters` turns trajectories into training formats.
"""

from rolltape.projections._fold import FoldError, fold, tool_failed
from rolltape.projections._trajectory import (
    ChainSpan,
    FeedbackRecord,
    Message,
    RewardRecord,
    ToolCallRecord,
    ToolOutcome,
    ToolStats,
    Trajectory,
    VerdictRecord,
)

__all__ = [
    "ChainSpan",
    "FeedbackRecord",
    "FoldError",
    "Message",
    "RewardRecord",
    "ToolCallRecord",
    "ToolOutcome",
    "ToolStats",
    "Trajectory",
    "VerdictRecord",
    "fold",
    "tool_failed",
]
