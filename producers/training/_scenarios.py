"""Named training setups of the reference task, each provoking rules with real training.

The expected rules are those the canonical engine fires from the monitor's real measurements on
this setup (checked by the integration tests against a real worker); other rules may fire too.
On the reference task R2 fires from batch 32 on: its per-step gradient norms are noisy (their
mean^2/var sits near 10-30, under REFERENCE.md's band of 50-5000), so the playbook's remedy, a
larger batch, is called for; that is the band of the default rule set, not a defect of a run.
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
    expected: tuple[RuleId, ...] = ()
    """Rules this setup fires from real hooks (on the default rule set)."""

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
            "validation accuracy; R2 fires (noisy gradients at batch 32)",
            expected=("R2",),
        ),
        Scenario(
            name="lr_too_high",
            description="LeakyReLU network at lr 20: the loss is NaN within the first epoch",
            architecture=ArchitectureSpec(activation="leaky_relu"),
            lr=20.0,
            epochs=8,
            expected=("R7",),
        ),
        Scenario(
            name="batch_of_two",
            description="batches of 2 on 300 images: every step follows a pair of samples",
            lr=0.005,
            batch_size=2,
            train_subset=300,
            epochs=6,
            expected=("R2",),
        ),
        Scenario(
            name="dead_relu",
            description="60% of every block's ReLU channels dead from initialisation",
            dead_units=0.6,
            epochs=10,
            expected=("R5",),
        ),
        Scenario(
            name="deep_sigmoid",
            description="10 sigmoid blocks without batch norm: the first layers' gradients vanish",
            architecture=ArchitectureSpec(blocks=10, activation="sigmoid"),
            lr=0.02,
            epochs=8,
            expected=("R6",),
        ),
        Scenario(
            name="tiny_lr",
            description="lr 1e-5: updates four orders of magnitude too small to move the weights",
            lr=1e-5,
            epochs=6,
            expected=("R1", "R4"),
        ),
        Scenario(
            name="plateau",
            description="80 training images: validation loss stops improving while training "
            "memorises them",
            train_subset=80,
            epochs=14,
            expected=("R3",),
        ),
        Scenario(
            name="no_capacity",
            description="one block of 2 channels: training accuracy stalls",
            architecture=ArchitectureSpec(blocks=1, width=2),
            epochs=8,
            expected=("R4",),
        ),
    )
}
