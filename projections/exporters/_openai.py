"""OpenAI fine-tuning chat JSONL and TRL conversational rows.

The formats are those of OpenAI's fine-tuning guide (chat format with tools) and of TRL's
dataset formats page (huggingface/trl, `docs/source/dataset_formats.md`).

OpenAI (`openai_row`):

    {"messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."},
                  {"role": "assistant", "content": "...", "tool_calls": [{"id": "call_1",
                   "type": "function", "function": {"name": "search", "arguments": "{\\"q\\":\\"x\\"}"}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "..."}],
     "tools": [{"type": "function", "function": {"name", "description", "parameters"}}]}

TRL (`trl_row`): the same messages with `arguments` as an object, tool messages also carry `name`,
reasoning as `reasoning_content` when recorded, and the `tools` column alongside.

Both are strict: nothing outside the formats' fields, so the files upload as they are; each line's
session and provenance are in the export's sidecar file, aligned by line.
A call with no recorded result gets no tool message (nothing is invented); the export's manifest
counts such calls (`unanswered_calls`).
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from rolltape.projections._trajectory import Trajectory
from rolltape.projections.exporters._sharegpt import tools_json


def _arguments_text(arguments: dict[str, Any], raw: str | None) -> str:
    return raw if raw is not None else orjson.dumps(arguments).decode()


def chat_messages(
    trajectory: Trajectory, flavor: Literal["openai", "trl"] = "openai"
) -> list[dict[str, Any]]:
    """The conversation as chat messages with tool calls, tool results after their turn."""
    out: list[dict[str, Any]] = []
    for message in trajectory.messages:
        entry: dict[str, Any] = {"role": message.role, "content": message.content}
        if flavor == "trl" and message.reasoning:
            entry["reasoning_content"] = message.reasoning
        if message.tool_calls:
            calls = []
            for call in message.tool_calls:
                arguments: Any
                if flavor == "openai":
                    arguments = _arguments_text(call.arguments, call.raw_arguments)
                else:
                    arguments = call.arguments if call.raw_arguments is None else call.raw_arguments
                calls.append(
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": arguments},
                    }
                )
            entry["tool_calls"] = calls
        out.append(entry)
        for call in message.tool_calls:
            if call.result is None:
                continue
            tool: dict[str, Any] = {"role": "tool", "tool_call_id": call.id}
            if flavor == "trl":
                tool["name"] = call.name
            tool["content"] = call.result.content
            out.append(tool)
    return out


def openai_row(trajectory: Trajectory) -> dict[str, Any]:
    """One row in the OpenAI fine-tuning chat format. `tools` is written only when the session
    declared tools."""
    row: dict[str, Any] = {"messages": chat_messages(trajectory, "openai")}
    if trajectory.tools:
        row["tools"] = tools_json(trajectory)
    return row


def trl_row(trajectory: Trajectory) -> dict[str, Any]:
    """One row in the TRL conversational format. `tools` is always written (TRL keeps tools in a
    column of its own), as an empty list when the session declared none."""
    return {"messages": chat_messages(trajectory, "trl"), "tools": tools_json(trajectory)}
