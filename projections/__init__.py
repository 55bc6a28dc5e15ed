"""rolltape.projections: folds events into trajectories, exporters, importers, the live feed.

`fold` turns one session's events (+ a judge version's verdicts and filter outcome) into a
`Trajectory`; `rolltape.projections.exporters` turns trajectories into training formats.
"""

from rolltape.processors.conversation import tool_failed
from rolltape.projections._atropos_sink import AtroposSink, AtroposSinkError
from rolltape.projections._erasures import ErasureList, ErasuresFileError, read_erasures
from rolltape.projections._errors import ProjectionError
from rolltape.projections._evidence import (
    Checkpoints,
    InclusionProof,
    SessionEvidence,
    evidence_problems,
    session_evidence,
)
from rolltape.projections._export import (
    MANIFEST,
    META_DIR,
    Chosen,
    ChosenStore,
    ExportFile,
    Exporting,
    ExportLine,
    ExportOptions,
    FileSink,
    Format,
    Manifest,
    MemorySink,
    MemoryStore,
    Selection,
    SortKey,
    Tally,
    build_export,
    order_key,
)
from rolltape.projections._feed import ContentKeys, FeedItem, TrajectoryFeed
from rolltape.projections._fold import FoldError, fold
from rolltape.projections._lineage import (
    LINEAGE_EVENT_TYPES,
    Lineage,
    LineageRun,
    ModelLineage,
    UnknownModelError,
    fold_lineage,
)
from rolltape.projections._narrowing import Narrowing, session_start
from rolltape.projections._projector import run_projector, trajectory_record
from rolltape.projections._prompts import (
    PROMPT_EVENT_TYPES,
    Decided,
    PromptLookupError,
    PromptTarget,
    TechniqueTally,
    fold_prompts,
)
from rolltape.projections._records import checked_event
from rolltape.projections._trajectory import (
    ChainSpan,
    FeedbackRecord,
    Message,
    PreferenceRecord,
    ReviewRecord,
    RewardRecord,
    ToolCallRecord,
    ToolOutcome,
    ToolStats,
    Trajectory,
    VerdictRecord,
)

__all__ = [
    "LINEAGE_EVENT_TYPES",
    "MANIFEST",
    "META_DIR",
    "PROMPT_EVENT_TYPES",
    "AtroposSink",
    "AtroposSinkError",
    "ChainSpan",
    "Checkpoints",
    "Chosen",
    "ChosenStore",
    "ContentKeys",
    "Decided",
    "ErasureList",
    "ErasuresFileError",
    "ExportFile",
    "ExportLine",
    "ExportOptions",
    "Exporting",
    "FeedItem",
    "FeedbackRecord",
    "FileSink",
    "FoldError",
    "Format",
    "InclusionProof",
    "Lineage",
    "LineageRun",
    "Manifest",
    "MemorySink",
    "MemoryStore",
    "Message",
    "ModelLineage",
    "Narrowing",
    "PreferenceRecord",
    "ProjectionError",
    "PromptLookupError",
    "PromptTarget",
    "ReviewRecord",
    "RewardRecord",
    "Selection",
    "SessionEvidence",
    "SortKey",
    "Tally",
    "TechniqueTally",
    "ToolCallRecord",
    "ToolOutcome",
    "ToolStats",
    "Trajectory",
    "TrajectoryFeed",
    "UnknownModelError",
    "VerdictRecord",
    "build_export",
    "checked_event",
    "evidence_problems",
    "fold",
    "fold_lineage",
    "fold_prompts",
    "order_key",
    "read_erasures",
    "run_projector",
    "session_evidence",
    "session_start",
    "tool_failed",
    "trajectory_record",
]
