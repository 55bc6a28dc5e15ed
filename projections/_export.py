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

import hashlib
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rolltape.projections._narrowing import Narrowing, id_matches
from rolltape.projections._trajectory import Trajectory
from rolltape.projections.exporters import (
    ChatTokenizer,
    CompressionReport,
    SkipSession,
    Stack,
    atropos_groups,
    compress,
    dpo_pairs,
    estimate_tokens,
    jsonl_line,
    session_rows,
    stack_rows,
)
from rolltape.schemas import JUDGE_VERSION_PATTERN, LIVE_JUDGE_VERSION

Format = Literal["sharegpt", "atropos", "turns", "openai", "trl", "dpo", "tokens"]
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
    tasks: tuple[str, ...] = ()
    """Task texts (what `session_started` said, exactly); empty: all."""
    since_ns: int | None = None
    """Sessions that started at or after this time (the recorder's clock, ns)."""
    until_ns: int | None = None
    """Sessions that started before this time."""
    include_unfinished: bool = False
    """Sessions with no session_ended yet (status "unfinished")."""
    include_broken: bool = False
    """Sessions whose chains have a break (gap, bad link, tampered record, chain_broken event)."""
    reviewed: Literal["any", "passed", "failed", "unreviewed"] = "any"
    """By the reviewers' human verdicts (the majority of each one's latest): `passed`,
    `failed`, or `unreviewed` (no reviewer judged it; a split counts as neither passed nor
    failed)."""

    def narrowing(self) -> Narrowing:
        """The ids, tasks and start window asked for: what a read model answers before a
        record is read (an export reads, and counts, only the sessions it picks)."""
        return Narrowing(
            sessions=self.sessions,
            tasks=self.tasks,
            since_ns=self.since_ns,
            until_ns=self.until_ns,
        )

    def reason_to_skip(self, trajectory: Trajectory) -> str | None:
        """Why `trajectory` is not exported, or None when it is."""
        if not id_matches(self.sessions, trajectory.session_id):
            return "session_not_selected"
        if self.tasks and trajectory.task not in self.tasks:
            return "task_not_selected"
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
        if self.reviewed != "any":
            passed = trajectory.reviewers_passed
            if self.reviewed == "unreviewed" and trajectory.reviews:
                return "reviewed"
            if self.reviewed == "passed" and passed is not True:
                return "not_reviewed" if not trajectory.reviews else "not_passed_by_reviewers"
            if self.reviewed == "failed" and passed is not False:
                return "not_reviewed" if not trajectory.reviews else "not_failed_by_reviewers"
        return None


class ExportOptions(BaseModel):
    """How an export is made. The manifest records the options whole, so the same options over the
    same sessions reproduce the same files."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Format
    selection: Selection = Selection()
    shard_lines: int = Field(default=10_000, ge=1)
    token_budget: int | None = Field(default=None, ge=1)
    """Compress each trajectory to this many tokens (counted with the tokenizer when one is
    given, else estimated); trajectories that cannot fit are skipped (`over_budget`)."""
    score: str = "reward"
    """Atropos and DPO: where a session's score comes from (Trajectory.score): `reward`,
    `reward:NAME`, `verdict:JUDGE:KEY` or `human` (the reviewers' verdicts, each reviewer's
    latest, averaged); anything else is refused before reading the log."""
    keep_equal_scores: bool = False
    """Atropos: keep groups whose scores are all equal (Atropos drops them by default)."""
    tokenizer: str | None = None
    """A label of the tokenizer used (its content digest), recorded in the manifest."""
    stack: Stack = Field(default="rolltape", exclude_if=lambda stack: stack == "rolltape")
    """Tokens: whose field names the samples are written in (`rolltape`, the documented form,
    or a training stack's own: see `rolltape.projections.exporters.STACKS`)."""

    @model_validator(mode="after")
    def _no_budget_for_ids(self) -> ExportOptions:
        if self.format == "tokens" and self.token_budget is not None:
            raise ValueError(
                "--token-budget compresses messages, and token samples keep the ids the server "
                "sampled: export -f tokens without it"
            )
        return self

    @field_validator("score")
    @classmethod
    def _a_score_source(cls, source: str) -> str:
        kind, _, rest = source.partition(":")
        if source == "human" or kind == "reward" or (kind == "verdict" and ":" in rest.strip(":")):
            return source
        raise ValueError(
            f"{source!r} is not a score source: use reward, reward:NAME, verdict:JUDGE:KEY or "
            "human (the reviewers' verdicts)"
        )


class ExportFile(BaseModel):
    """One data file of an export, as the manifest lists it. `bytes` and `sha256` cover the data
    file only, not its sidecar; `sessions` counts the distinct sessions its lines came from."""

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
    token_sources: dict[str, int] = Field(
        default_factory=dict, exclude_if=lambda sources: not sources
    )
    """Tokens: samples by where their ids came from (`exact`: as the serving engine returned
    them; `template`: rendered with `options.tokenizer`)."""
    files: tuple[ExportFile, ...]
    evidence: tuple[str, ...] = ()
    """Evidence files (`export --evidence`): per data file, the envelopes and signed inclusion
    proofs of the sessions its lines were folded from; `selected.evidence.jsonl` holds the
    selected sessions no line came from (they still shape the others, e.g. a tool list)."""

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            self.model_dump(mode="json"), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
        )


SortKey = tuple[int, str, str]
"""Where a chosen trajectory sits in the export: (start time, session id, "") for the formats
written per session, (0, group, session id) for the grouped ones (atropos, dpo)."""


@dataclass(frozen=True)
class Chosen:
    """A trajectory the selection took, compressed to the token budget when one is set."""

    trajectory: Trajectory
    report: CompressionReport | None


class ChosenStore(Protocol):
    """Where chosen trajectories wait: an export's order is global (by start time, or by group),
    so no line can be written before every session is folded. `MemoryStore` serves small
    exports; `rolltape dataset export` sorts through a file, so its memory does not grow with the log."""

    def add(self, key: SortKey, chosen: Chosen) -> None: ...

    def ordered(self) -> Iterator[Chosen]:
        """Every chosen trajectory, by key."""
        ...


class MemoryStore:
    """A `ChosenStore` in a list."""

    def __init__(self) -> None:
        self._items: list[tuple[SortKey, Chosen]] = []

    def add(self, key: SortKey, chosen: Chosen) -> None:
        self._items.append((key, chosen))

    def ordered(self) -> Iterator[Chosen]:
        for _, chosen in sorted(self._items, key=lambda item: item[0]):
            yield chosen


@dataclass(frozen=True)
class ExportLine:
    """One data line and its provenance (the sessions it came from, their chain spans)."""

    data: bytes
    provenance: dict[str, Any]

    @property
    def sessions(self) -> list[str]:
        return [source["session_id"] for source in self.provenance["sessions"]]


@dataclass
class Tally:
    """What an export counts on its way: the manifest's figures."""

    read: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    exported: int = 0
    lines: int = 0
    unanswered_calls: int = 0
    compressed: int = 0
    known_tools: set[str] = field(default_factory=set)
    token_sources: Counter[str] = field(default_factory=Counter)


class FileSink(Protocol):
    """Where export files are written, a chunk at a time (a folder, or memory)."""

    def append(self, name: str, data: bytes) -> None: ...

    def close(self, name: str) -> None:
        """Nothing more comes for `name`."""
        ...


class MemorySink:
    """A `FileSink` in memory: what `build_export` returns and `verify-export` compares."""

    def __init__(self) -> None:
        self.files: dict[str, bytearray] = {}

    def append(self, name: str, data: bytes) -> None:
        self.files.setdefault(name, bytearray()).extend(data)

    def close(self, name: str) -> None:
        self.files.setdefault(name, bytearray())

    def blobs(self) -> list[tuple[str, bytes]]:
        return [(name, bytes(data)) for name, data in self.files.items()]


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


def _group(format: Format, trajectory: Trajectory) -> str:
    """The group a grouped format puts the trajectory in (dpo: "" holds the ungrouped, which
    `dpo_pairs` skips as no_group)."""
    if format == "atropos":
        return trajectory.group_id or trajectory.session_id
    return trajectory.group_id or ""


class Exporting:
    """One export on its way: `offer` every folded trajectory, then `write` the lines.

    The same steps serve an export in memory (`build_export`) and the streaming one of
    `rolltape dataset export`, so both write the same bytes; only the `ChosenStore` and the `FileSink`
    differ."""

    def __init__(
        self,
        options: ExportOptions,
        store: ChosenStore,
        *,
        tokenizer: ChatTokenizer | None = None,
        count_tokens: Callable[[str], int] | None = None,
    ) -> None:
        self.options = options
        self.store = store
        self.tokenizer = tokenizer
        self.count_tokens = count_tokens
        self.tally = Tally()

    def left_out(self, reason: str, sessions: int = 1) -> None:
        """Sessions read but never offered (they do not fold, no checkpoint covers them)."""
        self.tally.read += sessions
        self.tally.skipped[reason] += sessions

    def offer(self, trajectory: Trajectory) -> bool:
        """Select and compress one trajectory; True when it was taken."""
        options, tally = self.options, self.tally
        tally.read += 1
        reason = options.selection.reason_to_skip(trajectory)
        if reason is not None:
            tally.skipped[reason] += 1
            return False
        report = None
        if options.token_budget is not None:
            trajectory, report = compress(
                trajectory, options.token_budget, self.count_tokens or estimate_tokens
            )
            if not report.within_budget:
                tally.skipped["over_budget"] += 1
                return False
            tally.compressed += bool(report.steps)
        tally.unanswered_calls += sum(
            1 for m in trajectory.messages for c in m.tool_calls if c.result is None
        )
        tally.known_tools.update(tool.name for tool in trajectory.tools)
        if options.format in ("atropos", "dpo"):
            key = (0, _group(options.format, trajectory), trajectory.session_id)
        else:
            key = (*order_key(trajectory), "")
        self.store.add(key, Chosen(trajectory, report))
        return True

    def lines(self) -> Iterator[ExportLine]:
        """The export's lines in order; call once every trajectory was offered (ShareGPT's
        tool statistics list every tool any chosen session declared)."""
        format = self.options.format
        if format in ("atropos", "dpo"):
            groups = itertools.groupby(
                self.store.ordered(), key=lambda c: _group(format, c.trajectory)
            )
            for _, members in groups:
                yield from self._group_lines(list(members))
            return
        if format == "tokens":
            for chosen in self.store.ordered():
                yield from self._token_lines(chosen)
            return
        known_tools = sorted(self.tally.known_tools)
        for chosen in self.store.ordered():
            rows = session_rows(format, chosen.trajectory, known_tools)
            if not rows:
                self.tally.skipped["no_assistant_turns"] += 1
                continue
            self.tally.exported += 1
            source = _source(chosen.trajectory, chosen.report)
            for row in rows:
                yield ExportLine(jsonl_line(row), {"sessions": [source]})

    def _token_lines(self, chosen: Chosen) -> Iterator[ExportLine]:
        options, tally = self.options, self.tally
        try:
            rows = stack_rows(
                options.stack,
                chosen.trajectory,
                self.tokenizer,
                tokenizer_label=options.tokenizer,
                score=options.score,
            )
        except SkipSession as exc:
            tally.skipped[exc.reason] += 1
            return
        tally.exported += 1
        source = _source(chosen.trajectory, chosen.report)
        for sample, row in rows:
            tally.token_sources[sample.token_source] += 1
            yield ExportLine(jsonl_line(row), {"branch": sample.branch, "sessions": [source]})

    def _group_lines(self, members: list[Chosen]) -> Iterator[ExportLine]:
        options, tally = self.options, self.tally
        reports = {c.trajectory.session_id: c.report for c in members}
        trajectories = [c.trajectory for c in members]
        if options.format == "atropos":
            export = atropos_groups(
                trajectories,
                self.tokenizer,
                score=options.score,
                keep_equal_scores=options.keep_equal_scores,
            )
            for _sid, reason, _ in export.skipped:
                tally.skipped[reason] += 1
            for key, kept, line in export.groups:
                tally.exported += len(kept)
                yield ExportLine(
                    jsonl_line(line),
                    {
                        "group": key,
                        "sessions": [_source(t, reports[t.session_id]) for t in kept],
                    },
                )
            return
        pairs = dpo_pairs(trajectories, score=options.score)
        for _what, reason in pairs.skipped:
            tally.skipped[reason] += 1
        tally.exported += len({t.session_id for _, *two, _ in pairs.pairs for t in two})
        for key, best, worse, row in pairs.pairs:
            yield ExportLine(
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

    def write(
        self, sink: FileSink, on_line: Callable[[str, ExportLine], None] | None = None
    ) -> tuple[ExportFile, ...]:
        """Write the lines into files `<format>-00000.jsonl` of `shard_lines` lines each, with
        their `.rolltape/<name>.provenance.jsonl` sidecars. `on_line(data file, line)` sees
        each line once it is written."""
        files: list[ExportFile] = []
        shard: _Shard | None = None
        for line in self.lines():
            number = self.tally.lines
            if number % self.options.shard_lines == 0:
                if shard is not None:
                    files.append(shard.close(sink))
                index = number // self.options.shard_lines
                shard = _Shard(self.options.format, index)
            assert shard is not None
            shard.add(sink, number, line)
            self.tally.lines += 1
            if on_line is not None:
                on_line(shard.name, line)
        if shard is not None:
            files.append(shard.close(sink))
        return tuple(files)

    def manifest(self, files: tuple[ExportFile, ...], source: dict[str, Any]) -> Manifest:
        tally = self.tally
        return Manifest(
            format=self.options.format,
            options=self.options,
            source=source,
            sessions_read=tally.read,
            sessions_exported=tally.exported,
            lines=tally.lines,
            skipped=dict(sorted(tally.skipped.items())),
            unanswered_calls=tally.unanswered_calls,
            compressed=tally.compressed,
            token_sources=dict(sorted(tally.token_sources.items())),
            files=files,
        )


class _Shard:
    """One data file being written, with its sidecar: counts and digest as lines go in."""

    def __init__(self, format: str, index: int) -> None:
        self.name = f"{format}-{index:05d}.jsonl"
        self.side = f"{META_DIR}/{format}-{index:05d}.provenance.jsonl"
        self.lines = 0
        self.bytes = 0
        self.digest = hashlib.sha256()
        self.sessions: set[str] = set()

    def add(self, sink: FileSink, number: int, line: ExportLine) -> None:
        sink.append(self.name, line.data)
        sink.append(self.side, jsonl_line({"line": number, **line.provenance}))
        self.lines += 1
        self.bytes += len(line.data)
        self.digest.update(line.data)
        self.sessions.update(line.sessions)

    def close(self, sink: FileSink) -> ExportFile:
        sink.close(self.name)
        sink.close(self.side)
        return ExportFile(
            name=self.name,
            provenance_name=self.side,
            lines=self.lines,
            bytes=self.bytes,
            sha256=self.digest.hexdigest(),
            sessions=len(self.sessions),
        )


def build_export(
    trajectories: Iterable[Trajectory],
    options: ExportOptions,
    *,
    source: dict[str, Any] | None = None,
    tokenizer: ChatTokenizer | None = None,
    count_tokens: Callable[[str], int] | None = None,
    extra_skipped: dict[str, int] | None = None,
) -> tuple[list[tuple[str, bytes]], Manifest]:
    """The files of an export (name, bytes) and its manifest, in memory; the caller writes
    them. `extra_skipped`: sessions read but not folded, by reason."""
    exporting = Exporting(options, MemoryStore(), tokenizer=tokenizer, count_tokens=count_tokens)
    for reason, count in (extra_skipped or {}).items():
        exporting.left_out(reason, count)
    for trajectory in trajectories:
        exporting.offer(trajectory)
    sink = MemorySink()
    files = exporting.write(sink)
    return sink.blobs(), exporting.manifest(files, source or {})
