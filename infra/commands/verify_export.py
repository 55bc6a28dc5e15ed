"""`rolltape dataset verify`: check an export folder with the judge's public key alone.

No Kafka: the folder's evidence files hold every envelope the lines were folded from and the
inclusion proofs of their chain heads in signed tree heads. Each session's evidence is checked
(projections.evidence_problems), every session is folded again from its evidence, the export is
rendered again with the manifest's options, and each data line must come out byte for byte.
Lines are matched through the provenance sidecar (which sessions each line came from), so one
bad session does not shift the report of the lines after it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ValidationError

from rolltape.infra.commands.export import ExportError, read_manifest, render_export
from rolltape.projections import (
    META_DIR,
    ErasureList,
    FoldError,
    SessionEvidence,
    Trajectory,
    evidence_problems,
    fold,
    read_erasures,
)
from rolltape.projections.exporters import ChatTokenizer
from rolltape.schemas import LIVE_JUDGE_VERSION, SchemaError
from rolltape.schemas.trust import key_id, load_public_key


def public_key(path: Path) -> Ed25519PublicKey:
    """The judge's public key in the PEM file `path` (ExportError when it holds none)."""
    try:
        return load_public_key(path.read_bytes())
    except ValueError as exc:  # schemas.trust refuses what is not an Ed25519 public key
        raise ExportError(
            f"{path}: {exc}; pass the judge's public key as `rolltape keys export FILE` writes it"
        ) from exc


def erasure_list(path: Path, key: Ed25519PublicKey) -> ErasureList:
    """The erasures file `path` (`rolltape privacy export-erasures`), checked with `key`."""
    return read_erasures(path.read_bytes(), key)


class ExportProblem(BaseModel):
    """Something in the folder that does not check out, where it is (line numbers from 1)."""

    file: str
    line: int | None
    detail: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.detail}"


class ExportVerification(BaseModel):
    """The outcome of checking one export folder: it verifies when `problems` is empty.
    `key_id` names the judge key the check used, so a report says whose signatures it trusted."""

    key_id: str
    files: int
    lines: int
    sessions: int
    problems: list[ExportProblem]


LineKey = tuple[tuple[str, ...], int]

_ERASED = (
    "erased (erasure {seq} of the erasures file): its content may not be kept; "
    "`rolltape dataset purge` takes it out"
)


class _Lines:
    """A data file and its provenance sidecar, lines matched by (sessions, occurrence)."""

    def __init__(self, data: bytes, provenance: bytes) -> None:
        self.data = data.splitlines(keepends=True)
        self.provenance = provenance.splitlines(keepends=True)
        self.keys: list[LineKey] = []
        seen: Counter[tuple[str, ...]] = Counter()
        for number, side in enumerate(self.provenance, start=1):
            try:
                sessions = tuple(s["session_id"] for s in orjson.loads(side)["sessions"])
            except (orjson.JSONDecodeError, KeyError, TypeError):
                sessions = (f"<unreadable provenance line {number}>",)
            self.keys.append((sessions, seen[sessions]))
            seen[sessions] += 1
        self.index = {key: n for n, key in enumerate(self.keys)}


def verify_export(
    folder: Path,
    public_key: Ed25519PublicKey,
    tokenizer: ChatTokenizer | None = None,
    erasures: ErasureList | None = None,
) -> ExportVerification:
    """Check the export in `folder` against the judge's `public_key` alone (no Kafka): every
    problem found is collected, not just the first. With `erasures` (a checked erasures file),
    every line and evidence line of an erased session is a problem too. Raises `ExportError`
    when the folder cannot be checked at all: no manifest, no evidence, or the tokenizer it was
    rendered with missing."""
    manifest = read_manifest(folder)
    if not manifest.evidence:
        raise ExportError(
            f"the export in {folder} carries no evidence: export it again with --evidence"
        )
    if manifest.options.tokenizer and tokenizer is None:
        raise ExportError(
            f"the export was rendered with the tokenizer {manifest.options.tokenizer}: pass the "
            "same one with --tokenizer"
        )
    judge_version = manifest.options.selection.judge_version
    if judge_version != LIVE_JUDGE_VERSION:
        raise ExportError(
            f"the manifest names judge version {judge_version!r}; evidence exists only for the "
            "live judge (replayed versions are not checkpointed): the manifest was edited"
        )
    problems: list[ExportProblem] = []
    failed: dict[str, str] = {}
    signatures: dict[tuple[str, str], bool] = {}
    trajectories: list[Trajectory] = []
    seen: dict[str, str] = {}
    for name in dict.fromkeys(manifest.evidence):
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
            if sid in seen:  # a session counted twice would weigh twice in the data
                detail = f"{sid}: a second evidence line for this session (first: {seen[sid]})"
                problems.append(ExportProblem(file=name, line=number, detail=detail))
                failed.setdefault(sid, "its evidence is given twice")
                continue
            seen[sid] = f"{name}:{number}"
            if erasures is not None and sid in erasures.sessions:
                detail = f"{sid}: {_ERASED.format(seq=erasures.sessions[sid])}"
                problems.append(ExportProblem(file=name, line=number, detail=detail))
            for found in evidence_problems(evidence, public_key, signatures):
                problems.append(ExportProblem(file=name, line=number, detail=f"{sid}: {found}"))
                failed.setdefault(sid, found)
            try:
                chains = evidence.decoded()  # sealed content opened with the keys it carries
                derived = [e for stream, es in chains.items() if stream != "events" for e in es]
                events = chains.get("events", [])
                trajectories.append(fold(events, derived, judge_version=judge_version))
            except (FoldError, SchemaError, ValueError, KeyError, TypeError) as exc:
                detail = f"{sid}: the evidence does not fold into a session: {exc}"
                problems.append(ExportProblem(file=name, line=number, detail=detail))
                failed.setdefault(sid, str(exc))
    blobs, rendered = render_export(
        trajectories, manifest.options, source=manifest.source, tokenizer=tokenizer, skipped={}
    )
    expected = dict(blobs)
    listed = {entry.name for entry in manifest.files}
    for entry in rendered.files:
        if entry.name not in listed:
            detail = "the evidence folds to this file, but the manifest does not list it"
            problems.append(ExportProblem(file=entry.name, line=None, detail=detail))
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and relative.parts[0] != META_DIR and str(relative) not in listed:
            detail = "not in the manifest: a loader reading the folder would train on it"
            problems.append(ExportProblem(file=str(relative), line=None, detail=detail))
    lines = 0
    for entry in manifest.files:
        data_path, side_path = folder / entry.name, folder / entry.provenance_name
        if not data_path.exists() or not side_path.exists():
            missing = entry.name if not data_path.exists() else entry.provenance_name
            problems.append(ExportProblem(file=missing, line=None, detail="file missing"))
            continue
        actual = _Lines(data_path.read_bytes(), side_path.read_bytes())
        wanted = _Lines(expected.get(entry.name, b""), expected.get(entry.provenance_name, b""))
        lines += len(actual.data)
        problems += _compare(entry.name, entry.provenance_name, actual, wanted, failed)
        if erasures is not None:
            problems += _erased_lines(entry.name, actual, erasures)
    return ExportVerification(
        key_id=key_id(public_key),
        files=len(manifest.files),
        lines=lines,
        sessions=len(trajectories),
        problems=problems,
    )


def _erased_lines(name: str, lines: _Lines, erasures: ErasureList) -> list[ExportProblem]:
    """Each line folded from an erased session, named."""
    return [
        ExportProblem(
            file=name,
            line=n + 1,
            detail=f"folded from {sid}: {_ERASED.format(seq=erasures.sessions[sid])}",
        )
        for n, (sessions, _) in enumerate(lines.keys)
        for sid in erasures.erased(sessions)
    ]


def _compare(
    name: str, side: str, actual: _Lines, wanted: _Lines, failed: dict[str, str]
) -> list[ExportProblem]:
    """Each data line and its provenance line against what the evidence folds to."""
    problems: list[ExportProblem] = []
    if len(actual.data) != len(actual.provenance):
        detail = f"{len(actual.data)} data lines but {len(actual.provenance)} provenance lines"
        problems.append(ExportProblem(file=name, line=None, detail=detail))
    for n, key in enumerate(actual.keys):
        bad = [sid for sid in key[0] if sid in failed]
        at = wanted.index.get(key)
        line = actual.data[n] if n < len(actual.data) else b""
        if bad:
            detail = f"folded from {', '.join(bad)}, whose evidence fails: {failed[bad[0]]}"
        elif at is None:
            detail = "no session of the evidence folds to this line (or its provenance)"
        elif wanted.data[at] != line:
            detail = "differs from the line its evidence folds to"
        elif wanted.provenance[at] != actual.provenance[n]:
            problems.append(
                ExportProblem(
                    file=side, line=n + 1, detail="differs from the provenance its evidence gives"
                )
            )
            continue
        elif at != n:
            detail = f"is line {at + 1} of what the evidence folds to (lines were reordered)"
        else:
            continue
        problems.append(ExportProblem(file=name, line=n + 1, detail=detail))
    missing: Counter[str] = Counter(
        ", ".join(key[0]) for key in wanted.keys if key not in actual.index
    )
    for sessions, count in sorted(missing.items()):
        detail = f"{count} line(s) folded from {sessions} are missing"
        problems.append(ExportProblem(file=name, line=None, detail=detail))
    return problems
