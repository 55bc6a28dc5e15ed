"""Token samples: a rollout as the token ids a trainer steps on, one line per branch.

    {"sample_id": "3f2a...:0", "trajectory_id": "3f2a...", "session_id": "s-1", "branch": 0,
     "branches": 1, "group_id": "g1", "task": "...", "token_ids": [5, 6, 7, 8, 9, 10],
     "mask": [0, 0, 1, 1, 0, 1], "logprobs": [0.0, 0.0, -0.1, -0.2, 0.0, -0.3],
     "spans": [[2, 4], [5, 6]], "turns": [0, 1], "reward": 1.0, "turn_rewards": [0.0, 0.5],
     "stop_reason": "stop", "model": "policy", "model_version": "gen-1",
     "token_source": "exact", "tokenizer": null}

- `token_ids`: the whole multi-turn conversation of the branch; `mask` is 1 where the policy
  sampled the token and 0 on prompt, tool and environment tokens; `logprobs` the sampler's
  log-probability at each sampled position, 0.0 elsewhere, and null (the whole list) when the
  server returned none for some sampled token; `spans` each sampled reply's `[start, end)` and
  `turns` which assistant turn of the session it is (counted from 0); `turn_rewards` the
  per-turn reward of each span (a reward event named `turn`, `TURN_REWARD`), 0.0 where a turn
  has none, and null when the session recorded no per-turn reward. No list holds a null: the
  JSON reader of pyarrow (what `datasets.load_dataset("json")` uses; 26.0) misplaces nulls
  inside lists of numbers, across rows.
- `token_source` `exact`: the ids the serving engine returned (a captured client against vLLM
  with `return_token_ids`). Each reply's prompt ids must extend the branch so far; when they do
  not (the agent compressed or rewrote its context, or the template re-rendered an earlier reply
  differently), a new branch starts from that prompt, as OpenPipe ART splits histories whose
  token prefixes diverge. No sampled token is ever trained twice or in a context it was not
  sampled in.
- `token_source` `template`: no ids were recorded, so the conversation is rendered with the named
  tokenizer's chat template (`tokenizer`, its label in the manifest), each assistant reply's
  tokens found as the Atropos rows find them (`templated_tokens`); there are no logprobs to align.
  A turn marked `summary` (a context compressor's summary, as the Hermes importer marks it)
  starts a new branch: the messages before the first assistant reply (the system prompt and the
  task), the summary, and everything after it. Without ids and without a tokenizer the session is
  skipped (`needs_tokenizer`), never guessed.
- `reward` is the export's score source (`Trajectory.score`), null when the session has none;
  `stop_reason` the last reply's finish reason; `model_version` the version the model table
  named for the endpoint that answered (`ModelEndpoint.version`), recorded on each turn.

`sample_id` is `<trajectory id>:<branch>`: the same events give the same ids, so a consumer drops
a re-sent sample by it. Pure: the same trajectory and tokenizer give the same bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

from pydantic import TypeAdapter

from rolltape.projections._trajectory import TURN_REWARD, Message, Trajectory
from rolltape.projections.exporters._atropos import ChatTokenizer, SkipSession, templated_tokens

TokenSource = Literal["exact", "template"]


@dataclass(frozen=True, slots=True)
class TokenSample:
    """One branch of one rollout as token ids (see the module docstring for each field).

    A dataclass, not a pydantic model: it is built from values already validated (the turns'
    ids), once per sample of every export line, where a model's construction cost a tenth of
    the export; `token_sample_schema()` gives its JSON Schema all the same."""

    sample_id: str
    trajectory_id: str
    session_id: str
    branch: int
    branches: int
    group_id: str | None
    task: str
    token_ids: list[int]
    mask: list[int]
    logprobs: list[float] | None
    spans: list[tuple[int, int]]
    turns: list[int]
    reward: float | None
    turn_rewards: list[float] | None
    stop_reason: str | None
    model: str | None
    model_version: str | None
    token_source: TokenSource
    tokenizer: str | None

    @property
    def prompt_length(self) -> int:
        """Tokens before the first sampled one: the prompt of stacks that split prompt and
        response."""
        return self.spans[0][0] if self.spans else len(self.token_ids)

    @property
    def has_logprobs(self) -> bool:
        """Whether every sampled position carries the sampler's logprob."""
        return self.logprobs is not None


class _Branch:
    """A branch being built: ids, mask, logprobs, and each sampled reply's span and turn."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float | None] = []
        self.spans: list[tuple[int, int]] = []
        self.turns: list[int] = []
        self.replies: list[Message] = []

    def context(self, ids: Sequence[int]) -> None:
        self.tokens.extend(ids)
        self.mask.extend([0] * len(ids))
        self.logprobs.extend([None] * len(ids))

    def sampled(self, reply: Message, turn: int) -> None:
        ids = reply.token_ids or ()
        start = len(self.tokens)
        self.tokens.extend(ids)
        self.mask.extend([1] * len(ids))
        aligned = reply.logprobs is not None and len(reply.logprobs) == len(ids)
        self.logprobs.extend(reply.logprobs if aligned and reply.logprobs else [None] * len(ids))
        self.spans.append((start, len(self.tokens)))
        self.turns.append(turn)
        self.replies.append(reply)


def _replies(trajectory: Trajectory) -> list[tuple[int, Message]]:
    """The assistant messages with their turn number (0-based, as `RewardRecord.turn` counts)."""
    return list(enumerate(m for m in trajectory.messages if m.role == "assistant"))


def _exact_branches(trajectory: Trajectory) -> list[_Branch] | None:
    replies = _replies(trajectory)
    if not replies:
        return None
    if all(r.prompt_token_ids is not None and r.token_ids is not None for _, r in replies):
        branches: list[_Branch] = []
        so_far: tuple[int, ...] = ()  # the current branch's ids, compared without copying it
        for turn, reply in replies:
            prompt = reply.prompt_token_ids or ()
            current = branches[-1] if branches else None
            if current is None or prompt[: len(so_far)] != so_far:
                current = _Branch()
                branches.append(current)
                so_far = ()
            current.context(prompt[len(so_far) :])
            current.sampled(reply, turn)
            so_far = prompt + (reply.token_ids or ())
        return branches
    # Ids recorded per message at generation time, and nothing without ids (tool results have
    # none): the conversation is those ids in order, one branch.
    if all(m.token_ids is not None for m in trajectory.messages) and not any(
        c.result for m in trajectory.messages for c in m.tool_calls
    ):
        branch = _Branch()
        turn = 0
        for message in trajectory.messages:
            if message.role == "assistant":
                branch.sampled(message, turn)
                turn += 1
            else:
                branch.context(message.token_ids or ())
        return [branch]
    return None


def _template_parts(trajectory: Trajectory) -> list[tuple[Trajectory, int]]:
    """The conversation split at compressor summaries: each part with the turn number of its
    first assistant reply. A part holds the messages before the first reply (system prompt and
    task), then its own messages from one summary to the next."""
    messages = trajectory.messages
    first_reply = next((i for i, m in enumerate(messages) if m.role == "assistant"), len(messages))
    head = messages[:first_reply]
    cuts = [i for i, m in enumerate(messages) if m.summary and i > first_reply]
    bounds = [first_reply, *cuts, len(messages)]
    parts: list[tuple[Trajectory, int]] = []
    turn = 0
    for begin, end in itertools.pairwise(bounds):
        own = messages[begin:end]
        replies = sum(1 for m in own if m.role == "assistant")
        if replies:
            parts.append((trajectory.model_copy(update={"messages": (*head, *own)}), turn))
        turn += replies
    return parts


def _template_branches(trajectory: Trajectory, tokenizer: ChatTokenizer) -> list[_Branch]:
    branches = []
    for part, first_turn in _template_parts(trajectory):
        rendered = templated_tokens(part, tokenizer)
        replies = [m for m in part.messages if m.role == "assistant"]
        branch = _Branch()
        branch.tokens = rendered.tokens
        branch.mask = [int(t) for t in rendered.trained]
        branch.logprobs = [None] * len(rendered.tokens)
        branch.spans = rendered.spans
        branch.turns = [first_turn + offset for offset in range(len(replies))]
        branch.replies = replies
        branches.append(branch)
    return branches


def _logprobs(branch: _Branch) -> list[float] | None:
    """The branch's logprobs, 0.0 where not sampled; None when a sampled token has none."""
    if any(lp is None and m == 1 for lp, m in zip(branch.logprobs, branch.mask, strict=True)):
        return None
    return [0.0 if lp is None else lp for lp in branch.logprobs]


def token_samples(
    trajectory: Trajectory,
    tokenizer: ChatTokenizer | None = None,
    *,
    tokenizer_label: str | None = None,
    score: str = "reward",
) -> list[TokenSample]:
    """A session's token samples, one per branch (see the module docstring). Raises SkipSession
    (`needs_tokenizer`, `template_not_prefix_stable`, `no_assistant_turns`) when it cannot be
    tokenized honestly."""
    branches = _exact_branches(trajectory)
    source: TokenSource = "exact"
    if branches is None:
        if not any(m.role == "assistant" for m in trajectory.messages):
            raise SkipSession("no_assistant_turns", "the session has no assistant reply")
        if tokenizer is None:
            raise SkipSession(
                "needs_tokenizer",
                "no token ids were recorded for every reply; name a tokenizer (--tokenizer PATH)",
            )
        branches = _template_branches(trajectory, tokenizer)
        source = "template"
    turn_rewards: dict[int, float] = {}
    for record in trajectory.rewards:
        if record.name == TURN_REWARD and record.turn is not None:
            turn_rewards[record.turn] = record.value
    reward = trajectory.score(score)
    samples = []
    for index, branch in enumerate(branches):
        last = branch.replies[-1]
        samples.append(
            TokenSample(
                sample_id=f"{trajectory.trajectory_id}:{index}",
                trajectory_id=trajectory.trajectory_id,
                session_id=trajectory.session_id,
                branch=index,
                branches=len(branches),
                group_id=trajectory.group_id,
                task=trajectory.task,
                token_ids=branch.tokens,
                mask=branch.mask,
                logprobs=_logprobs(branch),
                spans=branch.spans,
                turns=branch.turns,
                reward=reward,
                turn_rewards=(
                    [turn_rewards.get(turn, 0.0) for turn in branch.turns] if turn_rewards else None
                ),
                stop_reason=last.finish_reason,
                model=last.model or trajectory.model,
                model_version=last.model_version,
                token_source=source,
                tokenizer=tokenizer_label if source == "template" else None,
            )
        )
    return samples


TOKEN_SAMPLE_FIELDS = tuple(f.name for f in fields(TokenSample))
"""The form's fields, in the order a line writes them."""


def token_sample_schema() -> dict[str, object]:
    """The JSON Schema of a `rolltape` token line (pydantic's, of the dataclass)."""
    return TypeAdapter(TokenSample).json_schema()
