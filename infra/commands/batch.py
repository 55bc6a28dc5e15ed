"""`rolltape env run`: a batch of rollouts that resumes from the log and reports what the
judges made of it.

Before planning, the batch's recorder delivers whatever a killed earlier run left in its spool
folder, so the log holds every rollout that finished; then the log says which slots are done.
Each finished rollout is flushed (on the broker, or fsynced to the spool) before it counts, so
killing the process loses no finished rollout. The summary folds the batch's sessions from the
log: per-tool statistics and the reward filter's outcomes (which need a worker).

The batch's sessions are found by its tag (`batch=RUN`, on sessions named `batch.RUN.*`): the
read model says where their records lie, so only those are read; without one, or with one
behind the log, the whole log is, and `say` is told so once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rolltape.infra import open_recorder
from rolltape.infra.broker import require_connection
from rolltape.infra.commands.export import Collected, collect_narrowed, run_export
from rolltape.infra.judging import open_judge_runtime
from rolltape.infra.settings import Settings
from rolltape.producers.environments import Environment, Rollout, run_rollout
from rolltape.producers.environments._batch import Slot, plan, run_slots, slot_states
from rolltape.projections import ExportOptions, Manifest, Narrowing, Trajectory, fold
from rolltape.projections.exporters import ChatTokenizer
from rolltape.schemas import LIVE_JUDGE_VERSION, PromptVersion, Role, TypedEvent
from rolltape.schemas.clients import ModelEndpoint


class ToolLine(BaseModel):
    """One tool's calls, summed over the batch's completed sessions in the log."""

    count: int = 0
    success: int = 0
    failure: int = 0


class BatchSummary(BaseModel):
    """What a batch run did and what the judges made of it. `completed`/`failed` count only the
    rollouts this run executed; the reward, tool and filter figures fold every completed session
    of the batch in the log, earlier runs included."""

    run: str
    environment: str
    planned: int
    finished_before: int
    ran: int
    completed: int
    failed: int
    mean_reward: float | None
    tools: dict[str, ToolLine]
    accepted: int
    rejected: int
    undecided: int
    reasons: dict[str, int]


async def run_batch(
    settings: Settings,
    env: Environment,
    *,
    run: str,
    count: int,
    endpoint: ModelEndpoint,
    concurrency: int,
    wait_judged_s: float = 0.0,
    on_plan: Callable[[int, int], None] | None = None,
    on_rollout: Callable[[Rollout], None] | None = None,
    workdir_root: Path | None = None,
    prompt: PromptVersion | None = None,
    say: Callable[[str], None] | None = None,
) -> BatchSummary:
    """Run the slots of batch `run` that the log does not show finished, then summarise it.

    A killed earlier run's spool is delivered first, so planning sees every finished rollout;
    `on_rollout` fires only once a rollout is flushed, so a kill after it loses nothing. Waits
    up to `wait_judged_s` for the worker's filter outcomes. Raises `BrokerUnavailable` without a
    broker and `EnvError` for a bad batch name or an environment without train items."""
    require_connection(settings, Role.READER)
    say = _once(say)
    recorder = open_recorder(settings, spool_dir=settings.resolved_spool_dir() / "batch" / run)
    try:
        await recorder.adelivered(120)
        with await collect_narrowed(
            settings, LIVE_JUDGE_VERSION, batch_narrowing(run), keys=False, say=say
        ) as before:
            states = slot_states(run, _batch_events(before, run))
        todo, finished = plan(env, run, count, states)
        if on_plan is not None:
            on_plan(len(todo), finished)

        client = endpoint.async_client()
        judges = open_judge_runtime(settings, recorder=recorder, policy=endpoint)

        async def rollout(slot: Slot) -> Rollout:
            return await run_rollout(
                env,
                slot.item,
                recorder=recorder,
                client=client,
                model=endpoint.model,
                family=endpoint.family,
                model_version=endpoint.version,
                session_id=slot.session_id(run),
                sample=slot.sample,
                tags=["batch", f"batch={run}"],
                workdir_root=workdir_root,
                world_limits=settings.world_limits,
                judges=judges,
                prompt=prompt,
            )

        async def flushed(done: Rollout) -> None:
            await recorder.aflush(120)  # on the broker or fsynced: a kill cannot lose it now
            if on_rollout is not None:
                on_rollout(done)

        try:
            rollouts = await run_slots(todo, rollout, concurrency=concurrency, on_rollout=flushed)
        finally:
            await client.close()
            await judges.aclose()
        await recorder.adelivered(120)
    finally:
        await recorder.aclose()
    trajectories = await _judged(settings, run, count, wait_judged_s, say)
    return _summary(env, run, count, finished, rollouts, trajectories)


def batch_narrowing(run: str) -> Narrowing:
    """The sessions of batch `run`: named `batch.RUN.*` and tagged `batch=RUN`."""
    return Narrowing(sessions=(f"batch.{run}.*",), tags=(f"batch={run}",))


def _once(say: Callable[[str], None] | None) -> Callable[[str], None] | None:
    """`say`, silent after its first line (a batch reads the log several times)."""
    if say is None:
        return None
    said: list[str] = []

    def first(line: str) -> None:
        if not said:
            said.append(line)
            say(line)

    return first


def _batch_events(collected: Collected, run: str) -> dict[str, list[TypedEvent]]:
    """The events of the batch's sessions (every attempt of every slot), by session id."""
    return {s.session_id: s.events for s in collected.picked(batch_narrowing(run))}


async def _judged(
    settings: Settings,
    run: str,
    count: int,
    wait_s: float,
    say: Callable[[str], None] | None = None,
) -> list[Trajectory]:
    """The batch's completed sessions folded from the log, waiting up to `wait_s` for the
    worker's filter outcomes."""
    deadline = time.monotonic() + wait_s
    while True:
        trajectories: list[Trajectory] = []
        with await collect_narrowed(
            settings, LIVE_JUDGE_VERSION, batch_narrowing(run), say=say
        ) as collected:
            sessions = [
                opened
                for recorded in collected.picked(batch_narrowing(run))
                if (opened := collected.opened(recorded)[0]) is not None
            ]
        states = slot_states(run, {s.session_id: s.events for s in sessions})
        for session in sessions:
            completed = any(
                e.type == "session_ended" and e.payload.get("status") == "completed"
                for e in session.events
            )
            if completed:
                trajectories.append(fold(session.events, session.derived))
        undecided = sum(1 for t in trajectories if t.accepted is None)
        if not undecided or time.monotonic() >= deadline or not states:
            return trajectories
        await asyncio.sleep(1.0)


def _summary(
    env: Environment,
    run: str,
    count: int,
    finished: int,
    rollouts: list[Rollout],
    trajectories: list[Trajectory],
) -> BatchSummary:
    tools: dict[str, ToolLine] = {}
    for trajectory in trajectories:
        for name, stats in trajectory.tool_stats.items():
            line = tools.setdefault(name, ToolLine())
            line.count += stats.count
            line.success += stats.success
            line.failure += stats.failure
    reasons: Counter[str] = Counter()
    for trajectory in trajectories:
        if trajectory.filter is not None and not trajectory.filter.accepted:
            reasons.update(reason.code for reason in trajectory.filter.reasons)
    rewards = [t.reward for t in trajectories if t.reward is not None]
    return BatchSummary(
        run=run,
        environment=env.name,
        planned=count,
        finished_before=finished,
        ran=len(rollouts),
        completed=sum(1 for r in rollouts if r.status == "completed"),
        failed=sum(1 for r in rollouts if r.status == "failed"),
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        tools=dict(sorted(tools.items())),
        accepted=sum(1 for t in trajectories if t.accepted is True),
        rejected=sum(1 for t in trajectories if t.accepted is False),
        undecided=sum(1 for t in trajectories if t.accepted is None),
        reasons=dict(sorted(reasons.items())),
    )


async def process_batch(
    settings: Settings,
    env: Environment,
    *,
    out: Path,
    options: ExportOptions,
    tokenizer: ChatTokenizer | None = None,
    overwrite: bool = False,
    say: Callable[[str], None] | None = None,
    **batch: Any,
) -> tuple[BatchSummary, Manifest]:
    """`env process`: run a batch, wait for the judges, export the batch's sessions from the log
    (`options.selection` is narrowed to them)."""
    say = _once(say)
    summary = await run_batch(settings, env, say=say, **batch)
    selection = options.selection.model_copy(update={"sessions": (f"batch.{summary.run}.*",)})
    with await collect_narrowed(
        settings, selection.judge_version, selection.narrowing(), keys=False, say=say
    ) as collected:
        manifest = run_export(
            collected,
            options.model_copy(update={"selection": selection}),
            out,
            tokenizer=tokenizer,
            overwrite=overwrite,
        )
    return summary, manifest
