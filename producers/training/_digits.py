"""The reference task: a small CNN on scikit-learn's bundled 8x8 digits (1,797 images, nothing
downloaded), seeded and fast on a CPU.

The network is built from an `ArchitectureSpec`, so the harness can apply the playbook's
structural remedies by restarting from an edited spec: blocks are named (`blocks.<i>.conv`,
`blocks.<i>.bn`, `blocks.<i>.act`) and batch norm replaces an Identity in place, so an added
block or inserted batch norm leaves every other parameter's name and shape as it was and the
trained weights carry over.
"""

from __future__ import annotations

import functools
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

Activation = Literal["relu", "leaky_relu", "gelu", "sigmoid", "tanh"]
CLASSES = 10
DEAD_BIAS = 20.0


class ArchitectureSpec(BaseModel):
    """The structure the harness builds and edits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    blocks: int = Field(default=3, ge=1, le=16)
    width: int = Field(default=32, ge=1, le=256)
    activation: Activation = "relu"
    batchnorm: bool = False


def make_activation(kind: str) -> nn.Module:
    """A fresh module for an `Activation` name (leaky_relu with slope 0.01); ValueError listing
    the names otherwise. None has parameters, so swapping one keeps every trained weight."""
    if kind == "relu":
        return nn.ReLU()
    if kind == "leaky_relu":
        return nn.LeakyReLU(0.01)
    if kind == "gelu":
        return nn.GELU()
    if kind == "sigmoid":
        return nn.Sigmoid()
    if kind == "tanh":
        return nn.Tanh()
    raise ValueError(f"unknown activation {kind!r}; known: relu, leaky_relu, gelu, sigmoid, tanh")


class Block(nn.Module):
    """conv -> bn -> act at the spec's width, padded so 8x8 stays 8x8. The attribute names are
    the parameter names weight carry-over across spec edits relies on: keep them."""

    def __init__(self, channels_in: int, spec: ArchitectureSpec) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels_in, spec.width, 3, padding=1)
        self.bn: nn.Module = nn.BatchNorm2d(spec.width) if spec.batchnorm else nn.Identity()
        self.act = make_activation(spec.activation)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.act(self.bn(self.conv(x)))
        return out


class DigitsNet(nn.Module):
    """Conv blocks at 8x8, then a 2x2 average pool and a linear head over 10 classes."""

    def __init__(self, spec: ArchitectureSpec) -> None:
        super().__init__()
        self.spec = spec
        self.blocks = nn.ModuleList(
            Block(1 if i == 0 else spec.width, spec) for i in range(spec.blocks)
        )
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.head = nn.Linear(spec.width * 4, CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        out: Tensor = self.head(self.pool(x).flatten(1))
        return out


def build_model(spec: ArchitectureSpec, *, seed: int, dead_units: float = 0.0) -> DigitsNet:
    """A freshly initialised network. `dead_units` kills that fraction of every block's
    channels from the start (their conv bias is set far below anything the inputs can
    outweigh, so a ReLU never lets them through): the dead-ReLU scenario."""
    torch.manual_seed(seed)
    model = DigitsNet(spec)
    if dead_units:
        with torch.no_grad():
            for block in model.blocks:
                assert isinstance(block, Block) and block.conv.bias is not None
                bias = block.conv.bias
                killed = torch.randperm(bias.numel())[: round(dead_units * bias.numel())]
                bias[killed] = -DEAD_BIAS
    return model


def carry_weights(old: nn.Module, new: nn.Module) -> tuple[int, int]:
    """Copy every state entry of `old` whose name and shape `new` has; returns (carried, new
    entries left as initialised)."""
    old_state = old.state_dict()
    target = new.state_dict()
    carried = {k: v for k, v in old_state.items() if k in target and target[k].shape == v.shape}
    new.load_state_dict(carried, strict=False)
    return len(carried), len(target) - len(carried)


class DigitsData:
    """The digits split once, seeded: 1,197 train, 300 validation, 300 test images."""

    def __init__(self, seed: int = 0, train_subset: int | None = None) -> None:
        x, y = _digits()
        order = np.random.RandomState(seed).permutation(len(y))
        x, y = x[order], y[order]
        self.train = TensorDataset(x[:1197][:train_subset], y[:1197][:train_subset])
        self.val = TensorDataset(x[1197:1497], y[1197:1497])
        self.test = TensorDataset(x[1497:], y[1497:])
        self.seed = seed

    def train_loader(self, batch_size: int) -> DataLoader[tuple[Tensor, ...]]:
        """Shuffled with a generator of its own, so a rebuilt loader (a batch-size change) is
        as reproducible as the first."""
        generator = torch.Generator().manual_seed(self.seed + batch_size)
        return DataLoader(self.train, batch_size=batch_size, shuffle=True, generator=generator)

    def val_loader(self) -> DataLoader[tuple[Tensor, ...]]:
        return DataLoader(self.val, batch_size=300)

    def accuracy(self, model: nn.Module, split: Literal["val", "test"] = "test") -> float:
        data = self.test if split == "test" else self.val
        x, y = data.tensors
        was_training = model.training
        model.eval()
        with torch.no_grad():
            correct = int((model(x).argmax(1) == y).sum())
        model.train(was_training)
        return correct / len(y)


@functools.cache
def _digits() -> tuple[Tensor, Tensor]:
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(data.target, dtype=torch.int64)
    return x, y
