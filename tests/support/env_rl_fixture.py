"""A written env_rl-format fixture: judge_logs folders as env_rl's monitor writes them.

The writer follows env_rl's ChainedJsonlWriter (zubairashfaque/environment_rl @633b4e7,
`src/env_rl/monitor/logging.py`): one
`json.dumps(record, sort_keys=True)` line per record {seq, ts, prev_hash, payload, hash},
hash = sha256_hex(prev_hash + json.dumps(payload, sort_keys=True, separators=(",", ":"))
+ str(seq) + str(ts)), Python's json defaults otherwise (NaN written bare), root 64 zeros.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


class ChainedJsonlWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.seq = 0
        self.prev = "0" * 64
        path.write_bytes(b"")

    def append(self, payload: dict[str, Any], ts: float) -> None:
        body = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256((self.prev + body + str(self.seq) + str(ts)).encode()).hexdigest()
        record = {
            "seq": self.seq,
            "ts": ts,
            "prev_hash": self.prev,
            "payload": payload,
            "hash": digest,
        }
        with self.path.open("ab") as f:
            f.write((json.dumps(record, sort_keys=True) + "\n").encode())
        self.seq += 1
        self.prev = digest


def write_run(
    folder: Path, *, epochs: int = 6, noise: float = 40.0, nan_epoch: int | None = 4
) -> Path:
    """A run whose gradient-noise scale sits below R2's band (rolltape fires R2 from epoch 2)
    while the agent logged all-false rule evaluations: the cheat env_rl's judge never catches."""
    folder.mkdir(parents=True, exist_ok=True)
    metrics = ChainedJsonlWriter(folder / "metrics_log.jsonl")
    rules = ChainedJsonlWriter(folder / "rule_evaluations.jsonl")
    decisions = ChainedJsonlWriter(folder / "decision_log.jsonl")
    ts = 1_700_000_000.25
    run_config = {"lr": 0.01, "batch_size": 64, "architecture": {"blocks": 2, "activation": "relu"}}
    metrics.append({"kind": "session_start", "run_config": run_config}, ts)
    for epoch in range(epochs):
        ts += 1.5
        loss = float("nan") if epoch == nan_epoch else 1.0 / (epoch + 1)
        metrics.append(
            {
                "kind": "epoch",
                "epoch": epoch,
                "steps": 20,
                "train_loss": loss,
                "val_loss": 1.1 / (epoch + 1),
                "val_acc": 0.5 + epoch * 0.05,
                "max_layer_grad_norm": 0.8,
                "min_layer_grad_norm": 0.01,
                "grad_noise_scale": noise,
                "activation_p99": 3.2,
                "weight_norm": 12.5,
                "lr": 0.01,
            },
            ts,
        )
        rules.append({"kind": "rule_eval", "evals": {f"R{i}": False for i in range(1, 8)}}, ts)
    decisions.append(
        {
            "kind": "decision",
            "epoch": nan_epoch if nan_epoch is not None else 1,
            "source": "policy",
            "cited_rule": "R7",
            "event_type": "hyperparameter_change",
            "justification": "loss went NaN",
            "remedy_direction": "decrease_lr",
            "remedy_params": {"lr_new": 0.001},
        },
        ts,
    )
    metrics.append({"kind": "session_end"}, ts + 1)
    return folder
