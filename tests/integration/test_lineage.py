"""Lineage on the real broker and worker: two generations trained by a real `transformers`
`Trainer`, each run recorded by the trainer principal; `rolltape lineage` names a model's
sessions and ancestors, and the models a subject's sessions taught; the model's evidence
verifies offline; erasing the subject names the models to retrain in its signed receipt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from rolltape.infra.lineage import LineageCallback, open_training_run
from rolltape.producers import Recorder
from rolltape.schemas import Role
from rolltape.schemas.privacy import KeyEncryptionKey
from tests.integration.conftest import Cluster, Topics
from tests.integration.workers import WorkerProcess, payloads, wait_for
from tests.support.captured import captured_exchange
from tests.support.cli import rolltape

pytestmark = pytest.mark.integration
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")


def _record(topics: Topics, kek: KeyEncryptionKey, spool: Path) -> None:
    """Three captured sessions (exact ids): one of them holds subject alice's data."""
    recorder = Recorder(
        topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=spool, kek=kek
    )
    for i, subject in enumerate((None, None, "alice")):
        with recorder.session("add", session_id=f"lin-{i}", subject=subject) as s:
            captured_exchange(s, i)
            s.reward(1.0)
    recorder.close(30)


def _train(
    topics: Topics, settings: Any, tmp: Path, export: Path, run_id: str, base: str, model: str
) -> None:
    rows = []
    for line in (export / "tokens-00000.jsonl").read_bytes().splitlines():
        sample = orjson.loads(line)
        labels = [
            t if m else -100 for t, m in zip(sample["token_ids"], sample["mask"], strict=True)
        ]
        rows.append({"input_ids": sample["token_ids"], "labels": labels})
    run = open_training_run(
        settings,
        run_id,
        base_model=base,
        settings_used={"max_steps": 2},
        spool_dir=tmp / f"{run_id}-spool",
    )
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=8, n_layer=1, n_head=2)
    args = transformers.TrainingArguments(
        output_dir=str(tmp / run_id),
        max_steps=2,
        save_steps=2,
        logging_steps=1,
        per_device_train_batch_size=1,
        report_to=[],
        use_cpu=True,
    )
    callback = LineageCallback(run, model=model, export=export, final_dir=tmp / f"{model}-final")
    transformers.Trainer(
        model=transformers.GPT2LMHeadModel(config),
        args=args,
        train_dataset=rows,
        callbacks=[callback],
    ).train()
    run.close(30)


def test_models_name_what_they_learned_from_and_an_erasure_names_the_models(
    cluster: Cluster, topics: Topics, tmp_path: Path
) -> None:
    if cluster.managed is None:
        pytest.skip("needs rolltape's managed broker (its trainer principal and ACLs)")
    kek = KeyEncryptionKey.generate()
    kek_file = tmp_path / "kek.bin"
    kek_file.write_bytes(kek.secret)
    kek_file.chmod(0o600)
    settings = topics.settings.model_copy(update={"kek_file": kek_file})
    env = {**topics.env(), "ROLLTAPE_KEK_FILE": str(kek_file)}
    worker = WorkerProcess(topics, tmp_path, ROLLTAPE_KEK_FILE=str(kek_file)).start()
    try:
        _record(topics, kek, tmp_path / "spool")
        wait_for(topics, lambda rs: len(payloads(rs, "filter_outcome")) >= 3, worker=worker)
        first, second = tmp_path / "all", tmp_path / "plain"
        done = rolltape(env, "dataset", "export", "-f", "tokens", "-o", str(first))
        assert done.returncode == 0, done.stdout + done.stderr
        done = rolltape(env, "dataset", "export", "-f", "tokens", "-s", "lin-0", "-o", str(second))
        assert done.returncode == 0, done.stdout + done.stderr
        # gen-1 learns from all three (alice's too); gen-2, from gen-1, on one plain session.
        _train(topics, settings, tmp_path, first, "sft-1", "gen-0", "gen-1")
        _train(topics, settings, tmp_path, second, "sft-2", "gen-1", "gen-2")

        def runs_checkpointed(records: list[Any]) -> bool:
            leaves = {
                leaf["session_id"]
                for cp in payloads(records, "checkpoint")
                for leaf in cp["leaves"]
            }
            return {"sft-1", "sft-2", "lin-0", "lin-1", "lin-2"} <= leaves

        wait_for(topics, runs_checkpointed, worker=worker)
    finally:
        worker.stop()

    shown = rolltape(env, "lineage", "gen-2")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "ancestors: gen-1 <- gen-0" in shown.stdout
    assert "lin-0" in shown.stdout and "lin-2  trajectory" in shown.stdout  # through gen-1
    assert "written by run sft-2 (completed)" in shown.stdout

    taught = rolltape(env, "lineage", "--subject", "alice")
    assert taught.returncode == 0, taught.stdout + taught.stderr
    assert {"gen-1", "gen-2"} <= {line.strip() for line in taught.stdout.splitlines()[1:]}

    # The model's evidence: its sessions and its run, checked offline with the public key.
    proof = tmp_path / "proof"
    proven = rolltape(env, "lineage", "gen-1", "--evidence-out", str(proof))
    assert proven.returncode == 0, proven.stdout + proven.stderr
    public = tmp_path / "judge.pub"
    assert rolltape(topics.env(), "keys", "export", str(public)).returncode == 0
    checked = rolltape(env, "dataset", "verify", str(proof), "--public-key", str(public))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    manifest = json.loads((proof / ".rolltape" / "manifest.json").read_text())
    assert manifest["sessions_exported"] == 3 and manifest["skipped"] == {"not_trainable": 1}

    erased = rolltape(env, "privacy", "erase", "--subject", "alice")
    assert erased.returncode == 0, erased.stdout + erased.stderr
    receipt = json.loads(erased.stdout)
    assert {"gen-1", "gen-2"} <= set(receipt["erasure"]["models"])
    assert "must be retrained" in erased.stderr
