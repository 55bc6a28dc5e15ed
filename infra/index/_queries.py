"""The read model's query API: what a caller may ask (`SessionFilter`) and what it gets back
(`SessionSummary`, `SessionDetail`, `Page`, `SearchHit`, `SqlResult`), pydantic at the boundary.

Times are broker times in milliseconds since the epoch (the log's `LogAppendTime`), as the
store holds them; the CLI renders them. A page is ordered newest start first, then by session
id, and `Page.cursor` continues it exactly where it stopped, however many sessions arrive
meanwhile.
"""

from __future__ import annotations

import base64
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict

from rolltape.infra._errors import ReadModelError
from rolltape.schemas import LIVE_JUDGE_VERSION


class QueryError(ReadModelError, ValueError):
    """A query the read model cannot answer as asked (a bad cursor, a write in `sql`, a
    query past its time limit): the message says what to change."""


class SessionFilter(BaseModel):
    """Which sessions: every field given must hold (AND). Fields about verdicts, filters and
    rules read the judge version `judge_version` (the live one unless given)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_ids: tuple[str, ...] = ()
    """Only these sessions."""
    id_prefix: str | None = None
    kind: Literal["agent", "training"] | None = None
    group_id: str | None = None
    """The samples of one group (one prompt sampled several times: what GRPO ranks and a
    reviewer's preference compares)."""
    task: str | None = None
    """The task exactly as recorded (a sealed task is not in the store)."""
    tags: tuple[str, ...] = ()
    """Each `key=value` (that tag) or `key` (a bare label, or any value of that key)."""
    model: str | None = None
    status: Literal["completed", "interrupted", "failed", "running"] | None = None
    """`running`: no `session_ended` indexed yet."""
    trainable: bool | None = None
    since_ms: int | None = None
    """Started at or after (broker time)."""
    until_ms: int | None = None
    """Started before (broker time)."""
    subject_hash: str | None = None
    chain: Literal["ok", "broken"] | None = None
    judge_version: str = LIVE_JUDGE_VERSION
    accepted: bool | None = None
    """The reward filter's outcome under `judge_version` (sessions without one never match)."""
    filtered: bool | None = None
    """The reward filter has decided it under the judge version (true) or not yet (false: a
    session that runs, or one a filter with `require_review` holds for a reviewer)."""
    reason: str | None = None
    """A filter reason's code under `judge_version`."""
    judge: str | None = None
    verdict_status: Literal["ok", "failed", "error"] | None = None
    """The status of `judge`'s verdict (any judge's when `judge` is not given)."""
    score: str | None = None
    """A verdict score's name (of `judge`, or of any judge) under `judge_version`; with
    `score_min`/`score_max` its bounds."""
    score_min: float | None = None
    score_max: float | None = None
    reward: str | None = None
    """A reward's name; with `reward_min`/`reward_max` its bounds."""
    reward_min: float | None = None
    reward_max: float | None = None
    tool: str | None = None
    """A tool the session called."""
    tool_failed: bool | None = None
    """With `tool` (or alone: any tool): a call of it failed (true) or none did (false)."""
    rule: str | None = None
    """A rule that fired under `judge_version` (R1...R7)."""
    world: str | None = None
    """A world digest the session recorded."""
    erased: bool | None = None
    """The session's subject was erased (true) or it was not (false)."""
    reviewed: bool | None = None
    """A reviewer recorded a human verdict on the session (true) or none did (false)."""
    disagreeing: bool | None = None
    """Under `judge_version`, one judge's verdict is ok and another's failed (true)."""


class Page(BaseModel):
    model_config = ConfigDict(frozen=True)

    sessions: tuple[SessionSummary, ...]
    cursor: str | None
    """Pass it back to get the next page; None on the last one."""


class SessionSummary(BaseModel):
    """One session, as a list shows it."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    kind: str | None
    task: str | None
    model: str | None
    trainable: bool | None
    status: str
    """completed, interrupted, failed, or running (no end indexed)."""
    started_ms: int | None
    ended_ms: int | None
    tags: tuple[str, ...]
    models: tuple[str, ...]
    subject_hash: str | None
    events: int
    """Records counted on the session's events chain."""
    chain: str
    """`ok`, or the first break of any of its chains (`events: gap`, `verdicts: audit:fork`)."""
    accepted: bool | None
    """The reward filter's outcome under the filter's judge version (None: none indexed)."""
    rewards: dict[str, float]
    erased: bool = False
    """The session's subject was erased: its content is gone for every reader."""


class ChainInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    chain: str
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    first_ms: int
    last_ms: int
    events: int
    head_seq: int
    head_hash: str
    status: str
    audit_breaks: tuple[str, ...]
    checkpoint: CheckpointInfo | None
    types: dict[str, int]


class CheckpointInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    seq: int
    """The furthest seq of the chain a signed checkpoint covers."""
    log: str
    tree_size: int


class VerdictInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    judge_version: str
    judge: str
    status: str
    scores: dict[str, float]
    judge_session_id: str | None


class FilterInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    judge_version: str
    accepted: bool
    status: str
    turns: int
    tool_calls: int
    reward: float | None
    filter_version: str
    reasons: tuple[str, ...]
    reasons_sealed: bool


class RuleFiring(BaseModel):
    model_config = ConfigDict(frozen=True)

    judge_version: str
    epoch: int
    rule: str


class DecisionInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    seq: int
    epoch: int
    event_type: str
    remedy_direction: str
    cites: tuple[str, ...]


class ToolCallInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    call_id: str
    name: str | None
    seq: int | None
    success: bool | None
    """None: no result indexed."""
    duration_ms: float | None


class WorldInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    seq: int
    digest: str
    files: int
    stored_bytes: int
    blobs_indexed: bool
    """The world's manifest has a position on the blobs topic in the store."""


class SessionDetail(SessionSummary):
    """One session, whole: everything the store holds of it."""

    linked_session_id: str | None
    group_id: str | None
    chains: tuple[ChainInfo, ...]
    verdicts: tuple[VerdictInfo, ...]
    filters: tuple[FilterInfo, ...]
    rule_firings: tuple[RuleFiring, ...]
    decisions: tuple[DecisionInfo, ...]
    tool_calls: tuple[ToolCallInfo, ...]
    worlds: tuple[WorldInfo, ...]
    judge_sessions: tuple[str, ...]
    """Sessions of judges' own conversations about this one."""


class SearchHit(BaseModel):
    model_config = ConfigDict(frozen=True)

    session_id: str
    seq: int
    kind: str
    """`task`, a turn's role, `tool_call` or `tool_result`."""
    snippet: str
    """Plain text around the match (never markup)."""


class SqlResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    columns: tuple[str, ...]
    rows: tuple[tuple[object, ...], ...]
    truncated: bool
    """More rows matched than `max_rows`."""


class PositionInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    topic: str
    partition: int
    next_offset: int
    last_ms: int
    records: int
    unreadable: int
    tampered: int


class StoreInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    store: str
    """`sqlite:<path>` or `postgresql://host/db` (no password)."""
    schema_version: int
    prefix: str | None
    sessions: int
    positions: tuple[PositionInfo, ...]


Sort = Literal["newest", "oldest", "reward_high", "reward_low"]
"""A list's order: by start (newest or oldest first), or by a reward (highest or lowest first;
sessions without it last). Ties go by session id, so the order is total and a cursor exact."""
SORTS: tuple[str, ...] = ("newest", "oldest", "reward_high", "reward_low")


def encode_cursor(sort: str, key: float, session_id: str) -> str:
    """Where a page stopped: its order, the last session's sort key and its id."""
    raw = json.dumps([sort, key, session_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, sort: str = "newest") -> tuple[float, str]:
    """(sort key, session id) of a cursor `encode_cursor` gave for a list in order `sort`."""
    bad = QueryError(
        f"cursor {cursor!r} is not one a page of sessions in this order gave: pass the "
        "`cursor` of the previous page as it was, or none for the first page"
    )
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        given, key, session_id = json.loads(base64.urlsafe_b64decode(padded).decode())
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        raise bad from exc
    if given != sort or not isinstance(session_id, str) or isinstance(key, bool):
        raise bad
    if not isinstance(key, int | float):
        raise bad
    return key, session_id


Page.model_rebuild()
ChainInfo.model_rebuild()

__all__ = [
    "SORTS",
    "ChainInfo",
    "CheckpointInfo",
    "DecisionInfo",
    "FilterInfo",
    "Page",
    "PositionInfo",
    "QueryError",
    "RuleFiring",
    "SearchHit",
    "SessionDetail",
    "SessionFilter",
    "SessionSummary",
    "Sort",
    "SqlResult",
    "StoreInfo",
    "ToolCallInfo",
    "VerdictInfo",
    "WorldInfo",
    "decode_cursor",
    "encode_cursor",
]
