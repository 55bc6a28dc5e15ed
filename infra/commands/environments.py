"""`rolltape env list` and `rolltape env evaluate`, and what every command that runs rollouts
of an environment needs first: the environment it names, the endpoint its logical model is
bound to, and the version of the environment's system prompt `--prompt` names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from rolltape.infra import open_recorder
from rolltape.infra._errors import InfraError
from rolltape.infra.commands.prompts import prompt_for
from rolltape.infra.judging import open_judge_runtime
from rolltape.infra.settings import Settings
from rolltape.producers.agent import DEFAULT_MODEL
from rolltape.producers.environments import (
    Environment,
    Rollout,
    environment_names,
    evaluate,
    load_environment,
)
from rolltape.schemas import Evaluation, PromptVersion
from rolltape.schemas.clients import ModelEndpoint

__all__ = [
    "DEFAULT_MODEL",
    "Environment",
    "EnvironmentLine",
    "Evaluation",
    "ModelEndpoint",
    "PromptVersion",
    "Rollout",
    "UnboundModelError",
    "endpoint_for",
    "environment_lines",
    "environment_prompt",
    "evaluate_environment",
    "open_environment",
]


class UnboundModelError(InfraError):
    """No endpoint is bound to the logical model a command asks; the message says how to bind
    one."""


def open_environment(spec: str) -> Environment:
    """The environment a command names; an unknown name is a `PluginError` saying which ones
    exist."""
    return load_environment(spec)


def endpoint_for(settings: Settings, model: str) -> ModelEndpoint:
    """The endpoint ROLLTAPE_MODELS binds `model` to, or an `UnboundModelError` saying how to
    bind it."""
    endpoints = settings.models
    if model not in endpoints:
        bound = ", ".join(sorted(endpoints)) or "none"
        raise UnboundModelError(
            f"no endpoint is bound to model {model!r} (bound: {bound}); set "
            f'ROLLTAPE_MODELS=\'{{"{model}": {{"base_url": "http://HOST/v1", "model": "NAME"}}}}\''
        )
    return endpoints[model]


def environment_prompt(
    settings: Settings, env: Environment, ref: str
) -> tuple[PromptVersion | None, str]:
    """The version of the environment's system prompt `ref` names (None: the environment's
    own), and what to say of it."""
    return asyncio.run(prompt_for(settings, env.prompt_target(), ref))


@dataclass(frozen=True)
class EnvironmentLine:
    """An environment as `rolltape env list` shows it."""

    name: str
    train_items: int
    test_items: int
    group_size: int
    judges: tuple[str, ...]
    """Its judge versions, sorted."""


def environment_lines() -> list[EnvironmentLine]:
    """The environments this installation knows."""
    lines = []
    for name in environment_names():
        env = load_environment(name)
        lines.append(
            EnvironmentLine(
                name=name,
                train_items=len(env.items("train")),
                test_items=len(env.items("test")),
                group_size=env.group_size,
                judges=tuple(sorted(env.judge_versions)),
            )
        )
    return lines


def evaluate_environment(
    settings: Settings,
    env: Environment,
    split: str,
    *,
    endpoint: ModelEndpoint,
    concurrency: int,
    prompt: PromptVersion | None,
    on_rollout: Callable[[Rollout], None],
) -> tuple[Evaluation, str]:
    """Every item of `split` run once and judged, the `evaluation` event recorded (its own
    session): the evaluation and that session's id."""

    async def main() -> tuple[Evaluation, str]:
        recorder = open_recorder(settings)
        judges = open_judge_runtime(settings, recorder=recorder, policy=endpoint)
        try:
            return await evaluate(
                env,
                split,
                recorder=recorder,
                endpoint=endpoint,
                concurrency=concurrency,
                world_limits=settings.world_limits,
                judges=judges,
                on_rollout=on_rollout,
                prompt=prompt,
            )
        finally:
            await judges.aclose()
            await recorder.aclose()

    return asyncio.run(main())
