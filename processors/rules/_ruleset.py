"""The versioned rule-set config: thresholds, EMA alpha and persistence of R1..R7.

Defaults are those of REFERENCE.md section 1. A rule evaluation names the rule set by name and
digest, so a firing can always be traced to the exact thresholds that produced it.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rolltape.processors._errors import ProcessorError
from rolltape.schemas import canonical_bytes


class RuleSetError(ProcessorError, ValueError):
    """A rule-set file that cannot be used; the message says what to fix."""


class RuleSet(BaseModel):
    """Thresholds of the seven rules. Frozen: a changed threshold is a new rule set (new digest)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "default"
    ema_alpha: float = Field(default=0.1, gt=0, le=1)
    """EMA smoothing; the EMA is seeded by the first finite value."""
    persistence: int = Field(default=3, ge=1)
    """A smoothed signal must be past its threshold for this many consecutive samples."""
    r1_update_ratio_high: float = 1e-2
    r1_update_ratio_low: float = 1e-4
    r1_plateau_window: int = Field(default=3, ge=1)
    """R1 also fires when the last N val losses are all >= the one N epochs earlier."""
    r2_noise_scale_low: float = 50.0
    r2_noise_scale_high: float = 5000.0
    r3_min_delta: float = Field(default=1e-3, ge=0)
    r3_patience: int = Field(default=5, ge=1)
    r4_train_acc_delta: float = Field(default=0.02, ge=0)
    r4_window: int = Field(default=3, ge=1)
    r4_requires_healthy: bool = True
    """R4 (capacity) fires only while R5, R6 and R7 do not: a net that is not learning because its
    gradients or activations are broken has a stability problem, not a capacity one."""
    r5_dead_relu_high: float = 0.40
    r5_saturated_high: float = 0.40
    """R5 for smooth activations: the monitor's saturated fraction (inputs where the slope is
    below its threshold), the analogue of dead ReLUs for activations never exactly zero."""
    r6_min_grad_norm_low: float = 1e-5
    r7_max_grad_norm_high: float = 10.0

    @model_validator(mode="after")
    def _bands_are_ordered(self) -> RuleSet:
        if self.r1_update_ratio_low >= self.r1_update_ratio_high:
            raise ValueError("r1_update_ratio_low must be below r1_update_ratio_high")
        if self.r2_noise_scale_low >= self.r2_noise_scale_high:
            raise ValueError("r2_noise_scale_low must be below r2_noise_scale_high")
        return self

    @functools.cached_property
    def digest(self) -> str:
        return hashlib.sha256(canonical_bytes(self.model_dump())).hexdigest()

    @functools.cached_property
    def label(self) -> str:
        """`name@digest12`: what a rule evaluation records as its rule set."""
        return f"{self.name}@{self.digest[:12]}"

    @functools.cached_property
    def history(self) -> int:
        """How many past metric events any rule looks at (their hashes are the causes)."""
        return max(self.persistence, self.r1_plateau_window + 1, self.r4_window + 1)

    @classmethod
    def from_file(cls, path: Path) -> RuleSet:
        """Load a JSON rule-set file; fields left out keep their defaults."""
        try:
            data = orjson.loads(path.read_bytes())
        except OSError as exc:
            raise RuleSetError(f"cannot read rule set {path}: {exc.strerror}") from exc
        except orjson.JSONDecodeError as exc:
            raise RuleSetError(f"rule set {path} is not JSON: {exc}") from exc
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise RuleSetError(f"rule set {path} is invalid: {exc}") from exc
