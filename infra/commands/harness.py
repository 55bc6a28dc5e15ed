"""`rolltape harness`: self-refine attempts of the reference task, each a monitored training
session judged by a worker, with a decision policy (the scripted playbook or an LLM) acting on
the rule firings between attempts.

The training package needs torch: it is imported where a function runs, never at import.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

from rolltape.infra import open_monitor_recorder, open_recorder
from rolltape.infra._errors import InfraError
from rolltape.infra.broker import require_connection
from rolltape.infra.commands.prompts import prompt_for
from rolltape.infra.commands.worker import can_provision
from rolltape.infra.commands.worker_process import running_worker
from rolltape.infra.kafka.topics import provision
from rolltape.infra.settings import Settings
from rolltape.schemas import POLICY_PROMPT_TARGET, REFERENCE_TASK, Role

if TYPE_CHECKING:
    from rolltape.producers.training import Scenario, SelfRefineResult

__all__ = [
    "REFERENCE_TASK",
    "HarnessError",
    "PolicyName",
    "SelfRefineResult",
    "run_harness",
    "scenarios",
]


class PolicyName(StrEnum):
    """Who decides between attempts (`harness run --policy`): the scripted playbook, or an LLM
    through the endpoint ROLLTAPE_MODELS binds to the logical model `policy`."""

    scripted = "scripted"
    llm = "llm"


class HarnessError(InfraError):
    """What the llm policy lacks (its client, its endpoint); the message says what to set."""


def scenarios() -> dict[str, Scenario]:
    """The named scenarios of the reference task, by name."""
    from rolltape.producers.training import SCENARIOS

    return SCENARIOS


def run_harness(
    settings: Settings,
    *,
    scenario: str,
    attempts: int,
    policy: PolicyName,
    prompt_ref: str,
    epochs: int | None = None,
    seed: int = 0,
    waive: Sequence[str] = (),
    start_worker: bool = False,
    on_prompt: Callable[[str], None] = lambda _: None,
    on_start: Callable[[str], None] = lambda _: None,
) -> SelfRefineResult:
    """`attempts` self-refine attempts of `scenario`, each linked to the previous one, under a
    worker (the running one, or one started here with `start_worker`). The llm policy's
    prompt is the version `prompt_ref` names; `on_prompt` is told which, `on_start` the
    chosen policy's name before the first attempt."""
    from rolltape.producers.training import (
        SCENARIOS,
        Harness,
        HarnessConfig,
        LLMPolicy,
        Policy,
        ScriptedPolicy,
        rules_and_verdicts_follower,
    )

    s = settings
    if policy is PolicyName.llm and importlib.util.find_spec("openai") is None:
        raise HarnessError("the llm policy needs the openai client: pip install 'rolltape[openai]'")
    if policy is PolicyName.llm and "policy" not in s.models:
        raise HarnessError(
            "the llm policy needs an endpoint for the logical model 'policy': set "
            'ROLLTAPE_MODELS, e.g. \'{"policy": {"base_url": "http://host:8000/v1", "model": "m"}}\''
        )
    prompt = None
    if policy is PolicyName.llm:  # the version --prompt names (None: the playbook, unrecorded)
        prompt, said = asyncio.run(prompt_for(s, POLICY_PROMPT_TARGET, prompt_ref))
        on_prompt(said)
    if can_provision(s):
        provision(s)
    with running_worker(s, start_worker):
        agent = open_recorder(s)
        monitor = open_monitor_recorder(s)
        follower = rules_and_verdicts_follower(require_connection(s, Role.MONITOR), s.topic_prefix)
        try:
            chosen: Policy = (
                LLMPolicy(s.models["policy"], agent, prompt=prompt)
                if policy is PolicyName.llm
                else ScriptedPolicy()
            )
            harness = Harness(
                agent=agent,
                monitor_recorder=monitor,
                follower=follower,
                policy=chosen,
                config=HarnessConfig(epochs=epochs, seed=seed, waived_rules=tuple(waive)),
            )
            on_start(chosen.name)
            return harness.self_refine(SCENARIOS[scenario], attempts)
        finally:
            follower.close()
            monitor.close()
            agent.close()
