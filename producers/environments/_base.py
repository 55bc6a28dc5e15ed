"""What an environment is: items, how an item becomes a prompt, the tools and where they run,
and how a result is scored.

In the spirit of the Hermes agent's environments (and Atropos's): `get_next_item`,
`format_prompt`, the tools, a working directory per rollout prepared by `setup_workdir`, and
`compute_reward(item, result, ctx)` returning a reward with its shape and metadata. Rewards are
recorded as `reward` events of the rollout's session, so a replay re-scores from them (the
`final_reward` and `composite` reward functions read them). `judges(item, result, reward)` adds
judges as agents (a single call, or a tools-using agent grading inside the world the policy
left) and `combine` folds their verdicts into the reward.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from rolltape.producers._errors import EnvError
from rolltape.producers.agent import AgentResult, Tool, file_tools
from rolltape.schemas import JudgeSpec, Verdict

if TYPE_CHECKING:
    from rolltape.producers._session import Session

ITEM_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"


class Item(BaseModel):
    """One task of an environment. `data` is the environment's own (a repository to fix, a
    question and its answer)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    item_id: str = Field(pattern=ITEM_ID_PATTERN)
    split: str = "train"
    data: dict[str, Any] = Field(default_factory=dict)


class RewardResult(BaseModel):
    """A scored rollout: `reward` with its shape, the components of a composite, and metadata
    (what the scorer saw: test output, coverage...)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reward: float
    shape: Literal["binary", "continuous", "composite"]
    passed: bool
    components: dict[str, float] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


def binary(passed: bool, **metadata: Any) -> RewardResult:
    """1.0 or 0.0."""
    return RewardResult(
        reward=1.0 if passed else 0.0, shape="binary", passed=passed, metadata=metadata
    )


def continuous(value: float, *, passed: bool | None = None, **metadata: Any) -> RewardResult:
    """A value in [0, 1]; passed when positive unless said otherwise."""
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"a continuous reward is in [0, 1], not {value}")
    return RewardResult(
        reward=value,
        shape="continuous",
        passed=value > 0 if passed is None else passed,
        metadata=metadata,
    )


def composite(
    weighted: Mapping[str, tuple[float, float]], *, passed: bool, **metadata: Any
) -> RewardResult:
    """The weighted sum of components: `{name: (weight, value)}`. The components are recorded
    with the reward, so the `composite` reward function can recompute it on replay."""
    total = math.fsum(weight * value for weight, value in weighted.values())
    return RewardResult(
        reward=total,
        shape="composite",
        passed=passed,
        components={name: value for name, (_, value) in weighted.items()},
        metadata=metadata,
    )


@dataclass(frozen=True)
class RolloutContext:
    """Where one rollout runs: its working directory and the session recording it."""

    item: Item
    workdir: Path
    session: Session
    sample: int = 0
    """Which sample of the item this is (serve runs `group_size` per item)."""


class Environment(ABC):
    """The base of every environment: an ABC, because environments share the cursor over
    the train items and the default tools and workdir. Subclass it, set `name`, implement
    `items`, `format_prompt` and `compute_reward`, and register the class with
    `register_environment` (or name it `package.module:Class`)."""

    name: ClassVar[str]
    system_prompt: ClassVar[str | None] = None
    max_iterations: ClassVar[int] = 10
    group_size: ClassVar[int] = 4
    """Rollouts per item when serving (an Atropos group)."""
    pass_reward: ClassVar[float] = 1.0
    """The reward a passing rollout earns at least (the prompt loop's pass of a test case)."""
    judge_versions: ClassVar[Mapping[str, str]] = {}
    """The judges `judges` may return, by name, with their versions: the worker and replay can
    run them on recorded rollouts too (selected by name in ROLLTAPE_LLM_JUDGES)."""

    def __init__(self) -> None:
        self._cursor = 0

    def prompt_target(self) -> str:
        """The prompt target of this environment's agent system prompt (`rolltape prompts`);
        an instance's name, since an items file names its environment when it is opened."""
        return f"env.{self.name}.system"

    @abstractmethod
    def items(self, split: str = "train") -> Sequence[Item]:
        """Every item of a split, in a fixed order (evaluation runs all of them)."""

    async def get_next_item(self) -> Item:
        """The next training item, cycling through the train split."""
        items = self.items("train")
        if not items:
            raise EnvError(f"environment {self.name} has no train items")
        item = items[self._cursor % len(items)]
        self._cursor += 1
        return item

    @abstractmethod
    def format_prompt(self, item: Item) -> str:
        """The user message the agent starts from."""

    def setup_workdir(self, item: Item, workdir: Path) -> None:  # noqa: B027 (optional hook)
        """Prepare the rollout's working directory (empty by default)."""

    def tools(self, item: Item, workdir: Path) -> list[Tool]:
        """The agent's tools, bound to the rollout's workdir (files by default)."""
        return file_tools(workdir)

    @abstractmethod
    async def compute_reward(
        self, item: Item, result: AgentResult, ctx: RolloutContext
    ) -> RewardResult:
        """Score the rollout from the workdir and the agent's result."""

    def judges(self, item: Item, result: AgentResult, reward: RewardResult) -> list[JudgeSpec]:
        """The judges of one rollout (rolltape.schemas.JudgeSpec, criteria rendered from the
        item and what the agent did), run after the world is recorded and the programmatic
        reward computed; none by default. Return [] when the programmatic reward settles the
        grade already (conditional judging). A judge with the `policy` model judges with the
        rollout's own endpoint."""
        return []

    def combine(
        self, item: Item, reward: RewardResult, verdicts: Mapping[str, Verdict]
    ) -> RewardResult:
        """The rollout's reward from the programmatic one and the judges' verdicts (by judge
        name, every one `ok`: a judge that failed fails the rollout before this is called). By
        default the programmatic reward stands."""
        return reward
