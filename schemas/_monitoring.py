"""What the training monitor records besides per-epoch metrics: the model it saw and the live
check at the end of the run.

Invariant: these events are written only by the monitor (its own principal and recorder, on the
metrics stream) from the live model; the training judge replays the logged architecture edits
against them and never against a spec the agent reports.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

REFERENCE_TASK: Final = "digits-cnn"
"""The reference training task's family: the harness records its runs as `digits-cnn/<scenario>`,
and its calibrated rule set judges them (named here so the CLI knows it without loading torch)."""


class LayerSpec(BaseModel):
    """One leaf module of the model, in module order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """The module's qualified name in the model (`blocks.0.conv`)."""
    type: str
    """Its class name (`Conv2d`, `ReLU`, `BatchNorm2d`)."""
    parameters: int = Field(ge=0)


class ModelSpec(BaseModel):
    """The structure of the model the monitor hooks, at a moment of the run.

    `activation`, `weight_layers` and `batchnorm_layers` are the summary the judge's
    architecture replay compares: a logged `swap_activation` sets `activation`, `add_block`
    adds a weight layer, `remove_block` removes one, `add_batchnorm` requires batch norm.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    epoch: int = Field(ge=0)
    """The first epoch trained with this structure (for `final`: the number of epochs run)."""
    phase: Literal["attach", "changed", "final"]
    """attach: a model handed to the monitor (at the start, or a restart from an edited spec);
    changed: the monitor found modules added or removed in the hooked model; final: at the end."""
    layers: tuple[LayerSpec, ...]
    activations: dict[str, int]
    """Activation kind (`relu`, `leaky_relu`, `gelu`, ...) -> number of modules."""
    activation: str | None
    """The one activation kind when all activation modules share it, `mixed` when they do not,
    None when the model has no activation modules (activations applied as functions are
    invisible to module hooks)."""
    weight_layers: int = Field(ge=0)
    """Convolution and linear modules."""
    batchnorm_layers: int = Field(ge=0)
    parameter_count: int = Field(ge=0)
    state_digest: str | None = None
    """sha256 over the state dict (names, dtypes, shapes, bytes in name order)."""


class LiveCheck(BaseModel):
    """The monitor's check of the model as it stands at the end of the run: a forward and backward
    pass on the same fixed held-out probe batch it measured after every epoch, and a validation
    pass, with the weights the run ends with."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epoch: int = Field(ge=0)
    """The last epoch the monitor measured."""
    weights_epoch: int = Field(ge=0)
    """The epoch whose end-of-epoch weights the model should hold: the last one, or the one the
    monitor restored from its best-validation checkpoint."""
    probe_samples: int = Field(ge=1)
    loss: float
    per_layer_grad_norm: dict[str, float]
    val_loss: float | None = None
    val_acc: float | None = None
    """Measured by the monitor on the validation loader: the accuracy the judge scores."""
