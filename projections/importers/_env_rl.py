"""Importing an env_rl judge_logs folder: verify its chains with env_rl's own hash formula (its
`ChainedJsonlWriter`, zubairashfaque/environment_rl @633b4e7, `src/env_rl/monitor/logging.py`),
then turn its metrics and decisions into a rolltape training session.

env_rl writes three chained JSONL files (metrics_log.jsonl, rule_evaluations.jsonl,
decision_log.jsonl); each line is `json.dumps(record, sort_keys=True)` of {seq, ts, prev_hash,
payload, hash} with

    hash = sha256_hex(prev_hash + json.dumps(payload, sort_keys=True, separators=(",", ":"))
                      + str(seq) + str(ts))

over UTF-8 with Python's defaults otherwise (ASCII escaping, NaN as the bare token NaN, `ts` a
float rendered by repr), root = 64 zeros. Python's json module is used on purpose here: the
formula is defined by its output, and only it reproduces that byte for byte.

Payload kinds come from a `kind` field when present, else from the file: session_start
{run_config}, epoch {metrics...}, rule_eval {evals: {R1..R7: bool}} (the line index after
session_start is the epoch), decision {epoch, event_type, cites | cited_rule, ...}, session_end.
Their metrics logged by the agent are imported as written, but rolltape never takes their rule
evaluations: the processors recompute firings from the metrics; the importer keeps env_rl's own
evaluations only to show where the two judges disagree.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rolltape.projections.importers._imported import ImportedSession
from rolltape.schemas import GENESIS_HASH, PAYLOAD_MODELS, Decision, Metric

FILES = ("metrics_log.jsonl", "rule_evaluations.jsonl", "decision_log.jsonl")
IMPORT_TAG = "imported:env_rl"
_METRIC_FIELDS = frozenset(Metric.model_fields)
RULES = ("R1", "R2", "R3", "R4", "R5", "R6", "R7")


def env_rl_hash(prev_hash: str, payload: Any, seq: int, ts: Any) -> str:
    """env_rl's record hash, computed with Python's json so that it matches byte for byte (see the
    module docstring). `ts` must be the value as parsed from the line, because its repr is what
    gets hashed."""
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256((prev_hash + body + str(seq) + str(ts)).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ChainProblem:
    """Where an env_rl chain stops verifying. `line` is 1-based, and 0 when the whole file is
    missing."""

    file: str
    line: int
    detail: str


@dataclass
class EnvRlRun:
    """What the folder holds, once its chains verified."""

    records: dict[str, list[dict[str, Any]]]
    problems: list[ChainProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Things imported with a caveat (unknown metric fields, unmapped decisions)."""

    @property
    def verified(self) -> bool:
        return not self.problems


def verify_chain(path: Path) -> tuple[list[dict[str, Any]], list[ChainProblem]]:
    """env_rl's own verify: fields, seq, links, monotonic ts, the hash formula."""
    records: list[dict[str, Any]] = []
    problems: list[ChainProblem] = []
    prev, expected_seq, last_ts = GENESIS_HASH, 0, -math.inf
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError as exc:
            problems.append(ChainProblem(path.name, number, f"not JSON: {exc}"))
            break
        missing = [k for k in ("seq", "ts", "prev_hash", "payload", "hash") if k not in record]
        if missing:
            problems.append(ChainProblem(path.name, number, f"missing {', '.join(missing)}"))
            break
        if record["seq"] != expected_seq:
            problems.append(
                ChainProblem(path.name, number, f"seq {record['seq']}, expected {expected_seq}")
            )
            break
        if record["prev_hash"] != prev:
            problems.append(
                ChainProblem(path.name, number, "prev_hash does not link to the line before")
            )
            break
        if float(record["ts"]) < last_ts:
            problems.append(ChainProblem(path.name, number, "timestamp went backwards"))
            break
        if (
            env_rl_hash(record["prev_hash"], record["payload"], record["seq"], record["ts"])
            != record["hash"]
        ):
            problems.append(ChainProblem(path.name, number, "hash mismatch: the line was changed"))
            break
        records.append(record)
        prev, expected_seq, last_ts = record["hash"], expected_seq + 1, float(record["ts"])
    return records, problems


def read_env_rl(folder: Path) -> EnvRlRun:
    """Verify the three env_rl logs in `folder`. Each chain keeps its records up to its first
    problem. Check `verified` before importing: a run with problems cannot be trusted."""
    records: dict[str, list[dict[str, Any]]] = {}
    problems: list[ChainProblem] = []
    for name in FILES:
        path = folder / name
        if not path.exists():
            problems.append(ChainProblem(name, 0, "file missing"))
            continue
        records[name], found = verify_chain(path)
        problems += found
    return EnvRlRun(records=records, problems=problems)


def _kind(payload: dict[str, Any], file: str) -> str:
    kind = payload.get("kind") or payload.get("type")
    if isinstance(kind, str):
        return kind
    if "run_config" in payload:
        return "session_start"
    return {"metrics_log.jsonl": "epoch", "rule_evaluations.jsonl": "rule_eval"}.get(
        file, "decision"
    )


def _ns(ts: Any) -> int:
    return round(float(ts) * 1e9)


def _finite_or_token(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _decision(payload: dict[str, Any]) -> dict[str, Any]:
    """env_rl's decision (either its strict `DECISION_SCHEMA`, `src/env_rl/harness/prompt.py`, or
    the form its reference agent logs, with `cited_rule` and `remedy_params.edit`,
    `src/env_rl/agent/reference_run.py`) in rolltape's Decision schema."""
    cites = payload.get("cites")
    if cites is None and payload.get("cited_rule"):
        cites = [payload["cited_rule"]]
    params = payload.get("remedy_params") or {}
    edit = params.get("edit") or {}
    data = {
        "epoch": payload["epoch"],
        "event_type": payload["event_type"],
        "cites": cites or [],
        "justification": payload.get("justification", ""),
        "remedy_direction": payload.get("remedy_direction", "none"),
        "remedy_params": {
            "lr_new": params.get("lr_new"),
            "edit_op": params.get("edit_op") or edit.get("op") or "none",
            "edit_to": params.get("edit_to") or edit.get("to") or "none",
        },
    }
    return Decision.model_validate(data).model_dump(mode="python")


def their_rule_evaluations(run: EnvRlRun) -> list[dict[str, bool]]:
    """env_rl's logged {R1..R7: bool} per epoch (index = epoch)."""
    evaluations = []
    for record in run.records.get("rule_evaluations.jsonl", []):
        payload = record["payload"]
        if _kind(payload, "rule_evaluations.jsonl") != "rule_eval":
            continue
        evals = payload.get("evals", payload)
        evaluations.append({r: bool(evals.get(r, False)) for r in RULES})
    return evaluations


def env_rl_session(run: EnvRlRun, *, source: str) -> ImportedSession:
    """The run as a training session: events (start, decisions, end) and metrics chains."""
    metrics = run.records.get("metrics_log.jsonl", [])
    decisions = run.records.get("decision_log.jsonl", [])
    identity = hashlib.sha256(
        "".join(chain[-1]["hash"] if chain else "-" for chain in run.records.values()).encode()
    ).hexdigest()
    session = ImportedSession(f"envrl-{identity[:24]}")
    start = next(
        (r for r in metrics if _kind(r["payload"], "metrics_log.jsonl") == "session_start"), None
    )
    run_config = dict(start["payload"].get("run_config", {})) if start else {}
    first_ns = _ns(start["ts"]) if start else _ns(metrics[0]["ts"]) if metrics else 0
    heads = {name: chain[-1]["hash"] for name, chain in run.records.items() if chain}
    session.add(
        "events",
        "session_started",
        first_ns,
        PAYLOAD_MODELS["session_started"]
        .model_validate(
            {
                "task": f"env_rl run {source}",
                "kind": "training",
                "run_config": {
                    **run_config,
                    "imported_from": {"format": "env_rl", "folder": source, "chain_heads": heads},
                },
                "tags": [IMPORT_TAG],
            }
        )
        .model_dump(mode="python"),
    )
    epoch = 0
    last_ns = first_ns
    unknown: set[str] = set()
    for record in metrics:
        payload = record["payload"]
        if _kind(payload, "metrics_log.jsonl") != "epoch":
            continue
        fields = {k: _finite_or_token(v) for k, v in payload.items() if k in _METRIC_FIELDS}
        unknown |= {k for k in payload if k not in _METRIC_FIELDS and k not in ("kind", "type")}
        fields.setdefault("epoch", epoch)
        try:
            metric = Metric.model_validate(fields).model_dump(mode="python")
        except ValidationError as exc:
            run.notes.append(
                f"metrics line seq {record['seq']} not imported: {exc.errors()[0]['msg']}"
            )
            continue
        last_ns = _ns(record["ts"])
        session.add("metrics", "metric", last_ns, metric)
        epoch = metric["epoch"] + 1
    if unknown:
        run.notes.append(
            f"metric fields rolltape does not know, not imported: {', '.join(sorted(unknown))}"
        )
    for record in decisions:
        payload = record["payload"]
        if _kind(payload, "decision_log.jsonl") != "decision":
            continue
        try:
            decision = _decision(payload)
        except (ValidationError, KeyError) as exc:
            run.notes.append(
                f"decision line seq {record['seq']} not imported: {str(exc).splitlines()[0]}"
            )
            continue
        last_ns = max(last_ns, _ns(record["ts"]))
        session.add("events", "decision", _ns(record["ts"]), decision)
    end_ns = max([last_ns, *(_ns(r["ts"]) for chain in run.records.values() for r in chain[-1:])])
    outcome = {
        "val_acc": next(
            (m["payload"].get("val_acc") for m in reversed(metrics) if "val_acc" in m["payload"]),
            None,
        )
    }
    outcome = {k: v for k, v in outcome.items() if isinstance(v, int | float) and math.isfinite(v)}
    session.add(
        "metrics",
        "session_ended",
        end_ns,
        {"status": "completed", "outcome": outcome, "streams": []},
    )
    session.add(
        "events",
        "session_ended",
        end_ns,
        {"status": "completed", "outcome": outcome, "streams": ["metrics"]},
    )
    return session


def rule_disagreements(
    theirs: Iterable[dict[str, bool]], ours: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Per epoch, rules one judge fired and the other did not, with rolltape's reason."""
    out = []
    for epoch, (their, our) in enumerate(zip(theirs, ours, strict=False)):
        fired = set(our["fired"])
        for rule in RULES:
            if their.get(rule, False) != (rule in fired):
                outcome = our["rules"].get(rule, {})
                out.append(
                    {
                        "epoch": epoch,
                        "rule": rule,
                        "env_rl": their.get(rule, False),
                        "rolltape": rule in fired,
                        "why": outcome.get("reason") or "",
                    }
                )
    return out
