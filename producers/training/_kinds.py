"""Which modules are activations, what kind each is, and where a smooth one saturates.

Why a grid for saturation: activations that are never exactly zero (GELU, SiLU, sigmoid, tanh,
ELU, ...) have no "dead" output to count, but they do have regions where their slope is so
small that almost no gradient passes, which is what a dead ReLU is. The slope of the module
itself is measured once on a grid of inputs (so parameters such as ELU's alpha or a learned
PReLU slope are taken into account); every training step then only compares inputs with the
two bounds of the low-slope tails, as cheap as counting zeros.
"""

from __future__ import annotations

import math
from typing import Final

import torch
from torch import nn

#: Activations whose output is exactly zero on a region: their dead fraction is exact zeros.
RELU_FAMILY: Final[tuple[type[nn.Module], ...]] = (nn.ReLU, nn.ReLU6, nn.Threshold)
#: Activations measured by their saturated fraction (the analogue of dead units).
SMOOTH: Final[tuple[type[nn.Module], ...]] = (
    nn.LeakyReLU,
    nn.PReLU,
    nn.RReLU,
    nn.ELU,
    nn.CELU,
    nn.SELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Softplus,
    nn.Sigmoid,
    nn.Tanh,
    nn.Hardtanh,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.LogSigmoid,
    nn.Softsign,
    nn.Tanhshrink,
)
_NAMES: Final[dict[type[nn.Module], str]] = {
    nn.ReLU: "relu",
    nn.ReLU6: "relu6",
    nn.Threshold: "threshold",
    nn.LeakyReLU: "leaky_relu",
    nn.PReLU: "prelu",
    nn.RReLU: "rrelu",
    nn.ELU: "elu",
    nn.CELU: "celu",
    nn.SELU: "selu",
    nn.GELU: "gelu",
    nn.SiLU: "silu",
    nn.Mish: "mish",
    nn.Softplus: "softplus",
    nn.Sigmoid: "sigmoid",
    nn.Tanh: "tanh",
    nn.Hardtanh: "hardtanh",
    nn.Hardswish: "hardswish",
    nn.Hardsigmoid: "hardsigmoid",
    nn.LogSigmoid: "log_sigmoid",
    nn.Softsign: "softsign",
    nn.Tanhshrink: "tanhshrink",
}
WEIGHT_LAYERS: Final[tuple[type[nn.Module], ...]] = (
    nn.Linear,
    nn.Bilinear,
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
)
BATCHNORM: Final[tuple[type[nn.Module], ...]] = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
)
_GRID: Final = (-30.0, 30.0, 6001)


def activation_kind(module: nn.Module) -> str | None:
    """`relu`, `gelu`, ... for an activation module (subclasses take their base's kind); None
    for anything else."""
    for cls in type(module).__mro__:
        name = _NAMES.get(cls)
        if name is not None:
            return name
    return None


def is_relu_family(module: nn.Module) -> bool:
    """Whether a module's dead units are counted as exact zeros of its output (`RELU_FAMILY`,
    subclasses included) rather than by its low-slope tails."""
    return isinstance(module, RELU_FAMILY)


def saturation_bounds(module: nn.Module, slope_below: float) -> tuple[float, float]:
    """(lo, hi): inputs below lo or above hi are where |f'(x)| < slope_below, found on a grid
    over [-30, 30]; -inf / inf when that tail does not saturate. The module is evaluated in eval
    mode (RReLU's slope is then fixed) without changing its mode."""
    parameter = next(module.parameters(), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    dtype = parameter.dtype if parameter is not None else torch.float32
    x = torch.linspace(*_GRID, device=device, dtype=dtype, requires_grad=True)
    was_training = module.training
    module.eval()
    try:
        with torch.enable_grad():
            y = module(x * 1.0)  # a non-leaf copy: in-place activations may write into it
            (slope,) = torch.autograd.grad(y.sum(), x)
    finally:
        module.train(was_training)
    flat = (slope.abs() < slope_below).tolist()
    grid = x.detach().tolist()
    lo, hi = -math.inf, math.inf
    if flat[0]:
        i = flat.index(False) if False in flat else len(flat)
        lo = grid[i - 1] if i < len(flat) else math.inf
    if flat[-1]:
        j = flat[::-1].index(False) if False in flat else len(flat)
        hi = grid[len(flat) - j] if j < len(flat) else -math.inf
    return lo, hi
