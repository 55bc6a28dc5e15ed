"""Applying a decision to the live run: what the harness can change, and how.

Invariant: `apply` either carries the decision out completely and says so, or changes nothing
and returns why; the harness records a decision it could not carry out as
`rule_triggered_no_action` with that reason, never as applied. Structural edits (a block, batch
norm) restart from the edited spec: a new network, the trained weights carried over wherever a
parameter keeps its name and shape, the optimiser rebuilt with the current settings, and the
monitor moved to the new parts (it records the new model, which the judge's architecture
replay then checks against the logged edits).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from rolltape.producers._errors import MonitorError
from rolltape.producers.training._digits import (
    ArchitectureSpec,
    Block,
    DigitsData,
    DigitsNet,
    build_model,
    carry_weights,
    make_activation,
)
from rolltape.producers.training._monitor import TrainingMonitor
from rolltape.schemas import Decision

MAX_BLOCKS = 16


@dataclass
class TrainingRun:
    """The parts of one attempt that decisions edit."""

    data: DigitsData
    spec: ArchitectureSpec
    model: nn.Module
    optimizer: torch.optim.Optimizer
    loader: Iterable[Any]
    batch_size: int
    momentum: float
    seed: int
    clip: float | None = None
    """Gradient clipping (max total norm) the training loop applies before each step."""
    stopped: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr


def start_run(
    data: DigitsData,
    spec: ArchitectureSpec,
    *,
    lr: float,
    momentum: float,
    batch_size: int,
    seed: int,
    dead_units: float = 0.0,
) -> TrainingRun:
    """A fresh attempt: the network built from `spec` (`build_model`, which reseeds torch's
    global generator with `seed`), SGD with momentum at `lr`, and the shuffled train loader.
    Decisions then edit the returned run in place through `apply`."""
    model = build_model(spec, seed=seed, dead_units=dead_units)
    return TrainingRun(
        data=data,
        spec=spec,
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum),
        loader=data.train_loader(batch_size),
        batch_size=batch_size,
        momentum=momentum,
        seed=seed,
    )


def apply(decision: Decision, run: TrainingRun, monitor: TrainingMonitor) -> str | None:
    """Carry `decision` out on `run`; None when it was applied, else why it was not."""
    if decision.event_type == "rule_triggered_no_action":
        return None
    p = decision.remedy_params
    direction = decision.remedy_direction
    if decision.event_type == "hyperparameter_change":
        if direction in ("decrease_lr", "increase_lr"):
            return _change_lr(run, monitor, p.lr_new, direction, p.clip_grad_norm)
        if direction in ("increase_batch_size", "decrease_batch_size"):
            return _change_batch(run, p.batch_size_new, direction)
        if direction == "stop":
            return _stop(run, monitor)
        return f"a hyperparameter change cannot carry out {direction!r}"
    if not isinstance(run.model, DigitsNet):
        return "the harness edits only networks it built from an ArchitectureSpec"
    if p.edit_op == "swap_activation":
        return _swap(run, p.edit_to)
    if p.edit_op == "add_block":
        if run.spec.blocks >= MAX_BLOCKS:
            return f"the network already has the most blocks the harness builds ({MAX_BLOCKS})"
        return _restart(run, monitor, run.spec.model_copy(update={"blocks": run.spec.blocks + 1}))
    if p.edit_op == "remove_block":
        if run.spec.blocks <= 1:
            return "the network has a single block left"
        return _restart(run, monitor, run.spec.model_copy(update={"blocks": run.spec.blocks - 1}))
    if p.edit_op == "add_batchnorm":
        if run.spec.batchnorm:
            return "every block already has batch norm"
        return _restart(run, monitor, run.spec.model_copy(update={"batchnorm": True}))
    return f"an architecture change needs an edit; edit_op is {p.edit_op!r}"


def _change_lr(
    run: TrainingRun,
    monitor: TrainingMonitor,
    lr_new: float | None,
    direction: str,
    clip: float | None,
) -> str | None:
    current = run.lr
    if lr_new is None or not math.isfinite(lr_new) or lr_new <= 0:
        return f"lr_new must be a positive number, got {lr_new!r}"
    if direction == "decrease_lr" and not lr_new < current:
        return f"lr_new {lr_new:g} does not decrease the current lr {current:g}"
    if direction == "increase_lr" and not lr_new > current:
        return f"lr_new {lr_new:g} does not increase the current lr {current:g}"
    if _weights_broken(run.model):
        # a NaN step already wrote non-finite weights: a smaller lr cannot recover them
        if not isinstance(run.model, DigitsNet):
            return (
                "the weights are not finite and the harness can only re-initialise its own networks"
            )
        _restart(run, monitor, run.spec, carry=False, lr=lr_new)
        run.notes.append("the weights were not finite: re-initialised from the spec")
    run.set_lr(lr_new)
    if clip is not None:
        run.clip = clip
    return None


def _change_batch(run: TrainingRun, size: int | None, direction: str) -> str | None:
    current = run.batch_size
    if size is None:
        size = current * 2 if direction == "increase_batch_size" else current // 2
    limit = len(run.data.train)
    if not 1 <= size <= limit:
        return f"a batch of {size} is outside 1..{limit} (the training set)"
    if direction == "increase_batch_size" and not size > current:
        return f"batch_size_new {size} does not increase the current batch size {current}"
    if direction == "decrease_batch_size" and not size < current:
        return f"batch_size_new {size} does not decrease the current batch size {current}"
    run.batch_size = size
    run.loader = run.data.train_loader(size)
    return None


def _stop(run: TrainingRun, monitor: TrainingMonitor) -> str | None:
    run.stopped = True
    try:
        epoch = monitor.restore_best()
    except MonitorError as exc:
        run.notes.append(f"stopped with the last weights: {exc}")
    else:
        run.notes.append(f"stopped and restored the best checkpoint (epoch {epoch})")
    return None


def _swap(run: TrainingRun, kind: str) -> str | None:
    if kind in ("none", run.spec.activation):
        return f"swapping to {kind!r} changes nothing: the network uses {run.spec.activation}"
    assert isinstance(run.model, DigitsNet)
    for block in run.model.blocks:
        assert isinstance(block, Block)
        block.act = make_activation(kind)  # the monitor re-hooks the new modules
    run.spec = run.spec.model_copy(update={"activation": kind})
    return None


def _restart(
    run: TrainingRun,
    monitor: TrainingMonitor,
    spec: ArchitectureSpec,
    *,
    carry: bool = True,
    lr: float | None = None,
) -> str | None:
    """A new network from `spec`, the old one's weights carried where names and shapes match,
    a new optimiser with the current settings, and the monitor re-attached."""
    old = run.model
    new = build_model(spec, seed=run.seed + len(run.notes) + 1)
    if carry:
        carried, fresh = carry_weights(old, new)
        run.notes.append(
            f"restarted from {spec.model_dump()}: {carried} tensors carried, {fresh} new"
        )
    optimizer = torch.optim.SGD(new.parameters(), lr=lr or run.lr, momentum=run.momentum)
    monitor.attach(new, optimizer, monitor.loss_fn, run.loader)
    run.model, run.optimizer, run.spec = new, optimizer, spec
    return None


def _weights_broken(model: nn.Module) -> bool:
    return not all(bool(torch.isfinite(p).all()) for p in model.parameters())
