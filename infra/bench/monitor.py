"""`rolltape bench monitor`: what the training monitor costs a training step, measured every step.

(a) Step overhead: the reference CNN on the digits data trains with the monitor attached (every
    hook live: activations, loss, optimizer step) and, in the same process, an identical copy
    trains without it. Blocks of steps alternate between the two so drift (thermal, the other
    core's load) hits both alike; the figure is the median step time of each and their ratio.
    Tools in this field sample every 1,000 steps to stay cheap; the monitor measures every step.
(b) Epoch end: `end_epoch()` (one host copy of the epoch's accumulators, validation, the probe
    batch's forward and backward, the best-checkpoint copy, recording), median over epochs.

No broker is needed: the monitor records to a spool in a temporary folder (recording is a deque
append on the hot path either way; `rolltape bench producer` measures it).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

from rolltape.infra.bench._machine import machine


class StepFigures(BaseModel):
    """One CNN width: median step time with and without the monitor (alternating blocks in one
    process), and the cost of an epoch's end."""

    architecture: str
    batch_size: int
    steps_each: int
    plain_step_ms: float
    monitored_step_ms: float
    overhead: float
    """monitored / plain - 1, from the medians."""
    epoch_end_ms: float
    train_epoch_ms: float
    """A plain epoch's training steps, for scale (the epoch-end cost is paid once per epoch)."""


class MonitorBench(BaseModel):
    """What `rolltape bench monitor` prints: the machine and torch build, one `StepFigures` per
    width measured."""

    machine: str
    torch: str
    threads: int
    results: list[StepFigures]


def _measure(width: int, blocks: int, batch: int, steps: int, block: int) -> StepFigures:
    import torch
    from torch import nn

    from rolltape.producers import Recorder
    from rolltape.producers.training import (
        ArchitectureSpec,
        DigitsData,
        TrainingMonitor,
        build_model,
    )

    spec = ArchitectureSpec(blocks=blocks, width=width)
    data = DigitsData(0)
    batches = list(data.train_loader(batch))
    plain_model = build_model(spec, seed=0)
    watched_model = build_model(spec, seed=0)
    plain_opt = torch.optim.SGD(plain_model.parameters(), lr=0.01, momentum=0.9)
    watched_opt = torch.optim.SGD(watched_model.parameters(), lr=0.01, momentum=0.9)
    plain_loss = nn.CrossEntropyLoss()
    with tempfile.TemporaryDirectory() as tmp:
        agent = Recorder(None, spool_dir=Path(tmp) / "a", spool_after_s=0.0)
        recorder = Recorder(None, spool_dir=Path(tmp) / "m", spool_after_s=0.0)
        session = agent.session("bench monitor", kind="training")
        monitor = TrainingMonitor(recorder, session)
        monitor.attach(
            watched_model, watched_opt, nn.CrossEntropyLoss(), batches, data.val_loader()
        )
        watched_loss = monitor.loss_fn
        times: dict[str, list[float]] = {"plain": [], "monitored": []}
        ends: list[float] = []
        done = 0
        i = 0
        while done < steps:
            for name, model, opt, loss_fn in (
                ("plain", plain_model, plain_opt, plain_loss),
                ("monitored", watched_model, watched_opt, watched_loss),
            ):
                for k in range(block):
                    x, y = batches[(i + k) % len(batches)]
                    start = time.perf_counter()
                    opt.zero_grad()
                    loss_fn(model(x), y).backward()
                    opt.step()
                    times[name].append(time.perf_counter() - start)
            i += block
            done += block
            if done % len(batches) < block:  # an epoch's worth of steps: the epoch ends
                start = time.perf_counter()
                monitor.end_epoch()
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
    return StepFigures(
        architecture=f"{blocks} blocks x {width} channels ({sum(p.numel() for p in plain_model.parameters()):,} parameters)",
        batch_size=batch,
        steps_each=len(times["plain"]),
        plain_step_ms=plain * 1000,
        monitored_step_ms=watched * 1000,
        overhead=watched / plain - 1,
        epoch_end_ms=statistics.median(ends) * 1000,
        train_epoch_ms=plain * len(batches) * 1000,
    )


def run_monitor_bench(
    *, steps: int = 2000, block: int = 25, widths: tuple[int, ...] = (32, 64)
) -> MonitorBench:
    """Train the reference CNN at each width with and without the monitor, `block` steps at a
    time in turn. No broker: the monitor records to a temporary spool. Needs torch."""
    import torch

    results = [_measure(width, 3, 32, steps, block) for width in widths]
    return MonitorBench(
        machine=machine(),
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        results=results,
    )
