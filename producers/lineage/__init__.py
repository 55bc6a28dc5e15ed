"""Lineage: a training run records what it learned from and the checkpoints it wrote.

    run = TrainerRun(trainer_recorder, "sft-7", base_model="gen-0", settings={"lr": 1e-4})
    run.trained_on([TrainedSample(session_id=..., trajectory_id=...), ...], source="export",
                   manifest_sha256=...)
    run.log(step=10, epoch=0.5, values={"loss": 1.2, "learning_rate": 1e-4})
    run.checkpoint("gen-1", Path("out/final"), step=100, final=True)
    run.end()

The recorder must be the trainer's own (its principal): `rolltape.infra.open_training_run`
opens one from settings. The events are `schemas._lineage`'s.
"""

from rolltape.producers.lineage._run import LineageError, TrainerRun, folder_digest

__all__ = ["LineageError", "TrainerRun", "folder_digest"]
