"""A model's reply as capture records it, built from a ChatCompletion or from stream chunks.

Reads the OpenAI fields and the serving engines' additions: `reasoning_content` / `reasoning`
(vLLM, SGLang, DeepSeek), `prompt_token_ids` (response) and `token_ids` (choice) from vLLM's
`return_token_ids`, and `logprobs.content[].logprob`. Unknown extras are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_DECLARED: dict[type, frozenset[str] | None] = {}
"""The fields each class of reply object declares (None: not a pydantic model), read once:
pydantic's class-level `model_fields` costs a microsecond per look."""


def _declared_fields(cls: type) -> frozenset[str] | None:
    try:
        return _DECLARED[cls]
    except KeyError:
        fields = getattr(cls, "model_fields", None)
        found = _DECLARED[cls] = frozenset(fields) if fields is not None else None
        return found


def extra(obj: Any, name: str) -> Any:
    """A field that may be declared by the openai types or only present as an extra."""
    if obj is None:
        return None
    fields = _declared_fields(type(obj))
    if fields is not None and name not in fields:  # an extra: no getattr (pydantic raises)
        extras = obj.model_extra
        return extras.get(name) if extras else None
    return getattr(obj, name, None)


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, list | tuple) and all(isinstance(v, int) for v in value):
        return list(value)
    return None


def _logprobs(logprobs: Any) -> list[float]:
    content = getattr(logprobs, "content", None) or []
    return [float(item.logprob) for item in content if getattr(item, "logprob", None) is not None]


@dataclass
class Reply:
    """Everything recorded about one reply (choice 0)."""

    content: str = ""
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI structured calls: {id, type, function: {name, arguments}}."""
    finish_reason: str | None = None
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    logprobs: list[float] | None = None

    @classmethod
    def from_completion(cls, completion: Any) -> Reply:
        reply = cls(model=getattr(completion, "model", None))
        reply.prompt_token_ids = _ints(extra(completion, "prompt_token_ids"))
        reply._usage(getattr(completion, "usage", None))
        choices = getattr(completion, "choices", None) or []
        if not choices:
            return reply
        choice = choices[0]
        message = choice.message
        reply.content = message.content or ""
        reply.reasoning = extra(message, "reasoning_content") or extra(message, "reasoning")
        reply.tool_calls = [
            call.model_dump(mode="json") if hasattr(call, "model_dump") else dict(call)
            for call in (message.tool_calls or [])
        ]
        reply.finish_reason = choice.finish_reason
        reply.token_ids = _ints(extra(choice, "token_ids"))
        reply.prompt_token_ids = reply.prompt_token_ids or _ints(extra(choice, "prompt_token_ids"))
        if getattr(choice, "logprobs", None) is not None:
            reply.logprobs = _logprobs(choice.logprobs)
        return reply

    def _usage(self, usage: Any) -> None:
        if usage is not None:
            self.prompt_tokens = getattr(usage, "prompt_tokens", None)
            self.completion_tokens = getattr(usage, "completion_tokens", None)


class StreamAssembler:
    """Chunks of a streamed reply into one Reply, in arrival order."""

    def __init__(self) -> None:
        self.reply = Reply()
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}

    def add(self, chunk: Any) -> None:
        reply = self.reply
        reply.model = reply.model or getattr(chunk, "model", None)
        if reply.prompt_token_ids is None:
            reply.prompt_token_ids = _ints(extra(chunk, "prompt_token_ids"))
        usage = getattr(chunk, "usage", None)
        if usage is not None:  # the last chunk, with stream_options={"include_usage": True}
            reply._usage(usage)
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) != 0:
                continue
            delta = choice.delta
            if delta is not None:
                self._delta(delta)
            if choice.finish_reason is not None:
                reply.finish_reason = choice.finish_reason
            ids = _ints(extra(choice, "token_ids"))
            if ids:
                reply.token_ids = [*(reply.token_ids or []), *ids]
            if reply.prompt_token_ids is None:
                reply.prompt_token_ids = _ints(extra(choice, "prompt_token_ids"))
            if getattr(choice, "logprobs", None) is not None:
                reply.logprobs = [*(reply.logprobs or []), *_logprobs(choice.logprobs)]

    def _delta(self, delta: Any) -> None:
        if delta.content:
            self._content.append(delta.content)
        thought = extra(delta, "reasoning_content") or extra(delta, "reasoning")
        if thought:
            self._reasoning.append(thought)
        for piece in delta.tool_calls or []:
            call = self._calls.setdefault(
                piece.index, {"id": None, "type": "function", "name": "", "arguments": []}
            )
            if piece.id:
                call["id"] = piece.id
            function = piece.function
            if function is not None:
                if function.name:
                    call["name"] += function.name
                if function.arguments:
                    call["arguments"].append(function.arguments)

    def result(self) -> Reply:
        reply = self.reply
        reply.content = "".join(self._content)
        reply.reasoning = "".join(self._reasoning) or None
        reply.tool_calls = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
            }
            for _, call in sorted(self._calls.items())
        ]
        return reply
