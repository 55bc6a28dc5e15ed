"""Export planning: which trajectories go out, as which lines, in which files, with what manifest.

Pure: given the same trajectories and options it returns the same bytes, so running an export
twice over the same topics gives byte-identical files (no clock, no paths, no randomness in what
is written). Reading topics and writing files are the callers' part.

Every data line has a line in a sidecar `.provenance.jsonl` file with the same name stem and line
number: the sessions it came from, their trajectory ids and the chain spans (first and last event
hash of every chain used), so the training formats stay strict and every sample stays traceable.
Sidecars and the manifest live in the export folder's hidden `.rolltape/` subfolder: loaders that
take every .json/.jsonl file of a folder as data (`datasets.load_dataset("json", data_dir=...)`)
skip hidden folders, so an export folder loads as it is.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from rolltape.projections._trajectory import Trajectory
from rolltape.projections.exporters import (
    ChatTokenizer,
    CompressionReport,
    atropos_groups,
    compress,
    dpo_pairs,
    estimate_tokens,
    jsonl_line,
    session_rows,
)
from rolltape.schemas import JUDGE_VERSION_PATTERN, LIVE_JUDGE_VERSION

Format = Literal["sharegpt", "atropos", "turns", "openai", "trl", "dpo"]
META_DIR = ".rolltape"
"""The export folder's subfolder for what is not training data (sidecars, manifest)."""
MANIFEST = f"{META_DIR}/manifest.json"


class Selection(BaseModel):
    """Which folded sessions an export takes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    judge_version: str = Field(default=LIVE_JUDGE_VERSION, pattern=JUDGE_VERSION_PATTERN)
    accepted: Literal["any", "accepted", "rejected"] = "any"
    """accepted/rejected: by the judge version's reward-filter outcome (unfiltered sessions,
    such as training runs, are in neither)."""
    sessions: tuple[str, ...] = ()
    """Session ids or shell patterns (`run-7-*`); empty: all."""
    since_ns: int | None = None
    """Sessions that started at or after this time (the recorder's clock, ns)."""
    until_ns: int | None = None
    """Sessions that started before this time."""
    include_unfinished: bool = False
    """Sessions with no session_ended yet (status "unfinished")."""
    include_broken: bool = False
    """Sessions whose chains have a break (gap, bad link, tampered record, chain_broken event)."""

    def reason_to_skip(self, trajectory: Trajectory) -> str | None:
        """Why `trajectory` is not exported, or None when it is."""
        if self.sessions and not any(
            fnmatch.fnmatchcase(trajectory.session_id, p) for p in self.sessions
        ):
            return "session_not_selected"
        if self.since_ns is not None and trajectory.started_ns < self.since_ns:
            return "before_since"
        if self.until_ns is not None and trajectory.started_ns >= self.until_ns:
            return "after_until"
        if not trajectory.trainable:
            return "not_trainable"  # a judge's own conversation never becomes training data
        if trajectory.kind == "training":
            return "training_run"  # metrics and decisions, not a conversation
        if not trajectory.messages:
            return "no_messages"
        if trajectory.status == "unfinished" and not self.include_unfinished:
            return "unfinished"
        broken = trajectory.chain_breaks or not all(
            span.linked for span in trajectory.provenance.values()
        )
        if broken and not self.include_broken:
            return "chain_broken"
        if self.accepted == "accepted" and trajectory.accepted is not True:
            return "not_accepted" if trajectory.accepted is False else "not_filtered"
        if self.accepted == "rejected" and trajectory.accepted is not False:
            return "not_rejected" if trajectory.accepted else "not_filtered"
        return None


class ExportOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Format
    selection: Selection = Selection()
    shard_lines: int = Field(default=10_000, ge=1)
    token_budget: int | None = Field(default=None, ge=1)
    """Compress each trajectory to this many tokens (counted with the tokenizer when one is
    given, else estimated); trajectories that cannot fit are skipped (`over_budget`)."""
    score: str = "reward"
    """Atropos and DPO: where a session's score comes from (Trajectory.score)."""
    keep_equal_scores: bool = False
    """Atropos: keep groups whose scores are all equal (Atropos drops them by default)."""
    tokenizer: str | None = None
    """A label of the tokenizer used (its content digest), recorded in the manifest."""


class ExportFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    provenance_name: str
    """Relative to the export folder (in its .rolltape/ subfolder)."""
    lines: int
    bytes: int
    sha256: str
    sessions: int


class Manifest(BaseModel):
    """What an export holds and where it came from; written as .rolltape/manifest.json."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Format
    options: ExportOptions
    source: dict[str, Any] = Field(default_factory=dict)
    """Topics and the end offsets read up to (filled in by the reader)."""
    sessions_read: int
    sessions_exported: int
    lines: int
    skipped: dict[str, int]
    unanswered_calls: int
    compressed: int
    files: tuple[ExportFile, ...]
    evidence: tuple[str, ...] = ()
    """Evidence files (`export --evidence`): per data file, the envelopes and signed inclusion
    proofs of the sessions its lines were folded from; `selected.evidence.jsonl` holds the
    selected sessions no line came from (they still shape the others, e.g. a tool list)."""

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            self.model_dump(mode="json"), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
        )


@dataclass
class _Line:
    data: bytes
    provenance: dict[str, Any]


@dataclass
class Rendered:
    lines: list[_Line] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    exported: set[str] = field(default_factory=set)
    unanswered_calls: int = 0
    compressed: int = 0


def _source(trajectory: Trajectory, report: CompressionReport | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "session_id": trajectory.session_id,
        "trajectory_id": trajectory.trajectory_id,
        "chains": {
            name: [span.first_seq, span.first_hash, span.last_seq, span.last_hash]
            for name, span in trajectory.provenance.items()
        },
    }
    if report is not None and report.steps:
        entry["compression"] = report.model_dump(mode="json")
    return entry


def order_key(trajectory: Trajectory) -> tuple[int, str]:
    """Exports list sessions by start time, then id: stable whatever order the topics gave."""
    return (trajectory.started_ns, trajectory.session_id)


def render(
    trajectories: Iterable[Trajectory],
    options: ExportOptions,
    tokenizer: ChatTokenizer | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> Rendered:
    """Select, compress and render trajectories into export lines with their provenance."""
    out = Rendered()
    chosen: list[tuple[Trajectory, CompressionReport | None]] = []
    for trajectory in sorted(trajectories, key=order_key):
        reason = options.selection.reason_to_skip(trajectory)
        if reason is not None:
            out.skipped[reason] += 1
            continue
        report = None
        if options.token_budget is not None:
            trajectory, report = compress(
                trajectory, options.token_budget, count_tokens or estimate_tokens
            )
            if not report.within_budget:
                out.skipped["over_budget"] += 1
                continue
            out.compressed += bool(report.steps)
        out.unanswered_calls += sum(
            1 for m in trajectory.messages for c in m.tool_calls if c.result is None
        )
        chosen.append((trajectory, report))
    if options.format == "atropos":
        reports = {t.session_id: r for t, r in chosen}
        export = atropos_groups(
            [t for t, _ in chosen],
            tokenizer,
            score=options.score,
            keep_equal_scores=options.keep_equal_scores,
        )
        for _sid, reason, _ in export.skipped:
            out.skipped[reason] += 1
        for key, members, line in export.groups:
            out.exported.update(t.session_id for t in members)
            out.lines.append(
                _Line(
                    jsonl_line(line),
                    {
                        "group": key,
                        "sessions": [_source(t, reports[t.session_id]) for t in members],
                    },
                )
            )
        return out
    if options.format == "dpo":
        reports = {t.session_id: r for t, r in chosen}
        pairs = dpo_pairs([t for t, _ in chosen], score=options.score)
        for _what, reason in pairs.skipped:
            out.skipped[reason] += 1
        for key, best, worse, row in pairs.pairs:
            out.exported.update((best.session_id, worse.session_id))
            out.lines.append(
                _Line(
                    jsonl_line(row),
                    {
                        "group": key,
                        "scores": [best.score(options.score), worse.score(options.score)],
                        "sessions": [
                            _source(best, reports[best.session_id]),
                            _source(worse, reports[worse.session_id]),
                        ],
                    },
                )
            )
        return out
    known_tools = sorted({tool.name for t, _ in chosen for tool in t.tools})
    for trajectory, report in chosen:
        source = _source(trajectory, report)
        rows = session_rows(options.format, trajectory, known_tools)
        if not rows:
            out.skipped["no_assistant_turns"] += 1
            continue
        out.exported.add(trajectory.session_id)
        for row in rows:
            out.lines.append(_Line(jsonl_line(row), {"sessions": [source]}))
    return out


def shard(
    rendered: Rendered, options: ExportOptions
) -> tuple[list[tuple[str, bytes]], list[ExportFile]]:
    """Split lines into files `<format>-00000.jsonl` (+ `.rolltape/<name>.provenance.jsonl`
    sidecars)."""
    blobs: list[tuple[str, bytes]] = []
    files: list[ExportFile] = []
    size = options.shard_lines
    for index, start in enumerate(range(0, len(rendered.lines), size)):
        chunk = rendered.lines[start : start + size]
        name = f"{options.format}-{index:05d}.jsonl"
        side = f"{META_DIR}/{options.format}-{index:05d}.provenance.jsonl"
        data = b"".join(line.data for line in chunk)
        provenance = b"".join(
            jsonl_line({"line": start + i, **line.provenance}) for i, line in enumerate(chunk)
        )
        sessions = {s["session_id"] for line in chunk for s in line.provenance["sessions"]}
        blobs += [(name, data), (side, provenance)]
        files.append(
            ExportFile(
                name=name,
                provenance_name=side,
                lines=len(chunk),
                bytes=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                sessions=len(sessions),
            )
        )
    return blobs, files


def build_export(
    trajectories: Sequence[Trajectory],
    options: ExportOptions,
    *,
    source: dict[str, Any] | None = None,
    tokenizer: ChatTokenizer | None = None,
    count_tokens: Callable[[str], int] | None = None,
    extra_skipped: dict[str, int] | None = None,
) -> tuple[list[tuple[str, bytes]], Manifest]:
    """The files of an export (name, bytes) and its manifest; the caller writes them."""
    rendered = render(trajectories, options, tokenizer, count_tokens)
    blobs, files = shard(rendered, options)
    skipped = Counter(rendered.skipped)
    skipped.update(extra_skipped or {})
    manifest = Manifest(
        format=options.format,
        options=options,
        source=source or {},
        sessions_read=len(trajectories) + sum((extra_skipped or {}).values()),
        sessions_exported=len(rendered.exported),
        lines=len(rendered.lines),
        skipped=dict(sorted(skipped.items())),
        unanswered_calls=rendered.unanswered_calls,
        compressed=rendered.compressed,
        files=tuple(files),
    )
    return blobs, manifest
