"""The read model's rows: what one batch of records adds to each table of the store.

One named tuple per table, its fields the table's columns in order (`docs/read-model.md`
documents them, `rolltape.infra.index` writes them). A row says what a record showed, and each
table's upsert (in the store) merges rows so that the order in which partitions are indexed
never matters: a rebuilt store equals the live one whatever the interleaving (latest `seq` wins
where a later event replaces an earlier one; first and last offsets take the minimum and the
maximum; sets are sets). The fold counts a record only where it extends its chain, so a copy of
a record in the log is never counted twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple


class SessionRow(NamedTuple):
    """`sessions`: what `session_started` says (merged: a later start of the same session, a
    resumed writer's, changes nothing it set)."""

    session_id: str
    kind: str
    task: str | None
    """None while the task is sealed (a subject session read without its data key)."""
    model: str | None
    trainable: bool
    linked_session_id: str | None
    group_id: str | None
    started_ms: int
    """Broker time of `session_started`."""
    started_ns: int
    """The recorder's time of `session_started` (its envelope's `ts_ns`): what an export's
    --since and --until compare, as the fold's `Trajectory.started_ns` does."""


class SessionEndRow(NamedTuple):
    """`sessions`' end columns: the events stream's `session_ended` (latest seq wins)."""

    session_id: str
    status: str
    ended_ms: int
    end_seq: int


class SubjectRow(NamedTuple):
    """`subjects`: the keyed hash of the subject a session names (from the keys topic), never
    the subject in clear."""

    session_id: str
    subject_hash: str


class TagRow(NamedTuple):
    """`session_tags`: a tag as recorded, and its `key=value` split (`key` the whole tag and
    `value` "" for a bare label)."""

    session_id: str
    tag: str
    key: str
    value: str


class ModelRow(NamedTuple):
    """`session_models`: every model a session named (its start, its turns)."""

    session_id: str
    model: str


class ChainRow(NamedTuple):
    """`chains`: one per (session, chain) where the chain is a stream name as written
    (`verdicts@v2` for judge version v2): where its records are and how it links."""

    session_id: str
    chain: str
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    first_ms: int
    last_ms: int
    events: int
    """Records counted (those that extended the chain)."""
    head_seq: int
    head_hash: str
    status: str
    """`ok`, or the first break the indexer saw: `gap`, `broken_link`, `bad_genesis`, or
    `tampered` (a record that does not hash to its hash, left uncounted)."""


class ChainBreakRow(NamedTuple):
    """`chain_breaks`: a break the worker's audit recorded (`chain_broken` on the verdicts
    stream) in a session's chain."""

    session_id: str
    chain: str
    reason: str


class EventTypeRow(NamedTuple):
    """`event_types`: records of a type on a chain (summed)."""

    session_id: str
    chain: str
    type: str
    records: int


class EventRow(NamedTuple):
    """`events`: where each counted record is, so a reader fetches exactly a session's
    records (a resume's head, an export of a few sessions)."""

    session_id: str
    chain: str
    seq: int
    type: str
    hash: str
    partition: int
    offset: int
    broker_ms: int


class RewardRow(NamedTuple):
    """`rewards`: a session's reward by name (latest seq wins)."""

    session_id: str
    name: str
    value: float
    seq: int


class VerdictRow(NamedTuple):
    """`verdicts`: a judge's verdict under a judge version (latest seq wins)."""

    session_id: str
    judge_version: str
    judge: str
    status: str
    seq: int
    judge_session_id: str | None


class ScoreRow(NamedTuple):
    """`verdict_scores`: each score of a verdict (replaced with its verdict)."""

    session_id: str
    judge_version: str
    judge: str
    name: str
    value: float
    seq: int


class FilterRow(NamedTuple):
    """`filter_outcomes`: the reward filter's decision under a judge version (latest seq
    wins)."""

    session_id: str
    judge_version: str
    accepted: bool
    status: str
    turns: int
    tool_calls: int
    reward: float | None
    filter_version: str
    seq: int
    reasons_sealed: bool
    """The reasons are sealed under the session's data key: their codes are not in the store."""


class FilterReasonRow(NamedTuple):
    """`filter_reasons`: the code of each reason against a session (replaced with its
    outcome)."""

    session_id: str
    judge_version: str
    code: str
    seq: int


class RuleFiringRow(NamedTuple):
    """`rule_firings`: a rule that fired on an epoch under a judge version."""

    session_id: str
    judge_version: str
    epoch: int
    rule: str


class DecisionRow(NamedTuple):
    """`decisions`: the harness's decisions."""

    session_id: str
    seq: int
    epoch: int
    event_type: str
    remedy_direction: str
    cites: str
    """The rules it cites, comma separated in the order given."""


class ToolCallRow(NamedTuple):
    """`tool_calls`: a call as the agent made it."""

    session_id: str
    call_id: str
    name: str
    seq: int


class ToolResultRow(NamedTuple):
    """`tool_calls`' result columns (latest seq wins)."""

    session_id: str
    call_id: str
    success: bool
    duration_ms: float | None
    result_seq: int


class WorldRow(NamedTuple):
    """`worlds`: a recorded world (the digest names its manifest on the blobs topic)."""

    session_id: str
    seq: int
    digest: str
    files: int
    stored_bytes: int


class BlobRow(NamedTuple):
    """`blobs`: where a chunk of a blob is on the blobs topic (latest offset wins: compaction
    keeps the last record of a key)."""

    sha256: str
    chunk: int
    chunk_sha256: str
    partition: int
    offset: int


class JudgeSessionRow(NamedTuple):
    """`judge_sessions`: a judge's own conversation about a session."""

    session_id: str
    judge_session_id: str


class CheckpointRow(NamedTuple):
    """`checkpoints`: the furthest seq of a chain that a signed checkpoint covers."""

    session_id: str
    chain: str
    seq: int
    log: str
    tree_size: int


class TextRow(NamedTuple):
    """`texts`: searchable text of a record (message, tool call, tool result) of a session
    whose content could be read."""

    session_id: str
    seq: int
    kind: str
    text: str


class ExtentRow(NamedTuple):
    """`extents`: where the records keyed by a session lie on a topic's partition (every record
    with that key, copies, tampered and unreadable ones too, so a reader of only these offsets
    gets what a scan of the whole partition gets for that key)."""

    session_id: str
    """The record key: the session id (a checkpoint log's id on the verdicts topic)."""
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    records: int


class PositionRow(NamedTuple):
    """`positions`: the tracking record of a partition (the next offset to index, written in
    the transaction of the rows it produced), with what its records were (summed)."""

    topic: str
    partition: int
    next_offset: int
    last_ms: int
    """Broker time of the last record indexed there."""
    records: int
    unreadable: int
    """Records that are not envelopes (the live audit dead-lettered them)."""
    tampered: int
    """Envelopes whose content does not hash to their hash."""


class ErasedRow(NamedTuple):
    """`erased`: a session whose data key was tombstoned or whose erasure was recorded: its
    text leaves the store."""

    session_id: str


@dataclass
class IndexChanges:
    """What one batch adds, by table, in the order the records came. A store applies all of
    it with the batch's positions in one transaction."""

    sessions: list[SessionRow] = field(default_factory=list)
    session_ends: list[SessionEndRow] = field(default_factory=list)
    subjects: list[SubjectRow] = field(default_factory=list)
    tags: list[TagRow] = field(default_factory=list)
    models: list[ModelRow] = field(default_factory=list)
    chains: list[ChainRow] = field(default_factory=list)
    chain_breaks: list[ChainBreakRow] = field(default_factory=list)
    event_types: list[EventTypeRow] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)
    rewards: list[RewardRow] = field(default_factory=list)
    verdicts: list[VerdictRow] = field(default_factory=list)
    scores: list[ScoreRow] = field(default_factory=list)
    filters: list[FilterRow] = field(default_factory=list)
    filter_reasons: list[FilterReasonRow] = field(default_factory=list)
    rule_firings: list[RuleFiringRow] = field(default_factory=list)
    decisions: list[DecisionRow] = field(default_factory=list)
    tool_calls: list[ToolCallRow] = field(default_factory=list)
    tool_results: list[ToolResultRow] = field(default_factory=list)
    worlds: list[WorldRow] = field(default_factory=list)
    blobs: list[BlobRow] = field(default_factory=list)
    judge_sessions: list[JudgeSessionRow] = field(default_factory=list)
    checkpoints: list[CheckpointRow] = field(default_factory=list)
    texts: list[TextRow] = field(default_factory=list)
    erased: list[ErasedRow] = field(default_factory=list)
    extents: list[ExtentRow] = field(default_factory=list)
    positions: list[PositionRow] = field(default_factory=list)

    def tables(self) -> Iterator[tuple[str, list[Any]]]:
        """(name, rows) of every table with rows, in a fixed order."""
        for f in fields(self):
            rows = getattr(self, f.name)
            if rows:
                yield f.name, rows

    def __len__(self) -> int:
        return sum(len(rows) for _, rows in self.tables())
