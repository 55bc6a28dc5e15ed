"""Judges: the training-run audit, judges as agents (specs by name) and programmatic reward
functions."""

from rolltape.processors.judges._judges import (
    JUDGES,
    AnswerQuality,
    Judge,
    answer_quality,
    register_judge,
)
from rolltape.processors.judges._rewards import (
    REWARDS,
    Composite,
    FinalReward,
    RewardFunction,
    RewardUnavailable,
    TaskPass,
    register_reward,
)
from rolltape.processors.judges._training import (
    JUDGE_NAME,
    JUDGE_VERSION,
    WINDOW,
    TrainingJudgeState,
    judge,
)
from rolltape.processors.judges._training_config import (
    TrainingJudgeConfig,
    TrainingJudgeConfigError,
)
from rolltape.processors.judges._transcript import Transcript, TranscriptItem

__all__ = [
    "JUDGES",
    "JUDGE_NAME",
    "JUDGE_VERSION",
    "REWARDS",
    "WINDOW",
    "AnswerQuality",
    "Composite",
    "FinalReward",
    "Judge",
    "RewardFunction",
    "RewardUnavailable",
    "TaskPass",
    "TrainingJudgeConfig",
    "TrainingJudgeConfigError",
    "TrainingJudgeState",
    "Transcript",
    "TranscriptItem",
    "answer_quality",
    "judge",
    "register_judge",
    "register_reward",
]
