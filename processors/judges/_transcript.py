"""What a judge sees of an agent session: the conversation as text, its tools, end and rewards.

Kept in the worker's state while a session runs, so it is bounded: past `max_chars` of text the
middle of the conversation is dropped (the first turns carry the task, the last the answer) and
`truncated` says so; a judge is never shown a silently shortened session.

It is a view of `rolltape.processors.conversation`, so a judge reads the conversation the export
trains on: a repeated call id and a result that answers no call (a second one, or one for a call
never made) are not shown, and a result is marked failed by the export's rule (`tool_failed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from rolltape.processors.conversation import Conversation, View
from rolltape.schemas import (
    Reward,
    SessionEnded,
    SessionStarted,
    ToolCall,
    ToolResult,
    Turn,
    WorldSnapshot,
)

DEFAULT_MAX_CHARS = 32_000


@dataclass(frozen=True, slots=True)
class TranscriptItem:
    """One turn, tool call or tool result as a judge reads it.

    A frozen dataclass, not a model: the worker makes one per turn, call and result of every
    judged session, and a model's validating `__init__` was a tenth of stepping one (0.9 µs
    against 0.35). Its fields come from payloads validated already; a transcript read back from
    a saved state or a judge request is validated field by field by the `Transcript` around it
    (pydantic validates dataclass fields, with the config below)."""

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    kind: Literal["turn", "tool_call", "tool_result"]
    role: str
    """system/user/assistant for turns; the tool name for calls; the call id for results."""
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
    environment: dict[str, Any] | None = None
    """The environment and item the session is a rollout of (its run_config's `environment`),
    so a judge can take the task's own data."""
    world: str | None = None
    """Digest of the world the session recorded last (its `world_snapshot`): a tools judge
    grades inside it, restored from the log."""
    conversation: Conversation = Field(
        default_factory=Conversation, exclude_if=lambda conversation: conversation.ended
    )
    """Where the conversation stands, so calls and results are taken as the export takes them.
    Reading state only: dropped once the session has ended (the worker's audit admits nothing
    after session_ended), so what a judge request carries is the transcript alone."""

    def observe(self, payload: BaseModel, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        """Fold the typed payload of one usable event of the session's events stream."""
        if isinstance(payload, WorldSnapshot):
            self.world = payload.digest
            return
        self.conversation.tell(payload, (self, max_chars), _VIEW)

    def _add(self, item: TranscriptItem, max_chars: int) -> None:
        items = self.items
        items.append(item)
        size = self.size + _size(item)
        if size > max_chars and len(items) > 2:
            # Counted locally and set once: setting a field of a model is slow in the hot path.
            dropped = 0
            while size > max_chars and len(items) > 2:
                size -= _size(items.pop(len(items) // 2))
                dropped += 1
            self.truncated += dropped
        self.size = size

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


class _TranscriptView(View[tuple[Transcript, int]]):
    """What a judge is shown of each part: the conversation as the export takes it (a repeated
    call and a stray result are not shown; a result is marked failed by the export's rule)."""

    def started(self, start: SessionStarted, at: tuple[Transcript, int]) -> None:
        at[0].task, at[0].tools = start.task, [t.name for t in start.tools]
        environment = start.run_config.get("environment")
        at[0].environment = dict(environment) if isinstance(environment, dict) else None

    def turn(self, turn: Turn, at: tuple[Transcript, int]) -> None:
        at[0]._add(TranscriptItem("turn", turn.role, turn.content, turn.reasoning), at[1])

    def call(
        self, call: ToolCall, at: tuple[Transcript, int], *, opens: bool, repeated: bool
    ) -> None:
        if repeated:
            return
        args = call.raw_arguments if call.raw_arguments is not None else _json(call.arguments)
        at[0]._add(TranscriptItem("tool_call", call.name, args), at[1])

    def answer(self, result: ToolResult, at: tuple[Transcript, int], *, failed: bool) -> None:
        text = f"[failed: {result.error}] {result.content}" if failed else result.content
        at[0]._add(TranscriptItem("tool_result", result.call_id, text), at[1])

    def reward(self, reward: Reward, at: tuple[Transcript, int]) -> None:
        at[0].rewards.append(reward)

    def ended(self, end: SessionEnded, at: tuple[Transcript, int]) -> None:
        transcript = at[0]
        transcript.status, transcript.outcome = end.status, dict(end.outcome)
        transcript.conversation.calls.clear()  # not read again (see Transcript.conversation)


_VIEW = _TranscriptView()


def _size(item: TranscriptItem) -> int:
    return len(item.text) + len(item.reasoning or "")


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
