"""Atropos ScoredDataGroup lines (NousResearch/atropos, `atroposlib/envs/base.py`; atroposlib
0.4.0): one line per group of sessions that
answered the same prompt (`group_id`), validated by atroposlib's own `ScoredData` in the tests.

    {"tokens": [[...], [...]], "masks": [[-100, ..., 1234, ...], ...], "scores": [1.0, 0.0],
     "messages": [[{"role": "user", "content": "..."}, ...], ...], "group_overrides": {}}

Tokens and masks:
- sampled: when the session's last reply was recorded with the prompt's and the reply's token
  ids (a captured client against vLLM with `return_token_ids`), the sequence is that prompt
  plus that reply, exactly as the engine saw and sampled it; every recorded reply whose ids sit
  in that sequence right after its own prompt is trained (mask = id), all else is -100. An
  earlier reply the agent re-rendered differently (say, its reasoning dropped from the history)
  stays untrained context rather than being trained on tokens it was not sampled as;
- exact: when every message of a session carries token ids recorded at generation time and the
  session has no tool results (which never have ids), the sequence is those ids, concatenated;
  assistant ids are trained (mask = id), all others are -100. Exact ids beat re-tokenized text;
- otherwise from the tokenizer the user names (`--tokenizer PATH`, a local Hugging Face tokenizer
  with a chat template): the conversation is rendered once, each assistant reply's character span
  is found by rendering the prefixes before and after it (the template must render prefixes of a
  conversation as prefixes of its text, as chat templates do), and a token is trained when it lies
  inside an assistant span. Without token ids and without a tokenizer there is nothing honest to
  write: the session is skipped with `needs_tokenizer`.

Scores come from a `score` source (Trajectory.score). Sessions without a score are skipped
(`no_score`); groups whose scores are all equal carry no learning signal and are dropped as
Atropos's own environments do (`ensure_scores_are_not_same`) unless `keep_equal_scores`; a group
keeps its sessions in session-id order, groups are in group-id order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rolltape.projections._errors import ProjectionError
from rolltape.projections._trajectory import Trajectory
from rolltape.projections.exporters._openai import chat_messages

IGNORE = -100


class ChatTokenizer(Protocol):
    """What is used of a Hugging Face tokenizer."""

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    def __call__(self, text: str, **kwargs: Any) -> Any: ...


class TokenizerError(ProjectionError, ValueError):
    """The named tokenizer cannot be used (missing, no chat template, transformers absent)."""


def load_tokenizer(path: str | Path) -> ChatTokenizer:
    """A Hugging Face tokenizer from a local folder (never the hub)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise TokenizerError(
            "reading a tokenizer needs transformers: pip install 'rolltape[tokenizer]'"
        ) from exc
    folder = Path(path)
    if not folder.is_dir():
        raise TokenizerError(f"tokenizer folder {folder} does not exist")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"cannot load a tokenizer from {folder}: {exc}") from exc
    if not getattr(tokenizer, "chat_template", None):
        raise TokenizerError(f"the tokenizer in {folder} has no chat template")
    return tokenizer


class SkipSession(ProjectionError):
    """A session the Atropos rows leave out, with the reason counted in the manifest."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def _sampled(trajectory: Trajectory) -> tuple[list[int], list[int]] | None:
    replies = [m for m in trajectory.messages if m.role == "assistant"]
    prompt = replies[-1].prompt_token_ids if replies else None
    sampled = replies[-1].token_ids if replies else None
    if prompt is None or sampled is None:
        return None
    tokens = [*prompt, *sampled]
    masks = [IGNORE] * len(tokens)
    for reply in replies:
        if reply.prompt_token_ids is None or reply.token_ids is None:
            continue
        start, end = len(reply.prompt_token_ids), len(reply.prompt_token_ids) + len(reply.token_ids)
        if (
            tuple(tokens[:start]) == reply.prompt_token_ids
            and tuple(tokens[start:end]) == reply.token_ids
        ):
            masks[start:end] = reply.token_ids
    return tokens, masks


def _exact(trajectory: Trajectory) -> tuple[list[int], list[int]] | None:
    if not trajectory.messages:
        return None
    tokens: list[int] = []
    masks: list[int] = []
    for message in trajectory.messages:
        if message.token_ids is None or any(c.result for c in message.tool_calls):
            return None
        tokens.extend(message.token_ids)
        trained = message.role == "assistant"
        masks.extend(message.token_ids if trained else [IGNORE] * len(message.token_ids))
    return tokens, masks


def _render(tokenizer: ChatTokenizer, messages: list[dict[str, Any]], tools: Any, **kw: Any) -> str:
    text = tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False, **kw)
    if not isinstance(text, str):
        raise TokenizerError("the chat template did not render text")
    return text


@dataclass(frozen=True)
class Templated:
    """A conversation rendered with a chat template and encoded: its ids, which of them lie
    inside an assistant reply (`trained`), and each reply's token range `[start, end)`, in
    order (an empty range, where a reply rendered to no token, sits where its text would)."""

    tokens: list[int]
    trained: list[bool]
    spans: list[tuple[int, int]]


def templated_tokens(trajectory: Trajectory, tokenizer: ChatTokenizer) -> Templated:
    """The conversation rendered once with the tokenizer's chat template and encoded. A reply's
    characters are found by rendering the prefixes before and after it (the template must
    render prefixes of a conversation as prefixes of its text, as chat templates do); a token
    belongs to the reply when it lies inside those characters and is not empty. Raises
    SkipSession when the template is not prefix stable. The token form (`_tokens.py`) and the
    Atropos masks both come from here."""
    from rolltape.projections.exporters._sharegpt import tools_json

    messages = chat_messages(trajectory, "trl")
    tools = tools_json(trajectory)
    full = _render(tokenizer, messages, tools)
    chars: list[tuple[int, int]] = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = _render(tokenizer, messages[:i], tools, add_generation_prompt=True)
        after = _render(tokenizer, messages[: i + 1], tools)
        if not (full.startswith(after) and after.startswith(before)):
            raise SkipSession(
                "template_not_prefix_stable",
                "the chat template does not render conversation prefixes as text prefixes",
            )
        chars.append((len(before), len(after)))
    encoded = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    tokens = list(encoded["input_ids"])
    offsets = list(encoded["offset_mapping"])
    trained = [False] * len(tokens)
    first: list[int | None] = [None] * len(chars)
    last = [0] * len(chars)
    span_index = 0
    for i, (start, end) in enumerate(offsets):
        while span_index < len(chars) and chars[span_index][1] <= start:
            span_index += 1
        if (
            span_index < len(chars)
            and chars[span_index][0] <= start
            and start < end <= chars[span_index][1]
        ):
            trained[i] = True
            if first[span_index] is None:
                first[span_index] = i
            last[span_index] = i + 1
    spans = []
    for (begin_char, _), begin, end in zip(chars, first, last, strict=True):
        if begin is None:  # no token inside it: an empty range where its text begins
            at = next((i for i, (s, _) in enumerate(offsets) if s >= begin_char), len(tokens))
            spans.append((at, at))
        else:
            spans.append((begin, end))
    return Templated(tokens, trained, spans)


def _templated(trajectory: Trajectory, tokenizer: ChatTokenizer) -> tuple[list[int], list[int]]:
    rendered = templated_tokens(trajectory, tokenizer)
    masks = [
        token if trained else IGNORE
        for token, trained in zip(rendered.tokens, rendered.trained, strict=True)
    ]
    return rendered.tokens, masks


def tokens_and_masks(
    trajectory: Trajectory, tokenizer: ChatTokenizer | None
) -> tuple[list[int], list[int]]:
    """A session's token ids and its Atropos masks (-100 where untrained, the id where trained).
    Ids recorded at generation time are used before the tokenizer (see the module docstring).
    Raises SkipSession, with its reason, when the session cannot be tokenized honestly."""
    exact = _sampled(trajectory) or _exact(trajectory)
    if exact is not None:
        return exact
    if tokenizer is None:
        raise SkipSession(
            "needs_tokenizer",
            "no token ids were recorded for every message; name a tokenizer (--tokenizer PATH)",
        )
    return _templated(trajectory, tokenizer)


@dataclass
class AtroposExport:
    """What `atropos_groups` produced: the lines to write, and each session that was left out with
    its reason, so the manifest can count every skip."""

    groups: list[tuple[str, list[Trajectory], dict[str, Any]]] = field(default_factory=list)
    """(group key, its trajectories in line order, the ScoredDataGroup line)."""
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    """(session id, reason, detail) of sessions left out, and of dropped groups' sessions."""


def atropos_groups(
    trajectories: Iterable[Trajectory],
    tokenizer: ChatTokenizer | None = None,
    *,
    score: str = "reward",
    keep_equal_scores: bool = False,
) -> AtroposExport:
    """ScoredDataGroup lines, one per `group_id` (a session without one is a group of its own).
    Groups come in group-id order and members in session-id order. A one-session group has a
    single score, so it is dropped as `equal_scores` unless `keep_equal_scores` is set. The file
    export and `AtroposSink` both call this, so they write the same groups."""
    result = AtroposExport()
    grouped: dict[str, list[Trajectory]] = {}
    for trajectory in trajectories:
        grouped.setdefault(trajectory.group_id or trajectory.session_id, []).append(trajectory)
    for key in sorted(grouped):
        members = sorted(grouped[key], key=lambda t: t.session_id)
        kept: list[tuple[Trajectory, list[int], list[int], float]] = []
        for trajectory in members:
            value = trajectory.score(score)
            if value is None or not math.isfinite(value):
                reason = "no_score" if value is None else "non_finite_score"
                result.skipped.append((trajectory.session_id, reason, f"score source {score}"))
                continue
            try:
                tokens, masks = tokens_and_masks(trajectory, tokenizer)
            except SkipSession as exc:
                result.skipped.append((trajectory.session_id, exc.reason, str(exc)))
                continue
            kept.append((trajectory, tokens, masks, value))
        if not kept:
            continue
        scores = [value for *_, value in kept]
        if len(set(scores)) == 1 and not keep_equal_scores:
            for trajectory, *_ in kept:
                result.skipped.append(
                    (
                        trajectory.session_id,
                        "equal_scores",
                        f"group {key}: every score is {scores[0]!r}",
                    )
                )
            continue
        line = {
            "tokens": [tokens for _, tokens, _, _ in kept],
            "masks": [masks for _, _, masks, _ in kept],
            "scores": scores,
            "messages": [_messages(t) for t, *_ in kept],
            "group_overrides": {},
        }
        result.groups.append((key, [t for t, *_ in kept], line))
    return result


def _messages(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The messages as the chat template saw them (TRL form: arguments as objects)."""
    return chat_messages(trajectory, "trl")


def lines_only(export: AtroposExport) -> Sequence[dict[str, Any]]:
    """Only the ScoredDataGroup lines, in order, without the group keys and their sessions."""
    return [line for _, _, line in export.groups]
