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
from rolltape.projections._replay import (
    Conflict,
    ReplayRecord,
    ReplayResult,
    WritePlan,
    plan_writes,
    replay,
    replay_order,
)
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
    "Conflict",
    "ExportFile",
    "ExportOptions",
    "FeedbackRecord",
    "FoldError",
    "Format",
    "Manifest",
    "Message",
    "ReplayRecord",
    "ReplayResult",
    "RewardRecord",
    "Selection",
    "ToolCallRecord",
    "ToolOutcome",
    "ToolStats",
    "Trajectory",
    "VerdictRecord",
    "WritePlan",
    "build_export",
    "fold",
    "order_key",
    "plan_writes",
    "render",
    "replay",
    "replay_order",
    "tool_failed",
]
