"""The canonical rule engine (R1..R7), its versioned rule-set config, the rule book that picks a
rule set per task, and rule sets calibrated on healthy runs with their measured false alarms and
detections."""

from rolltape.processors.rules._calibrate import (
    calibrate,
    fired_per_epoch,
    goals,
    measure,
    quantile,
    smoothed_signals,
)
from rolltape.processors.rules._engine import (
    EMA_SIGNALS,
    RULES_VERSION,
    EpochOrderError,
    RuleState,
    epoch_order_error,
    evaluate,
    restart_course,
)
from rolltape.processors.rules._rulebook import (
    DIGITS_CALIBRATED,
    REFERENCE_MONITOR,
    RuleBook,
    default_rulebook,
    load_ruleset,
    shipped_rulesets,
    task_family,
)
from rolltape.processors.rules._ruleset import Calibration, RuleSet, RuleSetError, SignalRange

__all__ = [
    "DIGITS_CALIBRATED",
    "EMA_SIGNALS",
    "REFERENCE_MONITOR",
    "RULES_VERSION",
    "Calibration",
    "EpochOrderError",
    "RuleBook",
    "RuleSet",
    "RuleSetError",
    "RuleState",
    "SignalRange",
    "calibrate",
    "default_rulebook",
    "epoch_order_error",
    "evaluate",
    "fired_per_epoch",
    "goals",
    "load_ruleset",
    "measure",
    "quantile",
    "restart_course",
    "shipped_rulesets",
    "smoothed_signals",
    "task_family",
]
