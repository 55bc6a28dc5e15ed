"""`evaluate`: run every item of a split once, concurrently, and record the evaluation.

Each rollout is its own session (`eval.<env>.<split>.<stamp>.<item>`); the evaluation itself is
one more session (`eval.<env>.<split>.<stamp>`, not trainable) holding an `evaluation` event with
every rollout's session, reward and outcome, so an evaluation is in the log like everything
else and its rollouts can be exported, judged and replayed.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from rolltape.producers._errors import EnvError
from rolltape.producers._recorder import Recorder
from rolltape.producers._world import WorldLimits
from rolltape.producers.environments._base import Environment
from rolltape.producers.environments._rollout import Rollout, run_rollout
from rolltape.producers.judging import JudgeRuntime
from rolltape.schemas import EvaluatedItem, Evaluation, PromptVersion
from rolltape.schemas.clients import ModelEndpoint


async def evaluate(
    env: Environment,
    split: str,
    *,
    recorder: Recorder,
    endpoint: ModelEndpoint,
    concurrency: int = 4,
    label: str | None = None,
    workdir_root: Path | None = None,
    world_limits: WorldLimits | None = None,
    judges: JudgeRuntime | None = None,
    on_rollout: Callable[[Rollout], None] | None = None,
    prompt: PromptVersion | None = None,
) -> tuple[Evaluation, str]:
    """(the evaluation, the session it was recorded in); `prompt`: the system prompt version
    the agent gets (see run_rollout)."""
    items = list(env.items(split))
    if not items:
        raise EnvError(f"environment {env.name} has no items in split {split!r}")
    label = label or datetime.fromtimestamp(time.time(), UTC).strftime("%Y%m%dT%H%M%SZ")
    base = f"eval.{env.name}.{split}.{label}"
    slots = asyncio.Semaphore(concurrency)
    client = endpoint.async_client()

    async def one(index: int) -> Rollout:
        item = items[index]
        async with slots:
            rollout = await run_rollout(
                env,
                item,
                recorder=recorder,
                client=client,
                model=endpoint.model,
                family=endpoint.family,
                session_id=f"{base}.{item.item_id}",
                prompt=prompt,
                tags=["evaluation", f"split={split}"],
                workdir_root=workdir_root,
                world_limits=world_limits,
                judges=judges,
            )
        if on_rollout is not None:
            on_rollout(rollout)
        return rollout

    try:
        rollouts = await asyncio.gather(*(one(i) for i in range(len(items))))
    finally:
        await client.close()
    evaluation = summarise(env.name, split, endpoint.model, rollouts)
    with recorder.session(
        f"evaluate {env.name} on {split}",
        session_id=base,
        model=endpoint.model,
        tags=["evaluation", f"env={env.name}", f"split={split}"],
        trainable=False,
    ) as session:
        session.record(evaluation)
    return evaluation, base


def summarise(environment: str, split: str, model: str, rollouts: list[Rollout]) -> Evaluation:
    """The evaluation of `rollouts`, kept in their order. Rates are over the scored rollouts
    only (an unrewarded one, say a failed run, is counted in `items`, not as a fail), and are
    None when nothing was scored rather than a misleading 0."""
    scored = [r for r in rollouts if r.reward is not None]
    rewards = [r.reward.reward for r in scored if r.reward is not None]
    passed = sum(1 for r in scored if r.reward is not None and r.reward.passed)
    return Evaluation(
        environment=environment,
        split=split,
        model=model,
        items=len(rollouts),
        scored=len(scored),
        passed=passed,
        mean_reward=math.fsum(rewards) / len(rewards) if rewards else None,
        pass_rate=passed / len(scored) if scored else None,
        rollouts=tuple(
            EvaluatedItem(
                item_id=r.item_id,
                session_id=r.session_id,
                reward=r.reward.reward if r.reward else None,
                passed=r.reward.passed if r.reward else None,
                error=r.error,
            )
            for r in rollouts
        ),
    )
