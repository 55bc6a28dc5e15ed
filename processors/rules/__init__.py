"""The canonical rule engine (R1..R7) and its versioned rule-set config."""

from rolltape.processors.rules._engine import (
    EMA_SIGNALS,
    RULES_VERSION,
    EpochOrderError,
    RuleState,
    evaluate,
)
from rolltape.processors.rules._ruleset import RuleSet, RuleSetError

__all__ = [
    "EMA_SIGNALS",
    "RULES_VERSION",
    "EpochOrderError",
    "RuleSet",
    "RuleSetError",
    "RuleState",
    "evaluate",
]
