"""Payload models, one per event type.

Invariant: every model is frozen and forbids unknown fields when written; readers that must
tolerate fields added by a newer producer use `parse_payload(..., lenient=True)`. Float fields
accept the canonical non-finite tokens ("NaN", "Infinity", "-Infinity") and give floats back.
Field names of `Metric` and `Decision` follow REFERENCE.md section 1 so logs of the monitor and
judge we learn from map onto ours one to one.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rolltape.schemas._derived import DERIVED_PAYLOAD_MODELS, RuleId
from rolltape.schemas._errors import PayloadError


class ToolSpec(BaseModel):
    """A tool the session declares, with the JSON Schema of its arguments."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    """The name the model must use to call it; calls to other names are hallucinations."""
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    """JSON Schema of the arguments object."""


class SessionStarted(BaseModel):
    """First event of a session's events stream: what was asked, with which tools and model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: str
    kind: Literal["agent", "training"] = "agent"
    tools: tuple[ToolSpec, ...] = ()
    model: str | None = None
    run_config: dict[str, Any] = Field(default_factory=dict)
    tags: tuple[str, ...] = ()
    trainable: bool = True
    """False for sessions that must never become training data (an LLM judge's own conversation)."""
    linked_session_id: str | None = None
    """The session this one is about (a judge's conversation links to the judged session)."""
    group_id: str | None = None
    """Sessions sharing a group id answer the same prompt (Atropos groups)."""


class Turn(BaseModel):
    """One message of the conversation (tool output is a ToolResult, not a turn)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: str
    reasoning: str | None = None
    token_ids: tuple[int, ...] | None = None
    """Token ids as the serving engine produced them, when known; exports prefer them."""
    prompt_tokens: int | None = Field(default=None, ge=0)
    """Prompt size the serving engine reported for this reply (usage), when known."""
    completion_tokens: int | None = Field(default=None, ge=0)
    """Reply size the serving engine reported (usage), when known."""


class ToolCall(BaseModel):
    """The model asked for a tool; `id` links the result back, never the position."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = None
    """The model's argument text when it was not a JSON object (kept as evidence, not fixed)."""


class ToolResult(BaseModel):
    """What a tool returned for the call with `call_id`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    call_id: str = Field(min_length=1)
    content: str
    success: bool = True
    error: str | None = None
    duration_ms: float | None = Field(default=None, ge=0)


class Metric(BaseModel):
    """Epoch-level training diagnostics, measured by hooks (REFERENCE.md section 1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epoch: int = Field(ge=0)
    steps: int | None = Field(default=None, ge=0)
    """Optimizer steps in the epoch; 0 means no data, never zero gradients."""
    train_loss: float | None = None
    val_loss: float | None = None
    train_acc: float | None = None
    val_acc: float | None = None
    max_layer_grad_norm: float | None = None
    min_layer_grad_norm: float | None = None
    per_layer_grad_norm: dict[str, float] = Field(default_factory=dict)
    dead_relu_fraction: float | None = None
    update_to_param_ratio: float | None = None
    grad_noise_scale: float | None = None
    lr: float | None = None
    batch_size: int | None = Field(default=None, ge=1)


class RemedyParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    lr_new: float | None
    edit_op: Literal["swap_activation", "add_block", "remove_block", "none"]
    edit_to: Literal["relu", "leaky_relu", "gelu", "none"]


class Decision(BaseModel):
    """A training decision in the strict schema of REFERENCE.md section 1, plus its epoch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epoch: int = Field(ge=0)
    event_type: Literal["hyperparameter_change", "architecture_change", "rule_triggered_no_action"]
    cites: tuple[RuleId, ...]
    justification: str
    remedy_direction: Literal[
        "decrease_lr",
        "increase_lr",
        "decrease_batch_size",
        "increase_batch_size",
        "add_capacity",
        "swap_activation",
        "add_bn_or_residual",
        "stop",
        "none",
    ]
    remedy_params: RemedyParams


class Reward(BaseModel):
    """A scalar reward for the session (or one component of a composite)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: float
    name: str = "reward"
    components: dict[str, float] = Field(default_factory=dict)
    source: str | None = None


class Feedback(BaseModel):
    """Human or user feedback on the session or on one of its events."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = "user"
    score: float | None = None
    text: str | None = None
    about_seq: int | None = Field(default=None, ge=0)


class SessionEnded(BaseModel):
    """Last event of each of a session's chains.

    On the events stream it names the other streams the session wrote (`streams`); each of those
    got its own session_ended first, so a processor reading several topics knows when it has seen
    all of a session without waiting on a clock.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal["completed", "interrupted", "failed"]
    outcome: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    streams: tuple[str, ...] = ()


#: event type -> payload model. The envelope's `type` selects the model.
PAYLOAD_MODELS: dict[str, type[BaseModel]] = {
    "session_started": SessionStarted,
    "turn": Turn,
    "tool_call": ToolCall,
    "tool_result": ToolResult,
    "metric": Metric,
    "decision": Decision,
    "reward": Reward,
    "feedback": Feedback,
    "session_ended": SessionEnded,
    **DERIVED_PAYLOAD_MODELS,
}


def _lenient(model: type[BaseModel]) -> type[BaseModel]:
    config = ConfigDict(**{**model.model_config, "extra": "ignore"})
    return type(f"Lenient{model.__name__}", (model,), {"model_config": config})


_LENIENT_MODELS = {name: _lenient(model) for name, model in PAYLOAD_MODELS.items()}


def parse_payload(event_type: str, data: Any, *, lenient: bool = False) -> BaseModel:
    """Validate a payload mapping against its type's model.

    `lenient` ignores fields this version does not know (a newer producer added them).
    """
    models = _LENIENT_MODELS if lenient else PAYLOAD_MODELS
    model = models.get(event_type)
    if model is None:
        raise PayloadError(f"unknown event type {event_type!r}; known: {sorted(PAYLOAD_MODELS)}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise PayloadError(f"invalid {event_type} payload: {exc}") from exc
