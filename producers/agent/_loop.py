"""The reference agent: a chat model with tools, until it answers or runs out of iterations.

The client is captured by the session (`Session.capture`), so every model call is recorded with
what the capture records (messages, reasoning, tool calls, usage, token ids when served); each
tool run is recorded by `Session.tool`, linked to the model's call by its id. A tool that fails
(an exception, arguments that are not JSON, a name the agent does not have) is answered with an
`error: ...` result the model sees on its next turn, as agents do; only the model's own failure
ends the loop early.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from rolltape.producers._recorder import Session
from rolltape.producers._tools import result_text
from rolltape.producers.agent._tools import Tool
from rolltape.schemas import result_failed

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
) -> AgentResult:
    """Run the loop with a captured `openai.AsyncOpenAI` client. Exceptions of the client (the
    endpoint failing) propagate: the caller decides whether they are worth a retry."""
    by_name = {tool.name: tool for tool in tools}
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": prompt})
    options: dict[str, Any] = {}
    if tools:
        options["tools"] = [tool.openai() for tool in tools]
    if temperature is not None:
        options["temperature"] = temperature
    calls = errors = 0
    final = ""
    for iteration in range(1, max_iterations + 1):
        reply = await client.chat.completions.create(model=model, messages=messages, **options)
        message = reply.choices[0].message
        tool_calls = list(message.tool_calls or ())
        final = message.content or ""
        messages.append(_assistant(message.content, tool_calls))
        if not tool_calls:
            return AgentResult(
                final=final,
                stop="answered",
                iterations=iteration,
                tool_calls=calls,
                tool_errors=errors,
            )
        for call in tool_calls:
            calls += 1
            text, failed = await _run_tool(session, by_name, call)
            errors += failed
            messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return AgentResult(
        final=final,
        stop="max_iterations",
        iterations=max_iterations,
        tool_calls=calls,
        tool_errors=errors,
    )


def _assistant(content: str | None, tool_calls: list[Any]) -> dict[str, Any]:
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


async def _run_tool(session: Session, tools: dict[str, Tool], call: Any) -> tuple[str, bool]:
    """(the result the model sees, whether it failed)."""
    name = call.function.name
    try:
        arguments = json.loads(call.function.arguments or "{}")
        if not isinstance(arguments, dict):
            raise ValueError("arguments must be a JSON object")
    except ValueError as exc:
        text = f"error: the arguments of {name} are not a JSON object: {exc}"
        with session.tool(name, {}, call_id=call.id) as run:
            run.result, run.success = text, False
        return text, True
    tool = tools.get(name)
    try:
        with session.tool(name, arguments, call_id=call.id) as run:
            if tool is None:
                available = ", ".join(sorted(tools)) or "none"
                run.result = f"error: there is no tool {name!r} (tools: {available})"
                run.success = False
            else:
                run.result = await tool(arguments)
        text = result_text(run.result)
        return text, run.success is False or (run.success is None and result_failed(text))
    except Exception as exc:  # the model sees the failure and may try again
        return f"error: {type(exc).__name__}: {exc}", True
