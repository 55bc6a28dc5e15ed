"""The versioned rule-set config: thresholds, EMA alpha and persistence of R1..R7.

`RuleSet()` is the rule set of env_rl's monitor, the reference monitor (the thresholds of
zubairashfaque/environment_rl @633b4e7, `src/env_rl/monitor/rules.py` and
`conf/monitor/default.yaml`, set there for CIFAR-10), shipped as `reference-monitor` and labelled
`default@2713ec7281ea`. A rule evaluation names the rule set by name and digest, so a firing can
always be traced to the exact thresholds that produced it.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rolltape.processors._errors import ProcessorError
from rolltape.schemas import canonical_bytes

_ADDED_LATER = (
    "r2_relative_to_batch",
    "r3_min_relative_delta",
    "r4_train_acc_below",
    "new_model_restarts_course",
    "calibration",
)


class SignalRange(BaseModel):
    """A smoothed signal's spread on the healthy runs a rule set was calibrated on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    samples: int
    low: float
    """Its value at the lower calibration quantile."""
    high: float
    """Its value at the upper calibration quantile."""


class Calibration(BaseModel):
    """Where a calibrated rule set's thresholds came from: part of the rule set, so of its
    digest (the same thresholds from other runs are another rule set)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: str
    scenarios: tuple[str, ...]
    """The reference task's scenarios trained for it (none when read from the log)."""
    seeds: tuple[int, ...]
    sessions: tuple[str, ...] = ()
    """The recorded sessions read from the log (`rules calibrate --from-log`), if any."""
    epochs: int
    quantiles: tuple[float, float]
    margin: float
    """Each threshold sits this many times beyond its quantile (divided below, times above)."""
    base: str
    """The rule set calibrated from (`name@digest12`); no threshold is tighter than its."""
    ranges: dict[str, SignalRange]


class RuleSetError(ProcessorError, ValueError):
    """A rule-set file that cannot be used; the message says what to fix."""


class RuleSet(BaseModel):
    """Thresholds of the seven rules. Frozen: a changed threshold is a new rule set (new digest)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "default"
    """`RuleSet()` keeps the name it had before rule sets were shipped by name (so its digest, and
    every evaluation that names it, stand); it is the shipped `reference-monitor` set."""
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
    r2_relative_to_batch: bool = False
    """R2's band is on McCandlish et al.'s B_simple (`grad_noise_scale_simple`, measured when
    the monitor's `noise_scale_simple` is on) divided by the batch size in use, not on the
    monitor's default noise scale. B_simple estimates the critical batch size, so against the
    batch in use it reads the same on any task: well above 1, the batch is smaller than the
    gradient's noise calls for; well below, larger. Off by default: B_simple costs a copy of
    the parameters per step, and the default estimator (env_rl's mean^2/var of the per-step
    gradient norm) grows with the batch itself, which is what the playbook's remedy (a larger
    batch) relies on."""
    r3_min_delta: float = Field(default=1e-3, ge=0)
    r3_min_relative_delta: float = Field(default=0.0, ge=0, lt=1)
    """An improvement must also be this fraction of the best val loss: on a loss of 2.30 a step
    of 0.002 is noise, on a loss of 0.08 it is progress. 0: the absolute delta alone (the
    reference monitor's rule)."""
    r3_patience: int = Field(default=5, ge=1)
    r4_train_acc_delta: float = Field(default=0.02, ge=0)
    r4_window: int = Field(default=3, ge=1)
    r4_train_acc_below: float | None = Field(default=None, gt=0, le=1)
    """R4 fires only while the training accuracy is below this: a run that stopped improving
    at the accuracy healthy runs converge to has converged, not run out of capacity. None: at
    any accuracy (the reference monitor's rule)."""
    r4_requires_healthy: bool = True
    """R4 (capacity) fires only while R5, R6 and R7 do not: a net that is not learning because its
    gradients or activations are broken has a stability problem, not a capacity one."""
    r5_dead_relu_high: float = 0.40
    r5_saturated_high: float = 0.40
    """R5 for smooth activations: the monitor's saturated fraction (inputs where the slope is
    below its threshold), the analogue of dead ReLUs for activations never exactly zero."""
    r6_min_grad_norm_low: float = 1e-5
    r7_max_grad_norm_high: float = 10.0
    new_model_restarts_course: bool = False
    """When the network is rebuilt or edited mid-run (the monitor's `model_spec` of phase
    `attach` or `changed`), R1's val-loss plateau, R3's best val loss and R4's accuracy window
    start over: a repaired network's course is a new one, and the epochs its broken predecessor
    spent without improving are not its own. Off: the reference monitor's rules, which keep
    counting across an edit (so an early stop can follow a repair at once). `rolltape rules
    calibrate` turns it on."""
    calibration: Calibration | None = None
    """Set on rule sets `rolltape rules calibrate` wrote: the healthy runs they came from."""

    @model_validator(mode="after")
    def _bands_are_ordered(self) -> RuleSet:
        if self.r1_update_ratio_low >= self.r1_update_ratio_high:
            raise ValueError("r1_update_ratio_low must be below r1_update_ratio_high")
        if self.r2_noise_scale_low >= self.r2_noise_scale_high:
            raise ValueError("r2_noise_scale_low must be below r2_noise_scale_high")
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with `update` applied; the digest, label and history cached on this rule set
        are not carried over (pydantic copies the instance's dict, caches included)."""
        copy = super().model_copy(update=update, deep=deep)
        for cached in ("digest", "label", "history"):
            copy.__dict__.pop(cached, None)
        return copy

    @functools.cached_property
    def digest(self) -> str:
        """sha256 of the canonical thresholds. Fields added since the first rule sets enter it
        only when they differ from their default, so a rule set written before keeps its digest
        (and every evaluation that names it stays traceable to it)."""
        fields = self.model_dump()
        for name in _ADDED_LATER:
            if fields[name] == type(self).model_fields[name].default:
                del fields[name]
        if fields.get("calibration") and not fields["calibration"]["sessions"]:
            del fields["calibration"]["sessions"]  # added later, like the fields above
        return hashlib.sha256(canonical_bytes(fields)).hexdigest()

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
