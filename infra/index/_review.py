"""What the review queues and the judges' agreement with reviewers read from the read model.

Human verdicts are verdicts of the judge version `human` (one judge `human:<reviewer>` each,
its standing verdict the reviewer's latest: schemas._review), so a queue is a `SessionFilter`
(`reviewed=False` and what the queue is about) and agreement is a join of verdicts: each
judge's standing verdict, and the reward filter's outcome, against the reviewers' majority on
the sessions both judged. Reviewed sessions are few (people review them), so the counting is
done here over their rows, on either store.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from rolltape.infra.index._queries import SessionFilter
from rolltape.schemas import HUMAN_JUDGE_VERSION

if TYPE_CHECKING:
    from rolltape.infra.index._store import IndexStore

FILTER_JUDGE = "filter"
"""The name the reward filter's outcome goes by beside the judges (accepted is a pass)."""


class JudgeAgreement(BaseModel):
    """One judge (or the reward filter) against the reviewers, on the sessions both judged.
    A pass is an `ok` verdict (the filter's: accepted); the reviewers' answer is their
    majority (sessions they are split on are left out)."""

    model_config = ConfigDict(frozen=True)

    judge: str
    both_pass: int
    both_fail: int
    judge_pass_human_fail: int
    judge_fail_human_pass: int

    @property
    def sessions(self) -> int:
        return (
            self.both_pass
            + self.both_fail
            + self.judge_pass_human_fail
            + self.judge_fail_human_pass
        )

    @property
    def agreement(self) -> float | None:
        """The share of sessions where the judge and the reviewers agree."""
        return (self.both_pass + self.both_fail) / self.sessions if self.sessions else None

    @property
    def kappa(self) -> float | None:
        """Cohen's kappa: agreement beyond what the two pass rates give by chance (1 is full
        agreement, 0 chance, below 0 worse than chance); None where chance explains all."""
        n = self.sessions
        if not n:
            return None
        observed = (self.both_pass + self.both_fail) / n
        judge_pass = (self.both_pass + self.judge_pass_human_fail) / n
        human_pass = (self.both_pass + self.judge_fail_human_pass) / n
        chance = judge_pass * human_pass + (1 - judge_pass) * (1 - human_pass)
        if chance >= 1.0:
            return None
        return (observed - chance) / (1 - chance)


def human_majority(store: IndexStore) -> dict[str, bool]:
    """session -> whether most of its reviewers passed it (split sessions are left out)."""
    p = store.dialect.param
    rows = store._fetch(
        store.conn.cursor(),
        f"SELECT session_id, status FROM verdicts WHERE judge_version = {p}",
        [HUMAN_JUDGE_VERSION],
    )
    votes: dict[str, list[int]] = {}
    for sid, status in rows:
        tally = votes.setdefault(sid, [0, 0])
        tally[0 if status == "ok" else 1] += 1
    return {sid: passes > fails for sid, (passes, fails) in votes.items() if passes != fails}


def judge_agreement(store: IndexStore, judge_version: str) -> list[JudgeAgreement]:
    """Each judge of `judge_version`, and its reward filter, against the reviewers."""
    human = human_majority(store)
    if not human:
        return []
    p = store.dialect.param
    reviewed = f"SELECT session_id FROM verdicts WHERE judge_version = {p}"
    cur = store.conn.cursor()
    verdicts = store._fetch(
        cur,
        f"SELECT session_id, judge, status FROM verdicts WHERE judge_version = {p} "
        f"AND status IN ('ok', 'failed') AND session_id IN ({reviewed})",
        [judge_version, HUMAN_JUDGE_VERSION],
    )
    filters = store._fetch(
        cur,
        f"SELECT session_id, accepted FROM filter_outcomes WHERE judge_version = {p} "
        f"AND session_id IN ({reviewed})",
        [judge_version, HUMAN_JUDGE_VERSION],
    )
    counts: dict[str, list[int]] = {}

    def count(judge: str, sid: str, passed: bool) -> None:
        if sid not in human:
            return
        tally = counts.setdefault(judge, [0, 0, 0, 0])
        tally[(0 if passed else 2) + (0 if human[sid] else 1)] += 1

    for sid, judge, status in verdicts:
        count(str(judge), str(sid), status == "ok")
    for sid, accepted in filters:
        count(FILTER_JUDGE, str(sid), bool(accepted))
    return [
        JudgeAgreement(
            judge=judge,
            both_pass=t[0],
            judge_pass_human_fail=t[1],
            judge_fail_human_pass=t[2],
            both_fail=t[3],
        )
        for judge, t in sorted(counts.items())
    ]


def sampled_ids(store: IndexStore, where: SessionFilter, size: int, seed: str) -> list[str]:
    """A uniform sample of `size` of the matching sessions, the same for the same seed: the
    sessions whose sha256(seed/session id) is smallest (a reviewed session leaves the sample
    and the next one comes in; nothing else moves)."""
    sql, params = store._where(where)
    rows = store._fetch(
        store.conn.cursor(), f"SELECT s.session_id FROM sessions s WHERE {sql}", params
    )
    ranked = sorted(
        (hashlib.sha256(f"{seed}/{sid}".encode()).hexdigest(), str(sid)) for (sid,) in rows
    )
    return [sid for _, sid in ranked[:size]]
