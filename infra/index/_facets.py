"""Counts over the sessions a filter leaves, for the charts beside a list: how a reward is
distributed, the filter's outcomes by day, and how often each tool's calls fail.

Each is one aggregate query over the read model (on either store), bounded in what it returns
(bins, days, tools), whatever the number of sessions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from rolltape.infra.index._queries import SessionFilter

if TYPE_CHECKING:
    from rolltape.infra.index._store import IndexStore

DAY_MS = 86_400_000


class RewardBin(BaseModel):
    model_config = ConfigDict(frozen=True)

    low: float
    high: float
    sessions: int


class DayOutcomes(BaseModel):
    model_config = ConfigDict(frozen=True)

    day_ms: int
    """Midnight UTC of the day the sessions started, broker time."""
    accepted: int
    rejected: int
    unfiltered: int
    """Sessions with no filter outcome under the judge version (training runs, running ones)."""


class ToolFailures(BaseModel):
    model_config = ConfigDict(frozen=True)

    tool: str
    calls: int
    failed: int


def reward_bins(
    store: IndexStore, where: SessionFilter, name: str = "reward", bins: int = 10
) -> list[RewardBin]:
    """The reward `name` of the matching sessions in `bins` equal bins from its lowest value to
    its highest (one bin where every value is the same; none where no session has one)."""
    sql, params = store._where(where)
    p = store.dialect.param
    cur = store.conn.cursor()
    scoped = (
        f"FROM rewards r WHERE r.name = {p} AND r.session_id IN "
        f"(SELECT s.session_id FROM sessions s WHERE {sql})"
    )
    low, high, n = store._fetch(
        cur, f"SELECT MIN(r.value), MAX(r.value), COUNT(*) {scoped}", [name, *params]
    )[0]
    if not n:
        return []
    low, high = float(low), float(high)
    if high == low:
        return [RewardBin(low=low, high=high, sessions=int(n))]
    width = (high - low) / bins
    counts = [0] * bins
    offset = f"(r.value - {p}) / {p}"  # >= 0: SQLite's CAST truncates, which is the floor
    index = f"CAST({offset} AS INTEGER)" if store.dialect.name == "sqlite" else f"FLOOR({offset})"
    rows = store._fetch(
        cur,
        f"SELECT {index} AS b, COUNT(*) {scoped} GROUP BY b",
        [low, width, name, *params],
    )
    for b, count in rows:
        counts[min(int(b), bins - 1)] += int(count)
    return [
        RewardBin(low=low + i * width, high=low + (i + 1) * width, sessions=c)
        for i, c in enumerate(counts)
    ]


def outcomes_by_day(store: IndexStore, where: SessionFilter, days: int = 30) -> list[DayOutcomes]:
    """The filter's outcomes (under `where.judge_version`) of the matching sessions by the day
    they started, the last `days` days that have any."""
    sql, params = store._where(where)
    p = store.dialect.param
    rows = store._fetch(
        store.conn.cursor(),
        f"SELECT s.started_ms / {DAY_MS} AS d, "
        "SUM(CASE WHEN fo.accepted THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN fo.accepted IS NOT NULL AND NOT fo.accepted THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN fo.accepted IS NULL THEN 1 ELSE 0 END) "
        "FROM sessions s LEFT JOIN filter_outcomes fo ON fo.session_id = s.session_id "
        f"AND fo.judge_version = {p} WHERE s.started_ms IS NOT NULL AND {sql} "
        f"GROUP BY d ORDER BY d DESC LIMIT {int(days)}",
        [where.judge_version, *params],
    )
    return [
        DayOutcomes(day_ms=int(d) * DAY_MS, accepted=int(a), rejected=int(r), unfiltered=int(u))
        for d, a, r, u in reversed(rows)
    ]


def tool_failures(store: IndexStore, where: SessionFilter, tools: int = 12) -> list[ToolFailures]:
    """The `tools` most called tools in the matching sessions: calls, and calls that failed."""
    sql, params = store._where(where)
    rows = store._fetch(
        store.conn.cursor(),
        "SELECT tc.name, COUNT(*), SUM(CASE WHEN tc.success = FALSE THEN 1 ELSE 0 END) "
        "FROM tool_calls tc WHERE tc.name IS NOT NULL AND tc.session_id IN "
        f"(SELECT s.session_id FROM sessions s WHERE {sql}) "
        f"GROUP BY tc.name ORDER BY COUNT(*) DESC, tc.name LIMIT {int(tools)}",
        params,
    )
    return [ToolFailures(tool=str(t), calls=int(c), failed=int(f or 0)) for t, c, f in rows]


__all__ = [
    "DayOutcomes",
    "RewardBin",
    "ToolFailures",
    "outcomes_by_day",
    "reward_bins",
    "tool_failures",
]
