"""Lineage recorded by a real `transformers.Trainer`: what it trained on (an export, by its
manifest digest and every sample's session), its loss and learning rate, and each checkpoint by
sha256, as a training session of the trainer's principal."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from rolltape.infra.lineage import LineageCallback, LineageSourceError, export_samples
from rolltape.producers import Recorder
from rolltape.producers.lineage import TrainerRun, folder_digest
from rolltape.projections import ExportOptions, build_export
from rolltape.schemas import LINEAGE_TAG, read_event
from tests.unit.processors.scripted import Tape
from tests.unit.producers.recorded import spooled_records
from tests.unit.projections.sessions import captured, fold_records

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")


def _export(folder: Path) -> list[Any]:
    trajectories = [fold_records(captured(Tape(), f"s-{i}")) for i in range(3)]
    files, manifest = build_export(trajectories, ExportOptions(format="tokens"))
    for name, data in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    (folder / ".rolltape" / "manifest.json").write_bytes(manifest.to_bytes())
    return trajectories


def _rows(folder: Path) -> list[dict[str, Any]]:
    lines = (folder / "tokens-00000.jsonl").read_bytes().splitlines()
    samples = [orjson.loads(line) for line in lines]
    return [
        {
            "input_ids": s["token_ids"],
            "labels": [t if m else -100 for t, m in zip(s["token_ids"], s["mask"], strict=True)],
        }
        for s in samples
    ]


def test_a_trainers_run_records_what_it_trained_on_its_logs_and_its_checkpoints(
    tmp_path: Path,
) -> None:
    export = tmp_path / "export"
    trajectories = _export(export)
    recorder = Recorder(
        None, spool_dir=tmp_path / "trainer", spool_after_s=0.0, principal="trainer"
    )
    run = TrainerRun(recorder, "sft-1", base_model="gen-0", settings={"max_steps": 4})
    config = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=4,
        save_steps=2,
        logging_steps=1,
        per_device_train_batch_size=1,
        report_to=[],
        use_cpu=True,
        seed=0,
    )
    final = tmp_path / "final"
    callback = LineageCallback(run, model="gen-1", export=export, final_dir=final)
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=_rows(export), callbacks=[callback]
    )
    trainer.train()
    recorder.close(10)

    events = [read_event(v) for v in spooled_records(tmp_path / "trainer")]
    start = events[0]
    assert start.type == "session_started" and start.payload["kind"] == "training"
    assert LINEAGE_TAG in start.payload["tags"] and start.producer.principal == "trainer"
    assert start.payload["run_config"]["base_model"] == "gen-0"
    [consumed] = [e.payload for e in events if e.type == "training_input"]
    manifest = (export / ".rolltape" / "manifest.json").read_bytes()
    assert consumed["manifest_sha256"] == hashlib.sha256(manifest).hexdigest()
    assert {(s["session_id"], s["trajectory_id"]) for s in consumed["samples"]} == {
        (t.session_id, t.trajectory_id) for t in trajectories
    }
    logs = [e.payload for e in events if e.type == "trainer_log"]
    assert {"loss", "learning_rate"} <= set(logs[0]["values"])
    checkpoints = [e.payload for e in events if e.type == "model_checkpoint"]
    assert [c["model"] for c in checkpoints] == ["gen-1@step-2", "gen-1@step-4", "gen-1"]
    assert checkpoints[-1]["final"] and checkpoints[-1]["base_model"] == "gen-0"
    assert checkpoints[-1]["sha256"] == folder_digest(final)[0]
    assert checkpoints[0]["sha256"] == folder_digest(tmp_path / "out" / "checkpoint-2")[0]
    assert events[-1].type == "session_ended" and events[-1].payload["status"] == "completed"


def test_a_folder_digest_is_the_files_not_where_they_lie(tmp_path: Path) -> None:
    for root in ("a", "b"):
        (tmp_path / root / "sub").mkdir(parents=True)
        (tmp_path / root / "model.bin").write_bytes(b"weights")
        (tmp_path / root / "sub" / "config.json").write_bytes(b"{}")
    assert folder_digest(tmp_path / "a") == folder_digest(tmp_path / "b")
    (tmp_path / "b" / "model.bin").write_bytes(b"weights!")
    assert folder_digest(tmp_path / "a")[0] != folder_digest(tmp_path / "b")[0]


def test_a_folder_that_is_no_export_is_refused_with_what_to_name(tmp_path: Path) -> None:
    with pytest.raises(LineageSourceError, match="not an export folder"):
        export_samples(tmp_path)


def _runs(tmp_path: Path) -> Any:
    from rolltape.projections import fold_lineage
    from rolltape.schemas import ModelCheckpoint, TrainedSample

    recorder = Recorder(None, spool_dir=tmp_path / "t", spool_after_s=0.0, principal="trainer")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "w.bin").write_bytes(b"w")
    for run_id, sessions, base, model in (
        ("a-run", ["s-alice"], "gen-0", "gen-1"),
        ("b-run", ["s-bob"], "gen-0", "gen-1"),  # a second run writes the same name
        ("c-run", ["s-carol"], "gen-1", "gen-2"),
    ):
        with TrainerRun(recorder, run_id, base_model=base) as run:
            run.trained_on(
                [TrainedSample(session_id=s, trajectory_id=f"t-{s}") for s in sessions],
                source="export",
            )
            run.checkpoint(model, tmp_path / "ckpt", final=True)
    # An agent's session on the events topic claims a checkpoint: it is no training run.
    with recorder.session("not a run", session_id="z-agent") as s:
        s.record(ModelCheckpoint(model="gen-1", sha256="0" * 64))
    recorder.close(10)
    events = [read_event(v) for v in spooled_records(tmp_path / "t")]
    return fold_lineage((e.session_id, e) for e in events)


def test_an_erasure_names_every_model_any_run_of_that_name_taught_and_its_descendants(
    tmp_path: Path,
) -> None:
    lineage = _runs(tmp_path)
    assert lineage.models_trained_on(["s-alice"]) == ["gen-1", "gen-2"]
    assert lineage.models_trained_on(["s-carol"]) == ["gen-2"]
    assert lineage.models_trained_on(["s-nobody"]) == []
    assert "z-agent" not in lineage.runs
    gen2 = lineage.of("gen-2")
    assert gen2.ancestors == ("gen-1", "gen-0") and gen2.run.run_id == "c-run"
