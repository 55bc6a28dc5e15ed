"""A scenario run under the monitor with nothing acting on it: what rule calibration and rule-set
evaluation read. The monitor records as always (into a spool that is thrown away: no broker is
needed) and its metric per epoch is returned, the very records the worker's rule engine reads."""

from __future__ import annotations

import tempfile
from pathlib import Path

from torch import nn

from rolltape.producers._recorder import Recorder
from rolltape.producers.training._digits import DigitsData
from rolltape.producers.training._harness import TASK, _train_epoch
from rolltape.producers.training._monitor import MonitorConfig, TrainingMonitor
from rolltape.producers.training._scenarios import Scenario
from rolltape.schemas import Metric


def monitored_run(
    scenario: Scenario,
    *,
    seed: int,
    epochs: int | None = None,
    monitor: MonitorConfig | None = None,
) -> list[Metric]:
    """Train `scenario` once, seeded by `seed` (the data split, the initialisation and the
    shuffling all follow it, so seeds differ as independent runs do), for `epochs` (default:
    the scenario's), and return the monitor's metric of every epoch."""
    data = DigitsData(seed, scenario.train_subset)
    run = scenario.start(data, seed=seed)
    metrics: list[Metric] = []
    with tempfile.TemporaryDirectory(prefix="rolltape-offline-") as tmp:
        agent = Recorder(None, spool_dir=Path(tmp) / "agent", principal="agent")
        recorder = Recorder(None, spool_dir=Path(tmp) / "monitor", principal="monitor")
        try:
            with (
                agent.session(f"{TASK}/{scenario.name}", kind="training") as session,
                TrainingMonitor(recorder, session, config=monitor) as watching,
            ):
                watching.attach(
                    run.model, run.optimizer, nn.CrossEntropyLoss(), run.loader, data.val_loader()
                )
                for _ in range(epochs or scenario.epochs):
                    _train_epoch(run, watching)
                    metrics.append(watching.end_epoch())
        finally:
            agent.close(10)
            recorder.close(10)
    return metrics
