"""The training monitor on tiny models: every metric against values computed by hand, hooks that
follow the model, validation that leaves training statistics alone, and no way to pass a value."""

from __future__ import annotations

import copy
import inspect
import itertools
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from rolltape.producers import MonitorError, Session
from rolltape.producers.training import MonitorConfig, TrainingMonitor
from rolltape.producers.training._stats import ActivationStats, GradientStats, LossStats
from rolltape.schemas import Metric
from tests.unit.producers.recorded import Spooled


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, 3)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(3, 2)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.fc2(self.act(self.fc1(x)))
        return out


def tiny_model() -> Tiny:
    torch.manual_seed(3)
    model = Tiny()
    with torch.no_grad():
        model.fc1.bias[2] = -100.0  # unit 2 can never pass the ReLU: a dead unit
    return model


def data() -> tuple[DataLoader[Any], DataLoader[Any]]:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 2, generator=g), torch.tensor([0, 1, 1, 0, 1, 0, 0, 1])
    vx, vy = torch.randn(4, 2, generator=g), torch.tensor([1, 0, 1, 1])
    return (
        DataLoader(TensorDataset(x, y), batch_size=4),
        DataLoader(TensorDataset(vx, vy), batch_size=4),
    )


def train(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Any, loader: Any) -> None:
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()


def by_hand(
    model: nn.Module, lr: float, train_loader: Any, val_loader: Any, *, every: int = 1
) -> dict[str, Any]:
    """One epoch of SGD on a copy of `model`, measuring what the monitor measures with plain
    torch calls (no monitor code); the percentiles from the outputs of every `every`-th
    step."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    names = [n for n, _ in model.named_parameters()]
    grad_norms: list[list[float]] = []
    ratios, totals, outputs = [], [], []
    loss_sum = correct = samples = 0.0
    alive = torch.zeros(3, dtype=torch.bool)
    for step, (x, y) in enumerate(train_loader):
        optimizer.zero_grad()
        hidden = model.act(model.fc1(x))
        if step % every == 0:
            outputs.append(hidden.detach().reshape(-1))
        alive |= (hidden != 0).any(0)
        logits = model.fc2(hidden)
        loss = loss_fn(logits, y)
        loss.backward()
        norms = [float(p.grad.norm()) for p in model.parameters()]
        grad_norms.append(norms)
        totals.append(math.sqrt(sum(n * n for n in norms)))
        before = [p.detach().clone() for p in model.parameters()]
        optimizer.step()
        after = [p.detach() for p in model.parameters()]
        ratios.append(
            sum(float((a - b).norm() / a.norm()) for a, b in zip(after, before, strict=True))
            / len(after)
        )
        loss_sum += float(loss.detach()) * len(y)
        correct += int((logits.argmax(1) == y).sum())
        samples += len(y)
    per_param = {n: sum(s[i] for s in grad_norms) / len(grad_norms) for i, n in enumerate(names)}
    mean = sum(totals) / len(totals)
    var = sum((b - a) ** 2 for a, b in itertools.pairwise(totals)) / (2 * (len(totals) - 1))
    quantiles = torch.quantile(torch.cat(outputs), torch.tensor([0.5, 0.99])).tolist()
    model.eval()
    vx, vy = next(iter(val_loader))
    with torch.no_grad():
        val_logits = model(vx)
    probe_loss = loss_fn(model(vx), vy)
    probe = torch.autograd.grad(probe_loss, list(model.parameters()))
    probe_loss = probe_loss.detach()
    return {
        "steps": len(grad_norms),
        "samples": samples,
        "train_loss": loss_sum / samples,
        "train_acc": correct / samples,
        "val_loss": float(loss_fn(val_logits, vy)),
        "val_acc": float((val_logits.argmax(1) == vy).float().mean()),
        "per_layer_grad_norm": per_param,
        "max_layer_grad_norm": max(per_param.values()),
        "min_layer_grad_norm": min(  # the weights' (a bias can lose its gradient to a norm)
            per_param[n] for n, p in model.named_parameters() if p.dim() >= 2
        ),
        "update_to_param_ratio": sum(ratios) / len(ratios),
        "grad_noise_scale": mean * mean / var,
        "dead_relu_fraction": 1 - float(alive.float().mean()),
        "activation_p50": quantiles[0],
        "activation_p99": quantiles[1],
        "probe_loss": float(probe_loss),
        "probe_grad_norm": {n: float(g.norm()) for n, g in zip(names, probe, strict=True)},
        "lr": lr,
        "batch_size": 4,
    }


def close(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)
    return bool(a == b)


@pytest.mark.parametrize("every", [1, 2])
def test_monitor__every_metric_matches_a_hand_computation(tmp_path: Path, every: int) -> None:
    # `every`: activations sampled for the percentiles on every call, or every other one
    spooled = Spooled(tmp_path)
    train_loader, val_loader = data()
    model = tiny_model()
    expected = by_hand(model, 0.1, train_loader, val_loader, every=every)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    config = MonitorConfig(percentile_every=every, unit_stride=1)
    with (
        spooled.session() as session,
        TrainingMonitor(spooled.monitor, session, config=config) as monitor,
    ):
        monitor.attach(model, optimizer, nn.CrossEntropyLoss(), train_loader, val_loader)
        train(model, optimizer, monitor.loss_fn, train_loader)
        returned = monitor.end_epoch()
    (recorded,) = spooled.payloads("metric")
    metric = Metric.model_validate(recorded)
    assert metric == returned
    for field, value in expected.items():
        assert close(value, getattr(metric, field)), (field, value, getattr(metric, field))
    assert metric.dead_relu_per_module == {"act": pytest.approx(1 / 3)}
    assert metric.saturated_fraction is None  # no smooth activation: not measured, not 0


def test_monitor__steps_count_optimizer_steps_and_an_epoch_without_steps_has_no_data(
    tmp_path: Path,
) -> None:
    spooled = Spooled(tmp_path)
    train_loader, val_loader = data()
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with spooled.session() as session, TrainingMonitor(spooled.monitor, session) as monitor:
        monitor.attach(model, optimizer, nn.CrossEntropyLoss(), train_loader, val_loader)
        idle = monitor.end_epoch()
        train(model, optimizer, monitor.loss_fn, train_loader)
        busy = monitor.end_epoch()
    assert idle.steps == 0 and idle.max_layer_grad_norm is None and idle.per_layer_grad_norm == {}
    assert idle.val_loss is not None  # validation is measured either way
    assert busy.steps == 2 and busy.epoch == 1 and busy.samples == 8


def test_monitor__validation_and_the_loops_own_eval_passes_do_not_change_training_statistics(
    tmp_path: Path,
) -> None:
    train_loader, val_loader = data()

    def run(folder: str, extra_eval: bool) -> Metric:
        spooled = Spooled(tmp_path / folder)
        model = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
        torch.manual_seed(0)
        for p in model.parameters():
            nn.init.normal_(p)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with spooled.session() as session, TrainingMonitor(spooled.monitor, session) as monitor:
            monitor.attach(model, optimizer, nn.CrossEntropyLoss(), train_loader, val_loader)
            for x, y in train_loader:
                optimizer.zero_grad()
                monitor.loss_fn(model(x), y).backward()
                optimizer.step()
                if extra_eval:  # the training code validating on its own, between steps
                    model.eval()
                    with torch.no_grad():
                        monitor.loss_fn(model(torch.randn(16, 2) * 5), torch.zeros(16).long())
                    model.train()
            return monitor.end_epoch()

    plain, with_eval = run("a", False), run("b", True)
    training_fields = {
        k: v for k, v in plain.model_dump().items() if not k.startswith(("val_", "probe_"))
    }
    assert training_fields == {
        k: v for k, v in with_eval.model_dump().items() if not k.startswith(("val_", "probe_"))
    }


def test_monitor__validation_leaves_batch_norm_statistics_and_gradients_alone(
    tmp_path: Path,
) -> None:
    spooled = Spooled(tmp_path)
    train_loader, val_loader = data()
    model = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with spooled.session() as session, TrainingMonitor(spooled.monitor, session) as monitor:
        monitor.attach(model, optimizer, nn.CrossEntropyLoss(), train_loader, val_loader)
        train(model, optimizer, monitor.loss_fn, train_loader)
        for p in model.parameters():
            p.grad = torch.full_like(p, 7.0)
        running = model[1].running_mean.clone()  # type: ignore[index]
        monitor.end_epoch()  # runs validation and the probe
        assert torch.equal(model[1].running_mean, running)  # type: ignore[index]
        assert all(bool((p.grad == 7.0).all()) for p in model.parameters())
        assert model.training


def test_monitor__the_smallest_gradient_is_a_weights_so_batch_norm_does_not_look_vanishing(
    tmp_path: Path,
) -> None:
    """The bias of a layer whose output a batch norm re-centres gets no gradient by
    construction; the vanishing rule reads the weights' smallest norm, not that bias's."""
    spooled = Spooled(tmp_path)
    train_loader, val_loader = data()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with spooled.session() as session, TrainingMonitor(spooled.monitor, session) as monitor:
        monitor.attach(model, optimizer, nn.CrossEntropyLoss(), train_loader, val_loader)
        train(model, optimizer, monitor.loss_fn, train_loader)
        metric = monitor.end_epoch()
    norms = metric.per_layer_grad_norm
    assert norms["0.bias"] < 1e-6  # normalised away: no gradient
    assert metric.min_layer_grad_norm == min(norms["0.weight"], norms["3.weight"]) > 1e-3


def test_monitor__hooks_follow_a_swap_to_gelu_and_measure_it(tmp_path: Path) -> None:
    spooled = Spooled(tmp_path)
    train_loader, val_loader = data()
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with spooled.session() as session, TrainingMonitor(spooled.monitor, session) as monitor:
        monitor.attach(model, optimizer, nn.CrossEntropyLoss(), train_loader, val_loader)
        train(model, optimizer, monitor.loss_fn, train_loader)
        before = monitor.end_epoch()
        model.act = nn.GELU()  # an in-place swap, as a remedy would do it
        train(model, optimizer, monitor.loss_fn, train_loader)
        after = monitor.end_epoch()
    assert before.dead_relu_fraction == pytest.approx(1 / 3) and before.saturated_fraction is None
    # GELU is never exactly 0: the dead-unit count is not measured, the saturated analogue is
    assert after.dead_relu_fraction is None and after.dead_relu_per_module == {}
    assert after.saturated_per_module.keys() == {"act"}
    assert after.saturated_fraction == pytest.approx(1 / 3)  # unit 2's input sits near -100
    assert after.activation_p50 is not None
    specs = spooled.payloads("model_spec")
    assert [(s["phase"], s["epoch"], s["activation"]) for s in specs] == [
        ("attach", 0, "relu"),
        ("changed", 1, "gelu"),
        ("final", 2, "gelu"),
    ]


def test_monitor__an_added_block_is_hooked_and_a_removed_one_unhooked(tmp_path: Path) -> None:
    spooled = Spooled(tmp_path)
    train_loader, val_loader = data()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with spooled.session() as session, TrainingMonitor(spooled.monitor, session) as monitor:
        monitor.attach(model, optimizer, nn.CrossEntropyLoss(), train_loader, val_loader)
        train(model, optimizer, monitor.loss_fn, train_loader)
        first = monitor.end_epoch()
        model.append(nn.Tanh())  # an added block: a new activation module
        train(model, optimizer, monitor.loss_fn, train_loader)
        second = monitor.end_epoch()
        del model[1]  # the ReLU goes; Sequential renumbers what follows
        train(model, optimizer, monitor.loss_fn, train_loader)
        third = monitor.end_epoch()
    assert first.dead_relu_per_module.keys() == {"1"} and not first.saturated_per_module
    assert second.dead_relu_per_module.keys() == {"1"}
    assert second.saturated_per_module.keys() == {"3"}
    assert third.dead_relu_per_module == {} and third.saturated_per_module.keys() == {"2"}
    phases = [(s["phase"], s["activations"]) for s in spooled.payloads("model_spec")]
    assert phases == [
        ("attach", {"relu": 1}),
        ("changed", {"relu": 1, "tanh": 1}),
        ("changed", {"tanh": 1}),
        ("final", {"tanh": 1}),
    ]


def test_monitor__no_method_takes_a_metric_value_and_the_session_has_no_metric_call() -> None:
    fields = set(Metric.model_fields)
    for name, member in inspect.getmembers(TrainingMonitor, callable):
        if name.startswith("_"):
            continue
        parameters = set(inspect.signature(member).parameters)
        assert not parameters & fields, (name, parameters & fields)
    assert not hasattr(Session, "metric")
    public = {n for n in dir(Session) if not n.startswith("_")}
    assert public == {
        "capture",
        "decision",
        "evaluation",
        "end",
        "ended",
        "feedback",
        "prompt_decision",
        "prompt_promotion",
        "prompt_version",
        "record",
        "reward",
        "ruleset_evaluation",
        "session_id",
        "tool",
        "tool_call",
        "tool_result",
        "turn",
        "verdict",
        "world",
    }


def test_monitor__records_under_its_own_recorder_and_the_session_waits_for_its_chain(
    tmp_path: Path,
) -> None:
    spooled = Spooled(tmp_path)
    session = spooled.session()
    with pytest.raises(MonitorError, match="own principal"):
        TrainingMonitor(spooled.agent, session)
    train_loader, val_loader = data()
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with session, TrainingMonitor(spooled.monitor, session) as monitor:
        monitor.attach(model, optimizer, nn.CrossEntropyLoss(), train_loader, val_loader)
        train(model, optimizer, monitor.loss_fn, train_loader)
        monitor.end_epoch()
    envelopes = spooled.envelopes()
    by_stream = {(e["stream"], e["type"]): e for e in envelopes}
    assert by_stream[("events", "session_ended")]["payload"]["streams"] == ["metrics"]
    assert {e["producer"]["principal"] for e in envelopes if e["stream"] == "metrics"} == {
        "monitor"
    }
    assert {e["producer"]["principal"] for e in envelopes if e["stream"] == "events"} == {"agent"}
    metrics_chain = [e["type"] for e in envelopes if e["stream"] == "metrics"]
    assert metrics_chain == ["model_spec", "metric", "model_spec", "live_check", "session_ended"]


def test_monitor__the_live_check_repeats_the_last_probe_and_follows_a_restored_checkpoint(
    tmp_path: Path,
) -> None:
    spooled = Spooled(tmp_path)
    train_loader, val_loader = data()
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    with spooled.session() as session, TrainingMonitor(spooled.monitor, session) as monitor:
        monitor.attach(model, optimizer, nn.CrossEntropyLoss(), train_loader, val_loader)
        metrics = []
        for _ in range(4):
            train(model, optimizer, monitor.loss_fn, train_loader)
            metrics.append(monitor.end_epoch())
        best = min(range(4), key=lambda e: metrics[e].val_loss or math.inf)
        assert monitor.restore_best() == best
        check = monitor.finish()
    assert check is not None and check.weights_epoch == best and check.epoch == 3
    assert check.per_layer_grad_norm == pytest.approx(metrics[best].probe_grad_norm, rel=1e-6)
    assert check.val_loss == pytest.approx(metrics[best].val_loss)


def test_monitor__a_plain_loss_function_is_wrapped_and_measured(tmp_path: Path) -> None:
    spooled = Spooled(tmp_path)
    train_loader, val_loader = data()
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with spooled.session() as session, TrainingMonitor(spooled.monitor, session) as monitor:
        monitor.attach(model, optimizer, nn.functional.cross_entropy, train_loader, val_loader)
        train(model, optimizer, monitor.loss_fn, train_loader)
        metric = monitor.end_epoch()
    assert metric.train_loss is not None and metric.train_acc is not None


def test_monitor__without_held_out_data_attach_says_what_it_needs(tmp_path: Path) -> None:
    spooled = Spooled(tmp_path)
    train_loader, _ = data()
    model = tiny_model()
    with (
        spooled.session() as session,
        TrainingMonitor(spooled.monitor, session) as monitor,
        pytest.raises(MonitorError, match="val_loader"),
    ):
        monitor.attach(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            nn.CrossEntropyLoss(),
            train_loader,
        )


def test_step_hooks__never_read_a_tensor_back_to_the_host() -> None:
    """On the meta device any `.item()`, `.tolist()` or `bool()` of a tensor raises: the
    per-step accumulators must only launch device operations."""
    meta = torch.device("meta")
    params = [torch.empty(4, 3, device=meta), torch.empty(4, device=meta)]
    for p in params:
        p.grad = torch.empty_like(p)
    grads = GradientStats(params, ["w", "b"], noise_simple=True)
    relu = ActivationStats("relu", nn.ReLU(), slope_below=1e-3, sample=8, slots=4)
    gelu = ActivationStats("gelu", nn.GELU(), slope_below=1e-3, sample=8, slots=4)
    losses = LossStats()
    for _ in range(3):
        grads.before_step()
        grads.after_step()
        out = torch.empty(16, 4, device=meta)
        relu.count(out)
        relu.sample(out)
        gelu.count(out)
        gelu.sample(out)
        losses.observe(
            torch.empty(16, 10, device=meta),
            torch.empty(16, dtype=torch.long, device=meta),
            torch.empty((), device=meta),
            "mean",
        )
    assert grads.steps == 3 and relu.calls == 3 and losses.samples == 48
    assert grads.readout().device == meta  # the epoch's arithmetic stays on the device too


def test_activation_stats__a_stride_checks_every_share_of_the_batch_in_turn() -> None:
    stats = ActivationStats("act", nn.ReLU(), slope_below=1e-3, sample=4, slots=4, stride=2)
    out = torch.zeros(4, 3)
    out[1, 0] = 1.0  # unit 0 fires on sample 1 alone, unit 1 on sample 2 alone, unit 2 never
    out[2, 1] = 1.0
    stats.observe(out, out)
    fraction = stats.fraction()
    assert fraction is not None and float(fraction) == pytest.approx(2 / 3)  # samples 0 and 2
    stats.observe(out, out)
    fraction = stats.fraction()
    assert fraction is not None and float(fraction) == pytest.approx(1 / 3)  # then 1 and 3
