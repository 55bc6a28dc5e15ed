"""A rule set's measured false alarms and detections, and the event that records them beside it.

`rolltape rules evaluate` measures a rule set on seeded healthy and faulty runs of a task; with
`--record` its figures become a `ruleset_evaluation` event holding the rule set itself (its
thresholds and calibration header), so the log says what a rule set was measured to do, not
only where it fired.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rolltape.schemas._derived import RuleId


class RuleFigures(BaseModel):
    """One rule over the healthy runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: RuleId
    healthy_epochs: int
    false_alarms: int
    """Healthy epochs on which the rule fired."""
    longest_streak: int
    """The most consecutive healthy epochs it fired on (a persisting false alarm)."""

    @property
    def false_alarm_rate(self) -> float:
        return self.false_alarms / self.healthy_epochs if self.healthy_epochs else 0.0


class Detection(BaseModel):
    """One scenario's intended rule over its seeds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scenario: str
    rule: RuleId
    seeds: int
    detected: int
    first_epochs: tuple[int | None, ...]
    """Per seed, the first epoch the rule fired (None: never)."""
    unintended: dict[str, int] = Field(default_factory=dict)
    """Other rules that fired, with the number of epochs summed over the seeds."""


class RuleSetFigures(BaseModel):
    """What `rolltape rules evaluate` prints and records."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ruleset: str
    healthy_runs: int
    rules: tuple[RuleFigures, ...]
    detections: tuple[Detection, ...]
    kind: Literal["ruleset_figures"] = "ruleset_figures"


class Goal(BaseModel):
    """One of the goals a rule set is measured against, and whether it met it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    goal: str
    met: bool
    detail: str


class RulesetEvaluation(BaseModel):
    """Payload of a `ruleset_evaluation` event: one rule set measured on seeded runs of a task."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ruleset: dict[str, Any]
    """The rule set as its file holds it: thresholds and calibration header."""
    label: str
    """`name@digest12`, as its rule evaluations name it."""
    task: str
    healthy: tuple[str, ...]
    """The healthy scenarios whose firings count as false alarms."""
    seeds: tuple[int, ...]
    epochs: int | None = None
    """Epochs per run; None: each scenario's own."""
    figures: RuleSetFigures
    goals: tuple[Goal, ...]
