"""Judges: the training-run audit, LLM judges and programmatic reward functions."""

from rolltape.processors.judges._training import (
    JUDGE_NAME,
    JUDGE_VERSION,
    WINDOW,
    TrainingJudgeState,
    judge,
)

__all__ = ["JUDGE_NAME", "JUDGE_VERSION", "WINDOW", "TrainingJudgeState", "judge"]
