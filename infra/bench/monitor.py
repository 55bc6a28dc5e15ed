"""`rolltape bench monitor`: what the training monitor costs a training step, measured every step.

(a) Step overhead: a model trains with the monitor attached (every hook live: activations, loss,
    optimizer step) and, in the same process, an identical copy trains without it. Blocks of
    steps alternate between the two so drift (thermal, the other core's load) hits both alike;
    the figure is the median step time of each and their ratio. Tools in this field sample
    every 1,000 steps to stay cheap; the monitor measures every step.
(b) Epoch end: `end_epoch()` (one host copy of the epoch's accumulators, validation, the probe
    batch's forward and backward, the best-checkpoint copy, recording), median over epochs.

Models: the reference CNN on the digits data at each width (batch 32); on an accelerator also a
ResNet-18 (CIFAR layout, 11 M parameters) and a small transformer encoder (4 layers, width
256, GELU modules) on random data, batch 256. On a GPU a block is timed between two
synchronisations (never a step), and one monitored block runs under CUDA's sync debug mode set
to "error": a host synchronisation in any hook fails the run, so "no sync per step" is checked,
not assumed.

No broker is needed: the monitor records to a spool in a temporary folder (recording is a deque
append on the hot path either way; `rolltape bench producer` measures it).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._machine import machine

if TYPE_CHECKING:
    import torch
    from torch import nn

ModelName = Literal["cnn", "resnet18", "transformer"]
GOALS = {"cnn": 0.10, "cnn-wide": 0.05, "resnet18": 0.03, "transformer": 0.03}
"""Issue 31's goals: the reference CNN 10%, its 77k-parameter variant 5%, a larger model on a
GPU 3%."""


class StepFigures(BaseModel):
    """One model: median step time with and without the monitor (alternating blocks in one
    process), and the cost of an epoch's end."""

    architecture: str
    device: str
    batch_size: int
    steps_each: int
    plain_step_ms: float
    monitored_step_ms: float
    overhead: float
    """monitored / plain - 1, from the medians."""
    goal: float
    epoch_end_ms: float
    train_epoch_ms: float
    """A plain epoch's training steps, for scale (the epoch-end cost is paid once per epoch)."""
    host_syncs_checked: bool = False
    """A monitored block ran under CUDA's sync debug mode "error" without one."""


class MonitorBench(Figures):
    """What `rolltape bench monitor` prints: the machine and torch build, one `StepFigures` per
    model measured."""

    machine: str
    torch: str
    threads: int
    device: str
    results: list[StepFigures]

    def lines(self) -> Iterator[str]:
        yield machine_line(
            self.machine, f"torch {self.torch}, {self.threads} threads", f"device {self.device}"
        )
        yield "every step measured; SGD with momentum"
        for f in self.results:
            yield f"  {f.architecture}, batch {f.batch_size}, {f.steps_each} steps each:"
            yield (
                f"    step p50: plain {f.plain_step_ms:.3f} ms, monitored "
                f"{f.monitored_step_ms:.3f} ms -> overhead {f.overhead:+.1%} "
                f"(goal <= {f.goal:.0%}: {'met' if f.overhead <= f.goal else 'NOT met'})"
            )
            if f.host_syncs_checked:
                yield "    host synchronisations in a monitored block: none (CUDA sync debug)"
            yield (
                f"    epoch end (validation, probe, one host copy, record): {f.epoch_end_ms:.1f} "
                f"ms per epoch, beside {f.train_epoch_ms:.0f} ms of training steps"
            )


@dataclass
class _Case:
    """A model to train twice (plain and monitored) and its batches."""

    label: str
    goal: float
    make: Callable[[], nn.Module]
    batches: list[tuple[torch.Tensor, torch.Tensor]]
    val: list[tuple[torch.Tensor, torch.Tensor]]
    lr: float


def _digits_case(width: int, device: torch.device) -> _Case:
    from rolltape.producers.training import ArchitectureSpec, DigitsData, build_model

    spec = ArchitectureSpec(blocks=3, width=width)
    data = DigitsData(0)
    batches = [(x.to(device), y.to(device)) for x, y in data.train_loader(32)]
    val = [(x.to(device), y.to(device)) for x, y in data.val_loader()]
    label = "cnn" if width <= 32 else "cnn-wide"
    return _Case(
        label, GOALS[label], lambda: build_model(spec, seed=0).to(device), batches, val, 0.01
    )


def _random_batches(
    device: torch.device, shape: tuple[int, ...], classes: int, tokens: int | None, count: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    import torch

    g = torch.Generator(device="cpu").manual_seed(0)
    out = []
    for _ in range(count):
        if tokens is None:
            x = torch.randn(shape, generator=g)
        else:
            x = torch.randint(0, tokens, shape, generator=g)
        y = torch.randint(0, classes, (shape[0],), generator=g)
        out.append((x.to(device), y.to(device)))
    return out


def _resnet18() -> nn.Module:
    """ResNet-18 in the CIFAR layout (3x3 stem, no max-pool), written out here so the bench
    needs no torchvision; each block's ReLU module is called twice per forward, as in the
    original."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.shortcut: nn.Module = nn.Identity()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x: Any) -> Any:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + self.shortcut(x))

    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 3, 1, 1, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
    ]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10)]
    return nn.Sequential(*layers)


def _transformer() -> nn.Module:
    """A small encoder classifier: 1,000 tokens, width 256, 4 layers of 4 heads, GELU modules
    (the monitor hooks modules, not functions), mean-pooled into 10 classes."""
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(1000, 256)
            layer = nn.TransformerEncoderLayer(
                256, 4, 1024, dropout=0.0, activation=nn.GELU(), batch_first=True
            )
            self.encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
            self.head = nn.Linear(256, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.head(self.encoder(self.embed(x)).mean(1))
            return out

    return Encoder()


def _cases(
    models: tuple[ModelName, ...], widths: tuple[int, ...], device: torch.device
) -> list[_Case]:
    import torch

    cases: list[_Case] = []
    for model in models:
        if model == "cnn":
            cases += [_digits_case(width, device) for width in widths]
        elif model == "resnet18":
            batches = _random_batches(device, (256, 3, 32, 32), 10, None, 8)
            val = _random_batches(device, (256, 3, 32, 32), 10, None, 1)
            torch.manual_seed(0)
            cases.append(_Case("resnet18", GOALS["resnet18"], _resnet18, batches, val, 0.05))
        else:
            batches = _random_batches(device, (256, 128), 10, 1000, 8)
            val = _random_batches(device, (256, 128), 10, 1000, 1)
            cases.append(
                _Case("transformer", GOALS["transformer"], _transformer, batches, val, 0.01)
            )
    return cases


def _measure(
    case: _Case, steps: int, block: int, device: torch.device, epoch_steps: int
) -> StepFigures:
    import torch
    from torch import nn

    from rolltape.producers import Recorder
    from rolltape.producers.training import TrainingMonitor

    cuda = device.type == "cuda"
    torch.manual_seed(0)
    plain_model = case.make().to(device)
    watched_model = case.make().to(device)
    watched_model.load_state_dict(plain_model.state_dict())
    plain_opt = torch.optim.SGD(plain_model.parameters(), lr=case.lr, momentum=0.9)
    watched_opt = torch.optim.SGD(watched_model.parameters(), lr=case.lr, momentum=0.9)
    plain_loss = nn.CrossEntropyLoss()
    batches = case.batches

    def synchronize() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    with tempfile.TemporaryDirectory() as tmp:
        agent = Recorder(None, spool_dir=Path(tmp) / "a", spool_after_s=0.0)
        recorder = Recorder(None, spool_dir=Path(tmp) / "m", spool_after_s=0.0)
        session = agent.session("bench monitor", kind="training")
        monitor = TrainingMonitor(recorder, session)
        monitor.attach(watched_model, watched_opt, nn.CrossEntropyLoss(), batches, case.val)
        watched_loss = monitor.loss_fn
        ways: tuple[tuple[str, nn.Module, Any, Any], ...] = (
            ("plain", plain_model, plain_opt, plain_loss),
            ("monitored", watched_model, watched_opt, watched_loss),
        )
        times: dict[str, list[float]] = {"plain": [], "monitored": []}
        ends: list[float] = []
        checked = False

        def run_block(
            model: nn.Module, opt: Any, loss_fn: Any, first: int, *, strict: bool = False
        ) -> list[float]:
            """Step times: each step's on a CPU; on a GPU the block's mean (timing a step
            would need a synchronisation per step, the very thing the monitor avoids). With
            `strict`, any host synchronisation inside the steps raises."""
            synchronize()
            start = block_start = time.perf_counter()
            taken = []
            if strict:
                torch.cuda.set_sync_debug_mode("error")
            try:
                for k in range(block):
                    x, y = batches[(first + k) % len(batches)]
                    opt.zero_grad()
                    loss_fn(model(x), y).backward()
                    opt.step()
                    if not cuda:
                        now = time.perf_counter()
                        taken.append(now - start)
                        start = now
            finally:
                if strict:
                    torch.cuda.set_sync_debug_mode("default")
            synchronize()
            return taken or [(time.perf_counter() - block_start) / block] * block

        # warm-up (allocator, cuDNN's algorithm choice), then the first monitored epoch's end
        for _, model, opt, loss_fn in ways:
            run_block(model, opt, loss_fn, 0)
        monitor.end_epoch()
        done = i = 0
        while done < steps:
            for name, model, opt, loss_fn in ways:
                strict = cuda and name == "monitored" and not checked
                taken = run_block(model, opt, loss_fn, i, strict=strict)
                checked = checked or strict
                times[name] += taken
            i += block
            done += block
            if done % epoch_steps < block:  # an epoch's worth of steps: the epoch ends
                synchronize()
                start = time.perf_counter()
                monitor.end_epoch()
                synchronize()
                ends.append(time.perf_counter() - start)
        if not ends:
            start = time.perf_counter()
            monitor.end_epoch()
            ends.append(time.perf_counter() - start)
        monitor.finish()
        session.end()
        agent.close(30)
        recorder.close(30)
    plain = statistics.median(times["plain"])
    watched = statistics.median(times["monitored"])
    parameters = sum(p.numel() for p in plain_model.parameters())
    described = {
        "cnn": "the reference CNN",
        "cnn-wide": "the reference CNN, 64 channels",
        "resnet18": "ResNet-18 (CIFAR layout), random 3x32x32 images",
        "transformer": "transformer encoder (4 x 256, GELU), random 128-token sequences",
    }[case.label]
    return StepFigures(
        architecture=f"{described} ({parameters:,} parameters)",
        device=str(device),
        batch_size=int(batches[0][0].shape[0]),
        steps_each=len(times["plain"]),
        plain_step_ms=plain * 1000,
        monitored_step_ms=watched * 1000,
        overhead=watched / plain - 1,
        goal=case.goal,
        epoch_end_ms=statistics.median(ends) * 1000,
        train_epoch_ms=plain * epoch_steps * 1000,
        host_syncs_checked=checked,
    )


def cuda_visible() -> bool:
    """Whether torch sees a CUDA device here (for `device="cuda"`). Needs torch."""
    import torch

    return torch.cuda.is_available()


def run_monitor_bench(
    *,
    steps: int = 2000,
    block: int = 25,
    widths: tuple[int, ...] = (32, 64),
    models: tuple[ModelName, ...] = ("cnn",),
    device: str = "cpu",
) -> MonitorBench:
    """Train each model with and without the monitor, `block` steps at a time in turn. No
    broker: the monitor records to a temporary spool. Needs torch (and, for `device="cuda"`,
    a GPU)."""
    import torch

    where = torch.device(device)
    results = []
    for case in _cases(models, widths, where):
        epoch = len(case.batches) if case.label.startswith("cnn") else 50
        results.append(_measure(case, steps, block, where, epoch))
    return MonitorBench(
        machine=machine(),
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        device=torch.cuda.get_device_name(where) if where.type == "cuda" else "cpu",
        results=results,
    )
