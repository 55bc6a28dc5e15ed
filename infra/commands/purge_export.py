"""`rolltape dataset purge DIR --erasures FILE`: take erased sessions out of an export written
before their erasure, so that the folder holds none of their content and still verifies.

An export with evidence is rendered again from the evidence of the sessions that remain (the
same way `verify-export` checks it), so every file, sidecar, evidence file and the manifest are
what an export of those sessions alone would have been: grouped lines (atropos, dpo) lose the
erased member rather than the whole group, shards are re-cut, and `verify-export` passes. An
export without evidence has its lines whose provenance names an erased session removed (a
grouped line with one erased member goes whole: nothing re-renders it), the sidecars
renumbered and the manifest rewritten. The manifest counts the sessions taken out under
`skipped["erased"]`. The folder's manifest goes first and comes back last, so a purge cut short
leaves a folder that no loader takes for a complete export.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from rolltape.infra.commands.export import (
    ExportError,
    prepare_folder,
    read_manifest,
    render_export,
)
from rolltape.projections import (
    MANIFEST,
    META_DIR,
    ErasureList,
    ExportFile,
    FoldError,
    Manifest,
    SessionEvidence,
    fold,
)
from rolltape.projections.exporters import ChatTokenizer, jsonl_line
from rolltape.schemas import SchemaError


@dataclass(frozen=True)
class Purged:
    """What a purge took out: sessions, and lines (`lines_before` - `manifest.lines`)."""

    sessions: tuple[str, ...]
    lines_before: int
    manifest: Manifest


def purge_export(
    folder: Path, erasures: ErasureList, *, tokenizer: ChatTokenizer | None = None
) -> Purged | None:
    """Take the sessions `erasures` names out of the export in `folder` (module docstring);
    None when it holds none of them (nothing is written)."""
    manifest = read_manifest(folder)
    if manifest.evidence:
        return _rerender(folder, manifest, erasures, tokenizer)
    return _drop_lines(folder, manifest, erasures)


def _merged(skipped: dict[str, int], erased: int) -> dict[str, int]:
    out = dict(skipped)
    out["erased"] = out.get("erased", 0) + erased
    return dict(sorted(out.items()))


def _rerender(
    folder: Path, manifest: Manifest, erasures: ErasureList, tokenizer: ChatTokenizer | None
) -> Purged | None:
    if manifest.options.tokenizer and tokenizer is None:
        raise ExportError(
            f"the export was rendered with the tokenizer {manifest.options.tokenizer}: pass the "
            "same one with --tokenizer, so that the lines that stay are rendered as they were"
        )
    kept: dict[str, bytes] = {}
    purged: list[str] = []
    for name in dict.fromkeys(manifest.evidence):
        for number, raw in enumerate((folder / name).read_bytes().splitlines(keepends=True), 1):
            try:
                evidence = SessionEvidence.model_validate_json(raw)
            except ValidationError as exc:
                raise ExportError(
                    f"{name}:{number} is not an evidence line ({exc.errors()[0]['msg']}): run "
                    "`rolltape dataset verify` on the folder; nothing was changed"
                ) from exc
            if evidence.session_id in erasures.sessions:
                purged.append(evidence.session_id)
            else:
                kept.setdefault(evidence.session_id, raw)
    if not purged:
        return None
    trajectories = []
    for sid, raw in kept.items():
        try:
            chains = SessionEvidence.model_validate_json(raw).decoded()
            events = chains.get("events", [])
            derived = [e for stream, es in chains.items() if stream != "events" for e in es]
            judge_version = manifest.options.selection.judge_version
            trajectories.append(fold(events, derived, judge_version=judge_version))
        except (FoldError, SchemaError, ValueError) as exc:
            raise ExportError(
                f"the evidence of {sid} does not fold ({exc}): run `rolltape dataset verify` "
                "on the folder first; nothing was changed"
            ) from exc
    blobs, rendered = render_export(
        trajectories, manifest.options, source=manifest.source, tokenizer=tokenizer, skipped={}
    )
    contents = dict(blobs)
    evidence_files: dict[str, list[bytes]] = {}
    placed: set[str] = set()
    for entry in rendered.files:  # each session's evidence beside the first line it shaped
        name = f"{META_DIR}/{entry.name.removesuffix('.jsonl')}.evidence.jsonl"
        evidence_files[name] = []
        for side in contents[entry.provenance_name].splitlines():
            for source in orjson.loads(side)["sessions"]:
                sid = source["session_id"]
                if sid not in placed:
                    placed.add(sid)
                    evidence_files[name].append(kept[sid])
    rest = [raw for sid, raw in kept.items() if sid not in placed]
    if rest:
        evidence_files[f"{META_DIR}/selected.evidence.jsonl"] = rest
    new = manifest.model_copy(
        update={
            "files": rendered.files,
            "lines": rendered.lines,
            "sessions_exported": rendered.sessions_exported,
            "compressed": rendered.compressed,
            "unanswered_calls": rendered.unanswered_calls,
            "token_sources": rendered.token_sources,
            "skipped": _merged(manifest.skipped, len(purged)),
            "evidence": tuple(evidence_files),
        }
    )
    prepare_folder(folder, overwrite=True)
    for name, data in [*blobs, *((n, b"".join(lines)) for n, lines in evidence_files.items())]:
        (folder / name).write_bytes(data)
    (folder / MANIFEST).write_bytes(new.to_bytes())
    return Purged(tuple(sorted(purged)), manifest.lines, new)


def _drop_lines(folder: Path, manifest: Manifest, erasures: ErasureList) -> Purged | None:
    files: list[tuple[ExportFile, list[bytes], list[bytes]]] = []
    purged: set[str] = set()
    removed: set[str] = set()  # the members of every line taken out (a group's, too)
    remaining: set[str] = set()
    number = 0
    for entry in manifest.files:
        data = (folder / entry.name).read_bytes().splitlines(keepends=True)
        sides = (folder / entry.provenance_name).read_bytes().splitlines(keepends=True)
        if len(data) != len(sides):
            raise ExportError(
                f"{entry.name} has {len(data)} lines but its provenance {len(sides)}: the "
                "folder was changed; nothing was purged"
            )
        kept_data, kept_sides = [], []
        for n, (line, side) in enumerate(zip(data, sides, strict=True), start=1):
            try:
                provenance: dict[str, Any] = orjson.loads(side)
                members = [s["session_id"] for s in provenance["sessions"]]
            except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                raise ExportError(
                    f"{entry.provenance_name}:{n} is not a provenance line ({exc}): the folder "
                    "was changed; nothing was purged"
                ) from exc
            erased = erasures.erased(members)
            if erased:
                purged.update(erased)
                removed.update(members)
                continue
            remaining.update(members)
            provenance["line"] = number
            number += 1
            kept_data.append(line)
            kept_sides.append(jsonl_line(provenance))
        files.append((entry, kept_data, kept_sides))
    if not purged:
        return None
    entries = []
    for entry, data, sides in files:
        if not data:
            continue
        sessions = {s["session_id"] for side in sides for s in orjson.loads(side)["sessions"]}
        entries.append(
            entry.model_copy(
                update={
                    "lines": len(data),
                    "bytes": sum(map(len, data)),
                    "sha256": hashlib.sha256(b"".join(data)).hexdigest(),
                    "sessions": len(sessions),
                }
            )
        )
    gone = removed - remaining  # no line of theirs is left
    skipped = _merged(manifest.skipped, len(purged))
    if gone - purged:  # a grouped line with an erased member goes whole
        skipped["grouped_with_erased"] = skipped.get("grouped_with_erased", 0) + len(gone - purged)
    new = manifest.model_copy(
        update={
            "files": tuple(entries),
            "lines": number,
            "sessions_exported": manifest.sessions_exported - len(gone),
            "skipped": dict(sorted(skipped.items())),
        }
    )
    prepare_folder(folder, overwrite=True)
    for entry, data, sides in files:
        if data:
            (folder / entry.name).write_bytes(b"".join(data))
            (folder / entry.provenance_name).write_bytes(b"".join(sides))
    (folder / MANIFEST).write_bytes(new.to_bytes())
    return Purged(tuple(sorted(purged)), manifest.lines, new)
