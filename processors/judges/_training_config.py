"""The training judge's versioned config: the tolerances of its gates.

Frozen: a changed tolerance is a new config (new digest), named on every verdict, so a verdict can
always be traced to the tolerance that produced it.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rolltape.processors._errors import ProcessorError
from rolltape.schemas import canonical_bytes


class TrainingJudgeConfigError(ProcessorError, ValueError):
    """A training-judge config file that cannot be used; the message says what to fix."""


class TrainingJudgeConfig(BaseModel):
    """The training judge's tolerances and windows; its `label` names the verdicts' version."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "default"
    live_check_tolerance: float = Field(default=0.30, gt=0)
    """The end-of-run live check passes when every parameter's gradient norm on the probe batch
    is within this relative distance of what the monitor logged for the epoch whose weights the
    model holds (the +-30% of env_rl's live check: `compare_norms_within_tolerance`,
    zubairashfaque/environment_rl @633b4e7, `src/env_rl/judge/live_diag.py`)."""

    @functools.cached_property
    def label(self) -> str:
        """`name@digest12`: what a verdict records as its config."""
        digest = hashlib.sha256(canonical_bytes(self.model_dump())).hexdigest()
        return f"{self.name}@{digest[:12]}"

    @classmethod
    def from_file(cls, path: Path) -> TrainingJudgeConfig:
        """Load a JSON config file; fields left out keep their defaults."""
        try:
            return cls.model_validate(orjson.loads(path.read_bytes()))
        except OSError as exc:
            raise TrainingJudgeConfigError(
                f"cannot read training judge config {path}: {exc.strerror}"
            ) from exc
        except (orjson.JSONDecodeError, ValidationError) as exc:
            raise TrainingJudgeConfigError(
                f"training judge config {path} is invalid: {exc}"
            ) from exc
