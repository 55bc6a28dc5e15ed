"""Lineage read back: which training runs made which models, from which sessions.

Pure: training sessions' lineage events (schemas._lineage) in, a `Lineage` out. A model is
known by the version name its checkpoint gave (`ModelCheckpoint.model`) or by its sha256. Its
ancestors are the base models of the runs that made it, followed back as far as the log knows
them. A model learned from a session when the run that made it consumed a sample of that
session, or when one of its ancestors did: so `models_trained_on` names every model that must be
retrained once a session is erased, descendants included.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rolltape.projections._errors import ProjectionError
from rolltape.schemas import LINEAGE_TAG, ModelCheckpoint, TrainedSample, TypedEvent

LINEAGE_EVENT_TYPES = frozenset({"training_input", "trainer_log", "model_checkpoint"})
"""The events a training run records its lineage with (the read model finds the runs by them)."""


class LineageRun(BaseModel):
    """One training run: where it started from, what it consumed, what it wrote."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    base_model: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    sources: tuple[dict[str, Any], ...] = ()
    """Each `training_input` event's source, without its samples: an export's manifest digest,
    or a stream's positions."""
    samples: tuple[TrainedSample, ...] = ()
    checkpoints: tuple[ModelCheckpoint, ...] = ()
    logs: int = 0
    status: str = "unfinished"

    @property
    def sessions(self) -> list[str]:
        """The sessions it learned from, each once, in the order first consumed."""
        return list(dict.fromkeys(s.session_id for s in self.samples))


class ModelLineage(BaseModel):
    """What `rolltape lineage MODEL` shows: the model's checkpoint, the run that wrote it, the
    sessions it learned from (its ancestors' too, each marked with the model that learned it),
    and its ancestors nearest first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    checkpoint: ModelCheckpoint
    run: LineageRun
    ancestors: tuple[str, ...] = ()
    """Base models followed back (nearest first); the last may be one the log did not make."""
    learned: tuple[tuple[str, TrainedSample], ...] = ()
    """(the model whose run consumed it, the sample), this model's first."""

    @property
    def sessions(self) -> list[str]:
        return list(dict.fromkeys(s.session_id for _, s in self.learned))


class UnknownModelError(ProjectionError, LookupError):
    """No recorded checkpoint has that version name or sha256."""


class Lineage:
    """Every training run the log holds, by run id, and their checkpoints by model and digest."""

    def __init__(self, runs: dict[str, LineageRun]) -> None:
        self.runs = runs
        self._made: dict[str, tuple[ModelCheckpoint, LineageRun]] = {}
        for run_id in sorted(runs):
            run = runs[run_id]
            for checkpoint in run.checkpoints:
                self._made[checkpoint.model] = (checkpoint, run)
                self._made[checkpoint.sha256] = (checkpoint, run)

    def models(self) -> list[str]:
        """Every model version a run wrote, by name, sorted."""
        return sorted({c.model for run in self.runs.values() for c in run.checkpoints})

    def of(self, model: str) -> ModelLineage:
        """The lineage of `model` (a version name or a checkpoint's sha256)."""
        found = self._made.get(model)
        if found is None:
            known = ", ".join(self.models()) or "none yet"
            raise UnknownModelError(
                f"no training run recorded a checkpoint named or digested {model!r} (models: "
                f"{known}); record runs with rolltape.infra.lineage.LineageCallback"
            )
        checkpoint, run = found
        ancestors: list[str] = []
        learned = [(checkpoint.model, s) for s in run.samples]
        seen = {checkpoint.model}
        base = run.base_model
        while base is not None and base not in seen:
            ancestors.append(base)
            seen.add(base)
            parent = self._made.get(base)
            if parent is None:
                break
            learned += [(parent[0].model, s) for s in parent[1].samples]
            base = parent[1].base_model
        return ModelLineage(
            model=checkpoint.model,
            checkpoint=checkpoint,
            run=run,
            ancestors=tuple(ancestors),
            learned=tuple(learned),
        )

    def models_trained_on(self, sessions: Iterable[str]) -> list[str]:
        """Every model that learned from any of `sessions`, itself or through an ancestor:
        what must be retrained when they are erased. Sorted by name. A name two runs wrote is
        taught by both runs' samples (an erasure must not miss one because the other won)."""
        wanted = set(sessions)
        taught: dict[str, bool] = {}
        writers: dict[str, list[LineageRun]] = {}
        for run in self.runs.values():
            for checkpoint in run.checkpoints:
                writers.setdefault(checkpoint.model, []).append(run)

        def learned(model: str, seen: frozenset[str]) -> bool:
            if model in taught:
                return taught[model]
            result = any(
                bool(wanted & set(run.sessions))
                or (
                    run.base_model is not None
                    and run.base_model not in seen
                    and learned(run.base_model, seen | {model})
                )
                for run in writers.get(model, ())
            )
            taught[model] = result
            return result

        return [m for m in self.models() if learned(m, frozenset())]


def fold_lineage(events: Iterable[tuple[str, TypedEvent]]) -> Lineage:
    """The runs of (session id, event) pairs in log order: every training run's start (a
    training session tagged `lineage`), lineage events and end. Lineage events of any other
    session (an agent's, which may write the events topic too) are ignored."""
    building: dict[str, dict[str, Any]] = {}
    for sid, event in events:
        if event.type == "session_started":
            payload = event.payload
            if payload.get("kind") == "training" and LINEAGE_TAG in payload.get("tags", ()):
                config = payload.get("run_config") or {}
                started = building.setdefault(sid, _empty(sid))
                started["base_model"] = config.get("base_model")
                started["settings"] = config.get("settings") or {}
            continue
        if event.type not in LINEAGE_EVENT_TYPES and event.type != "session_ended":
            continue
        if event.type == "session_ended":
            if sid in building:
                building[sid]["status"] = event.payload.get("status", "completed")
            continue
        found = building.get(sid)
        if found is None:
            continue  # lineage events of a session that is no training run's: not lineage
        run = found
        if event.type == "training_input":
            payload = dict(event.payload)
            run["samples"].extend(payload.pop("samples", ()))
            run["sources"].append(payload)
        elif event.type == "model_checkpoint":
            run["checkpoints"].append(event.payload)
        else:
            run["logs"] += 1
    runs = {
        sid: LineageRun.model_validate(run)
        for sid, run in building.items()
        if run["checkpoints"] or run["samples"]
    }
    return Lineage(runs)


def _empty(sid: str) -> dict[str, Any]:
    return {"run_id": sid, "samples": [], "sources": [], "checkpoints": [], "logs": 0}
