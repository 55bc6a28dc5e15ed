"""Judges: the training-run audit, LLM judges and programmatic reward functions."""

from rolltape.processors.judges._llm import (
    LLM_JUDGES,
    AnswerQuality,
    AnswerQualityJudge,
    JudgeRun,
    LLMJudge,
    register_llm_judge,
    run_llm_judge,
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
    "JUDGE_NAME",
    "JUDGE_VERSION",
    "LLM_JUDGES",
    "REWARDS",
    "WINDOW",
    "AnswerQuality",
    "AnswerQualityJudge",
    "Composite",
    "FinalReward",
    "JudgeRun",
    "LLMJudge",
    "RewardFunction",
    "RewardUnavailable",
    "TaskPass",
    "TrainingJudgeConfig",
    "TrainingJudgeConfigError",
    "TrainingJudgeState",
    "Transcript",
    "TranscriptItem",
    "judge",
    "register_llm_judge",
    "register_reward",
    "run_llm_judge",
]
