"""Named training setups of the reference task, each provoking rules with real training.

Each names the rules it is built to provoke (what `rolltape rules evaluate` scores a rule set's
detections against) and the rules it fires under the task's default rule set, the calibrated
`digits-cnn-calibrated` (checked by the integration tests against a real worker; measured over
ten held-out seeds in docs/training-monitor.md). Other rules may fire too. The healthy baseline
fires none; the two setups whose fault the default set does not see say so.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rolltape.producers.training._digits import ArchitectureSpec, DigitsData
from rolltape.producers.training._remedies import TrainingRun, start_run
from rolltape.schemas import RuleId


class Scenario(BaseModel):
    """A training setup: the network, the optimiser's settings, the data and what it provokes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str
    architecture: ArchitectureSpec = ArchitectureSpec()
    lr: float = Field(default=0.05, gt=0)
    momentum: float = Field(default=0.9, ge=0, lt=1)
    batch_size: int = Field(default=32, ge=1)
    epochs: int = Field(default=12, ge=1)
    dead_units: float = Field(default=0.0, ge=0, le=1)
    """Fraction of every block's channels killed at initialisation (see build_model)."""
    train_subset: int | None = Field(default=None, ge=1)
    """Train on the first N training images only."""
    provokes: tuple[RuleId, ...] = ()
    """The rules this setup is built to provoke (its fault's rules)."""
    expected: tuple[RuleId, ...] = ()
    """The rules it fires from real hooks under the default rule set, in at least 9 of 10
    seeds; a rule it provokes is missing here when that set does not detect it."""

    def start(self, data: DigitsData, *, seed: int) -> TrainingRun:
        """A fresh run of this setup on `data`, its network initialised with `seed`."""
        return start_run(
            data,
            self.architecture,
            lr=self.lr,
            momentum=self.momentum,
            batch_size=self.batch_size,
            seed=seed,
            dead_units=self.dead_units,
        )


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="baseline",
            description="3 ReLU blocks of 32 channels, SGD lr 0.05, batch 32: trains to ~95% "
            "validation accuracy; a healthy run, no rule fires",
        ),
        Scenario(
            name="lr_too_high",
            description="LeakyReLU network at lr 20: the loss is NaN within the first epoch",
            architecture=ArchitectureSpec(activation="leaky_relu"),
            lr=20.0,
            epochs=8,
            provokes=("R7",),
            expected=("R7",),
        ),
        Scenario(
            name="batch_of_two",
            description="batches of 2 on 300 images: every step follows a pair of samples; the "
            "monitor's noise scale reads as on healthy runs, so R2 does not fire by default",
            lr=0.005,
            batch_size=2,
            train_subset=300,
            epochs=6,
            provokes=("R2",),
        ),
        Scenario(
            name="dead_relu",
            description="60% of every block's ReLU channels dead from initialisation",
            dead_units=0.6,
            epochs=10,
            provokes=("R5",),
            expected=("R5",),
        ),
        Scenario(
            name="deep_sigmoid",
            description="10 sigmoid blocks without batch norm: the first layers' gradients vanish",
            architecture=ArchitectureSpec(blocks=10, activation="sigmoid"),
            lr=0.02,
            epochs=8,
            provokes=("R6",),
            expected=("R6",),
        ),
        Scenario(
            name="tiny_lr",
            description="lr 1e-5: updates four orders of magnitude too small to move the weights",
            lr=1e-5,
            epochs=6,
            provokes=("R1", "R4"),
            expected=("R1", "R4"),
        ),
        Scenario(
            name="plateau",
            description="80 training images: validation loss stops improving while training "
            "memorises them",
            train_subset=80,
            epochs=14,
            provokes=("R3",),
            expected=("R3",),
        ),
        Scenario(
            name="no_capacity",
            description="one block of 2 channels: training accuracy stalls, but late and with "
            "a dead channel in some seeds (R5), so R4 fires in few seeds",
            architecture=ArchitectureSpec(blocks=1, width=2),
            epochs=8,
            provokes=("R4",),
        ),
    )
}
