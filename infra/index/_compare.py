"""Two judge versions side by side across every session both judged: which filter outcomes
and which verdicts changed, counted, each change naming its session.

A replay re-judges history under a new version (`rolltape log replay --judge-version V`); this
is the question that follows: what did V change? Read from the read model alone (the verdicts,
their scores and the filter outcomes it keeps per judge version), on either store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from rolltape.schemas import LIVE_JUDGE_VERSION

if TYPE_CHECKING:
    from rolltape.infra.index._store import IndexStore


class VersionChange(BaseModel):
    """One thing two versions judged differently in one session."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    task: str | None
    what: Literal["outcome", "verdict", "score"]
    judge: str | None
    """The judge whose verdict changed (None for the filter's outcome)."""
    before: str
    after: str


class VersionComparison(BaseModel):
    """Version `a` against version `b`."""

    model_config = ConfigDict(frozen=True)

    a: str
    b: str
    judged_both: int
    """Sessions with a filter outcome under both versions."""
    only_a: int
    only_b: int
    accepted_to_rejected: int
    rejected_to_accepted: int
    verdicts_compared: int
    """(session, judge) pairs with a verdict under both versions."""
    verdicts_changed: int
    """Of those, the pairs whose status or any score differs."""
    changes: tuple[VersionChange, ...]
    """The changes themselves, by session id (at most the `limit` asked for)."""
    truncated: bool


def judge_versions(store: IndexStore) -> list[str]:
    """Every judge version with a verdict or a filter outcome in the store (live first)."""
    rows = store._fetch(
        store.conn.cursor(),
        "SELECT judge_version FROM filter_outcomes UNION SELECT judge_version FROM verdicts",
    )
    found = {str(v) for (v,) in rows}
    return sorted(found, key=lambda v: (v != LIVE_JUDGE_VERSION, v))


def compare_versions(store: IndexStore, a: str, b: str, *, limit: int = 500) -> VersionComparison:
    p = store.dialect.param
    cur = store.conn.cursor()

    def one(sql: str, params: list[object]) -> int:
        return int(store._fetch(cur, sql, params)[0][0])

    both = (
        "FROM filter_outcomes fa JOIN filter_outcomes fb ON fb.session_id = fa.session_id "
        f"AND fb.judge_version = {p} WHERE fa.judge_version = {p}"
    )
    judged_both = one(f"SELECT COUNT(*) {both}", [b, a])
    to_rejected = one(
        f"SELECT COUNT(*) {both} AND fa.accepted = {p} AND fb.accepted = {p}", [b, a, True, False]
    )
    to_accepted = one(
        f"SELECT COUNT(*) {both} AND fa.accepted = {p} AND fb.accepted = {p}", [b, a, False, True]
    )
    only = (
        f"SELECT COUNT(*) FROM filter_outcomes x WHERE x.judge_version = {p} AND NOT EXISTS "
        "(SELECT 1 FROM filter_outcomes y WHERE y.session_id = x.session_id "
        f"AND y.judge_version = {p})"
    )
    only_a = one(only, [a, b])
    only_b = one(only, [b, a])
    pairs = (
        "FROM verdicts va JOIN verdicts vb ON vb.session_id = va.session_id "
        f"AND vb.judge = va.judge AND vb.judge_version = {p} WHERE va.judge_version = {p}"
    )
    compared = one(f"SELECT COUNT(*) {pairs}", [b, a])
    changes: list[VersionChange] = []
    for sid, task, accepted_a, accepted_b in store._fetch(
        cur,
        "SELECT fa.session_id, s.task, fa.accepted, fb.accepted "
        "FROM filter_outcomes fa JOIN filter_outcomes fb ON fb.session_id = fa.session_id "
        f"AND fb.judge_version = {p} LEFT JOIN sessions s ON s.session_id = fa.session_id "
        f"WHERE fa.judge_version = {p} AND fa.accepted <> fb.accepted "
        f"ORDER BY fa.session_id LIMIT {int(limit) + 1}",
        [b, a],
    ):
        changes.append(
            VersionChange(
                session_id=sid,
                task=task,
                what="outcome",
                judge=None,
                before=_outcome(accepted_a),
                after=_outcome(accepted_b),
            )
        )
    changed_pairs: set[tuple[str, str]] = set()
    status_changed = (
        "FROM verdicts va JOIN verdicts vb ON vb.session_id = va.session_id "
        f"AND vb.judge = va.judge AND vb.judge_version = {p} "
        "LEFT JOIN sessions s ON s.session_id = va.session_id "
        f"WHERE va.judge_version = {p} AND va.status <> vb.status"
    )
    for sid, task, judge, status_a, status_b in store._fetch(
        cur,
        f"SELECT va.session_id, s.task, va.judge, va.status, vb.status {status_changed} "
        "ORDER BY va.session_id, va.judge",
        [b, a],
    ):
        changed_pairs.add((sid, judge))
        changes.append(
            VersionChange(
                session_id=sid,
                task=task,
                what="verdict",
                judge=judge,
                before=status_a,
                after=status_b,
            )
        )
    scores: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for version, sid, judge, name, value in store._fetch(
        cur,
        # The scores of each verdict as it stands (its latest seq), as `IndexStore.session` reads them.
        "SELECT vs.judge_version, vs.session_id, vs.judge, vs.name, vs.value FROM verdict_scores vs "
        "JOIN verdicts v ON v.session_id = vs.session_id AND v.judge_version = vs.judge_version "
        "AND v.judge = vs.judge AND v.seq = vs.seq "
        f"WHERE vs.judge_version IN ({p}, {p}) AND EXISTS (SELECT 1 FROM verdicts va JOIN verdicts vb "
        "ON vb.session_id = va.session_id AND vb.judge = va.judge "
        f"WHERE va.judge_version = {p} AND vb.judge_version = {p} "
        "AND va.session_id = vs.session_id AND va.judge = vs.judge)",
        [a, b, a, b],
    ):
        scores.setdefault((sid, judge), {}).setdefault(version, {})[name] = float(value)
    tasks: dict[str, str | None] = {}
    for (sid, judge), by_version in sorted(scores.items()):
        sa, sb = by_version.get(a, {}), by_version.get(b, {})
        if sa == sb:
            continue
        changed_pairs.add((sid, judge))
        if sid not in tasks:
            rows = store._fetch(cur, f"SELECT task FROM sessions WHERE session_id = {p}", [sid])
            tasks[sid] = rows[0][0] if rows else None
        changes.append(
            VersionChange(
                session_id=sid,
                task=tasks[sid],
                what="score",
                judge=judge,
                before=_scores(sa),
                after=_scores(sb),
            )
        )
    changes.sort(key=lambda c: (c.session_id, c.what != "outcome", c.judge or "", c.what))
    return VersionComparison(
        a=a,
        b=b,
        judged_both=judged_both,
        only_a=only_a,
        only_b=only_b,
        accepted_to_rejected=to_rejected,
        rejected_to_accepted=to_accepted,
        verdicts_compared=compared,
        verdicts_changed=len(changed_pairs),
        changes=tuple(changes[:limit]),
        truncated=len(changes) > limit,
    )


def _outcome(accepted: object) -> str:
    return "accepted" if accepted else "rejected"


def _scores(scores: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in sorted(scores.items())) or "no score"


__all__ = ["VersionChange", "VersionComparison", "compare_versions", "judge_versions"]
