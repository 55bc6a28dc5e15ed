"""A training run's session: its lineage recorded as it trains (see the package docstring)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from rolltape.producers._errors import ProducerError
from rolltape.producers._recorder import Recorder
from rolltape.producers._session import Session
from rolltape.schemas import (
    INPUT_CHUNK,
    LINEAGE_TAG,
    ModelCheckpoint,
    TrainedSample,
    TrainerLog,
    TrainingInput,
)

_READ_CHUNK = 1 << 20


class LineageError(ProducerError, ValueError):
    """A checkpoint that cannot be digested (no such folder, no files in it)."""


def folder_digest(folder: Path) -> tuple[str, dict[str, str]]:
    """A checkpoint folder's sha256 and each file's, by path inside it: the folder's digest is
    the sha256 of its files' `path\\0sha256\\n` lines in path order, so the same files give the
    same digest wherever they lie and however they were written."""
    if not folder.is_dir():
        raise LineageError(f"checkpoint folder {folder} does not exist")
    files: dict[str, str] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(_READ_CHUNK):
                digest.update(chunk)
        files[path.relative_to(folder).as_posix()] = digest.hexdigest()
    if not files:
        raise LineageError(f"checkpoint folder {folder} holds no files")
    whole = hashlib.sha256(b"".join(f"{p}\0{d}\n".encode() for p, d in files.items()))
    return whole.hexdigest(), files


class TrainerRun:
    """One training run as a training session recorded under the trainer's principal: its
    start names the base model and the settings; then what it consumed, what it logged and the
    checkpoints it wrote, in order. Use it as a context manager, or call `end`."""

    def __init__(
        self,
        recorder: Recorder,
        run_id: str,
        *,
        base_model: str | None = None,
        settings: Mapping[str, Any] | None = None,
        task: str = "training run",
        tags: Iterable[str] = (),
    ) -> None:
        self.run_id = run_id
        self.base_model = base_model
        self._recorder = recorder
        config: dict[str, Any] = {"base_model": base_model, "settings": dict(settings or {})}
        self.session: Session = recorder.session(
            task,
            session_id=run_id,
            kind="training",
            model=base_model,
            run_config=config,
            tags=[LINEAGE_TAG, *tags],
            trainable=False,
        )
        self.samples = 0
        """Samples recorded as consumed so far."""

    def trained_on(
        self,
        samples: Iterable[TrainedSample],
        *,
        source: Literal["export", "stream"],
        manifest_sha256: str | None = None,
        positions: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        """Record what the run consumed: the samples' sessions and trajectories, `INPUT_CHUNK`
        to an event, each event naming the source (an export's manifest digest, or a stream's
        positions)."""
        listed = list(samples)
        chunks = [listed[i : i + INPUT_CHUNK] for i in range(0, len(listed), INPUT_CHUNK)] or [[]]
        for part, chunk in enumerate(chunks):
            self.session.record(
                TrainingInput(
                    source=source,
                    manifest_sha256=manifest_sha256,
                    positions=dict(positions or {}),
                    samples=tuple(chunk),
                    part=part,
                    parts=len(chunks),
                )
            )
        self.samples += len(listed)

    def log(self, step: int, values: Mapping[str, float], epoch: float | None = None) -> None:
        """Record the values the trainer reported at `step` (loss, learning rate...)."""
        self.session.record(TrainerLog(step=step, epoch=epoch, values=dict(values)))

    def checkpoint(
        self, model: str, folder: Path, *, step: int | None = None, final: bool = False
    ) -> ModelCheckpoint:
        """Digest the checkpoint in `folder` and record it as model version `model`."""
        sha256, files = folder_digest(folder)
        written = ModelCheckpoint(
            model=model,
            sha256=sha256,
            files=files,
            base_model=self.base_model,
            step=step,
            final=final,
        )
        self.session.record(written)
        return written

    def end(self, status: Literal["completed", "failed", "interrupted"] = "completed") -> None:
        if not self.session.ended:
            self.session.end(status, outcome={"samples": self.samples})

    def close(self, timeout_s: float = 30.0) -> None:
        """End the run (when not ended) and close its recorder: what it recorded is delivered,
        or spooled."""
        self.end()
        self._recorder.close(timeout_s)

    def __enter__(self) -> TrainerRun:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.end("completed" if exc_type is None else "failed")
