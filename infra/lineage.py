"""Lineage for the trainers people run: a training run opened from settings under the trainer's
principal, the samples of an export read from its manifest and sidecars, and a `transformers`
`TrainerCallback` that records a `Trainer`'s run (TRL's trainers are `Trainer`s):

    run = open_training_run(Settings(), "sft-7", base_model="gen-0", settings={"lr": 1e-4})
    trainer = SFTTrainer(..., callbacks=[LineageCallback(run, export=Path("accepted"),
                                                         model="gen-1", final_dir=out)])
    trainer.train()          # what it trained on, its loss and learning rate, its checkpoints

With a `TokenStream` instead of an export (`stream=`), the callback records the samples the
stream gave the trainer, and the positions they came from, at every checkpoint. Needs the
`train` extra (transformers, accelerate).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from transformers import TrainerCallback

from rolltape.infra import open_recorder
from rolltape.infra._errors import InfraError
from rolltape.infra.settings import Settings
from rolltape.producers.lineage import TrainerRun
from rolltape.projections import MANIFEST
from rolltape.schemas import Role, TrainedSample

if TYPE_CHECKING:
    from rolltape.projections.dataset import TokenStream


class LineageSourceError(InfraError, ValueError):
    """An export folder without the manifest and sidecars `dataset export` writes."""


def open_training_run(
    settings: Settings | None = None,
    run_id: str = "training-run",
    *,
    base_model: str | None = None,
    settings_used: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> TrainerRun:
    """A training run recorded by the trainer principal's own recorder (its own spool folder),
    so its lineage never travels under an agent's identity. Close the run's recorder after
    `end` (`run.session` is recorded through it): `run.close()` does both."""
    settings = settings or Settings()
    kwargs: dict[str, Any] = {
        "spool_dir": settings.resolved_spool_dir() / "trainer",
        "senders": 1,
        "principal": Role.TRAINER.value,
    }
    kwargs.update(overrides)
    recorder = open_recorder(settings, role=Role.TRAINER, **kwargs)
    return TrainerRun(recorder, run_id, base_model=base_model, settings=settings_used)


def export_samples(folder: Path) -> tuple[str, list[TrainedSample]]:
    """An export's manifest digest and the samples behind its lines: each line's sessions and
    trajectories, read from the provenance sidecars in line order, each sample once."""
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise LineageSourceError(
            f"{folder} is not an export folder (no {MANIFEST}): name the folder "
            "`rolltape dataset export -o` wrote"
        )
    raw = manifest_path.read_bytes()
    manifest = orjson.loads(raw)
    samples: dict[tuple[str, str], None] = {}
    for file in manifest.get("files", []):
        sidecar = folder / file["provenance_name"]
        if not sidecar.is_file():
            raise LineageSourceError(f"{sidecar} is missing: the export is incomplete")
        for line in sidecar.read_bytes().splitlines():
            for source in orjson.loads(line)["sessions"]:
                samples[(source["session_id"], source["trajectory_id"])] = None
    listed = [TrainedSample(session_id=s, trajectory_id=t) for s, t in samples]
    return hashlib.sha256(raw).hexdigest(), listed


def _stream_samples(stream: TokenStream) -> tuple[list[TrainedSample], dict[str, tuple[int, int]]]:
    consumed, positions = stream.take_consumed()
    return [TrainedSample(session_id=s, trajectory_id=t) for s, t in consumed], positions


class LineageCallback(TrainerCallback):
    """Records a `transformers.Trainer`'s run (TRL's trainers too) as `run`'s lineage: what it
    trained on (`export`: an export folder, recorded at the start; `stream`: a `TokenStream`,
    what it gave the trainer, recorded at each checkpoint and at the end), the values each log
    reports (loss, learning rate, gradient norm), each checkpoint the trainer saves (as model
    version `<model>@step-N`), and at the end the final model saved to `final_dir` as version
    `model`. The run ends with the training. In a run of several processes, the main one
    records (a chain has one writer), and a stream's samples are those of its own rank."""

    def __init__(
        self,
        run: TrainerRun,
        *,
        model: str,
        export: Path | None = None,
        stream: TokenStream | None = None,
        final_dir: Path | None = None,
    ) -> None:
        self.run = run
        self.model = model
        self.export = export
        self.stream = stream
        self.final_dir = final_dir

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.export is not None and state.is_world_process_zero:
            digest, samples = export_samples(self.export)
            self.run.trained_on(samples, source="export", manifest_sha256=digest)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any
    ) -> None:
        values = {
            k: float(v)
            for k, v in (logs or {}).items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        if values and state.is_world_process_zero:
            self.run.log(int(state.global_step), values, epoch=state.epoch)

    def _streamed(self) -> None:
        if self.stream is not None:
            samples, positions = _stream_samples(self.stream)
            if samples:
                self.run.trained_on(samples, source="stream", positions=positions)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return  # one writer per chain: the main process records the run
        self._streamed()
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            step = int(state.global_step)
            self.run.checkpoint(f"{self.model}@step-{step}", folder, step=step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        self._streamed()
        model = kwargs.get("model")
        if self.final_dir is not None and model is not None:
            model.save_pretrained(str(self.final_dir))
            tokenizer = kwargs.get("processing_class") or kwargs.get("tokenizer")
            if tokenizer is not None:
                tokenizer.save_pretrained(str(self.final_dir))
            self.run.checkpoint(self.model, self.final_dir, step=int(state.global_step), final=True)
        self.run.end()


__all__ = [
    "LineageCallback",
    "LineageSourceError",
    "export_samples",
    "open_training_run",
]
