"""Token samples in the field names of the RL stacks people train agents with.

One `TokenSample` (the documented form, `_tokens.py`) becomes one row per stack, each field
the stack's own name and meaning, so a trainer loads the rows into its own type:

- `rolltape`: the documented form itself.
- `verl`: veRL's agent loop output (`verl/experimental/agent_loop/agent_loop.py`,
  `AgentLoopOutput`): `prompt_ids`, `response_ids`, `response_mask` (1 on model tokens, 0 on
  tool tokens), `response_logprobs` (one per response token, 0.0 where the model did not sample
  it), `reward_score`, `num_turns` (the user and assistant turns, as the agent loop counts them).
- `skyrl`: one rollout of SkyRL's `GeneratorOutput` (`skyrl_train/generators/base.py`, whose
  fields are lists over rollouts): `prompt_token_ids`, `response_ids`, `rewards` (a scalar, or
  one per response token when per-turn rewards were recorded: each at its turn's last token),
  `loss_masks`, `stop_reasons`, `rollout_logprobs`.
- `slime`: slime's `Sample` (`slime/utils/types.py`): `tokens` (prompt and response),
  `response_length`, `loss_mask` and `rollout_log_probs` over the response, `reward`,
  `weight_versions`, `status` (`completed`, `truncated` when the model stopped on length,
  `aborted` otherwise short of a stop).
- `rllm`: an rLLM trajectory (`rllm/agents/agent.py`): one step per sampled reply, each with the
  `prompt_ids` it was sampled after, its `response_ids` and `logprobs`, the turn's `reward`
  and the `weight_version`; the trajectory's `reward`.
- `verifiers`: a branch of a verifiers v1 trace: `token_ids`, `sampled_mask` (true where
  sampled), `logprobs`, `loss_weights` (1.0 where sampled), `reward`.

Stacks that train on a reward need one: a session without a score is left out (`no_score`).
A stack's response starts at the first sampled token: everything before it is its prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from rolltape.projections.exporters._atropos import SkipSession
from rolltape.projections.exporters._tokens import TokenSample

Stack = Literal["rolltape", "verl", "skyrl", "slime", "rllm", "verifiers"]


def _reward(sample: TokenSample, stack: str) -> float:
    if sample.reward is None:
        raise SkipSession("no_score", f"{stack} rows need a reward and the session has none")
    return sample.reward


def _response_logprobs(sample: TokenSample) -> list[float] | None:
    """The logprobs from the first sampled token on, 0.0 on tokens the model did not sample;
    None when any sampled token has none (a stack recomputes them rather than train on a
    guess)."""
    if not sample.has_logprobs:
        return None
    start = sample.prompt_length
    return [0.0 if lp is None else lp for lp in sample.logprobs[start:]]


def _rolltape(sample: TokenSample) -> dict[str, Any]:
    return sample.model_dump(mode="json")


def _verl(sample: TokenSample) -> dict[str, Any]:
    start = sample.prompt_length
    return {
        "prompt_ids": sample.token_ids[:start],
        "response_ids": sample.token_ids[start:],
        "response_mask": sample.mask[start:],
        "response_logprobs": _response_logprobs(sample),
        "reward_score": _reward(sample, "verl"),
        "num_turns": 2 * len(sample.spans),
        "extra_fields": {"sample_id": sample.sample_id, "group_id": sample.group_id},
    }


def _skyrl(sample: TokenSample) -> dict[str, Any]:
    start = sample.prompt_length
    reward = _reward(sample, "skyrl")
    rewards: float | list[float] = reward
    if any(r is not None for r in sample.turn_rewards):
        per_token = [0.0] * (len(sample.token_ids) - start)
        for (_, end), turn_reward in zip(sample.spans, sample.turn_rewards, strict=True):
            per_token[end - 1 - start] += turn_reward or 0.0
        per_token[-1] += reward
        rewards = per_token
    return {
        "prompt_token_ids": sample.token_ids[:start],
        "response_ids": sample.token_ids[start:],
        "rewards": rewards,
        "loss_masks": sample.mask[start:],
        "stop_reasons": sample.stop_reason,
        "rollout_logprobs": _response_logprobs(sample),
    }


def _slime_status(sample: TokenSample) -> str:
    if sample.stop_reason == "length":
        return "truncated"
    if sample.stop_reason in (None, "stop", "tool_calls", "eos"):
        return "completed"
    return "aborted"


def _slime(sample: TokenSample) -> dict[str, Any]:
    start = sample.prompt_length
    return {
        "group_index": sample.group_id,
        "index": sample.sample_id,
        "tokens": sample.token_ids,
        "response_length": len(sample.token_ids) - start,
        "loss_mask": sample.mask[start:],
        "rollout_log_probs": _response_logprobs(sample),
        "reward": _reward(sample, "slime"),
        "weight_versions": [sample.model_version] if sample.model_version else [],
        "status": _slime_status(sample),
    }


def _rllm(sample: TokenSample) -> dict[str, Any]:
    steps = []
    for (begin, end), turn_reward in zip(sample.spans, sample.turn_rewards, strict=True):
        logprobs = sample.logprobs[begin:end]
        steps.append(
            {
                "prompt_ids": sample.token_ids[:begin],
                "response_ids": sample.token_ids[begin:end],
                "logprobs": logprobs if all(lp is not None for lp in logprobs) else [],
                "reward": turn_reward or 0.0,
                "weight_version": sample.model_version,
            }
        )
    return {"uid": sample.sample_id, "steps": steps, "reward": _reward(sample, "rllm")}


def _verifiers(sample: TokenSample) -> dict[str, Any]:
    return {
        "token_ids": sample.token_ids,
        "sampled_mask": [m == 1 for m in sample.mask],
        "logprobs": [0.0 if lp is None else lp for lp in sample.logprobs],
        "loss_weights": [float(m) for m in sample.mask],
        "reward": sample.reward,
    }


STACKS: dict[str, Callable[[TokenSample], dict[str, Any]]] = {
    "rolltape": _rolltape,
    "verl": _verl,
    "skyrl": _skyrl,
    "slime": _slime,
    "rllm": _rllm,
    "verifiers": _verifiers,
}
"""Each stack's row writer, by the name `--stack` takes."""


def stack_row(stack: str, sample: TokenSample) -> dict[str, Any]:
    """`sample` in `stack`'s field names. Raises SkipSession (`no_score`) when the stack needs
    a reward the session lacks."""
    return STACKS[stack](sample)
