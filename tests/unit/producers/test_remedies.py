"""Remedies applied to a live run, and edits that cannot be applied left undone with a reason."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from rolltape.producers import RecorderClosedError
from rolltape.producers.training import (
    ArchitectureSpec,
    DigitsData,
    DigitsNet,
    TrainingMonitor,
    TrainingRun,
    apply,
    start_run,
)
from rolltape.schemas import Decision
from tests.unit.producers.recorded import Spooled

SPEC = ArchitectureSpec(blocks=2, width=8)


def decision(event_type: str, direction: str, **params: Any) -> Decision:
    return Decision.model_validate(
        {
            "epoch": 0,
            "event_type": event_type,
            "cites": ["R1"],
            "justification": "test",
            "remedy_direction": direction,
            "remedy_params": {"lr_new": None, "edit_op": "none", "edit_to": "none", **params},
        }
    )


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[TrainingRun, TrainingMonitor, Spooled]]:
    spooled = Spooled(tmp_path)
    data = DigitsData(0, train_subset=64)
    run = start_run(data, SPEC, lr=0.05, momentum=0.9, batch_size=16, seed=0)
    session = spooled.session()
    monitor = TrainingMonitor(spooled.monitor, session)
    monitor.attach(run.model, run.optimizer, nn.CrossEntropyLoss(), run.loader, data.val_loader())
    yield run, monitor, spooled
    # tests that read what was recorded closed the recorders already
    with contextlib.suppress(RecorderClosedError):
        monitor.finish()
        session.end()


def train_epoch(run: TrainingRun, monitor: TrainingMonitor) -> None:
    for x, y in run.loader:
        run.optimizer.zero_grad()
        monitor.loss_fn(run.model(x), y).backward()
        run.optimizer.step()
    monitor.end_epoch()


def test_remedy__lr_and_clipping_change_the_optimizer(live: Any) -> None:
    run, monitor, _ = live
    assert (
        apply(
            decision("hyperparameter_change", "decrease_lr", lr_new=0.005, clip_grad_norm=1.0),
            run,
            monitor,
        )
        is None
    )
    assert [g["lr"] for g in run.optimizer.param_groups] == [0.005] and run.clip == 1.0
    assert (
        apply(decision("hyperparameter_change", "increase_lr", lr_new=0.05), run, monitor) is None
    )
    assert run.lr == 0.05


@pytest.mark.parametrize(
    ("direction", "lr_new", "why"),
    [
        ("decrease_lr", 0.5, "does not decrease"),
        ("increase_lr", 0.01, "does not increase"),
        ("decrease_lr", None, "positive number"),
        ("decrease_lr", float("nan"), "positive number"),
        ("decrease_lr", -1.0, "positive number"),
    ],
)
def test_remedy__an_lr_change_that_does_not_fit_is_refused_with_the_reason(
    live: Any, direction: str, lr_new: float | None, why: str
) -> None:
    run, monitor, _ = live
    reason = apply(decision("hyperparameter_change", direction, lr_new=lr_new), run, monitor)
    assert reason is not None and why in reason and run.lr == 0.05


def test_remedy__a_batch_size_change_rebuilds_the_loader(live: Any) -> None:
    run, monitor, _ = live
    assert (
        apply(
            decision("hyperparameter_change", "increase_batch_size", batch_size_new=32),
            run,
            monitor,
        )
        is None
    )
    assert run.batch_size == 32 and [len(y) for _, y in run.loader] == [32, 32]
    refused = apply(
        decision("hyperparameter_change", "increase_batch_size", batch_size_new=500), run, monitor
    )
    assert refused is not None and "outside 1..64" in refused
    train_epoch(run, monitor)  # the monitor reads the new batch size from what the loss sees


def test_remedy__a_restart_from_an_edited_spec_carries_the_trained_weights(live: Any) -> None:
    run, monitor, spooled = live
    train_epoch(run, monitor)
    old = {k: v.clone() for k, v in run.model.state_dict().items()}
    assert (
        apply(decision("architecture_change", "add_capacity", edit_op="add_block"), run, monitor)
        is None
    )
    assert isinstance(run.model, DigitsNet) and run.spec.blocks == 3
    new = run.model.state_dict()
    carried = [k for k in old if k in new and torch.equal(old[k], new[k])]
    assert carried == list(old)  # every old tensor kept its name and shape, and its values
    assert any(k.startswith("blocks.2.") for k in new)
    assert run.optimizer.param_groups[0]["lr"] == 0.05
    assert {id(p) for p in run.optimizer.param_groups[0]["params"]} == {
        id(p) for p in run.model.parameters()
    }
    assert (
        apply(
            decision("architecture_change", "add_bn_or_residual", edit_op="add_batchnorm"),
            run,
            monitor,
        )
        is None
    )
    assert run.spec.batchnorm and any(isinstance(m, nn.BatchNorm2d) for m in run.model.modules())
    assert torch.equal(run.model.state_dict()["blocks.0.conv.weight"], old["blocks.0.conv.weight"])
    train_epoch(run, monitor)
    monitor.finish()
    specs = [
        (s["phase"], s["weight_layers"], s["batchnorm_layers"])
        for s in spooled.payloads("model_spec")
    ]
    assert specs == [("attach", 3, 0), ("attach", 4, 0), ("attach", 4, 3), ("final", 4, 3)]


def test_remedy__an_activation_swap_is_applied_in_place_and_measured(live: Any) -> None:
    run, monitor, spooled = live
    assert (
        apply(
            decision(
                "architecture_change", "swap_activation", edit_op="swap_activation", edit_to="gelu"
            ),
            run,
            monitor,
        )
        is None
    )
    assert run.spec.activation == "gelu"
    train_epoch(run, monitor)
    monitor.finish()
    (metric,) = spooled.payloads("metric")
    assert metric["saturated_per_module"].keys() == {"blocks.0.act", "blocks.1.act"}


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({"edit_op": "swap_activation", "edit_to": "relu"}, "changes nothing"),
        ({"edit_op": "none"}, "needs an edit"),
        ({"edit_op": "remove_block"}, None),
    ],
)
def test_remedy__structural_edits_that_cannot_be_applied_are_refused(
    live: Any, params: dict[str, str], why: str | None
) -> None:
    run, monitor, _ = live
    reason = apply(decision("architecture_change", "swap_activation", **params), run, monitor)
    assert (reason is None) if why is None else (reason is not None and why in reason)


def test_remedy__batch_norm_twice_and_edits_of_a_foreign_network_are_refused(live: Any) -> None:
    run, monitor, _ = live
    assert (
        apply(
            decision("architecture_change", "add_bn_or_residual", edit_op="add_batchnorm"),
            run,
            monitor,
        )
        is None
    )
    again = apply(
        decision("architecture_change", "add_bn_or_residual", edit_op="add_batchnorm"), run, monitor
    )
    assert again is not None and "already has batch norm" in again
    run.model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    foreign = apply(
        decision("architecture_change", "add_capacity", edit_op="add_block"), run, monitor
    )
    assert foreign is not None and "ArchitectureSpec" in foreign


def test_remedy__stop_restores_the_best_checkpoint(live: Any) -> None:
    run, monitor, _ = live
    for _ in range(2):
        train_epoch(run, monitor)
    assert apply(decision("hyperparameter_change", "stop"), run, monitor) is None
    assert run.stopped and "restored the best checkpoint" in run.notes[-1]


def test_remedy__non_finite_weights_are_reinitialised_with_the_smaller_lr(live: Any) -> None:
    run, monitor, _ = live
    with torch.no_grad():
        next(run.model.parameters()).fill_(float("nan"))
    assert (
        apply(decision("hyperparameter_change", "decrease_lr", lr_new=0.005), run, monitor) is None
    )
    assert all(bool(torch.isfinite(p).all()) for p in run.model.parameters())
    assert run.lr == 0.005 and "re-initialised" in run.notes[-1]
