"""An environment's tester for the prompt loop: runs the agent with a version of the
environment's system prompt (`env.<name>.system`) on an item, as one recorded rollout the worker
judges.

A case is an item and a seed (the rollout's sample number, and the seed of every model call, so
champion and proposal sample alike on a server that honours seeds; cases learn from the train
split and decide on the test split by default, so the tuner never sees an item that decides). Its score is the worker's
`reward:final_reward` verdict (the reward the rollout recorded, read back by the worker: the
worker must run that reward function, ROLLTAPE_REWARDS), and it passes when that reward is at
least the environment's `pass_reward`. A rollout whose verdict does not arrive in time, or that
failed before it was scored, leaves its case unscored: the rule then keeps the champion.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from rolltape.producers._errors import HarnessError
from rolltape.producers._follow import LogFollower
from rolltape.producers._recorder import Recorder
from rolltape.producers.environments._base import Environment
from rolltape.producers.environments._rollout import run_rollout
from rolltape.producers.judging import JudgeRuntime
from rolltape.producers.prompts import Case, CaseResult, Suite
from rolltape.schemas import CaseScoring, PromptVersion, Verdict
from rolltape.schemas.clients import ModelEndpoint

ENV_SCORE_JUDGE = "reward:final_reward"
"""The worker's judge whose verdict scores an environment's test rollouts."""


def environment_suite(env: Environment, samples: int = 1) -> Suite:
    """Learn from the train items, decide on the test items, `samples` rollouts of each."""
    return Suite(
        learn=tuple(
            Case(name=i.item_id, seed=k) for i in env.items("train") for k in range(samples)
        ),
        heldout=tuple(
            Case(name=i.item_id, seed=k) for i in env.items("test") for k in range(samples)
        ),
    )


class EnvironmentTester:
    """Runs cases as rollouts of `env` through `endpoint`, waiting on `follower` (the verdicts
    topic) for the worker's verdict of each."""

    def __init__(
        self,
        env: Environment,
        *,
        endpoint: ModelEndpoint,
        recorder: Recorder,
        follower: LogFollower,
        judges: Callable[[], JudgeRuntime] | None = None,
        verdict_timeout_s: float = 120.0,
    ) -> None:
        self.env = env
        self.endpoint = endpoint
        self.recorder = recorder
        self.follower = follower
        self.judges = judges
        self.verdict_timeout_s = verdict_timeout_s
        self.items = {i.item_id: i for split in ("train", "test") for i in env.items(split)}
        self.max_calls_per_case = env.max_iterations
        """The agent makes one model call per iteration at most (its judges' are not counted)."""
        self.scoring = CaseScoring(
            judge=ENV_SCORE_JUDGE,
            score="reward",
            passes="score_at_least",
            threshold=env.pass_reward,
        )

    def run(self, version: PromptVersion, case: Case, labels: dict[str, Any]) -> CaseResult:
        item = self.items[case.name]
        session_id = (
            f"{labels['prompt_loop']}-r{labels['prompt_round']}-{version.digest[:8]}-"
            f"{item.item_id}-s{case.seed}"
        )
        self.follower.watch(session_id)

        async def rollout() -> Any:
            client = self.endpoint.async_client()
            judges = self.judges() if self.judges is not None else None
            try:
                return await run_rollout(
                    self.env,
                    item,
                    recorder=self.recorder,
                    client=client,
                    model=self.endpoint.model,
                    family=self.endpoint.family,
                    session_id=session_id,
                    sample=case.seed,
                    seed=case.seed,
                    tags=["prompt_loop"],
                    judges=judges,
                    prompt=version,
                    labels=labels,
                )
            finally:
                await client.close()
                if judges is not None:
                    await judges.aclose()

        done = asyncio.run(rollout())
        self.recorder.flush()
        calls = done.result.iterations if done.result is not None else 0
        if done.status != "completed":
            failure = f"the rollout failed: {done.error}"
            return CaseResult(
                case=case,
                session_id=session_id,
                score=None,
                passed=False,
                failures=(failure,),
                model_calls=calls,
            )
        verdict = self._verdict(session_id)
        score, passed = self.scoring.of(verdict)
        failures: tuple[str, ...] = ()
        if verdict is None:
            failures = (f"no {ENV_SCORE_JUDGE} verdict arrived in {self.verdict_timeout_s:.0f} s",)
        elif not passed:
            reward = done.reward
            detail = "" if reward is None else f" ({_metadata(reward.metadata)})"
            failures = (f"reward {score} below {self.scoring.threshold:g}{detail}",)
        return CaseResult(
            case=case,
            session_id=session_id,
            score=score,
            passed=passed,
            failures=failures,
            model_calls=calls,
        )

    def _verdict(self, session_id: str) -> Verdict | None:
        try:
            found = self.follower.verdict(session_id, ENV_SCORE_JUDGE, self.verdict_timeout_s)
        except HarnessError:
            return None
        return Verdict.model_validate(found["payload"])


def _metadata(metadata: dict[str, Any]) -> str:
    """What the scorer saw, shortened for the tuner."""
    text = "; ".join(f"{k}: {v}" for k, v in sorted(metadata.items()))
    return text[:600]
