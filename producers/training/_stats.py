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

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import torch
from torch import Tensor, nn

from rolltape.producers.training._kinds import is_relu_family, saturation_bounds

_F = TypeVar("_F", bound=Callable[..., None])


def _without_grad(method: _F) -> _F:
    """`torch.no_grad()` for the per-step methods, at a tenth of its cost: the decorator builds
    a context object on every call (about 3 µs), and the hooks call these methods several
    times a step. Restores the mode it found, also on an exception."""
    set_grad = torch._C._set_grad_enabled  # what no_grad's __enter__ and __exit__ call

    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> None:
        enabled = torch.is_grad_enabled()
        set_grad(False)
        try:
            method(*args, **kwargs)
        finally:
            set_grad(enabled)

    return cast(_F, run)


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
    saturated fraction.

    Every call is counted, over every `stride`-th sample of its batch (the first one rotating
    from call to call, so an epoch checks a `1/stride` share of its samples, spread over every
    step): reading a whole activation map to find the few units that never fire was most of
    the monitor's cost on a GPU (ResNet-18, batch 256: 3.7% of a step of 12.6 ms on an H200).
    A unit active on any checked sample is alive; one that fires on fewer than about
    `stride` in the epoch's samples may be called dead. `stride=1` checks every sample."""

    def __init__(
        self,
        name: str,
        module: nn.Module,
        *,
        slope_below: float,
        sample: int,
        slots: int,
        every: int = 1,
        stride: int = 1,
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
        self.every = every
        """Outputs are sampled on every `every`-th call (units are counted on every call)."""
        self.stride = stride
        """Units are counted over every `stride`-th sample of a call's batch, the first one
        rotating from call to call."""
        self.calls = 0
        """Calls of the module this epoch."""
        self.sampled = 0
        """Samples taken this epoch."""

    @_without_grad
    def observe(self, counted: Tensor, output: Tensor) -> None:
        """One call of the module: `count(counted)` and `sample(output)` under one switch of
        the grad mode (the hooks' own cost is a few microseconds a call)."""
        self._count(counted)
        self._sample(output)

    @_without_grad
    def count(self, tensor: Tensor) -> None:
        """Keep one call's per-unit extremes: `tensor` is the output for the ReLU family, the
        input for smooth activations."""
        self._count(tensor)

    @_without_grad
    def sample(self, output: Tensor) -> None:
        """Copy a strided sample of the output into the ring: one `take` into a prepared slot
        (the indices of a few offsets are built once per output size)."""
        self._sample(output)

    def _count(self, tensor: Tensor) -> None:
        t = tensor
        stride = self.stride
        if stride > 1 and t.ndim >= 2 and t.shape[0] > 1:
            t = t[self.calls % min(stride, t.shape[0]) :: stride]  # calls: counted in _sample
        if self.relu or self.lo > -math.inf:
            self.highs.append(_per_unit(t, torch.amax))
        if not self.relu and self.hi < math.inf:
            self.lows.append(_per_unit(t, torch.amin))

    def _sample(self, output: Tensor) -> None:
        """Every call ends here (it is what counts them); every `every`-th takes a sample."""
        call = self.calls
        self.calls = call + 1
        if call % self.every:
            return
        taken = self.sampled
        self.sampled = taken + 1
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
            slot = self._slots[taken % self.slots]
            torch.take(
                output,
                indices[taken % len(indices)],
                out=slot[:k] if k < self.sample_size else slot,
            )

    def samples(self) -> Tensor | None:
        """The outputs sampled in this epoch's most recent `slots` samples (NaN where
        unfilled)."""
        return self.ring if self.ring is not None and self.sampled else None

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
        self.calls = self.sampled = 0


@_without_grad
def observe_outputs(pending: list[tuple[ActivationStats, Tensor]]) -> None:
    """The calls of ReLU-family modules whose outputs the hooks set aside during a forward
    pass, measured together under one switch of the grad mode, and the list emptied. Their
    outputs are alive until the backward pass anyway (the activation saves them for it, and
    autograd refuses to run after they are changed in place), so nothing is kept longer than
    training keeps it; each call costs the forward pass a list append."""
    for stats, output in pending:
        stats._count(output)
        stats._sample(output)
    pending.clear()


def _per_unit(t: Tensor, reduce: Any) -> Tensor:
    """`t` reduced over every dimension but 1 (the units: channels, features)."""
    if t.ndim < 2:
        return t
    return cast(Tensor, reduce(t, dim=(0, *range(2, t.ndim))))


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

    @_without_grad
    def observe(self, logits: Tensor, target: Tensor, loss: Tensor, reduction: str) -> None:
        n = int(target.shape[0]) if target.ndim else int(logits.shape[0])
        value = loss.detach()  # the step's graph is not kept alive until the epoch ends
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
    """Around each optimizer step: per-parameter gradient norms, the update-to-parameter ratio
    from a snapshot of the parameters, and (with `noise_simple`) the norms of the sum of two
    consecutive steps' gradients (McCandlish's B_simple). Each step keeps one stacked row;
    nothing is reduced until `readout`.

    A step costs five device operations: the gradients' norms and the parameter snapshot before
    it, then the update (snapshot minus parameters), the norms of the update and of the
    parameters in one call, and one stack of all the step's norms into its row."""

    def __init__(self, params: Sequence[Tensor], names: Sequence[str], noise_simple: bool) -> None:
        self.params = list(params)
        self.names = list(names)
        self.noise_simple = noise_simple
        self.rows: list[Tensor] = []
        """Per step: P gradient norms (-1 where a parameter had no gradient, so a NaN gradient
        still shows), P update norms, P parameter norms after the step, and with
        `noise_simple` P norms of (previous step's gradient + this one) (NaN when there is no
        complete pair)."""
        self._before: list[Tensor] | None = None
        self._measured: list[Tensor] | Tensor | None = None
        """What the pre-step hook measured for the step's row: the norms (a 0-d tensor each),
        or, when a parameter had no gradient, the gradient part of the row already built."""
        self._previous: list[Tensor] | None = None
        self._previous_ok = False
        self.missing = [0] * len(self.params)
        """Steps of the epoch in which each parameter had no gradient."""

    @property
    def steps(self) -> int:
        return len(self.rows)

    @_without_grad
    def before_step(self) -> None:
        params = self.params
        if self._before is None:
            self._before = [p.detach().clone() for p in params]
            if self.noise_simple:
                self._previous = [torch.zeros_like(p) for p in params]
        grads = [p.grad for p in params]
        if all(g is not None for g in grads):
            used = cast(list[Tensor], grads)
            if self._previous is not None and self._previous_ok:
                pairs = torch._foreach_add(self._previous, used)
                self._measured = list(torch._foreach_norm([*used, *pairs]))
            else:
                self._measured = list(torch._foreach_norm(used))
            if self._previous is not None:
                torch._foreach_copy_(self._previous, used)
                self._previous_ok = True
        else:  # some parameter got no gradient this step: slower, and no pair
            row = torch.full((len(params),), -1.0, device=params[0].device)
            present = [i for i, g in enumerate(grads) if g is not None]
            for i, g in enumerate(grads):
                self.missing[i] += g is None
            if present:
                found = torch._foreach_norm([g for g in grads if g is not None])
                row[torch.tensor(present, device=row.device)] = torch.stack(found).to(row.dtype)
            self._measured = row
            self._previous_ok = False
        torch._foreach_copy_(self._before, params)

    @_without_grad
    def after_step(self) -> None:
        measured = self._measured
        if self._before is None or measured is None:
            return  # a step without our pre-step hook (attached mid-step)
        params = self.params
        p = len(params)
        torch._foreach_sub_(self._before, params)  # before - after: minus the update
        norms = torch._foreach_norm(self._before + params)
        if isinstance(measured, list):
            pairs = measured[p:]
            row = torch.stack([*measured[:p], *norms, *pairs])
            if self.noise_simple and not pairs:
                row = torch.cat([row, torch.full((p,), math.nan, device=row.device)])
        else:
            tail = (
                [torch.full((p,), math.nan, device=params[0].device)] if self.noise_simple else []
            )
            row = torch.cat([measured, torch.stack(norms).to(measured.dtype), *tail])
        self.rows.append(row)
        self._measured = None

    def readout(self) -> Tensor:
        """One device vector for the epoch: P mean gradient norms, then [sum of per-step total
        norms, sum of squared differences of consecutive totals, mean update ratio summed over
        steps, pair count, mean over pairs of the two squared norms, mean over pairs of the
        squared norm of their mean] (see EpochGradients)."""
        p = len(self.params)
        table = torch.stack(self.rows).to(torch.float64)
        norms, update, weight = table[:, :p], table[:, p : 2 * p], table[:, 2 * p : 3 * p]
        present = norms != -1
        norms = torch.where(present, norms, 0.0)  # a NaN gradient stays NaN
        per_param = norms.sum(0) / present.sum(0).clamp_min(1)
        totals = norms.square().sum(1).sqrt()
        diff_sq = (totals[1:] - totals[:-1]).square().sum()
        counted = weight != 0  # a NaN weight counts, so a NaN ratio shows
        ratio = torch.where(counted, update / weight, torch.zeros_like(update))
        ratio_sum = (ratio.sum(1) / counted.sum(1).clamp_min(1)).sum()
        if self.noise_simple:
            pairs = table[:, 3 * p :]
            complete = ~pairs.isnan().any(1)
            complete[0] = False
            keep = complete[1:]
            small = (totals[1:].square() + totals[:-1].square()) / 2
            big = pairs[1:].square().sum(1) / 4
            pair_figures = [
                keep.sum().to(torch.float64),
                torch.where(keep, small, 0.0).sum(),
                torch.where(keep, big, 0.0).sum(),
            ]
        else:
            zero = torch.zeros((), dtype=torch.float64, device=table.device)
            pair_figures = [zero, zero, zero]
        tail = torch.stack([totals.sum(), diff_sq, ratio_sum, *pair_figures])
        return torch.cat([per_param, tail])

    def reset(self) -> None:
        """A new epoch: consecutive-step pairs do not span two epochs."""
        self.rows = []
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
    """mean^2 / var of the per-step total gradient norm (env_rl's estimator, which the rule set's
    R2 band was set for: zubairashfaque/environment_rl @633b4e7, `src/env_rl/monitor/hooks.py`),
    with the variance taken from differences of consecutive steps (von Neumann), so the norm's
    drift over the epoch is not counted as noise. None with fewer than two steps or no spread."""
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
