"""Programmatic reward functions: pure judges that score a finished agent session.

They plug in like LLM judges (a name, a version, a verdict), but run inline in the session's
step because they are pure and fast. A function that cannot score a session says why in an
error verdict; it never returns a silent 0.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar

from rolltape.processors._errors import ProcessorError
from rolltape.processors.judges._transcript import Transcript
from rolltape.schemas import Verdict
from rolltape.schemas.plugins import Registry


class RewardUnavailable(ProcessorError, ValueError):
    """The session lacks what this reward needs (the message says what)."""


class RewardFunction(ABC):
    """The base of every reward function: an ABC, because they share `verdict`, which turns
    scores into a verdict (and a `RewardUnavailable` or a non-finite score into an error one).
    Subclass it, set `name` and `version`, implement `score`, and register an instance with
    `register_reward`."""

    name: ClassVar[str]
    version: ClassVar[str]

    @abstractmethod
    def score(self, transcript: Transcript) -> dict[str, float]:
        """The scores of a finished session, by name; `RewardUnavailable` saying what is
        missing when the session lacks what this reward needs."""

    def verdict(self, transcript: Transcript) -> Verdict:
        """The score as a verdict of judge `reward:<name>`; never raises for a bad session."""
        judge = f"reward:{self.name}"
        try:
            scores = self.score(transcript)
        except RewardUnavailable as exc:
            return Verdict(judge=judge, judge_version=self.version, status="error", error=str(exc))
        bad = [k for k, v in scores.items() if not math.isfinite(v)]
        if bad:
            return Verdict(
                judge=judge,
                judge_version=self.version,
                status="error",
                error=f"non-finite score(s) {', '.join(bad)}",
            )
        return Verdict(judge=judge, judge_version=self.version, status="ok", scores=scores)


class TaskPass(RewardFunction):
    """1.0 when the session ended completed with `outcome["passed"]` true, else 0.0."""

    name = "task_pass"
    version = "rolltape.rewards.task_pass/1"

    def score(self, transcript: Transcript) -> dict[str, float]:
        passed = transcript.outcome.get("passed")
        if not isinstance(passed, bool):
            raise RewardUnavailable("session_ended.outcome has no boolean 'passed'")
        return {"reward": 1.0 if passed and transcript.status == "completed" else 0.0}


class FinalReward(RewardFunction):
    """The last `reward` event named "reward" (a continuous reward the environment recorded)."""

    name = "final_reward"
    version = "rolltape.rewards.final_reward/1"

    def score(self, transcript: Transcript) -> dict[str, float]:
        values = [r.value for r in transcript.rewards if r.name == "reward"]
        if not values:
            raise RewardUnavailable("the session recorded no reward named 'reward'")
        return {"reward": values[-1]}


class Composite(RewardFunction):
    """A weighted sum of the components of the last reward (missing components are an error)."""

    name = "composite"
    version = "rolltape.rewards.composite/1"

    def __init__(self, weights: Mapping[str, float] | None = None) -> None:
        self.weights = dict(weights or {})

    def score(self, transcript: Transcript) -> dict[str, float]:
        if not transcript.rewards:
            raise RewardUnavailable("the session recorded no reward")
        components = transcript.rewards[-1].components
        weights = self.weights or {k: 1.0 for k in components}
        missing = sorted(set(weights) - set(components))
        if missing or not weights:
            raise RewardUnavailable(f"reward components missing: {', '.join(missing) or 'all'}")
        total = math.fsum(weights[k] * components[k] for k in sorted(weights))
        return {"reward": total, **{f"component.{k}": components[k] for k in sorted(weights)}}


REWARDS = Registry[RewardFunction]("reward function")
"""Reward functions by name, selectable in ROLLTAPE_REWARDS."""
REWARDS.register(TaskPass.name, TaskPass())
REWARDS.register(FinalReward.name, FinalReward())
REWARDS.register(Composite.name, Composite())


def register_reward(function: RewardFunction, *, replace: bool = False) -> None:
    """Make `function` selectable by its name in ROLLTAPE_REWARDS (a plugin module calls this);
    a name that is taken is refused (`DuplicatePluginError`) unless `replace`."""
    REWARDS.register(function.name, function, replace=replace)
