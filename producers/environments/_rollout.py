"""One rollout: a working directory, a fresh session, the reference agent, the world, the reward.

The session declares the environment's tools (so filters can flag hallucinated names), is tagged
with the environment and item, records the world the environment set up (its first
`world_snapshot`, before the agent's first call: what the agent's changes are diffed against),
every model call through the captured client and every tool run, then the world the agent left (`Session.world`: the workdir as a `world_snapshot`
event and its contents as blobs, before anything scores or judges it, so every judge reads the
same world and a replay can restore it), then the reward as a `reward` event (with its components) and ends with the outcome
`{"passed", "reward", "shape", "item_id", ...}` that the `task_pass` reward function reads. A
model endpoint that fails ends the session `failed` with the error, and the rollout has no
reward: a rollout that never ran is not scored 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from rolltape.producers._recorder import Recorder
from rolltape.producers._world import WorldError, WorldLimits
from rolltape.producers.agent import AgentResult, run_agent
from rolltape.producers.environments._base import Environment, Item, RewardResult, RolloutContext
from rolltape.producers.judging import (
    JudgeInputs,
    JudgeRuntime,
    RecordedWorld,
    render_messages,
    run_judges,
)
from rolltape.schemas import JudgeSpec, PromptVersion, Verdict, WorldSnapshot


class Rollout(BaseModel):
    """What one rollout produced."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    item_id: str
    session_id: str
    sample: int
    status: Literal["completed", "failed"]
    result: AgentResult | None = None
    reward: RewardResult | None = None
    world: WorldSnapshot | None = None
    """The workdir as the agent left it (recorded on the session)."""
    started_from: WorldSnapshot | None = None
    """The workdir as the environment set it up, before the agent ran (recorded first)."""
    verdicts: tuple[Verdict, ...] = ()
    """The environment's judges' verdicts, in the order of its specs."""
    error: str | None = None


async def run_rollout(
    env: Environment,
    item: Item,
    *,
    recorder: Recorder,
    client: Any,
    model: str,
    session_id: str,
    sample: int = 0,
    group_id: str | None = None,
    tags: Sequence[str] = (),
    workdir_root: Path | None = None,
    family: str | None = None,
    world_limits: WorldLimits | None = None,
    judges: JudgeRuntime | None = None,
    prompt: PromptVersion | None = None,
    labels: Mapping[str, Any] | None = None,
    seed: int | None = None,
    model_version: str | None = None,
) -> Rollout:
    """Run and record one rollout of `item` in session `session_id`, in a temporary workdir
    removed afterwards (`family`: the endpoint's tool-call text format, see
    run_agent). An agent that raises gives a `failed` rollout with no reward instead of
    an exception; `client` stays the caller's to close, so one can serve a whole batch.
    `judges` runs the environment's judges (a judge that fails fails the rollout: no reward).
    `prompt` is a version of the environment's prompt target (`env.<name>.system`) the agent
    gets as its system prompt instead of the environment's own; the session's run config names
    it, with `labels` (a prompt loop's round and role). `seed` goes with every model call (a
    server that honours it samples the same way for the same seed: a prompt loop's pairs).
    `model_version`: the version the endpoint serves (`ModelEndpoint.version`), on every reply."""
    with tempfile.TemporaryDirectory(prefix=f"rolltape-{env.name}-", dir=workdir_root) as tmp:
        workdir = Path(tmp)
        env.setup_workdir(item, workdir)
        tools = env.tools(item, workdir)
        session = recorder.session(
            env.format_prompt(item),
            session_id=session_id,
            tools=[tool.spec for tool in tools],
            model=model,
            tags=["env", f"env={env.name}", f"item={item.item_id}", *tags],
            run_config={
                "environment": {"name": env.name, "item_id": item.item_id, "split": item.split},
                **(
                    {"prompt_target": prompt.target, "prompt_version": prompt.digest}
                    if prompt is not None
                    else {}
                ),
                **(labels or {}),
            },
            group_id=group_id,
        )
        ctx = RolloutContext(item=item, workdir=workdir, session=session, sample=sample)
        rollout = functools.partial(
            Rollout, item_id=item.item_id, session_id=session_id, sample=sample
        )

        def failed(error: str, **recorded: Any) -> Rollout:
            """The session ended failed, the rollout with no reward (never scored 0)."""
            session.end("failed", error=error, outcome={"item_id": item.item_id})
            return rollout(status="failed", error=error, **recorded)

        async with session:
            try:
                # The world the agent is given: the console diffs the one it left against it.
                started_from, _ = await asyncio.to_thread(session.world, workdir, world_limits)
            except WorldError as exc:
                return failed(f"the starting world could not be recorded: {exc}")
            rollout = functools.partial(rollout, started_from=started_from)
            # A recording copy sharing `client`'s connections (one client serves a whole batch:
            # building one loads the CA bundle, tens of milliseconds).
            captured = session.capture(client, family=family, model_version=model_version)
            try:
                result = await run_agent(
                    captured,
                    model,
                    env.format_prompt(item),
                    tools,
                    session=session,
                    system=prompt.content if prompt is not None else env.system_prompt,
                    max_iterations=env.max_iterations,
                    family=family,
                    seed=seed,
                )
            except Exception as exc:
                # The world the agent left all the same: the session's last world is always
                # the one after the agent, never the one it was given (a judge reads the last).
                left: WorldSnapshot | None = None
                with contextlib.suppress(WorldError):
                    left, _ = await asyncio.to_thread(session.world, workdir, world_limits)
                return failed(f"{type(exc).__name__}: {exc}", world=left)
            try:
                # off the loop: reading and hashing the tree must not stall other rollouts
                world, blobs = await asyncio.to_thread(session.world, workdir, world_limits)
            except WorldError as exc:  # a rollout whose world cannot be recorded is not scored
                return failed(f"the world could not be recorded: {exc}", result=result)
            reward = await env.compute_reward(item, result, ctx)
            specs = env.judges(item, result, reward)
            verdicts: list[Verdict] = []
            if specs:
                recorded = RecordedWorld(world, blobs, live=workdir)
                verdicts = await _judge(
                    env, item, result, reward, specs, session_id, judges, recorded, workdir_root
                )
                for verdict in verdicts:
                    session.record(verdict)
                errors = [(s, v) for s, v in zip(specs, verdicts, strict=True) if v.status != "ok"]
                if errors:
                    error = "; ".join(f"judge {s.name}: {v.error}" for s, v in errors)
                    return failed(error, result=result, world=world, verdicts=tuple(verdicts))
                by_name = {s.name: v for s, v in zip(specs, verdicts, strict=True)}
                reward = env.combine(item, reward, by_name)
            session.reward(
                reward.reward,
                name="reward",
                components=reward.components,
                source=f"env:{env.name}",
            )
            session.end(
                "completed",
                outcome={
                    "passed": reward.passed,
                    "reward": reward.reward,
                    "shape": reward.shape,
                    "item_id": item.item_id,
                    "stop": result.stop,
                    **{f"metadata.{k}": v for k, v in sorted(reward.metadata.items())},
                },
            )
        return rollout(
            status="completed",
            result=result,
            reward=reward,
            world=world,
            verdicts=tuple(verdicts),
        )


async def _judge(
    env: Environment,
    item: Item,
    result: AgentResult,
    reward: RewardResult,
    specs: Sequence[JudgeSpec],
    session_id: str,
    judges: JudgeRuntime | None,
    world: RecordedWorld,
    workdir_root: Path | None,
) -> list[Verdict]:
    """The verdicts of the environment's judges on the rollout, every judge reading the one
    recorded world and the same inputs."""
    if judges is None:
        return [
            Verdict(
                judge=f"llm:{spec.name}",
                judge_version=spec.version,
                status="error",
                error=f"environment {env.name} has judges and the rollout was given no judge "
                "runtime (run_rollout(judges=...))",
            )
            for spec in specs
        ]
    prompt = env.format_prompt(item)
    inputs = JudgeInputs(
        task={
            "environment": env.name,
            "item_id": item.item_id,
            "split": item.split,
            "data": item.data,
            "prompt": prompt,
        },
        transcript=render_messages(prompt, result.messages),
        trace={
            "messages": list(result.messages),
            "final": result.final,
            "stop": result.stop,
            "reward": reward.model_dump(mode="json"),
        },
    )
    return await run_judges(
        judges, specs, session_id, inputs=inputs, world=world, workdir_root=workdir_root
    )
