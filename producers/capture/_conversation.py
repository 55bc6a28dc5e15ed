"""What a captured client records into a session: new request messages, replies, failures.

An agent sends the whole conversation on every call. The recorder keeps, per session, the
fingerprints of the messages the session already holds, and records only the rest:

- when the request starts with what was recorded (the usual append-only loop), the new tail;
- otherwise (the agent rewrote or compressed its history), every message not recorded before;
- a tool message whose call already has a recorded result (a `record_tool` tool ran it) is not
  recorded again.

Assistant messages are compared by their text without reasoning and their call ids, so an agent
that echoes a reply back as a dict, a pydantic object or without its `<think>` block is not
recorded twice.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rolltape.producers.capture._reply import Reply
from rolltape.producers.parsing import parse, split_reasoning, structured_calls
from rolltape.schemas import ToolSpec

if TYPE_CHECKING:
    from rolltape.producers._session import Session

log = logging.getLogger("rolltape.producers.capture")

Fingerprint = tuple[str, str, tuple[str, ...]]


def as_dict(message: Any) -> dict[str, Any]:
    """A request message as a plain dict (agents pass dicts or the openai pydantic objects)."""
    if isinstance(message, Mapping):
        return dict(message)
    if hasattr(message, "model_dump"):
        dumped = message.model_dump(exclude_none=True)
        return dumped if isinstance(dumped, dict) else {}
    return {}


def text_of(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list of parts (other parts,
    such as images, are named in brackets so the turn shows they were there)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        pieces = []
        for part in content:
            part = as_dict(part)
            if part.get("type") == "text":
                pieces.append(str(part.get("text", "")))
            else:
                pieces.append(f"[{part.get('type', 'part')}]")
        return "".join(pieces)
    return str(content)


def _call_ids(message: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(as_dict(c).get("id", "")) for c in message.get("tool_calls") or [])


def fingerprint(message: Mapping[str, Any]) -> Fingerprint:
    """What makes two request messages the same message: (role, text, call ids). A tool message
    is known by its call id alone, and so is an assistant message that made calls (call ids are
    unique, and an echo may come without the text: OpenTelemetry's openai-v2 instrumentation
    drops an assistant message's text when it has calls); an assistant's text is taken without
    its reasoning, so an echo without `<think>` matches the reply it came from."""
    role = str(message.get("role", ""))
    if role == "tool":
        return (role, str(message.get("tool_call_id", "")), ())
    if role == "assistant":
        calls = _call_ids(message)
        if calls and all(calls):
            return (role, "", calls)
        return (role, split_reasoning(text_of(message.get("content")))[0].strip(), calls)
    return (role, text_of(message.get("content")), ())


class Conversation:
    """One session's view through a captured client."""

    def __init__(
        self, session: Session, family: str | None, model_version: str | None = None
    ) -> None:
        self.session = session
        self.family = family
        self.model_version = model_version
        self.recorded: list[Fingerprint] = []
        self.replies = 0
        self._sent: list[tuple[Any, Fingerprint]] = []
        """The last request's message objects and their fingerprints: an agent appends to one
        list, so a message object at the same place is not fingerprinted again."""

    def _fingerprints(self, messages: Sequence[Any]) -> list[Fingerprint]:
        sent = self._sent
        prints = [
            sent[i][1] if i < len(sent) and sent[i][0] is message else fingerprint(as_dict(message))
            for i, message in enumerate(messages)
        ]
        self._sent = list(zip(messages, prints, strict=True))
        return prints

    def request(self, messages: Sequence[Any]) -> None:
        """Record the request's messages the session does not hold yet."""
        prints = self._fingerprints(messages)
        if prints[: len(self.recorded)] == self.recorded:
            new = list(messages[len(self.recorded) :])
        else:
            seen = Counter(self.recorded)
            new = []
            for message, mark in zip(messages, prints, strict=True):
                if seen[mark]:
                    seen[mark] -= 1
                else:
                    new.append(message)
        for message in new:
            self._message(as_dict(message))
        self.recorded = prints

    def extend(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Record messages that follow exactly what the session holds (the caller compared the
        request's prefix itself, more cheaply than by fingerprints: the OTLP ingest)."""
        for message in messages:
            self._message(message)
        self.recorded.extend(fingerprint(m) for m in messages)
        self._sent = []

    def _message(self, message: Mapping[str, Any]) -> None:
        s = self.session
        role = message.get("role")
        text = text_of(message.get("content"))
        if role in ("system", "developer"):
            s.turn("system", text)
        elif role == "user":
            s.turn("user", text)
        elif role == "assistant":
            rest, reasoning = split_reasoning(text)
            s.turn("assistant", rest.strip(), reasoning=reasoning)
            calls, _problems = structured_calls(
                [as_dict(c) for c in message.get("tool_calls") or []]
            )
            for call in calls:
                s.tool_call(
                    call.name, call.arguments, call_id=call.id, raw_arguments=call.raw_arguments
                )
        elif role == "tool":
            call_id = str(message.get("tool_call_id", ""))
            if not call_id and s._open_calls:  # a result without an id answers the oldest call
                call_id = s._open_calls[0][0]
            if call_id and call_id not in s._answered:
                s.tool_result(call_id, text)
        else:
            log.warning("capture: a message with role %r was not recorded", role)

    def reply(
        self,
        reply: Reply,
        latency_ms: float,
        tools: Sequence[ToolSpec] | Callable[[], Sequence[ToolSpec]] = (),
    ) -> None:
        """Record the assistant's reply: the turn with its token ids, then its calls (`tools`,
        the request's declared tools, type the arguments of calls written as text; a function
        giving them is called only then)."""
        s = self.session
        self.replies += 1
        content, reasoning = reply.content, reply.reasoning
        calls, problems = structured_calls(reply.tool_calls)
        if not reply.tool_calls:
            parsed = parse(
                content,
                self.family or "openai",
                tools=tools() if callable(tools) else tools,
                seed=f"{s.session_id}:{self.replies}",
            )
            content, calls, problems = parsed.content, parsed.tool_calls, parsed.problems
            reasoning = reasoning or parsed.reasoning
        s.turn(
            "assistant",
            content,
            reasoning=reasoning,
            token_ids=reply.token_ids,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            prompt_token_ids=reply.prompt_token_ids,
            logprobs=reply.logprobs,
            finish_reason=reply.finish_reason,
            model=reply.model,
            latency_ms=round(latency_ms, 3),
            model_version=self.model_version,
        )
        for call in calls:
            s.tool_call(
                call.name, call.arguments, call_id=call.id, raw_arguments=call.raw_arguments
            )
        for problem in problems:
            s.record(problem)
        echoed = {"role": "assistant", "content": reply.content, "tool_calls": reply.tool_calls}
        if not reply.tool_calls and calls:  # text calls: the agent echoes the text, ids unknown
            echoed["tool_calls"] = []
        self.recorded.append(fingerprint(echoed))

    def failure(
        self, exc: BaseException, model: Any, latency_ms: float, partial: str | None = None
    ) -> None:
        status = getattr(exc, "status_code", None)
        message = getattr(exc, "message", None) or str(exc)
        self.error(
            type(exc).__name__,
            str(message),
            status=status if isinstance(status, int) else None,
            model=model if isinstance(model, str) else None,
            latency_ms=latency_ms,
            partial=partial,
        )

    def error(
        self,
        error_type: str,
        message: str,
        *,
        status: int | None,
        model: str | None,
        latency_ms: float,
        partial: str | None = None,
    ) -> None:
        """Record a failed model call as a `model_error` event."""
        self.session._record(
            "events",
            "model_error",
            {
                "error_type": error_type,
                "message": message[:4000],
                "status": status,
                "model": model,
                "latency_ms": round(latency_ms, 3),
                "partial_content": partial,
            },
        )
