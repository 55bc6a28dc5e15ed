"""Payload models, one per event type.

Invariant: every model is frozen and forbids unknown fields when written; readers that must
tolerate fields added by a newer producer use `parse_payload(..., lenient=True)`. Float fields
accept the canonical non-finite tokens ("NaN", "Infinity", "-Infinity") and give floats back.
Field names of `Metric` and `Decision` follow env_rl's (its monitor's `EpochMetrics` and its
`DECISION_SCHEMA`: zubairashfaque/environment_rl @633b4e7, `src/env_rl/monitor/hooks.py` and
`src/env_rl/harness/prompt.py`), so logs of the monitor and judge we learn from map onto ours one
to one.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
)

from rolltape.schemas._checkpoint import Checkpoint
from rolltape.schemas._content_fields import sealed_field, unset
from rolltape.schemas._cron import CronJob, CronRun
from rolltape.schemas._derived import DERIVED_PAYLOAD_MODELS, RuleId
from rolltape.schemas._erasure import Erasure
from rolltape.schemas._errors import PayloadError
from rolltape.schemas._evaluation import Evaluation
from rolltape.schemas._lineage import LINEAGE_PAYLOAD_MODELS
from rolltape.schemas._monitoring import LiveCheck, ModelSpec
from rolltape.schemas._prompt_decisions import PromptDecision
from rolltape.schemas._prompts import PromptPromotion, PromptVersion
from rolltape.schemas._review import REVIEW_PAYLOAD_MODELS
from rolltape.schemas._rule_figures import RulesetEvaluation
from rolltape.schemas._world import WorldSnapshot


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
    sealed: str | None = sealed_field()


class Turn(BaseModel):
    """One message of the conversation (tool output is a ToolResult, not a turn).

    Fields added after turns were first written are left out of a dump while unset, so a turn
    without them is written, and hashes, exactly as an older version wrote it (an importer
    re-run after an upgrade repeats its records instead of forking the chain)."""

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
    prompt_token_ids: tuple[int, ...] | None = Field(default=None, exclude_if=unset)
    """The prompt's token ids as the serving engine saw them (vLLM `return_token_ids`): with
    `token_ids`, the exact sequence a trainer needs, no re-tokenising."""
    logprobs: tuple[float, ...] | None = Field(default=None, exclude_if=unset)
    """The sampled tokens' log-probabilities, one per token of the reply, when returned."""
    finish_reason: str | None = Field(default=None, exclude_if=unset)
    model: str | None = Field(default=None, exclude_if=unset)
    """The model that answered, as the server named it."""
    model_version: str | None = Field(default=None, exclude_if=unset)
    """The version of the model the endpoint serves, as the model table names it
    (`ModelEndpoint.version`): which training run's checkpoint sampled this reply."""
    latency_ms: float | None = Field(default=None, ge=0, exclude_if=unset)
    """From the request to the complete reply (the last chunk of a stream)."""
    summary: bool | None = Field(default=None, exclude_if=unset)
    """True for a turn that stands for earlier turns a context compressor replaced (the Hermes
    compressor's `[CONTEXT SUMMARY]:` turn): not something the user said."""
    sealed: str | None = sealed_field()


class ToolCall(BaseModel):
    """The model asked for a tool; `id` links the result back, never the position."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = None
    """The model's argument text when it was not a JSON object (kept as evidence, not fixed)."""
    sealed: str | None = sealed_field()


class ToolResult(BaseModel):
    """What a tool returned for the call with `call_id`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    call_id: str = Field(min_length=1)
    content: str
    success: bool = True
    error: str | None = None
    duration_ms: float | None = Field(default=None, ge=0)
    sealed: str | None = sealed_field()


class ModelError(BaseModel):
    """A model call that failed: what the caller got instead of a reply (re-raised to it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    error_type: str
    """The exception's class name (e.g. InternalServerError, APIConnectionError)."""
    message: str
    status: int | None = None
    """The HTTP status, when the server answered."""
    model: str | None = None
    """The model that was asked."""
    latency_ms: float | None = Field(default=None, ge=0)
    partial_content: str | None = None
    """What a stream delivered before it broke."""
    sealed: str | None = sealed_field()


class ToolParseError(BaseModel):
    """A block of a reply that looked like a tool call in the model family's format but could
    not be read as one; the calls around it were still recorded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str
    raw: str
    error: str
    offset: int = Field(ge=0)
    sealed: str | None = sealed_field()


class Metric(BaseModel):
    """Epoch-level training diagnostics, measured by the training monitor's hooks.

    Field names of the first block follow env_rl's `EpochMetrics` (zubairashfaque/environment_rl
    @633b4e7, `src/env_rl/monitor/hooks.py`), so logs of the monitor we learn from map onto ours
    one to one; the rest are what rolltape's monitor measures besides (see
    docs/training-monitor.md for every estimator). None means "not measured", never zero.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    DIAGNOSTICS: ClassVar[tuple[str, ...]] = (
        "train_loss",
        "val_loss",
        "train_acc",
        "val_acc",
        "max_layer_grad_norm",
        "min_layer_grad_norm",
        "dead_relu_fraction",
        "saturated_fraction",
        "update_to_param_ratio",
        "grad_noise_scale",
    )
    """The scalar diagnostics of an epoch, in the order people read them: the rules check
    each for a non-finite value, and a decision policy is shown each that was measured."""

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

    samples: int | None = Field(default=None, ge=0)
    """Training examples the loss saw in the epoch."""
    dead_relu_per_module: dict[str, float] = Field(default_factory=dict)
    """Exact-zero output fraction of each ReLU-family activation module (max: dead_relu_fraction)."""
    saturated_fraction: float | None = None
    """For activations that are never exactly zero (GELU, SiLU, sigmoid, ...): the largest, over
    those modules, fraction of inputs where the activation's slope is below the monitor's
    saturation threshold (units that pass almost no gradient)."""
    saturated_per_module: dict[str, float] = Field(default_factory=dict)
    activation_p50: float | None = None
    """Median of the activation modules' outputs (sampled every step, see the monitor's docs)."""
    activation_p99: float | None = None
    grad_noise_scale_simple: float | None = None
    """McCandlish et al.'s B_simple = tr(Sigma) / |G|^2 in examples, from the per-step batch
    gradients and their epoch mean; None when the estimate is not positive."""
    probe_loss: float | None = None
    """Loss on the monitor's fixed held-out probe batch with the end-of-epoch weights."""
    probe_grad_norm: dict[str, float] = Field(default_factory=dict)
    """Per-parameter gradient norms on the probe batch with the end-of-epoch weights: the
    reference the end-of-run live check is compared with."""


EventType = Literal["hyperparameter_change", "architecture_change", "rule_triggered_no_action"]
RemedyDirection = Literal[
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
EditOp = Literal["swap_activation", "add_block", "remove_block", "add_batchnorm", "none"]
EditTarget = Literal["relu", "leaky_relu", "gelu", "none"]


class RemedyParams(BaseModel):
    """What a decision changes. The first three fields are env_rl's strict `remedy_params`
    (`lr_new`, `edit_op`, `edit_to` of its `DECISION_SCHEMA`, `src/env_rl/harness/prompt.py`);
    rolltape adds `add_batchnorm` as an edit and the new batch size and clipping norm as values,
    so the judge can replay every hyperparameter the harness changes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lr_new: float | None
    edit_op: EditOp
    edit_to: EditTarget
    batch_size_new: int | None = Field(default=None, ge=1)
    clip_grad_norm: float | None = Field(default=None, gt=0)
    """Gradient clipping (max total norm) from the next step on; None: unchanged."""


class Decision(BaseModel):
    """A training decision in env_rl's strict schema (`DECISION_SCHEMA` of
    zubairashfaque/environment_rl @633b4e7, `src/env_rl/harness/prompt.py`), plus its epoch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epoch: int = Field(ge=0)
    event_type: EventType
    cites: tuple[RuleId, ...]
    justification: str
    remedy_direction: RemedyDirection
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
    sealed: str | None = sealed_field()


class SessionEnded(BaseModel):
    """Last event of each of a session's chains.

    On the events stream it names the other streams the session wrote (`streams`); each of those
    got its own session_ended first, so a processor reading several topics knows when it has seen
    all of a session without waiting on a clock.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal["completed", "interrupted", "failed"]
    outcome: dict[str, Any] = Field(default_factory=dict)
    """What the run came to, in the producer's terms. `outcome["content_missing"]` (a
    CONTENT_MISSING text) flags a session whose content never reached the recorder, saying what
    was missing and which setting would send it: the reward filters never accept it."""
    error: str | None = None
    streams: tuple[str, ...] = ()
    sealed: str | None = sealed_field()


CONTENT_MISSING: Final = "content_missing"
"""The `SessionEnded.outcome` key a producer sets when a session's content did not arrive (an
OpenTelemetry instrumentation with content capture off, say), its value saying what and why."""


class SessionResumed(BaseModel):
    """A writer takes over a session's chain on this stream from the head it read in the log (a
    restarted agent, another process). It is written first and read back: the new writer goes on
    only if no other record reached the chain in between, and every reader sets aside what the
    old writer appends afterwards (one writer per chain, decided by log order)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    writer: str
    """Who resumed: the recording process (host, pid) and a random id of its recorder."""
    head_seq: int = Field(ge=0)
    """The seq of the head it read (this record's prev_hash is that head's hash)."""


#: event type -> payload model. The envelope's `type` selects the model.
PAYLOAD_MODELS: dict[str, type[BaseModel]] = {
    "session_started": SessionStarted,
    "turn": Turn,
    "tool_call": ToolCall,
    "tool_result": ToolResult,
    "model_error": ModelError,
    "tool_parse_error": ToolParseError,
    "metric": Metric,
    "model_spec": ModelSpec,
    "live_check": LiveCheck,
    "decision": Decision,
    "reward": Reward,
    "feedback": Feedback,
    "session_ended": SessionEnded,
    "session_resumed": SessionResumed,
    **DERIVED_PAYLOAD_MODELS,
    **REVIEW_PAYLOAD_MODELS,
    "checkpoint": Checkpoint,
    "erasure": Erasure,
    "cron_job": CronJob,
    "cron_run": CronRun,
    "evaluation": Evaluation,
    "ruleset_evaluation": RulesetEvaluation,
    "world_snapshot": WorldSnapshot,
    "prompt_version": PromptVersion,
    "prompt_promotion": PromptPromotion,
    "prompt_decision": PromptDecision,
    **LINEAGE_PAYLOAD_MODELS,
}


def parse_payload(event_type: str, data: Any, *, lenient: bool = False) -> BaseModel:
    """Validate a payload mapping against its type's model.

    `lenient` ignores fields this version does not know (a newer producer added them), at every
    depth: a tool spec inside `session_started` may carry new fields too.
    """
    model = PAYLOAD_MODELS.get(event_type)
    if model is None:
        raise PayloadError(f"unknown event type {event_type!r}; known: {sorted(PAYLOAD_MODELS)}")
    try:
        # The model's validator itself: `model_validate` only forwards to it, and the wrapper
        # was a third of the cost of parsing a turn (every reader parses every payload it uses).
        validated = model.__pydantic_validator__.validate_python(
            data, extra="ignore" if lenient else None
        )
        return cast(BaseModel, validated)
    except ValidationError as exc:
        raise PayloadError(f"invalid {event_type} payload: {exc}") from exc
