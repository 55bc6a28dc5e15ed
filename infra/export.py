"""`rolltape export` wiring: read the topics, fold every session, write the files.

The pure parts (selection, rendering, sharding, manifest) are rolltape.projections; this module
only reads Kafka, checks each record's hash, and writes what the projections return.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from rolltape.infra._errors import InfraError
from rolltape.infra.readback import read_records
from rolltape.processors.audit import CHECKPOINT_LOG_PREFIX
from rolltape.projections import (
    MANIFEST,
    META_DIR,
    Checkpoints,
    ExportOptions,
    FoldError,
    Manifest,
    SessionEvidence,
    Trajectory,
    build_export,
    checked_envelope,
    fold,
    session_evidence,
)
from rolltape.projections.exporters import ChatTokenizer, load_tokenizer
from rolltape.schemas import LIVE_JUDGE_VERSION, KafkaConnection, Stream, versioned_stream


class ExportError(InfraError, ValueError):
    """The export cannot run as asked (output folder in use, unusable tokenizer)."""


@dataclass
class Collected:
    """One session's records per chain, read up to the end offsets taken when the scan began."""

    events: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    derived: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    bounds: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    records: int = 0
    unreadable: int = 0
    """Records that are not envelopes (the live audit dead-lettered them)."""
    tampered: int = 0
    """Records whose content does not match their hash: left out, so their chain shows a gap."""

    def source(self) -> dict[str, Any]:
        return {
            "topics": {
                topic: {str(p): end for p, (_, end) in sorted(parts.items())}
                for topic, parts in sorted(self.bounds.items())
            },
            "records_read": self.records,
            "unreadable_records": self.unreadable,
            "tampered_records": self.tampered,
        }


def add_record(collected: Collected, value: bytes, wanted: frozenset[str]) -> None:
    """File one record under its session: events, or the wanted derived chains (pure)."""
    collected.records += 1
    env, problem = checked_envelope(value)
    if env is None:
        if problem == "tampered":
            collected.tampered += 1
        else:
            collected.unreadable += 1
        return
    stream = env["stream"]
    if stream == Stream.EVENTS.value:
        collected.events[env["session_id"]].append(env)
    elif stream in wanted:
        collected.derived[env["session_id"]].append(env)


async def collect(
    connection: KafkaConnection,
    *,
    prefix: str,
    judge_version: str,
    on_record: Callable[[int, int], None] | None = None,
) -> Collected:
    """Read the events topic and the judge version's verdict and filter chains."""
    collected = Collected()
    wanted = frozenset(
        versioned_stream(s, judge_version) for s in (Stream.VERDICTS, Stream.FILTERED)
    )
    total = 0
    async for record in read_records(
        connection,
        [Stream.EVENTS, Stream.VERDICTS, Stream.FILTERED],
        prefix=prefix,
        bounds=collected.bounds,
    ):
        if not total:
            total = sum(e - s for parts in collected.bounds.values() for s, e in parts.values())
        add_record(collected, record.value, wanted)
        if on_record is not None:
            on_record(collected.records, total)
    return collected


def fold_all(collected: Collected, judge_version: str) -> tuple[list[Trajectory], dict[str, int]]:
    """Fold every session; sessions that cannot be folded are counted by reason."""
    trajectories = []
    skipped: dict[str, int] = defaultdict(int)
    for sid in sorted(collected.events):
        try:
            trajectories.append(
                fold(
                    collected.events[sid],
                    collected.derived.get(sid, ()),
                    judge_version=judge_version,
                )
            )
        except FoldError:
            skipped["no_session_start"] += 1
    return trajectories, dict(skipped)


def tokenizer_label(folder: Path) -> str:
    """The tokenizer's folder name and a digest of its files: what the manifest records (never
    the machine path)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return f"{folder.name}@sha256:{digest.hexdigest()[:16]}"


def open_tokenizer(path: Path | None) -> tuple[ChatTokenizer | None, str | None]:
    if path is None:
        return None, None
    try:
        return load_tokenizer(path), tokenizer_label(path)
    except ValueError as exc:
        raise ExportError(str(exc)) from exc


def write_export(
    out: Path, blobs: list[tuple[str, bytes]], manifest: Manifest, *, overwrite: bool
) -> None:
    """Write the files, the manifest last (a folder with a manifest holds a complete export)."""
    existing = out / MANIFEST
    if out.exists() and any(out.iterdir()):
        if not existing.exists():
            raise ExportError(f"{out} is not empty and holds no export: choose an empty folder")
        if not overwrite:
            raise ExportError(f"{out} already holds an export: pass --overwrite to replace it")
        old = orjson.loads(existing.read_bytes())
        existing.unlink()
        names = [n for e in old.get("files", []) for n in (e.get("name"), e.get("provenance_name"))]
        for name in [*names, *old.get("evidence", [])]:
            if isinstance(name, str) and _ours(name):
                (out / name).unlink(missing_ok=True)
    (out / META_DIR).mkdir(parents=True, exist_ok=True)
    for name, data in blobs:
        (out / name).write_bytes(data)
    existing.write_bytes(manifest.to_bytes())


def _ours(name: str) -> bool:
    """A file name an earlier manifest may ask us to remove: in the folder or its .rolltape/."""
    parts = name.split("/")
    return ".." not in parts and (len(parts) == 1 or (len(parts) == 2 and parts[0] == META_DIR))


def render_export(
    trajectories: list[Trajectory],
    options: ExportOptions,
    *,
    source: dict[str, Any],
    tokenizer: ChatTokenizer | None,
    skipped: dict[str, int],
) -> tuple[list[tuple[str, bytes]], Manifest]:
    """The export's files and manifest: what `export` writes and `verify-export` reproduces."""
    count = None
    if tokenizer is not None and options.token_budget is not None:

        def count(text: str) -> int:
            return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return build_export(
        trajectories,
        options,
        source=source,
        tokenizer=tokenizer,
        count_tokens=count,
        extra_skipped=skipped,
    )


def run_export(
    collected: Collected,
    options: ExportOptions,
    out: Path,
    *,
    tokenizer: ChatTokenizer | None = None,
    overwrite: bool = False,
    evidence: bool = False,
) -> Manifest:
    trajectories, skipped = fold_all(collected, options.selection.judge_version)
    proofs: dict[str, SessionEvidence] = {}
    if evidence:
        trajectories, proofs, uncovered = _with_evidence(collected, options, trajectories)
        if uncovered:
            skipped = {**skipped, "no_checkpoint": uncovered}
    blobs, manifest = render_export(
        trajectories, options, source=collected.source(), tokenizer=tokenizer, skipped=skipped
    )
    if evidence:
        files = _evidence_files(blobs, manifest, proofs)
        blobs += files
        manifest = manifest.model_copy(update={"evidence": tuple(name for name, _ in files)})
    write_export(out, blobs, manifest, overwrite=overwrite)
    return manifest


def _with_evidence(
    collected: Collected, options: ExportOptions, trajectories: list[Trajectory]
) -> tuple[list[Trajectory], dict[str, SessionEvidence], int]:
    """The trajectories an evidence export may use (the selected ones need every chain head
    committed to by a signed checkpoint), their evidence, and how many were left out."""
    if options.selection.judge_version != LIVE_JUDGE_VERSION:
        raise ExportError(
            "--evidence proves the live judge's chains; a replayed judge version is not "
            "checkpointed: export without --evidence, or from the live version"
        )
    logs = {
        sid: envs
        for sid, envs in collected.derived.items()
        if sid.startswith(CHECKPOINT_LOG_PREFIX)
    }
    checkpoints = Checkpoints(logs)
    kept, proofs, uncovered = [], {}, 0
    for trajectory in trajectories:
        sid = trajectory.session_id
        if options.selection.reason_to_skip(trajectory) is None:
            found = session_evidence(
                trajectory, collected.events[sid], collected.derived.get(sid, []), checkpoints
            )
            if found is None:
                uncovered += 1
                continue
            proofs[sid] = found
        kept.append(trajectory)
    return kept, proofs, uncovered


def _evidence_files(
    blobs: list[tuple[str, bytes]], manifest: Manifest, proofs: dict[str, SessionEvidence]
) -> list[tuple[str, bytes]]:
    """`.rolltape/<data file stem>.evidence.jsonl` per data file with the sessions first used
    there, and `.rolltape/selected.evidence.jsonl` with the selected sessions no line used."""
    data = dict(blobs)
    written: set[str] = set()
    files = []
    for entry in manifest.files:
        sessions = []
        for line in data[entry.provenance_name].splitlines():
            for source in orjson.loads(line)["sessions"]:
                sid = source["session_id"]
                if sid not in written:
                    written.add(sid)
                    sessions.append(sid)
        name = f"{META_DIR}/{entry.name.removesuffix('.jsonl')}.evidence.jsonl"
        files.append((name, b"".join(_evidence_line(proofs[sid]) for sid in sessions)))
    rest = sorted(set(proofs) - written)
    if rest:
        blob = b"".join(_evidence_line(proofs[sid]) for sid in rest)
        files.append((f"{META_DIR}/selected.evidence.jsonl", blob))
    return files


def _evidence_line(evidence: SessionEvidence) -> bytes:
    return orjson.dumps(
        evidence.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
    )
