"""The one exception root of rolltape.processors.

ProcessorError
├── RuleSetError               a rule-set file that is unreadable or invalid
├── TrainingJudgeConfigError   a training-judge config file that is unreadable or invalid
└── EpochOrderError            a metric for an epoch at or before one already evaluated

The worker never raises these into its loop for bad input: a record that cannot be used is
dead-lettered with the reason. They reach callers that load configs or drive the engine.
"""

from __future__ import annotations

from rolltape.schemas import RolltapeError


class ProcessorError(RolltapeError):
    """Root of every error rolltape.processors raises."""
