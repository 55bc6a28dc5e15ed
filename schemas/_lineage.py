"""Lineage: what a training run learned from, and the model it made, as events of its session.

A training run is a session (kind `training`) on the events stream, recorded under the trainer's
own principal (`Role.TRAINER`): its start names the base model and the settings
(`run_config`); `training_input` events say what it consumed (an export by its manifest's
digest, or a stream by the positions it read) and list the sessions behind every sample;
`trainer_log` events carry the loss and learning rate the trainer reported; `model_checkpoint`
events name each checkpoint it wrote by version and sha256. Chained and checkpointed like every
session, so "which sessions did model M learn from" is answered from the log, with evidence, and
an erasure can name the models that learned from a subject's sessions.

The trainer's logged values are the training code's own report, kept apart from the monitor's
hook-measured `metric` events (which rules fire on): a claimed loss never fires a rule.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

_SHA256 = r"^[0-9a-f]{64}$"
LINEAGE_TAG: Final = "lineage"
"""The tag of a training run's session that records lineage (the read model's `tag=lineage`)."""
INPUT_CHUNK: Final = 500
"""Samples per `training_input` event: a run over a large export writes several, each well
under the record limit."""


class TrainedSample(BaseModel):
    """One sample a run consumed: the session it came from and the trajectory (judge version's
    fold) it was made of."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: str = Field(min_length=1)
    trajectory_id: str = Field(min_length=1)


class TrainingInput(BaseModel):
    """Payload of a `training_input` event: what a run consumed, part `part` of `parts`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: Literal["export", "stream"]
    manifest_sha256: str | None = Field(default=None, pattern=_SHA256)
    """An export's: the sha256 of its `.rolltape/manifest.json` (whose files list the digests
    of every data file)."""
    positions: dict[str, tuple[int, int]] = Field(default_factory=dict)
    """A stream's: per `topic:partition`, the offsets it read from and up to."""
    samples: tuple[TrainedSample, ...] = ()
    part: int = Field(default=0, ge=0)
    parts: int = Field(default=1, ge=1)


class TrainerLog(BaseModel):
    """Payload of a `trainer_log` event: the values a trainer reported at a step (its loss,
    learning rate, gradient norm), as the trainer said them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: int = Field(ge=0)
    epoch: float | None = None
    values: dict[str, float] = Field(default_factory=dict)


class ModelCheckpoint(BaseModel):
    """Payload of a `model_checkpoint` event: a checkpoint the run wrote. `model` is the version
    name an endpoint serving it gives (`ModelEndpoint.version`), so sessions it samples carry
    it; `sha256` digests its files (`files`: each file's sha256, by path in the checkpoint)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1)
    sha256: str = Field(pattern=_SHA256)
    files: dict[str, str] = Field(default_factory=dict)
    base_model: str | None = None
    """The version it was trained from, when that is a model rolltape knows (its ancestor)."""
    step: int | None = Field(default=None, ge=0)
    final: bool = False
    """The checkpoint the run ended with."""


LINEAGE_PAYLOAD_MODELS: dict[str, type[BaseModel]] = {
    "training_input": TrainingInput,
    "trainer_log": TrainerLog,
    "model_checkpoint": ModelCheckpoint,
}
