"""`rolltape serve env`: an environment as an Atropos rollout server, through the log.

It registers with the Atropos API server (`/register-env`, waiting while the trainer has not
started), then does two things at once:

- rollouts: takes the environment's next item and runs `group_size` rollouts of it concurrently,
  each a session sharing the group's `group_id` (`serve.<run>.<item>.<n>`), recorded with its
  reward like any rollout;
- delivery: the live feed (`TrajectoryFeed`) hands over the run's sessions once the worker's
  filters and judges decided them (accepted or not: a group needs all its members; the filter
  outcome stays in the log), and the Atropos sink posts each full group as a ScoredDataGroup;
  a session is acknowledged to the feed only once its group reached the server (or was
  skipped, e.g. equal scores), so a restart resends what the trainer never got.

Nothing is sent to the trainer that is not in the log and judged: what it trains on can be traced
back to sessions, verdicts and filter outcomes like any export.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable

from pydantic import BaseModel

from rolltape.infra import open_recorder
from rolltape.infra.broker import require_connection
from rolltape.infra.judging import open_judge_runtime
from rolltape.infra.settings import Settings
from rolltape.producers.environments import Environment, run_rollout
from rolltape.projections import AtroposSink, Selection, TrajectoryFeed
from rolltape.projections.exporters import ChatTokenizer
from rolltape.schemas import PromptVersion, Role
from rolltape.schemas.clients import ModelEndpoint


class ServeOptions(BaseModel):
    """How `env serve` runs. `run` names the sessions (`serve.<run>.…`) and the feed's consumer
    group, so serving the same run again resends only what the trainer never got."""

    url: str
    run: str
    group_size: int
    groups: int | None = None
    """Stop after this many groups were delivered or skipped (None: until stopped)."""
    score: str = "reward"
    keep_equal_scores: bool = False
    max_token_length: int = 4096
    prompt: PromptVersion | None = None
    """The agent's system prompt version (None: the environment's own)."""


class ServeStats(BaseModel):
    """What `env serve` did before it stopped. `sessions_settled` counts sessions acknowledged
    to the feed (their group sent or skipped); `skipped` counts sessions by the sink's reason."""

    groups_run: int = 0
    rollouts: int = 0
    sessions_settled: int = 0
    sent_groups: int = 0
    skipped: dict[str, int] = {}


async def register_env(
    url: str,
    env: Environment,
    options: ServeOptions,
    stop: asyncio.Event,
    say: Callable[[str], None],
) -> int | None:
    """The env id the Atropos server gave; None when stopped while waiting for the trainer."""
    import httpx  # the `atropos` extra

    body = {
        "max_token_length": options.max_token_length,
        "desired_name": env.name,
        "weight": 1.0,
        "group_size": options.group_size,
    }
    waiting = False
    async with httpx.AsyncClient(base_url=url.rstrip("/"), timeout=10) as client:
        while not stop.is_set():
            response = await client.post("/register-env", json=body)
            response.raise_for_status()
            answer = response.json()
            if answer.get("status") == "success":
                return int(answer["env_id"])
            if not waiting:
                say(f"{url}: {answer.get('status', answer)}; waiting for the trainer")
                waiting = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    return None


async def serve_env(
    settings: Settings,
    env: Environment,
    *,
    endpoint: ModelEndpoint,
    options: ServeOptions,
    tokenizer: ChatTokenizer | None,
    stop: asyncio.Event,
    say: Callable[[str], None],
) -> ServeStats:
    """Register with the Atropos server, then run groups and deliver the judged ones until
    `stop` is set or `options.groups` groups are settled (sent or skipped). Returns empty stats
    when stopped while waiting for the trainer; `say` gets progress lines meant for the user."""
    stats = ServeStats()
    env_id = await register_env(options.url, env, options, stop, say)
    if env_id is None:
        return stats
    say(f"registered with {options.url} as env {env_id}; serving groups of {options.group_size}")
    done = asyncio.Event()
    produced_enough = asyncio.Event()
    recorder = open_recorder(
        settings, spool_dir=settings.resolved_spool_dir() / "serve" / options.run
    )
    client = endpoint.async_client()
    judges = open_judge_runtime(settings, recorder=recorder, policy=endpoint)

    async def rollouts() -> None:
        for n in itertools.count():
            if stop.is_set() or done.is_set():
                return
            if options.groups is not None and n >= options.groups:
                produced_enough.set()
                return
            item = await env.get_next_item()
            group = f"serve.{options.run}.{item.item_id}.{n}"
            await asyncio.gather(
                *(
                    run_rollout(
                        env,
                        item,
                        recorder=recorder,
                        client=client,
                        model=endpoint.model,
                        family=endpoint.family,
                        model_version=endpoint.version,
                        session_id=f"{group}.{k}",
                        sample=k,
                        group_id=group,
                        tags=["serve", f"serve={options.run}"],
                        world_limits=settings.world_limits,
                        judges=judges,
                        prompt=options.prompt,
                    )
                    for k in range(options.group_size)
                )
            )
            await recorder.aflush(120)
            stats.groups_run += 1
            stats.rollouts += options.group_size

    async def delivery() -> None:
        sink = AtroposSink(
            options.url,
            group_size=options.group_size,
            tokenizer=tokenizer,
            score=options.score,
            keep_equal_scores=options.keep_equal_scores,
        )
        # Every decided session of the run, accepted or not: an Atropos group needs all its
        # members (the filter outcome stays in the log, beside what was sent).
        selection = Selection(sessions=(f"serve.{options.run}.*",))
        wanted = None if options.groups is None else options.groups * options.group_size
        feed_stop = asyncio.Event()

        async def watch() -> None:
            await stop.wait()
            feed_stop.set()

        watcher = asyncio.create_task(watch())
        try:
            async with TrajectoryFeed(
                require_connection(settings, Role.READER),
                group_id=f"{settings.topic_prefix}-serve-{options.run}",
                prefix=settings.topic_prefix,
                selection=selection,
                auto_ack=False,
            ) as feed:
                async for item in feed.until(feed_stop):
                    for settled in await sink.add(item.trajectory):
                        feed.ack(settled)
                        stats.sessions_settled += 1
                    stats.sent_groups = sink.sent_groups
                    if wanted is not None and stats.sessions_settled >= wanted:
                        done.set()
                        feed_stop.set()
                for settled in await sink.close():
                    feed.ack(settled)
                    stats.sessions_settled += 1
        finally:
            watcher.cancel()
        stats.sent_groups = sink.sent_groups
        stats.skipped = dict(sink.skipped)

    try:
        await asyncio.gather(rollouts(), delivery())
    finally:
        await client.close()
        await judges.aclose()
        await recorder.aclose()
    return stats
