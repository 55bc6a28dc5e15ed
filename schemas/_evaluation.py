"""An environment's evaluation, recorded as an event: which rollouts, how they scored."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EvaluatedItem(BaseModel):
    """One item of an evaluation: the session its rollout recorded and the reward it earned."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    item_id: str
    session_id: str
    reward: float | None = None
    """None when the rollout failed before it could be scored (the model endpoint failed)."""
    passed: bool | None = None
    error: str | None = None


class Evaluation(BaseModel):
    """Payload of an `evaluation` event: one split of an environment, run once per item."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    environment: str
    split: str
    model: str
    items: int = Field(ge=0)
    scored: int = Field(ge=0)
    passed: int = Field(ge=0)
    mean_reward: float | None = None
    """Over the scored rollouts; None when none was scored."""
    pass_rate: float | None = None
    rollouts: tuple[EvaluatedItem, ...] = ()
