"""`rolltape verify-export`: check an export folder with the judge's public key alone.

No Kafka: the folder's evidence files hold every envelope the lines were folded from and the
inclusion proofs of their chain heads in signed tree heads. Each session's evidence is checked
(projections.evidence_problems), every session is folded again from its evidence, the export is
rendered again with the manifest's options, and each data line must come out byte for byte.
Lines are matched through the provenance sidecar (which sessions each line came from), so one
bad session does not shift the report of the lines after it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ValidationError

from rolltape.infra.export import ExportError, render_export
from rolltape.projections import (
    MANIFEST,
    FoldError,
    Manifest,
    SessionEvidence,
    Trajectory,
    evidence_problems,
    fold,
)
from rolltape.projections.exporters import ChatTokenizer
from rolltape.schemas import key_id


class ExportProblem(BaseModel):
    """Something in the folder that does not check out, where it is (line numbers from 1)."""

    file: str
    line: int | None
    detail: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.detail}"


class ExportVerification(BaseModel):
    key_id: str
    files: int
    lines: int
    sessions: int
    problems: list[ExportProblem]


LineKey = tuple[tuple[str, ...], int]


def _keyed(data: bytes, provenance: bytes) -> dict[LineKey, tuple[int, bytes]]:
    """Data lines by (sessions they came from, occurrence): the line number and bytes."""
    out: dict[LineKey, tuple[int, bytes]] = {}
    seen: Counter[tuple[str, ...]] = Counter()
    for number, (line, side) in enumerate(
        zip(data.splitlines(keepends=True), provenance.splitlines(), strict=False), start=1
    ):
        try:
            sessions = tuple(s["session_id"] for s in orjson.loads(side)["sessions"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            sessions = (f"<unreadable provenance line {number}>",)
        out[(sessions, seen[sessions])] = (number, line)
        seen[sessions] += 1
    return out


def verify_export(
    folder: Path, public_key: Ed25519PublicKey, tokenizer: ChatTokenizer | None = None
) -> ExportVerification:
    manifest_path = folder / MANIFEST
    if not manifest_path.exists():
        raise ExportError(f"{folder} holds no export ({MANIFEST} is missing)")
    try:
        manifest = Manifest.model_validate_json(manifest_path.read_bytes())
    except ValidationError as exc:
        raise ExportError(f"{manifest_path} is not an export manifest: {exc}") from exc
    if not manifest.evidence:
        raise ExportError(
            f"the export in {folder} carries no evidence: export it again with --evidence"
        )
    if manifest.options.tokenizer and tokenizer is None:
        raise ExportError(
            f"the export was rendered with the tokenizer {manifest.options.tokenizer}: pass the "
            "same one with --tokenizer"
        )
    problems: list[ExportProblem] = []
    failed: dict[str, str] = {}
    signatures: dict[tuple[str, str], bool] = {}
    trajectories: list[Trajectory] = []
    judge_version = manifest.options.selection.judge_version
    for name in manifest.evidence:
        path = folder / name
        if not path.exists():
            problems.append(ExportProblem(file=name, line=None, detail="evidence file missing"))
            continue
        for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
            try:
                evidence = SessionEvidence.model_validate_json(raw)
            except ValidationError as exc:
                detail = f"not an evidence line: {exc.errors()[0]['msg']}"
                problems.append(ExportProblem(file=name, line=number, detail=detail))
                continue
            sid = evidence.session_id
            for found in evidence_problems(evidence, public_key, signatures):
                problems.append(ExportProblem(file=name, line=number, detail=f"{sid}: {found}"))
                failed.setdefault(sid, found)
            chains = evidence.decoded()
            derived = [env for stream, envs in chains.items() if stream != "events" for env in envs]
            try:
                events = chains.get("events", [])
                trajectories.append(fold(events, derived, judge_version=judge_version))
            except (FoldError, KeyError, TypeError) as exc:
                detail = f"{sid}: the evidence does not fold into a session: {exc}"
                problems.append(ExportProblem(file=name, line=number, detail=detail))
                failed.setdefault(sid, str(exc))
    blobs, _ = render_export(
        trajectories, manifest.options, source=manifest.source, tokenizer=tokenizer, skipped={}
    )
    expected = dict(blobs)
    lines = 0
    for entry in manifest.files:
        data_path, side_path = folder / entry.name, folder / entry.provenance_name
        if not data_path.exists() or not side_path.exists():
            missing = entry.name if not data_path.exists() else entry.provenance_name
            problems.append(ExportProblem(file=missing, line=None, detail="file missing"))
            continue
        actual = _keyed(data_path.read_bytes(), side_path.read_bytes())
        wanted = _keyed(expected.get(entry.name, b""), expected.get(entry.provenance_name, b""))
        lines += len(actual)
        for key, (number, line) in sorted(actual.items(), key=lambda kv: kv[1][0]):
            bad = [sid for sid in key[0] if sid in failed]
            if bad:
                detail = f"folded from {', '.join(bad)}, whose evidence fails: {failed[bad[0]]}"
            elif key not in wanted:
                detail = "no session of the evidence folds to this line (or its provenance)"
            elif wanted[key][1] != line:
                detail = "differs from the line its evidence folds to"
            else:
                continue
            problems.append(ExportProblem(file=entry.name, line=number, detail=detail))
        by_number: defaultdict[str, int] = defaultdict(int)
        for key in wanted.keys() - actual.keys():
            by_number[", ".join(key[0])] += 1
        for sessions, count in sorted(by_number.items()):
            detail = f"{count} line(s) folded from {sessions} are missing"
            problems.append(ExportProblem(file=entry.name, line=None, detail=detail))
    return ExportVerification(
        key_id=key_id(public_key),
        files=len(manifest.files),
        lines=lines,
        sessions=len(trajectories),
        problems=problems,
    )
