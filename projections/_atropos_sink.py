"""A sink that pushes judged trajectories to an Atropos API server as ScoredDataGroups.

    sink = AtroposSink("http://trainer:8000", group_size=8, tokenizer=tok)
    await sink.register(stop)                  # as Atropos's environments do: waits for a trainer
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

The Atropos API server keeps nothing for a trainer that has not registered: groups posted
before its `/register` sit in a queue the trainer's registration then never initialises
(`atroposlib/api/server.py`: `register` sets up its state only `if not hasattr(app.state,
"queue")`). So the sink registers as Atropos's own environments do (`POST /register-env`, asked
again while the server answers "wait for trainer to start") and posts its groups under the
environment id it got; before each post it checks that a trainer is still registered
(`GET /info`: a restarted server has none) and waits for one again. A group counts as delivered
only once the server took it for a registered trainer.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
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
        env_name: str = "rolltape",
        max_token_length: int = 8192,
        weight: float = 1.0,
        wait_every_s: float = 2.0,
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
        self.buffered_groups = 0
        """Of those, the ones the server buffered instead of queueing for the trainer: groups
        shorter than `group_size` (members left out), which it holds until buffered groups add
        up to `group_size` sequences (`atroposlib/api/server.py`, `_process_scored_data`)."""
        self.skipped: Counter[str] = Counter()
        """Sessions left out of groups, by reason (no_score, equal_scores, needs_tokenizer...)."""
        self.env_name = env_name
        self.max_token_length = max_token_length
        self.weight = weight
        self.wait_every_s = wait_every_s
        self.env_id: int | None = None
        """The environment id the server gave at registration (None: not registered)."""
        self._stop: asyncio.Event | None = None
        self.on_wait: Callable[[str], None] = lambda message: None
        """Told, once per wait, why the sink waits for the server (no trainer registered)."""

    # -- registration ----------------------------------------------------------------------------
    async def register(self, stop: asyncio.Event | None = None) -> bool:
        """Register as an environment, asking again while no trainer has started; False when
        `stop` was set first. Without `stop` it asks once: AtroposSinkError when no trainer has
        started (nothing is sent; the groups stay queued). Raises AtroposSinkError when the
        server refuses the request."""
        self._stop = stop
        told = False
        while True:
            response = await self._request(
                "POST",
                "/register-env",
                json={
                    "max_token_length": self.max_token_length,
                    "desired_name": self.env_name,
                    "weight": self.weight,
                    "group_size": self.group_size,
                },
            )
            answer = response.json()
            if answer.get("status") == "success":
                self.env_id = int(answer["env_id"])
                return True
            if stop is None:
                raise AtroposSinkError(
                    f"the Atropos server at {self._client.base_url} has no trainer yet "
                    f"({answer.get('status')!r}): nothing was sent; the groups stay queued"
                )
            if not told:
                told = True
                self.on_wait(
                    f"waiting for a trainer: the Atropos server says {answer.get('status')!r} "
                    "(a trainer registers with /register and asks for its first /batch)"
                )
            if await self._stopped_within(self.wait_every_s):
                return False

    async def _registered(self) -> bool:
        """Whether a trainer is still registered; registers again when it is not (a restarted
        server). False when told to stop while waiting."""
        info = (await self._request("GET", "/info")).json()
        if self.env_id is not None and int(info.get("batch_size", -1)) >= 0:
            return True
        self.env_id = None
        self.on_wait("the Atropos server has no trainer registered any more (restarted?)")
        return await self.register(self._stop)

    async def _stopped_within(self, seconds: float) -> bool:
        if self._stop is None:
            await asyncio.sleep(seconds)
            return False
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self._client.request(method, path, **kwargs)
        except Exception as exc:
            raise AtroposSinkError(
                f"the Atropos server at {self._client.base_url} did not answer {method} {path}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if response.status_code >= 300:
            raise AtroposSinkError(
                f"the Atropos server answered {method} {path} with HTTP {response.status_code}: "
                f"{response.text[:300]}"
            )
        return response

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
        if not await self._registered():  # told to stop while waiting: nothing sent
            return []
        body = [{**group, "env_id": self.env_id} for group in self._queued]
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
                    self.buffered_groups += _buffered(response)
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


def _buffered(response: Any) -> int:
    """How many posted groups the server says it buffered (0 when it does not say)."""
    try:
        answer = response.json()
    except ValueError:
        return 0
    count = answer.get("buffered", 0) if isinstance(answer, dict) else 0
    return count if isinstance(count, int) and count > 0 else 0
