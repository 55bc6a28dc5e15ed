"""A sink that pushes judged trajectories to an Atropos API server as ScoredDataGroups.

    sink = AtroposSink("http://trainer:8000", group_size=8, tokenizer=tok)
    async for item in feed:
        await sink.add(item.trajectory)
    await sink.close()

Trajectories are grouped by `group_id` (a session without one is its own group); a group is sent
when `group_size` of its sessions have arrived, through `atropos_groups` (the same code as the
file export: token ids recorded at generation time, else the tokenizer; groups whose scores are
all equal are dropped as Atropos does). Groups go to `POST /scored_data_list`, `batch_groups`
at a time; a failed POST is retried with backoff, then raised (nothing is dropped silently: the
groups stay queued for the next `flush`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from rolltape.projections._trajectory import Trajectory
from rolltape.projections.exporters import ChatTokenizer, atropos_groups


class AtroposSinkError(RuntimeError):
    """The Atropos server did not take the groups (the message has its answer)."""


class AtroposSink:
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
        self.sent_groups = 0
        self.skipped: Counter[str] = Counter()
        """Sessions left out of groups, by reason (no_score, equal_scores, needs_tokenizer...)."""

    async def add(self, trajectory: Trajectory) -> int:
        """Take one trajectory; returns how many groups were sent because of it."""
        key = trajectory.group_id or trajectory.session_id
        members = self._waiting.setdefault(key, [])
        if any(m.trajectory_id == trajectory.trajectory_id for m in members):
            return 0  # the feed delivered it again
        members.append(trajectory)
        if len(members) < self.group_size:
            return 0
        del self._waiting[key]
        export = atropos_groups(
            members, self.tokenizer, score=self.score, keep_equal_scores=self.keep_equal_scores
        )
        for _, reason, _ in export.skipped:
            self.skipped[reason] += 1
        self._queued.extend(line for _, _, line in export.groups)
        if len(self._queued) >= self.batch_groups:
            return await self.flush()
        return 0

    async def flush(self) -> int:
        """Send every queued group; returns how many were sent."""
        if not self._queued:
            return 0
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
                    return len(body)
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

    async def close(self) -> None:
        try:
            await self.flush()
        finally:
            await self._client.aclose()
