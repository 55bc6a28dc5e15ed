"""Token samples in the field names of the RL stacks people train agents with.

One `TokenSample` (the documented form, `_tokens.py`) becomes one row per stack, each field
the stack's own name and meaning, so a trainer loads the rows into its own type. Read from the
stacks' code (2026-08 and later):

- `rolltape`: the documented form itself.
- `verl`: veRL's `AgentLoopOutput` (`verl/experimental/agent_loop/agent_loop.py`, 0.9):
  `prompt_ids`, `response_ids`, `response_mask` (1 on model tokens, 0 on tool tokens),
  `response_logprobs` (one per response token, 0.0 where the model did not sample it),
  `reward_score`, `num_turns` (user and assistant turns, as the agent loop counts them),
  `metrics` (its timings: none recorded, so empty), `extra_fields` (our ids).
- `skyrl`: one rollout's entry of each list of SkyRL's `GeneratorOutput`
  (`skyrl/train/generators/base.py`, 0.4; a TypedDict of lists over rollouts, so a batch is
  these rows zipped key by key): `prompt_token_ids`, `response_ids`, `rewards` (a scalar, or one
  per response token when per-turn rewards were recorded: each at its turn's last token, the
  final reward at the last), `loss_masks`, `stop_reasons`, `rollout_logprobs`.
- `slime`: slime's `Sample` (`slime/utils/types.py`, 0.3; `Sample.from_dict`): `tokens` (prompt
  and response), `response_length`, `loss_mask` and `rollout_log_probs` over the response,
  `reward`, `weight_versions`, `status` (`completed`, or `truncated` when the model stopped on
  length, `aborted` on any other stop), our ids in `metadata`.
- `rllm`: rLLM's `Trajectory` (`rllm/types.py`, 0.3): one `Step` per sampled reply, with the
  `prompt_ids` it was sampled after, its `response_ids` and `logprobs` (empty when the server
  returned none), the turn's `reward`, and `weight_version` when the model version is a number
  (rLLM counts policy updates; a named version goes in `metadata`); the trajectory's `reward`.
- `verifiers`: a verifiers v1 trace (`verifiers/v1/trace.py`, 0.4; `WireTrace.model_validate`),
  one per branch: for each sampled reply a node of the message before it, holding the tokens
  between the previous reply and this one (not sampled), then the reply's node (sampled, its
  logprobs). The trace's `branches[0]` gives back the sample's `token_ids`, its mask as
  `sampled_mask`, and its logprobs (0.0 where not sampled).

Stacks that train on a reward need one: a session without a score is left out (`no_score`).
A stack's response starts at the first sampled token: everything before it is its prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from rolltape.projections._trajectory import Trajectory
from rolltape.projections.exporters._atropos import ChatTokenizer, SkipSession
from rolltape.projections.exporters._openai import chat_messages
from rolltape.projections.exporters._tokens import (
    TOKEN_SAMPLE_FIELDS,
    TokenSample,
    token_samples,
)

Stack = Literal["rolltape", "verl", "skyrl", "slime", "rllm", "verifiers"]


def _reward(sample: TokenSample, stack: str) -> float:
    if sample.reward is None:
        raise SkipSession("no_score", f"{stack} rows need a reward and the session has none")
    return sample.reward


def _response_logprobs(sample: TokenSample) -> list[float] | None:
    """The logprobs from the first sampled token on, 0.0 on tokens the model did not sample;
    None when any sampled token has none (a stack recomputes them rather than train on a
    guess)."""
    if sample.logprobs is None:
        return None
    return sample.logprobs[sample.prompt_length :]


def _rolltape(sample: TokenSample, trajectory: Trajectory) -> dict[str, Any]:
    return {name: getattr(sample, name) for name in TOKEN_SAMPLE_FIELDS}


def _verl(sample: TokenSample, trajectory: Trajectory) -> dict[str, Any]:
    start = sample.prompt_length
    return {
        "prompt_ids": sample.token_ids[:start],
        "response_ids": sample.token_ids[start:],
        "response_mask": sample.mask[start:],
        "response_logprobs": _response_logprobs(sample),
        "reward_score": _reward(sample, "verl"),
        "num_turns": 2 * len(sample.spans),
        "metrics": {},
        "extra_fields": {"sample_id": sample.sample_id, "group_id": sample.group_id},
    }


def _skyrl(sample: TokenSample, trajectory: Trajectory) -> dict[str, Any]:
    start = sample.prompt_length
    reward = _reward(sample, "skyrl")
    rewards: float | list[float] = reward
    if sample.turn_rewards is not None:
        per_token = [0.0] * (len(sample.token_ids) - start)
        for (begin, end), turn_reward in zip(sample.spans, sample.turn_rewards, strict=True):
            if end > begin:  # a reply rendered to no token has no token to reward
                per_token[end - 1 - start] += turn_reward
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


def _slime(sample: TokenSample, trajectory: Trajectory) -> dict[str, Any]:
    start = sample.prompt_length
    return {
        "tokens": sample.token_ids,
        "response_length": len(sample.token_ids) - start,
        "loss_mask": sample.mask[start:],
        "rollout_log_probs": _response_logprobs(sample),
        "reward": _reward(sample, "slime"),
        "weight_versions": [sample.model_version] if sample.model_version else [],
        "status": _slime_status(sample),
        "metadata": {"sample_id": sample.sample_id, "group_id": sample.group_id},
    }


def _rllm(sample: TokenSample, trajectory: Trajectory) -> dict[str, Any]:
    version = sample.model_version
    numbered = int(version) if version is not None and version.isdigit() else None
    steps = []
    turn_rewards = sample.turn_rewards or [0.0] * len(sample.spans)
    for (begin, end), turn_reward in zip(sample.spans, turn_rewards, strict=True):
        steps.append(
            {
                "prompt_ids": sample.token_ids[:begin],
                "response_ids": sample.token_ids[begin:end],
                "logprobs": [] if sample.logprobs is None else sample.logprobs[begin:end],
                "reward": turn_reward,
                "weight_version": numbered,
            }
        )
    return {
        "uid": sample.sample_id,
        "name": trajectory.task,
        "steps": steps,
        "reward": _reward(sample, "rllm"),
        "metadata": {"group_id": sample.group_id, "model_version": version},
    }


def _verifiers_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message (OpenAI form) as a verifiers v1 message: calls' names and arguments flat."""
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "name": c["function"]["name"],
                "arguments": c["function"]["arguments"],
            }
            for c in message["tool_calls"]
        ]
    return out


def _verifiers(sample: TokenSample, trajectory: Trajectory) -> dict[str, Any]:
    messages = [_verifiers_message(m) for m in chat_messages(trajectory, "openai")]
    at_reply = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    nodes: list[dict[str, Any]] = []
    previous = 0
    for (begin, end), turn in zip(sample.spans, sample.turns, strict=True):
        reply = at_reply[turn]
        before = next(
            (m for m in reversed(messages[:reply]) if m["role"] != "assistant"),
            {"role": "user", "content": ""},
        )
        nodes.append(
            {
                "parent": len(nodes) - 1 if nodes else None,
                "message": before,
                "token_ids": sample.token_ids[previous:begin],
                "mask": [False] * (begin - previous),
            }
        )
        nodes.append(
            {
                "parent": len(nodes) - 1,
                "message": messages[reply],
                "sampled": True,
                "token_ids": sample.token_ids[begin:end],
                "mask": [True] * (end - begin),
                "logprobs": [] if sample.logprobs is None else sample.logprobs[begin:end],
            }
        )
        previous = end
    rewards = {} if sample.reward is None else {"reward": {"score": sample.reward}}
    return {
        "version": 1,
        "id": sample.sample_id,
        "task": {"type": "rolltape", "data": {"prompt": trajectory.task}},
        "agent": {"config": {}},
        "nodes": nodes,
        "rewards": rewards,
        "is_completed": trajectory.status == "completed",
        "stop_condition": sample.stop_reason,
        "info": {
            "session_id": sample.session_id,
            "group_id": sample.group_id,
            "model": sample.model,
            "model_version": sample.model_version,
        },
    }


STACKS: dict[str, Callable[[TokenSample, Trajectory], dict[str, Any]]] = {
    "rolltape": _rolltape,
    "verl": _verl,
    "skyrl": _skyrl,
    "slime": _slime,
    "rllm": _rllm,
    "verifiers": _verifiers,
}
"""Each stack's row writer, by the name `--stack` takes."""


def stack_row(stack: str, sample: TokenSample, trajectory: Trajectory) -> dict[str, Any]:
    """`sample` (of `trajectory`) in `stack`'s field names. Raises SkipSession (`no_score`)
    when the stack needs a reward the session lacks."""
    return STACKS[stack](sample, trajectory)


def stack_rows(
    stack: str,
    trajectory: Trajectory,
    tokenizer: ChatTokenizer | None = None,
    *,
    tokenizer_label: str | None = None,
    score: str = "reward",
) -> list[tuple[TokenSample, dict[str, Any]]]:
    """A session's token samples (`token_samples`), each with its row in `stack`'s field names:
    what the export and the dataset write. Raises SkipSession with the reason the session is
    left out."""
    samples = token_samples(trajectory, tokenizer, tokenizer_label=tokenizer_label, score=score)
    return [(sample, stack_row(stack, sample, trajectory)) for sample in samples]
