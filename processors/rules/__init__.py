"""The canonical rule engine (R1..R7), its versioned rule-set config, and rule sets calibrated on
healthy runs with their measured false alarms and detections."""

from rolltape.processors.rules._calibrate import (
    Detection,
    Goal,
    RuleFigures,
    RuleSetFigures,
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
    evaluate,
)
from rolltape.processors.rules._ruleset import Calibration, RuleSet, RuleSetError, SignalRange

__all__ = [
    "EMA_SIGNALS",
    "RULES_VERSION",
    "Calibration",
    "Detection",
    "EpochOrderError",
    "Goal",
    "RuleFigures",
    "RuleSet",
    "RuleSetError",
    "RuleSetFigures",
    "RuleState",
    "SignalRange",
    "calibrate",
    "evaluate",
    "fired_per_epoch",
    "goals",
    "measure",
    "quantile",
    "smoothed_signals",
]
