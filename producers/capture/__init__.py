"""OpenAI client capture: one line records every chat completion of an agent.

    client = session.capture(openai.OpenAI(base_url=..., api_key=...), family="qwen")
    # or, once for a client used by many sessions: client = capture(openai.OpenAI(...))
    # then each call inside a session's `with` block records into that session

The result is a copy of the client (the same class: `with_options()`), whose
`chat.completions.create` records, for plain and `stream=True` calls, sync and async:

- the request messages the session does not hold yet (see _conversation.py);
- the reply: content, reasoning (`reasoning_content`, else `<think>`-style blocks in the text),
  tool calls with their ids (structured `tool_calls`, else parsed from the text with the model
  `family`'s parser; unreadable blocks become `tool_parse_error` events), finish reason, usage,
  model, latency, and the exact `prompt_token_ids`, `token_ids` and logprobs when the server
  returns them (ask vLLM with `extra_body={"return_token_ids": True}` and `logprobs=True`);
- a failed call as a `model_error` event (status, message; for a broken stream, what arrived),
  after which the exception is re-raised unchanged.

What the caller gets is never changed, and an error while recording is logged, never raised.
Not captured: `with_raw_response`, `.parse()` and the Responses API (recorded by hand).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from rolltape.producers._session import Session
from rolltape.producers._tools import current_session
from rolltape.producers.capture._conversation import Conversation, as_dict
from rolltape.producers.capture._reply import Reply, StreamAssembler
from rolltape.producers.capture._stream import AsyncCapturedStream, CapturedStream
from rolltape.producers.parsing import check_family, declared_tools
from rolltape.schemas import ToolSpec

C = TypeVar("C")
log = logging.getLogger("rolltape.producers.capture")


class _Recorder:
    """The capture's state: one Conversation per session it recorded into."""

    def __init__(
        self, session: Session | None, family: str | None, model_version: str | None = None
    ) -> None:
        self.session = session
        self.family = family
        self.model_version = model_version
        self.conversations: dict[int, Conversation] = {}

    def conversation(self) -> Conversation | None:
        session = self.session or current_session()
        if session is None or session.ended:
            return None
        key = id(session)
        found = self.conversations.get(key)
        if found is None or found.session is not session:
            # a new session: forget the ended ones, so a client captured once for a long-lived
            # program does not keep every session it ever recorded
            for old in [k for k, c in self.conversations.items() if c.session.ended]:
                del self.conversations[old]
            found = self.conversations[key] = Conversation(session, self.family, self.model_version)
        return found


def _declared(tools: Any) -> list[ToolSpec]:
    """The request's `tools` (dicts or the openai pydantic objects) as ToolSpecs."""
    return declared_tools(as_dict(entry) for entry in tools or [])


def _safely(what: str, fn: Callable[..., None], *args: Any) -> None:
    """Recording must never break the agent: log and go on."""
    try:
        fn(*args)
    except Exception:
        log.warning(
            "capture: recording the %s failed; the call itself is unaffected", what, exc_info=True
        )


def capture(
    client: C,
    *,
    session: Session | None = None,
    family: str | None = None,
    model_version: str | None = None,
) -> C:
    """A recording copy of an `openai.OpenAI` or `openai.AsyncOpenAI` client. With `session`,
    it records there; without, into the session whose `with` block is current at each call
    (calls outside any session are not recorded). `family` names the model's tool-call text
    format (rolltape.producers.parsing.FAMILIES) for servers that return calls as text;
    `model_version` the version of the model the endpoint serves (`ModelEndpoint.version`),
    recorded on every reply."""
    if family is not None:
        check_family(family)
    with_options = getattr(client, "with_options", None)
    if with_options is None:
        raise TypeError(f"capture() takes an openai.OpenAI or AsyncOpenAI client, not {client!r}")
    copy = with_options()
    completions = copy.chat.completions
    original = completions.create
    state = _Recorder(session, family, model_version)
    if _is_async(copy, original):
        completions.create = _async_create(original, state)
    else:
        completions.create = _sync_create(original, state)
    return copy  # type: ignore[no-any-return]


def _is_async(client: Any, create: Any) -> bool:
    """AsyncOpenAI's `create` is a plain function returning a coroutine behind a decorator."""
    if inspect.iscoroutinefunction(inspect.unwrap(create)):
        return True
    return any(cls.__name__ == "AsyncAPIClient" for cls in type(client).__mro__)


def _begin(state: _Recorder, kwargs: dict[str, Any]) -> Conversation | None:
    try:
        conversation = state.conversation()
    except Exception:
        log.warning("capture: finding the session failed; the call is not recorded", exc_info=True)
        return None
    if conversation is not None:
        _safely("request", conversation.request, kwargs.get("messages") or [])
    return conversation


def _sync_create(original: Callable[..., Any], state: _Recorder) -> Callable[..., Any]:
    def create(*args: Any, **kwargs: Any) -> Any:
        conversation = _begin(state, kwargs)
        t0 = time.perf_counter()
        try:
            result = original(*args, **kwargs)
        except Exception as exc:
            _failed(conversation, exc, kwargs, t0)
            raise
        return _answered(conversation, result, kwargs, t0, CapturedStream)

    return create


def _async_create(original: Callable[..., Any], state: _Recorder) -> Callable[..., Any]:
    async def create(*args: Any, **kwargs: Any) -> Any:
        conversation = _begin(state, kwargs)
        t0 = time.perf_counter()
        try:
            result = await original(*args, **kwargs)
        except Exception as exc:
            _failed(conversation, exc, kwargs, t0)
            raise
        return _answered(conversation, result, kwargs, t0, AsyncCapturedStream)

    return create


def _failed(
    conversation: Conversation | None, exc: Exception, kwargs: dict[str, Any], t0: float
) -> None:
    if conversation is not None:
        _safely("error", conversation.failure, exc, kwargs.get("model"), _ms(t0))


def _answered(
    conversation: Conversation | None,
    result: Any,
    kwargs: dict[str, Any],
    t0: float,
    stream: type[CapturedStream] | type[AsyncCapturedStream],
) -> Any:
    """What the caller gets: the result itself, or its stream wrapped to record as it ends."""
    if conversation is None:
        return result
    if kwargs.get("stream"):
        return stream(result, _Finisher(conversation, kwargs, t0))
    latency_ms = _ms(t0)
    _safely(
        "reply",
        lambda: conversation.reply(
            Reply.from_completion(result), latency_ms, lambda: _declared(kwargs.get("tools"))
        ),
    )
    return result


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


class _Finisher:
    """Turns a stream's chunks into one recorded reply (or a failure), exactly once."""

    def __init__(self, conversation: Conversation, kwargs: dict[str, Any], t0: float) -> None:
        self.conversation = conversation
        self.kwargs = kwargs
        self.t0 = t0
        self.assembler = StreamAssembler()
        self.done = False

    def chunk(self, chunk: Any) -> None:
        if not self.done:
            _safely("stream chunk", self.assembler.add, chunk)

    def complete(self) -> None:
        if not self.done:
            self.done = True
            latency_ms, tools = _ms(self.t0), self.kwargs.get("tools")
            _safely(
                "reply",
                lambda: self.conversation.reply(
                    self.assembler.result(), latency_ms, lambda: _declared(tools)
                ),
            )

    def fail(self, exc: BaseException) -> None:
        if not self.done:
            self.done = True
            latency_ms, model = _ms(self.t0), self.kwargs.get("model")
            _safely(
                "error",
                lambda: self.conversation.failure(
                    exc, model, latency_ms, self.assembler.result().content
                ),
            )


__all__ = ["capture"]
