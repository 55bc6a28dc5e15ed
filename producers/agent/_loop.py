"""The reference agent: a chat model with tools, until it answers or runs out of iterations.

The client is captured by the session (`Session.capture`), so every model call is recorded with
what the capture records (messages, reasoning, tool calls, usage, token ids when served); each
tool run is recorded by `Session.tool`, linked to the model's call by its id. A tool that fails
(an exception, arguments that are not JSON, a name the agent does not have) is answered with an
`error: ...` result the model sees on its next turn, as agents do; only the model's own failure
ends the loop early.

Servers that return calls as text (no tool parser enabled, or a model family the server does not
parse) are served by `family`: a reply without structured calls is parsed with that family's
parser (rolltape.producers.parsing) and its calls are run like structured ones. The capture,
given the same family, records the parsed calls and a `tool_parse_error` event for each block it
could not read; the loop runs the calls under the ids the capture recorded, and the model sees
its own text echoed back with the results. Blocks it could not read are told to the model in a
user message after the results (each counts as a tool error), so it can write them again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rolltape.producers._session import Session
from rolltape.producers._tools import result_text
from rolltape.producers.agent._tools import Tool
from rolltape.producers.parsing import check_family, parse
from rolltape.schemas import ToolCall, ToolParseError, result_failed

DEFAULT_MODEL = "agent"
"""The logical model the reference agent calls unless told otherwise (settings bind it)."""


class AgentResult(BaseModel):
    """How a rollout ended."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    final: str
    """The model's last answer (empty when it never answered without calling a tool)."""
    stop: Literal["answered", "max_iterations"]
    iterations: int
    tool_calls: int
    tool_errors: int
    messages: tuple[dict[str, Any], ...] = Field(default=(), exclude=True, repr=False)
    """The conversation as the last request carried it, then the final reply (what a judge
    reads of the rollout); left out of dumps: the session has it recorded."""


async def run_agent(
    client: Any,
    model: str,
    prompt: str,
    tools: Sequence[Tool],
    *,
    session: Session,
    system: str | None = None,
    max_iterations: int = 10,
    temperature: float | None = None,
    seed: int | None = None,
    family: str | None = None,
) -> AgentResult:
    """Run the loop with a captured `openai.AsyncOpenAI` client. `family` names the model's
    tool-call text format when the server returns calls as text; capture the client with the
    same family (`session.capture(client, family=family)`) so the calls and the unreadable
    blocks are recorded. Exceptions of the client (the endpoint failing) propagate: the caller
    decides whether they are worth a retry."""
    if family is not None:
        check_family(family)
    by_name = {tool.name: tool for tool in tools}
    specs = [tool.spec for tool in tools]
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": prompt})
    options: dict[str, Any] = {}
    if tools:
        options["tools"] = [tool.openai() for tool in tools]
    if temperature is not None:
        options["temperature"] = temperature
    if seed is not None:
        options["seed"] = seed
    calls = errors = 0
    final = ""
    for iteration in range(1, max_iterations + 1):
        reply = await client.chat.completions.create(model=model, messages=messages, **options)
        message = reply.choices[0].message
        structured = list(message.tool_calls or ())
        tool_calls = [_structured(call, index) for index, call in enumerate(structured)]
        # calls without the server's id (and text calls) run under the id the capture recorded,
        # found by name and arguments
        claim = any(not call.id for call in structured)
        final = message.content or ""
        messages.append(_assistant(message.content, structured))
        unreadable: str | None = None
        if not tool_calls and family is not None and message.content:
            parsed = parse(final, family, tools=specs)  # the calls the capture recorded
            tool_calls, final, claim = list(parsed.tool_calls), parsed.content, True
            if parsed.problems:  # it tried to call and wrote some of it wrong: tell it why
                errors += len(parsed.problems)
                unreadable = _unreadable(parsed.problems)
            if not tool_calls and unreadable is not None:
                messages.append({"role": "user", "content": unreadable})
                continue
        if not tool_calls:
            return AgentResult(
                final=final,
                stop="answered",
                iterations=iteration,
                tool_calls=calls,
                tool_errors=errors,
                messages=tuple(messages),
            )
        for call in tool_calls:
            calls += 1
            call_id, text, failed = await _run_tool(session, by_name, call, claim=claim)
            errors += failed
            messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        if unreadable is not None:
            messages.append({"role": "user", "content": unreadable})
    return AgentResult(
        final=final,
        stop="max_iterations",
        iterations=max_iterations,
        tool_calls=calls,
        tool_errors=errors,
        messages=tuple(messages),
    )


def _structured(call: Any, index: int) -> ToolCall:
    """A structured call of the reply; arguments that are not a JSON object stay raw, so the
    tool run can tell the model what was wrong with them. A call the server sent without an id
    gets the one the capture gives it (`call_<index>`)."""
    text = call.function.arguments or "{}"
    try:
        arguments = json.loads(text)
    except ValueError:
        arguments = None
    if isinstance(arguments, dict):
        return ToolCall(id=call.id or f"call_{index}", name=call.function.name, arguments=arguments)
    return ToolCall(id=call.id or f"call_{index}", name=call.function.name, raw_arguments=text)


def _assistant(content: str | None, tool_calls: Sequence[Any]) -> dict[str, Any]:
    """The reply as the next request carries it: structured calls as the server sent them;
    text calls are in `content`, as the model wrote them."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in tool_calls
        ]
    return message


def _unreadable(problems: Sequence[ToolParseError]) -> str:
    """What the model is told when none of its call blocks could be read, so it can write
    them again (the blocks themselves are recorded as tool_parse_error events)."""
    reasons = "; ".join(problem.error for problem in problems)
    return f"error: your tool call could not be read ({reasons}). Write it again."


async def _run_tool(
    session: Session, tools: dict[str, Tool], call: ToolCall, *, claim: bool = False
) -> tuple[str, str, bool]:
    """(the id the result answers, the result the model sees, whether it failed). With
    `claim`, the call runs under the id the capture recorded for it (found by name and
    arguments), or is recorded afresh when the capture has no such call."""
    name = call.name
    given = None if claim else call.id
    if call.raw_arguments is not None:
        text = f"error: the arguments of {name} are not a JSON object: {call.raw_arguments[:200]}"
        with session.tool(name, call.arguments, call_id=given) as run:
            run.result, run.success = text, False
        return run.call_id or call.id, text, True
    tool = tools.get(name)
    call_id = call.id
    try:
        with session.tool(name, call.arguments, call_id=given) as run:
            call_id = run.call_id or call_id
            if tool is None:
                available = ", ".join(sorted(tools)) or "none"
                run.result = f"error: there is no tool {name!r} (tools: {available})"
                run.success = False
            else:
                run.result = await tool(call.arguments)
        text = result_text(run.result)
        return call_id, text, run.success is False or (run.success is None and result_failed(text))
    except Exception as exc:  # the model sees the failure and may try again
        return call_id, f"error: {type(exc).__name__}: {exc}", True
