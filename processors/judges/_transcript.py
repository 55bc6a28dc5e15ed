"""What a judge sees of an agent session: the conversation as text, its tools, end and rewards.

Kept in the worker's state while a session runs, so it is bounded: past `max_chars` of text the
middle of the conversation is dropped (the first turns carry the task, the last the answer) and
`truncated` says so; a judge is never shown a silently shortened session.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from rolltape.schemas import (
    Reward,
    SessionEnded,
    SessionStarted,
    ToolCall,
    ToolResult,
    Turn,
)

DEFAULT_MAX_CHARS = 32_000


class TranscriptItem(BaseModel):
    """One turn, tool call or tool result as a judge reads it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["turn", "tool_call", "tool_result"]
    role: str
    """system/user/assistant for turns; the tool name for calls and results."""
    text: str
    reasoning: str | None = None


class Transcript(BaseModel):
    """A session as a judge reads it, bounded in size while the session runs."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    task: str = ""
    tools: list[str] = Field(default_factory=list)
    items: list[TranscriptItem] = Field(default_factory=list)
    status: str | None = None
    outcome: dict[str, Any] = Field(default_factory=dict)
    rewards: list[Reward] = Field(default_factory=list)
    size: int = 0
    """Characters of text held (kept up to date so a long session is not re-measured per item)."""
    truncated: int = 0
    """Items dropped from the middle to stay under the size bound."""

    def observe(self, payload: BaseModel, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        """Fold the typed payload of one usable event of the session's events stream."""
        if isinstance(payload, SessionStarted):
            self.task, self.tools = payload.task, [t.name for t in payload.tools]
        elif isinstance(payload, Turn):
            item = TranscriptItem(
                kind="turn", role=payload.role, text=payload.content, reasoning=payload.reasoning
            )
            self._add(item, max_chars)
        elif isinstance(payload, ToolCall):
            call = payload
            args = call.raw_arguments if call.raw_arguments is not None else _json(call.arguments)
            self._add(TranscriptItem(kind="tool_call", role=call.name, text=args), max_chars)
        elif isinstance(payload, ToolResult):
            result = payload
            text = (
                result.content if result.success else f"[failed: {result.error}] {result.content}"
            )
            self._add(TranscriptItem(kind="tool_result", role=result.call_id, text=text), max_chars)
        elif isinstance(payload, Reward):
            self.rewards.append(payload)
        elif isinstance(payload, SessionEnded):
            self.status, self.outcome = payload.status, dict(payload.outcome)

    def _add(self, item: TranscriptItem, max_chars: int) -> None:
        self.items.append(item)
        self.size += _size(item)
        while self.size > max_chars and len(self.items) > 2:
            self.size -= _size(self.items.pop(len(self.items) // 2))
            self.truncated += 1

    def render(self) -> str:
        """The conversation as plain text for a judge prompt."""
        lines = [f"TASK: {self.task}", f"TOOLS: {', '.join(self.tools) or '(none)'}"]
        for n, item in enumerate(self.items):
            if self.truncated and n == len(self.items) // 2:
                lines.append(f"[... {self.truncated} items omitted ...]")
            if item.kind == "turn":
                if item.reasoning:
                    lines.append(f"{item.role.upper()} (reasoning): {item.reasoning}")
                lines.append(f"{item.role.upper()}: {item.text}")
            elif item.kind == "tool_call":
                lines.append(f"TOOL CALL {item.role}: {item.text}")
            else:
                lines.append(f"TOOL RESULT: {item.text}")
        lines.append(f"SESSION ENDED: {self.status}")
        return "\n".join(lines)


def _size(item: TranscriptItem) -> int:
    return len(item.text) + len(item.reasoning or "")


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
