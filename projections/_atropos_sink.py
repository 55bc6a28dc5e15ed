"""A sink that pushes judged trajectories to an Atropos API server as ScoredDataGroups.

    sink = AtroposSink("http://trainer:8000", group_size=8, tokenizer=tok)
    async with TrajectoryFeed(..., auto_ack=False) as feed:
        async for item in feed:
            for settled in await sink.add(item.trajectory):
                feed.ack(settled)              # committed only once its group was sent
    await sink.close()

Trajectories are grouped by `group_id`; a group is sent when `group_size` of its sessions have
arrived. A session without a `group_id` is a group of one: sent when `group_size` is 1, otherwise
settled at once as skipped (`no_group`), since no group of it can ever fill and waiting would hold
its partition's commits back for good. Groups are built by `atropos_groups` (the same code as the
file export: token ids recorded at generation time, else the tokenizer; groups whose scores are all
equal are dropped as Atropos does). Groups go to `POST /scored_data_list`, `batch_groups` at a time;
a failed POST is retried with backoff, then raised (nothing is dropped silently: the groups stay
queued for the next `flush`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from rolltape.projections._errors import ProjectionError
from rolltape.projections._trajectory import Trajectory
from rolltape.projections.exporters import ChatTokenizer, atropos_groups


class AtroposSinkError(ProjectionError, RuntimeError):
    """The Atropos server did not take the groups (the message has its answer)."""


class AtroposSink:
    """Collects judged trajectories into groups of `group_size` and posts each full group to an
    Atropos API server. A trajectory is returned as settled only once its group was accepted or
    it was left out, so a feed that acknowledges what `add` returns never commits a session the
    trainer did not get."""

    def __init__(
        self,
        url: str,
        *,
        group_size: int,
        tokenizer: ChatTokenizer | None = None,
        score: str = "reward",
        keep_equal_scores: bool = False,
        batch_groups: int = 1,
        retries: int = 3,
        timeout_s: float = 30.0,
    ) -> None:
        import httpx  # the `atropos` extra

        if group_size < 1 or batch_groups < 1:
            raise ValueError("group_size and batch_groups must be at least 1")
        self._client = httpx.AsyncClient(base_url=url.rstrip("/"), timeout=timeout_s)
        self.group_size = group_size
        self.tokenizer = tokenizer
        self.score = score
        self.keep_equal_scores = keep_equal_scores
        self.batch_groups = batch_groups
        self.retries = retries
        self._waiting: dict[str, list[Trajectory]] = {}
        self._queued: list[dict[str, Any]] = []
        self._queued_members: list[Trajectory] = []
        """Trajectories whose groups are queued or were left out, not yet settled."""
        self.sent_groups = 0
        self.skipped: Counter[str] = Counter()
        """Sessions left out of groups, by reason (no_score, equal_scores, needs_tokenizer...)."""

    async def add(self, trajectory: Trajectory) -> list[Trajectory]:
        """Take one trajectory; returns the trajectories settled because of it (their group was
        sent, or they were left out), which a feed may now acknowledge. The rest wait."""
        if trajectory.group_id is None and self.group_size > 1:
            self.skipped["no_group"] += 1
            return [trajectory]
        key = trajectory.group_id or trajectory.session_id
        members = self._waiting.setdefault(key, [])
        if any(m.trajectory_id == trajectory.trajectory_id for m in members):
            return []  # the feed delivered it again
        members.append(trajectory)
        if len(members) < self.group_size:
            return []
        del self._waiting[key]
        export = atropos_groups(
            members, self.tokenizer, score=self.score, keep_equal_scores=self.keep_equal_scores
        )
        for _, reason, _ in export.skipped:
            self.skipped[reason] += 1
        self._queued.extend(line for _, _, line in export.groups)
        self._queued_members.extend(members)
        if len(self._queued) >= self.batch_groups or not self._queued:
            return await self.flush()
        return []

    async def flush(self) -> list[Trajectory]:
        """Send every queued group; returns the trajectories settled."""
        if not self._queued:
            settled, self._queued_members = self._queued_members, []
            return settled
        body = list(self._queued)
        delay = 0.5
        for attempt in range(self.retries + 1):
            try:
                response = await self._client.post("/scored_data_list", json=body)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 300:
                    self._queued.clear()
                    self.sent_groups += len(body)
                    settled, self._queued_members = self._queued_members, []
                    return settled
                error = f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code < 500:
                    break  # the server refused the groups: retrying will not change that
            if attempt < self.retries:
                await asyncio.sleep(delay)
                delay *= 2
        raise AtroposSinkError(f"the Atropos server did not take {len(body)} group(s): {error}")

    @property
    def waiting(self) -> dict[str, int]:
        """Groups still short of `group_size`: group key -> sessions arrived."""
        return {key: len(members) for key, members in self._waiting.items()}

    async def close(self) -> list[Trajectory]:
        """Send what is queued (groups still short of `group_size` stay unsent) and close."""
        try:
            return await self.flush()
        finally:
            await self._client.aclose()
