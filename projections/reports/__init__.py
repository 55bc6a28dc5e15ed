"""Reports: HTML views of training runs (curves, rule heatmaps with decisions, scores,
violations), agent sessions (conversation, tool calls, filter outcome, verdicts) and prompt
targets (lineage, scoreboard, every round's decision).

Needs the `report` extra (plotly): pip install 'rolltape[report]'.
"""

from rolltape.projections.reports._page import render_report
from rolltape.projections.reports._prompts import render_prompts
from rolltape.projections.reports._run import (
    DecisionView,
    EpochView,
    RunView,
    TrainingView,
    fold_training,
    group_runs,
)

__all__ = [
    "DecisionView",
    "EpochView",
    "RunView",
    "TrainingView",
    "fold_training",
    "group_runs",
    "render_prompts",
    "render_report",
]
