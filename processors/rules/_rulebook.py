"""Which rule set judges which task: the rule sets rolltape ships, and the book that picks one per
session by its task.

A rule set's thresholds hold for the task (model, data, optimiser) they were calibrated on: the
reference monitor's R2 band, set on CIFAR-10, fires on every healthy epoch of the digits task. So
a worker that judges several tasks keeps one rule set per task family and the reference
monitor's for the rest, and every `rule_evaluation` names the rule set it used.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rolltape.processors.rules._ruleset import RuleSet, RuleSetError

REFERENCE_MONITOR = "reference-monitor"
"""The reference monitor's thresholds (`RuleSet()`): for imports of its runs and comparisons."""
DIGITS_CALIBRATED = "digits-cnn-calibrated"
"""The reference task's default: calibrated on its healthy baseline (`rolltape rules calibrate`)."""
_SHIPPED_FILES = {DIGITS_CALIBRATED: "digits-cnn-calibrated.json"}


@functools.cache
def shipped_rulesets() -> dict[str, RuleSet]:
    """The rule sets rolltape ships, by name (read once: they are package data)."""
    shipped = {REFERENCE_MONITOR: RuleSet()}
    folder = importlib.resources.files("rolltape.processors.rules") / "sets"
    for name, file in _SHIPPED_FILES.items():
        with importlib.resources.as_file(folder / file) as path:
            rules = RuleSet.from_file(path)
        if rules.name != name:
            raise RuleSetError(f"shipped rule set {file} is named {rules.name!r}, not {name!r}")
        shipped[name] = rules
    return shipped


def load_ruleset(spec: str | Path) -> RuleSet:
    """A rule set from a JSON file, or by the name of a shipped one (a file of that name wins)."""
    path = Path(spec)
    if not path.exists() and str(spec) in shipped_rulesets():
        return shipped_rulesets()[str(spec)]
    if not path.exists():
        raise RuleSetError(
            f"no rule-set file {spec} and no shipped rule set of that name; shipped: "
            f"{', '.join(shipped_rulesets())}"
        )
    return RuleSet.from_file(path)


def task_family(task: str) -> str:
    """The part of a task before its first `/`: `digits-cnn/dead_relu` is of `digits-cnn`."""
    return task.split("/", 1)[0]


class RuleBook(BaseModel):
    """One rule set per task family and one for every other task. Frozen, like its rule sets: a
    changed book is a new judge configuration (its label changes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: Mapping[str, RuleSet] = {}
    """Task family (a session's task up to its first `/`) -> the rule set that judges it."""
    fallback: RuleSet = RuleSet()
    """For every task not listed, and for sessions whose task is not known."""

    @classmethod
    def only(cls, rules: RuleSet) -> RuleBook:
        """One rule set for every task."""
        return cls(fallback=rules)

    def for_task(self, task: str | None) -> RuleSet:
        """The rule set that judges sessions of `task`."""
        if task is None:
            return self.fallback
        return self.tasks.get(task_family(task), self.fallback)

    @functools.cached_property
    def label(self) -> str:
        """`family=name@digest12, ..., *=name@digest12`: what a replay reports it judged with."""
        parts = [f"{family}={rules.label}" for family, rules in sorted(self.tasks.items())]
        return ", ".join([*parts, f"*={self.fallback.label}"])


def default_rulebook() -> RuleBook:
    """Each shipped calibrated rule set judges the task it was calibrated on (the reference
    task, `digits-cnn`, by `digits-cnn-calibrated`); every other task the reference monitor's."""
    calibrated = [r for r in shipped_rulesets().values() if r.calibration is not None]
    return RuleBook(tasks={task_family(r.calibration.task): r for r in calibrated if r.calibration})
