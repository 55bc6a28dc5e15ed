"""rolltape.producers.environments: tasks with rewards, run by the reference agent.

An `Environment` says what the next item is, how it becomes a prompt, which tools the agent gets
and where they run (a fresh working directory per rollout), and how a result is scored
(`compute_reward`: binary, continuous or composite). `run_rollout` records one rollout as a
session with its reward; `evaluate` runs a split and records the evaluation. `bugfix` is the
reference environment: small Python projects whose tests decide the reward.
"""

from rolltape.producers.environments._base import (
    Environment,
    Item,
    RewardResult,
    RolloutContext,
    binary,
    composite,
    continuous,
)
from rolltape.producers.environments._evaluate import evaluate, summarise
from rolltape.producers.environments._prompt_tester import (
    ENV_SCORE_JUDGE,
    EnvironmentTester,
    environment_suite,
)
from rolltape.producers.environments._registry import (
    environment_names,
    load_environment,
    register_environment,
)
from rolltape.producers.environments._rollout import Rollout, run_rollout

__all__ = [
    "ENV_SCORE_JUDGE",
    "Environment",
    "EnvironmentTester",
    "Item",
    "RewardResult",
    "Rollout",
    "RolloutContext",
    "binary",
    "composite",
    "continuous",
    "environment_names",
    "environment_suite",
    "evaluate",
    "load_environment",
    "register_environment",
    "run_rollout",
    "summarise",
]
