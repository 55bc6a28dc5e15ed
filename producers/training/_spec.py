"""The structure of a torch model as the monitor sees it (a ModelSpec payload)."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Literal

import torch
from torch import nn

from rolltape.producers.training._kinds import BATCHNORM, WEIGHT_LAYERS, activation_kind
from rolltape.schemas import LayerSpec, ModelSpec


def layers_of(model: nn.Module) -> tuple[LayerSpec, ...]:
    """Leaf modules in module order with their own parameter counts."""
    return tuple(
        LayerSpec(
            name=name,
            type=type(module).__name__,
            parameters=sum(p.numel() for p in module.parameters(recurse=False)),
        )
        for name, module in model.named_modules()
        if name and not any(True for _ in module.children())
    )


def state_digest(model: nn.Module) -> str:
    """sha256 over the state dict: each entry's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        value = tensor.detach().cpu().contiguous()
        digest.update(f"{name}\0{value.dtype}\0{tuple(value.shape)}\0".encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def model_spec(
    model: nn.Module,
    epoch: int,
    phase: Literal["attach", "changed", "final"],
    *,
    with_digest: bool,
) -> ModelSpec:
    """The ModelSpec payload of `model` at `epoch`: leaf layers, activation kinds ("mixed" when
    several), layer and parameter counts. `with_digest` adds `state_digest`, which copies every
    tensor to the CPU: the monitor pays that only when it attaches and at the end."""
    kinds: Counter[str] = Counter()
    weight_layers = batchnorm_layers = 0
    for module in model.modules():
        kind = activation_kind(module)
        if kind is not None:
            kinds[kind] += 1
        weight_layers += isinstance(module, WEIGHT_LAYERS)
        batchnorm_layers += isinstance(module, BATCHNORM)
    activation = None if not kinds else next(iter(kinds)) if len(kinds) == 1 else "mixed"
    return ModelSpec(
        epoch=epoch,
        phase=phase,
        layers=layers_of(model),
        activations=dict(sorted(kinds.items())),
        activation=activation,
        weight_layers=weight_layers,
        batchnorm_layers=batchnorm_layers,
        parameter_count=sum(p.numel() for p in model.parameters()),
        state_digest=state_digest(model) if with_digest else None,
    )
