"""ShareGPT rows in the conventions agent trainers already consume (the Hermes agent's:
`_convert_to_trajectory_format` in `run_agent.py` and the rows of `batch_runner.py`,
NousResearch/hermes-agent as of commit 5d3be898), with the escaping of `_tags` so any content
round-trips.

A row:

    {"conversations": [{"from": "system", "value": "...<tools>\\n[...]\\n</tools>"},
                       {"from": "human", "value": "..."},
                       {"from": "gpt", "value": "<think>\\n...\\n</think>\\n...\\n<tool_call>\\n{...}\\n</tool_call>"},
                       {"from": "tool", "value": "<tool_response>\\n{...}\\n</tool_response>"}, ...],
     "session_id", "trajectory_id", "completed", "partial", "api_calls", "toolsets_used",
     "tool_stats", "tool_error_counts", "reward", "accepted", "tool_call_ids", "metadata"}

- the system turn is the session's first system message followed by the declared tools as a JSON
  list inside `<tools>` (OpenAI function form); no system turn when there is neither;
- every assistant turn starts with `<think>\\n{reasoning}\\n</think>\\n` (empty when none), then
  its text, then each call as `\\n<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`
  (`arguments` is the model's text when it was not a JSON object);
- all results of one assistant turn's calls are merged into one `tool` turn of
  `<tool_response>\\n{"tool_call_id", "name", "content"}\\n</tool_response>` blocks, in call order;
- call ids stay out of the trained text (a model would learn to emit random ids); the row keeps
  them in `tool_call_ids`, one list per gpt turn, and each response names its call's id;
- `text_escaping: "rolltape-tags-v1"` marks the row's text as escaped by the rule above, so a
  reader un-escapes it (and leaves the text of rows without the mark, such as Hermes rows, as it
  stands);
- `tool_stats` / `tool_error_counts` list every declared tool (and every tool of the export),
  zeros when unused, and every name the model called, declared or not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, Literal

import orjson
from pydantic import BaseModel

from rolltape.projections._errors import ProjectionError
from rolltape.projections._trajectory import Message, Trajectory
from rolltape.projections.exporters._tags import escape, unescape


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def tools_json(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The declared tools in OpenAI function form (shared by every exporter)."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in trajectory.tools
    ]


def _system_value(system: str | None, trajectory: Trajectory) -> str | None:
    parts = []
    if system is not None:
        parts.append(escape(system))
    if trajectory.tools:
        parts.append(f"<tools>\n{escape(_json(tools_json(trajectory)))}\n</tools>")
    return "\n\n".join(parts) if parts else None


def _gpt_value(message: Message) -> str:
    value = f"<think>\n{escape(message.reasoning or '')}\n</think>\n{escape(message.content)}"
    for call in message.tool_calls:
        arguments: Any = call.raw_arguments if call.raw_arguments is not None else call.arguments
        body = _json({"name": call.name, "arguments": arguments})
        value += f"\n<tool_call>\n{escape(body)}\n</tool_call>"
    return value


def _tool_value(message: Message) -> str | None:
    blocks = []
    for call in message.tool_calls:
        if call.result is None:
            continue
        body = _json({"tool_call_id": call.id, "name": call.name, "content": call.result.content})
        blocks.append(f"<tool_response>\n{escape(body)}\n</tool_response>")
    return "\n".join(blocks) if blocks else None


def sharegpt_row(trajectory: Trajectory, known_tools: Iterable[str] = ()) -> dict[str, Any]:
    """One ShareGPT row for a trajectory. `known_tools` (for example every tool of an export)
    are listed in tool_stats with zeros too, so all rows of a file share one schema."""
    messages = list(trajectory.messages)
    system = None
    if messages and messages[0].role == "system":
        system = messages.pop(0).content
    conversations: list[dict[str, str]] = []
    system_value = _system_value(system, trajectory)
    if system_value is not None:
        conversations.append({"from": "system", "value": system_value})
    call_ids: list[list[str]] = []
    for message in messages:
        if message.role == "assistant":
            conversations.append({"from": "gpt", "value": _gpt_value(message)})
            call_ids.append([call.id for call in message.tool_calls])
            tool_value = _tool_value(message)
            if tool_value is not None:
                conversations.append({"from": "tool", "value": tool_value})
        else:
            role = "human" if message.role == "user" else "system"
            conversations.append({"from": role, "value": escape(message.content)})
    zero = {"count": 0, "success": 0, "failure": 0}
    stats = {name: dict(zero) for name in known_tools}
    stats.update({name: s.model_dump() for name, s in trajectory.tool_stats.items()})
    stats = dict(sorted(stats.items()))
    return {
        "conversations": conversations,
        "session_id": trajectory.session_id,
        "trajectory_id": trajectory.trajectory_id,
        "completed": trajectory.completed,
        "partial": not trajectory.completed,
        "api_calls": sum(1 for m in trajectory.messages if m.role == "assistant"),
        "toolsets_used": sorted(name for name, s in trajectory.tool_stats.items() if s.count),
        "tool_stats": stats,
        "tool_error_counts": {name: s["failure"] for name, s in stats.items()},
        "reward": trajectory.reward,
        "accepted": trajectory.accepted,
        "tool_call_ids": call_ids,
        "text_escaping": ESCAPING_MARK,
        "metadata": {
            "model": trajectory.model,
            "task": trajectory.task,
            "group_id": trajectory.group_id,
            "status": trajectory.status,
            "started_ns": trajectory.started_ns,
            "ended_ns": trajectory.ended_ns,
            "judge_version": trajectory.judge_version,
        },
    }


# -- reading rows back (round trip, importers) -----------------------------------------------------

# Reading a gpt turn: only a `<think>` block at the very start is reasoning, and only a run of
# well-formed `<tool_call>` blocks at the very end are calls; everything between is content,
# exactly as written, tag literals included (Hermes escapes nothing, so prose that quotes
# `</think><tool_call>` must stay prose). Hermes writes `<think>\n...\n</think>\n`,
# `<think>\n</think>\n` (no reasoning) or `<think>...</think>` (scratchpad): one newline on each
# side belongs to the tags, as does the one newline before each call block.
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_CALL_OPEN, _CALL_CLOSE = "<tool_call>\n", "\n</tool_call>"
_RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.S)
_TOOLS = re.compile(r"<tools>\n(.*?)\n</tools>", re.S)
ROLLTAPE_TOOLS_SEPARATOR, HERMES_TOOLS_SEPARATOR = "\n\n", "\n"
"""Before the `<tools>` block: rolltape puts it last after a blank line, Hermes on its own line
between its preamble and more text."""

ESCAPING_MARK = "rolltape-tags-v1"
"""The `text_escaping` value of rows rolltape writes: only their text is un-escaped on reading
(Hermes escapes nothing, so `&amp;` in a Hermes row is the tool's own text)."""


def _identity(text: str) -> str:
    return text


class ShareGPTFormatError(ProjectionError, ValueError):
    """A row does not follow the conventions above."""


def parse_gpt_value(
    value: str, unescape: Callable[[str], str] = unescape
) -> tuple[str, str, list[tuple[str, Any]]]:
    """(reasoning, content, [(tool name, arguments)]) of one gpt turn. The structure is found on
    the text as stored, the pieces are un-escaped after (escaped text holds no structural tag)."""
    reasoning, start = _leading_reasoning(value)
    end, calls = _trailing_calls(value, start, unescape)
    return unescape(reasoning), unescape(value[start:end]), calls


def _leading_reasoning(value: str) -> tuple[str, int]:
    """The leading `<think>` block's text and where the content starts. A turn that does not
    start with a closed block has no reasoning: a tag elsewhere is the text's own."""
    if not value.startswith(_THINK_OPEN):
        return "", 0
    close = value.find(_THINK_CLOSE, len(_THINK_OPEN))
    if close == -1:
        return "", 0
    inner = value[len(_THINK_OPEN) : close]
    inner = inner[1:] if inner.startswith("\n") else inner
    inner = inner[:-1] if inner.endswith("\n") else inner
    start = close + len(_THINK_CLOSE)
    return inner, start + 1 if value.startswith("\n", start) else start


def _trailing_calls(
    value: str, start: int, unescape: Callable[[str], str]
) -> tuple[int, list[tuple[str, Any]]]:
    """Where the content ends and the calls after it, read back to front: a block counts only
    when its body is a JSON object with a name (a JSON body holds no raw newline, so the last
    `<tool_call>\\n` before a closing tag opens its block). The first block from the end that is
    not a call ends the run; it and all before it are content."""
    calls: list[tuple[str, Any]] = []
    end = len(value)
    while value.endswith(_CALL_CLOSE, start, end):
        body_end = end - len(_CALL_CLOSE)
        open_at = value.rfind(_CALL_OPEN, start, body_end)
        if open_at == -1:
            break
        call = _call_body(unescape(value[open_at + len(_CALL_OPEN) : body_end]))
        if call is None:
            break
        calls.append(call)
        end = open_at - 1 if open_at > start and value[open_at - 1] == "\n" else open_at
    calls.reverse()
    return end, calls


def _call_body(body: str) -> tuple[str, Any] | None:
    try:
        call = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    return call["name"], call.get("arguments", call.get("parameters", {}))


def parse_tool_value(value: str, unescape: Callable[[str], str] = unescape) -> list[dict[str, Any]]:
    """The {tool_call_id, name, content} blocks of one tool turn. Text outside the blocks is an
    error rather than dropped: a tool turn holds nothing else."""
    bodies: list[str] = []
    pos = 0
    for match in _RESPONSE.finditer(value):
        if value[pos : match.start()].strip():
            break
        bodies.append(match.group(1))
        pos = match.end()
    stray = value[pos:].strip()
    if stray:
        raise ShareGPTFormatError(f"text outside the <tool_response> blocks: {stray[:80]!r}")
    try:
        blocks = [orjson.loads(unescape(body)) for body in bodies]
    except orjson.JSONDecodeError as exc:
        raise ShareGPTFormatError(f"a <tool_response> block is not JSON: {exc}") from exc
    if not all(isinstance(block, dict) for block in blocks):
        raise ShareGPTFormatError("a <tool_response> block is not a JSON object")
    return blocks


def parse_system_value(
    value: str,
    unescape: Callable[[str], str] = unescape,
    separator: str = ROLLTAPE_TOOLS_SEPARATOR,
) -> tuple[str | None, list[dict[str, Any]]]:
    """(system text, declared tools) of a system turn. The first `<tools>` block that holds a
    JSON list is taken out of the text wherever it stands (Hermes puts more text after it),
    with the `separator` its writer put before it; a block that does not is the text's own.
    None when the turn holds the block alone (an empty system text written before it is "")."""
    for match in _TOOLS.finditer(value):
        try:
            tools = orjson.loads(unescape(match.group(1)))
        except orjson.JSONDecodeError:
            continue
        if isinstance(tools, list):
            start = match.start()
            written = value.endswith(separator, 0, start)
            start -= len(separator) if written else 0
            rest = value[:start] + value[match.end() :]
            return (unescape(rest) if rest or written else None), tools
    return unescape(value), []


class ParsedCall(BaseModel):
    """A tool call read from a `<tool_call>` block. `id` is None when the row kept no call ids
    (Hermes rows never do)."""

    id: str | None
    name: str
    arguments: Any


class ParsedResponse(BaseModel):
    """One `<tool_response>` block. Hermes fills in `name` by call position, so the name is wrong
    when results come back out of order; match on `tool_call_id` first."""

    tool_call_id: str | None
    name: str | None
    content: Any


class ParsedMessage(BaseModel):
    """One turn read back. Assistant turns carry `reasoning` and `tool_calls`; a `tool` turn
    carries only `responses`, all the results that follow one assistant turn."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    reasoning: str | None = None
    tool_calls: list[ParsedCall] = []
    responses: list[ParsedResponse] = []


class ParsedRow(BaseModel):
    """A ShareGPT row read back: the system text, declared tools and the messages."""

    system: str | None
    tools: list[dict[str, Any]]
    messages: list[ParsedMessage]


_FROM_ROLES: dict[str, Literal["system", "user", "assistant", "tool"]] = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}


def parse_sharegpt_row(row: dict[str, Any]) -> ParsedRow:
    """Read a row written by `sharegpt_row`, or by the Hermes agent (batch runner or
    interactive), back into messages.

    Text is un-escaped only in rows rolltape wrote (`text_escaping`); Hermes text is taken as
    it stands. Call ids come from the row's `tool_call_ids` when present; otherwise they are
    None and a caller must match responses to calls by their own `tool_call_id` or name."""
    turns = row.get("conversations")
    if not isinstance(turns, list):
        raise ShareGPTFormatError("a ShareGPT row needs a 'conversations' list")
    ids: list[list[str]] = list(row.get("tool_call_ids") or [])
    text = unescape if row.get("text_escaping") == ESCAPING_MARK else _identity
    system: str | None = None
    tools: list[dict[str, Any]] = []
    messages: list[ParsedMessage] = []
    gpt_index = 0
    for position, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise ShareGPTFormatError(f"turn {position} needs 'from' and a string 'value'")
        role = _FROM_ROLES.get(turn.get("from", ""))
        if role is None:
            raise ShareGPTFormatError(f"turn {position}: unknown 'from' {turn.get('from')!r}")
        value = turn["value"]
        if role == "system" and position == 0:
            system, tools = parse_system_value(
                value,
                text,
                ROLLTAPE_TOOLS_SEPARATOR if text is unescape else HERMES_TOOLS_SEPARATOR,
            )
        elif role == "assistant":
            reasoning, content, calls = parse_gpt_value(value, text)
            turn_ids = ids[gpt_index] if gpt_index < len(ids) else []
            gpt_index += 1
            parsed_calls = [
                ParsedCall(id=turn_ids[i] if i < len(turn_ids) else None, name=n, arguments=a)
                for i, (n, a) in enumerate(calls)
            ]
            messages.append(
                ParsedMessage(
                    role="assistant", content=content, reasoning=reasoning, tool_calls=parsed_calls
                )
            )
        elif role == "tool":
            responses = [
                ParsedResponse(
                    tool_call_id=block.get("tool_call_id"),
                    name=block.get("name"),
                    content=block.get("content"),
                )
                for block in parse_tool_value(value, text)
            ]
            messages.append(ParsedMessage(role="tool", responses=responses))
        else:
            messages.append(ParsedMessage(role=role, content=text(value)))
    return ParsedRow(system=system, tools=tools, messages=messages)
