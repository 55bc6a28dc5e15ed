"""rolltape.projections: folds events into trajectories, exporters, replay.

`fold` turns one session's events (+ a judge version's verdicts and filter outcome) into a
`Trajectory`; `rolltape.projections.exporters` turns trajectories into training formats.
"""

from rolltape.projections._export import (
    ExportFile,
    ExportOptions,
    Format,
    Manifest,
    Selection,
    build_export,
    order_key,
    render,
)
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
    "ExportFile",
    "ExportOptions",
    "FeedbackRecord",
    "FoldError",
    "Format",
    "Manifest",
    "Message",
    "RewardRecord",
    "Selection",
    "ToolCallRecord",
    "ToolOutcome",
    "ToolStats",
    "Trajectory",
    "VerdictRecord",
    "build_export",
    "fold",
    "order_key",
    "render",
    "tool_failed",
]
