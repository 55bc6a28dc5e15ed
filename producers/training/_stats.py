"""Per-epoch accumulators the monitor's hooks feed, kept on the tensors' device.

Invariant: the per-step methods run without autograd (`torch.no_grad`: nothing they compute
is part of the model's graph, and view tracking alone would double their cost); nothing here
reads a tensor value on the host during an epoch (no `.item()`, no
`.tolist()`, no Python `bool` of a tensor): a step only launches a few device operations (their
results are kept as device tensors) and updates Python integers taken from shapes. The epoch's
statistics are computed from those at `end_epoch` and copied to the host once. So the monitor
never stalls a GPU's queue during an epoch; the unit tests run the step hooks on the `meta`
device, where any host read raises.

Why per-step rows instead of running sums: on small models a step's cost is the number of
operations launched, not their size; keeping each step's norms as one stacked tensor costs no
operation at all, and the epoch's arithmetic runs vectorised once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from rolltape.producers.training._kinds import is_relu_family, saturation_bounds

_OFFSETS = 4
"""Sample offsets rotated through, so the sample is not always the same positions."""


class ActivationStats:
    """One activation module: which of its units (channels of a conv output, features of a
    linear one: dimension 1) were dead over the epoch, and a strided sample of its outputs for
    percentiles.

    A unit is dead in an epoch when it never passed gradient on a training batch: for the ReLU
    family, its output was exactly zero for every sample and position (the running per-unit
    maximum stayed 0); for smooth activations, which are never exactly zero, every input fell in
    one low-slope tail of the activation (`saturation_bounds`): the analogue, reported as the
    saturated fraction."""

    def __init__(
        self, name: str, module: nn.Module, *, slope_below: float, sample: int, slots: int
    ) -> None:
        self.name = name
        self.relu = is_relu_family(module)
        self.lo, self.hi = (0.0, 0.0) if self.relu else saturation_bounds(module, slope_below)
        self.sample_size = sample
        self.slots = slots
        self.highs: list[Tensor] = []
        """Per call, each unit's largest output (ReLU family) or input (smooth)."""
        self.lows: list[Tensor] = []
        """Per call, each unit's smallest input (smooth activations with a saturating right
        tail)."""
        self.ring: Tensor | None = None
        self._slots: list[Tensor] = []
        self._indices: dict[int, list[Tensor]] = {}
        self.calls = 0

    @torch.no_grad()
    def count(self, tensor: Tensor) -> None:
        """Keep one call's per-unit extremes: `tensor` is the output for the ReLU family, the
        input for smooth activations."""
        t = tensor
        dims = (0, *range(2, t.ndim)) if t.ndim >= 2 else ()
        if self.relu or self.lo > -math.inf:
            self.highs.append(t.amax(dim=dims) if dims else t)
        if not self.relu and self.hi < math.inf:
            self.lows.append(t.amin(dim=dims) if dims else t)

    @torch.no_grad()
    def sample(self, output: Tensor) -> None:
        """Copy a strided sample of the output into the ring: one `take` into a prepared slot
        (the indices of a few offsets are built once per output size)."""
        n = output.numel()
        if self.ring is None or self.ring.device != output.device:
            # NaN marks unfilled places; percentiles are taken with nanquantile
            self.ring = torch.full((self.sample_size * self.slots,), math.nan, device=output.device)
            size = self.sample_size
            self._slots = [self.ring[i * size : (i + 1) * size] for i in range(self.slots)]
            self._indices.clear()
        k = min(self.sample_size, n)
        if k:
            indices = self._indices.get(n)
            if indices is None:
                stride = n // k
                indices = self._indices[n] = [
                    torch.arange(offset, offset + stride * k, stride, device=output.device)
                    for offset in range(min(stride, _OFFSETS))
                ]
            slot = self._slots[self.calls % self.slots]
            torch.take(
                output,
                indices[self.calls % len(indices)],
                out=slot[:k] if k < self.sample_size else slot,
            )
        self.calls += 1

    def samples(self) -> Tensor | None:
        """The sampled outputs of this epoch's most recent `slots` calls (NaN where unfilled)."""
        return self.ring if self.ring is not None and self.calls else None

    def fraction(self) -> Tensor | None:
        """Dead (or saturated) units of the epoch, as a fraction of the module's units."""
        if not self.calls:
            return None
        dead: Tensor | None = None
        if self.highs and _same_shape(self.highs):
            peak = torch.stack(self.highs).amax(0)
            dead = peak == 0 if self.relu else peak < self.lo
        if self.lows and _same_shape(self.lows):
            low_dead = torch.stack(self.lows).amin(0) > self.hi
            dead = low_dead if dead is None else dead | low_dead
        if dead is None and self.lo == -math.inf and self.hi == math.inf:
            return torch.zeros((), dtype=torch.float64)  # the slope never gets low: none saturate
        return None if dead is None else dead.to(torch.float64).mean()

    def reset(self) -> None:
        self.highs, self.lows = [], []
        if self.ring is not None:
            self.ring.fill_(math.nan)
        self.calls = 0


def _same_shape(tensors: list[Tensor]) -> bool:
    """A module's unit count is fixed unless it was fed differently shaped inputs (then its
    units cannot be told apart across calls, and it is not measured)."""
    first = tensors[0].shape
    return all(t.shape == first for t in tensors)


class LossStats:
    """The loss module's view of training: loss, accuracy (class logits [N, C] against integer
    targets [N]), samples and batch sizes. A call keeps the loss and the predicted classes as
    device tensors; the epoch's sums are taken in `readout`."""

    def __init__(self) -> None:
        self.losses: list[Tensor] = []
        self.sizes: list[int] = []
        self.predicted: list[Tensor] = []
        self.targets: list[Tensor] = []
        self.largest_batch = 0

    @property
    def samples(self) -> int:
        return sum(self.sizes)

    @property
    def scored_samples(self) -> int:
        return sum(int(t.shape[0]) for t in self.targets)

    @torch.no_grad()
    def observe(self, logits: Tensor, target: Tensor, loss: Tensor, reduction: str) -> None:
        n = int(target.shape[0]) if target.ndim else int(logits.shape[0])
        value = loss
        if value.ndim:
            value = value.sum() / n  # reduction="none": the per-sample losses
        elif reduction == "sum":
            value = value / n
        self.losses.append(value)
        self.sizes.append(n)
        if logits.ndim == 2 and target.ndim == 1 and not target.is_floating_point():
            self.predicted.append(logits.argmax(1))
            self.targets.append(target)
        self.largest_batch = max(self.largest_batch, n)

    def readout(self) -> Tensor | None:
        """[loss summed over samples, correct predictions] of the epoch, on the device."""
        if not self.losses:
            return None
        losses = torch.stack(self.losses).to(torch.float64)
        sizes = torch.tensor(self.sizes, dtype=torch.float64, device=losses.device)
        correct = (
            (torch.cat(self.predicted) == torch.cat(self.targets)).sum().to(torch.float64)
            if self.predicted
            else torch.zeros((), dtype=torch.float64, device=losses.device)
        )
        return torch.stack([(losses * sizes).sum(), correct.to(losses.device)])

    def reset(self) -> None:
        self.losses, self.sizes, self.predicted, self.targets = [], [], [], []
        self.largest_batch = 0


class GradientStats:
    """Around each optimizer step: per-parameter gradient norms, the norms of the mean of two
    consecutive steps' gradients (McCandlish's B_simple), and the update-to-parameter ratio from
    a snapshot of the parameters. Each step keeps two stacked tensors; nothing is reduced until
    `readout`."""

    def __init__(self, params: Sequence[Tensor], names: Sequence[str], noise_simple: bool) -> None:
        self.params = list(params)
        self.names = list(names)
        self.noise_simple = noise_simple
        self.grad_rows: list[Tensor] = []
        """Per step: P gradient norms (-1 where a parameter had no gradient, so a NaN gradient
        still shows), then P norms of (previous step's gradient + this one) (NaN when there is
        no complete pair)."""
        self.update_rows: list[Tensor] = []
        """Per step: P update norms, then P parameter norms after the step."""
        self._before: list[Tensor] | None = None
        self._previous: list[Tensor] | None = None
        self._previous_ok = False
        self._nan: Tensor | None = None
        self.missing = [0] * len(self.params)
        """Steps of the epoch in which each parameter had no gradient."""

    @property
    def steps(self) -> int:
        return len(self.update_rows)

    @torch.no_grad()
    def before_step(self) -> None:
        params = self.params
        if self._before is None:
            self._before = [p.detach().clone() for p in params]
            self._nan = torch.full((len(params),), math.nan, device=params[0].device)
            if self.noise_simple:
                self._previous = [torch.zeros_like(p) for p in params]
        grads = [p.grad for p in params]
        if all(g is not None for g in grads):
            used = [g for g in grads if g is not None]
            if self._previous is not None and self._previous_ok:
                pairs = torch._foreach_add(self._previous, used)
                self.grad_rows.append(torch.stack(torch._foreach_norm([*used, *pairs])))
            else:
                norms = torch.stack(torch._foreach_norm(used))
                assert self._nan is not None
                self.grad_rows.append(torch.cat([norms, self._nan]))
            if self._previous is not None:
                torch._foreach_copy_(self._previous, used)
                self._previous_ok = True
        else:  # some parameter got no gradient this step: slower, and no pair
            row = torch.full((2 * len(params),), math.nan, device=params[0].device)
            row[: len(params)] = -1.0
            present = [i for i, g in enumerate(grads) if g is not None]
            for i, g in enumerate(grads):
                self.missing[i] += g is None
            if present:
                found = torch._foreach_norm([g for g in grads if g is not None])
                row[torch.tensor(present, device=row.device)] = torch.stack(found).to(row.dtype)
            self.grad_rows.append(row)
            self._previous_ok = False
        torch._foreach_copy_(self._before, params)

    @torch.no_grad()
    def after_step(self) -> None:
        if self._before is None:  # a step without our pre-step hook (attached mid-step)
            return
        params = self.params
        torch._foreach_sub_(self._before, params)  # before - after: minus the update
        self.update_rows.append(torch.stack(torch._foreach_norm(self._before + params)))

    def readout(self) -> Tensor:
        """One device vector for the epoch: P mean gradient norms, then [sum of per-step total
        norms, sum of squared differences of consecutive totals, mean update ratio summed over
        steps, pair count, mean over pairs of the two squared norms, mean over pairs of the
        squared norm of their mean] (see EpochGradients)."""
        p = len(self.params)
        grads = torch.stack(self.grad_rows[: self.steps]).to(torch.float64)
        norms, pairs = grads[:, :p], grads[:, p:]
        present = norms != -1
        norms = torch.where(present, norms, 0.0)  # a NaN gradient stays NaN
        per_param = norms.sum(0) / present.sum(0).clamp_min(1)
        totals = norms.square().sum(1).sqrt()
        diff_sq = (totals[1:] - totals[:-1]).square().sum()
        updates = torch.stack(self.update_rows).to(torch.float64)
        update, weight = updates[:, :p], updates[:, p:]
        counted = weight != 0  # a NaN weight counts, so a NaN ratio shows
        ratio = torch.where(counted, update / weight, torch.zeros_like(update))
        ratio_sum = (ratio.sum(1) / counted.sum(1).clamp_min(1)).sum()
        complete = ~pairs.isnan().any(1)
        complete[0] = False
        small = (totals[1:].square() + totals[:-1].square()) / 2
        big = pairs[1:].square().sum(1) / 4
        keep = complete[1:]
        tail = torch.stack(
            [
                totals.sum(),
                diff_sq,
                ratio_sum,
                keep.sum().to(torch.float64),
                torch.where(keep, small, 0.0).sum(),
                torch.where(keep, big, 0.0).sum(),
            ]
        )
        return torch.cat([per_param, tail])

    def reset(self) -> None:
        """A new epoch: consecutive-step pairs do not span two epochs."""
        self.grad_rows, self.update_rows = [], []
        self.missing = [0] * len(self.params)
        self._previous_ok = False


@dataclass(frozen=True)
class EpochGradients:
    """One epoch's gradient measurements; None where the epoch gave too little to measure.
    `per_param` is each parameter's mean gradient norm; `max_norm` is their largest, `min_norm`
    the smallest of the weights' (tensors of 2 dimensions and up; of all, when none is). A NaN
    norm is `max_norm`, and `min_norm` too when it is a weight's, so the exploding rule always
    sees it and the vanishing rule where it reads. `noise_scale` is the env_rl
    estimator R2's band is set for; `noise_scale_simple` is McCandlish et al.'s B_simple."""

    per_param: dict[str, float]
    max_norm: float | None
    min_norm: float | None
    update_ratio: float | None
    noise_scale: float | None
    noise_scale_simple: float | None

    @classmethod
    def from_host(
        cls, stats: GradientStats, values: Sequence[float], samples: int
    ) -> EpochGradients:
        """`values` = stats.readout() on the host. Parameters that had no gradient in any step
        of the epoch are left out (not measured, not zero)."""
        names, steps, p = stats.names, stats.steps, len(stats.names)
        means = values[:p]
        total_sum, diff_sq, ratio_sum, pairs, small, big = values[p : p + 6]
        per_param = {n: v for n, v, m in zip(names, means, stats.missing, strict=True) if m < steps}
        finite = list(per_param.values())
        # The vanishing rule reads weights (2-D and up): a bias or scale whose output a batch
        # norm re-centres gets no gradient by construction (about 1e-8), on every healthy step.
        weights = [
            per_param[n]
            for n, p in zip(names, stats.params, strict=True)
            if p.dim() >= 2 and n in per_param
        ]
        return cls(
            per_param=per_param,
            max_norm=max(finite, key=_nan_first) if finite else None,
            min_norm=min(weights or finite, key=_nan_last) if finite else None,
            update_ratio=ratio_sum / steps if steps else None,
            noise_scale=_env_rl_noise_scale(total_sum, diff_sq, steps),
            noise_scale_simple=_b_simple(small, big, int(pairs), samples / steps)
            if steps
            else None,
        )


def _nan_first(v: float) -> float:
    return math.inf if v != v else v


def _nan_last(v: float) -> float:
    return -math.inf if v != v else v


def _env_rl_noise_scale(norm_sum: float, diff_sq_sum: float, steps: int) -> float | None:
    """mean^2 / var of the per-step total gradient norm (REFERENCE.md's env_rl estimator, which
    the rule set's R2 band was set for), with the variance taken from differences of consecutive
    steps (von Neumann), so the norm's drift over the epoch is not counted as noise. None with
    fewer than two steps or no spread."""
    if steps < 2:
        return None
    mean = norm_sum / steps
    var = diff_sq_sum / (2 * (steps - 1))
    if not math.isfinite(mean) or not math.isfinite(var):
        return math.nan
    return mean * mean / var if var > 0 else None


def _b_simple(small: float, big: float, pairs: int, batch: float) -> float | None:
    """McCandlish et al. (2018), appendix A: B_simple = tr(Sigma) / |G|^2 from two batch sizes,
    B (one step's gradient) and 2B (the mean of two consecutive steps' gradients, taken at
    nearly the same parameters): |G|^2 ~ 2|G_2B|^2 - |G_B|^2 and tr(Sigma) ~ 2B(|G_B|^2 -
    |G_2B|^2), each averaged over the epoch's pairs before dividing. None when either estimate
    is not positive (too few pairs for the noise to average out)."""
    if pairs < 1:
        return None
    small, big = small / pairs, big / pairs
    g_sq = 2 * big - small
    trace = 2 * batch * (small - big)
    if not (math.isfinite(g_sq) and math.isfinite(trace)):
        return math.nan
    return trace / g_sq if g_sq > 0 and trace > 0 else None
