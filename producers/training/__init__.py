"""rolltape.producers.training: training runs recorded by a monitor the training code cannot
bypass, and the decision harness that acts on the rule firings the processors write back.

Needs the `torch` extra: pip install 'rolltape[torch]'.
"""

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError(
        "rolltape.producers.training needs PyTorch: pip install 'rolltape[torch]'"
    ) from exc

from rolltape.producers._follow import LogFollower, rules_and_verdicts_follower
from rolltape.producers.training._digits import (
    ArchitectureSpec,
    DigitsData,
    DigitsNet,
    build_model,
    carry_weights,
)
from rolltape.producers.training._harness import (
    AttemptResult,
    Harness,
    HarnessConfig,
    SelfRefineResult,
    feedback_text,
    violation_line,
)
from rolltape.producers.training._monitor import MonitorConfig, TrainingMonitor
from rolltape.producers.training._policies import (
    BASE_POLICY_PROMPT,
    PLAYBOOK,
    AttemptStart,
    DecisionContext,
    LLMPolicy,
    Policy,
    PolicyDecision,
    ScriptedPolicy,
)
from rolltape.producers.training._prompt_tester import (
    DEFAULT_SUITE,
    HarnessTester,
    max_policy_calls,
)
from rolltape.producers.training._remedies import TrainingRun, apply, start_run
from rolltape.producers.training._scenarios import SCENARIOS, Scenario
from rolltape.schemas import POLICY_PROMPT_TARGET

__all__ = [
    "BASE_POLICY_PROMPT",
    "DEFAULT_SUITE",
    "PLAYBOOK",
    "POLICY_PROMPT_TARGET",
    "SCENARIOS",
    "ArchitectureSpec",
    "AttemptResult",
    "AttemptStart",
    "DecisionContext",
    "DigitsData",
    "DigitsNet",
    "Harness",
    "HarnessConfig",
    "HarnessTester",
    "LLMPolicy",
    "LogFollower",
    "MonitorConfig",
    "Policy",
    "PolicyDecision",
    "Scenario",
    "ScriptedPolicy",
    "SelfRefineResult",
    "TrainingMonitor",
    "TrainingRun",
    "apply",
    "build_model",
    "carry_weights",
    "feedback_text",
    "max_policy_calls",
    "rules_and_verdicts_follower",
    "start_run",
    "violation_line",
]
