"""What a judge is given about the rollout it grades: the task, and the session as text and as
data. A tools judge reads them as files in a folder of its own run (task.json, transcript.md,
trace.json, mounted at /judge), never in the world it judges, so the policy can neither read nor
plant them; a null judge's hook renders what it needs into its prompt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from rolltape.schemas import WorldSnapshot, canonical_bytes

INPUT_FILES: Final = ("task.json", "transcript.md", "trace.json")


@dataclass(frozen=True)
class WorldView:
    """The world a judge grades in: the live workdir after the policy finished, or a fresh copy
    restored from the recorded snapshot (whose files over the size limits are absent, and the
    judge is told so)."""

    path: Path
    snapshot: WorldSnapshot
    restored: bool

    @property
    def absent(self) -> list[str]:
        return [e.path for e in self.snapshot.missing] if self.restored else []


class JudgeInputs(BaseModel):
    """The evidence of one judged session, written the same way for every judge of it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: dict[str, Any] = Field(default_factory=dict)
    """The task as data (an environment's item: its id, split and data, and the prompt)."""
    transcript: str = ""
    """The session as a judge reads it (markdown)."""
    trace: dict[str, Any] = Field(default_factory=dict)
    """The session as data: its messages, tool calls and results, its reward."""

    def write(self, folder: Path) -> None:
        """The three input files, in canonical JSON where they are data: the same inputs give
        the same bytes."""
        (folder / "task.json").write_bytes(canonical_bytes(self.task))
        (folder / "transcript.md").write_text(self.transcript, encoding="utf-8")
        (folder / "trace.json").write_bytes(canonical_bytes(self.trace))


def render_messages(task: str, messages: Sequence[Mapping[str, Any]]) -> str:
    """An agent's conversation (chat-completions messages) as a judge reads it, in the form
    the worker's transcripts take (`TASK:`, `USER:`, `TOOL CALL name: args`, `TOOL RESULT:`)."""
    lines = [f"TASK: {task}"]
    for message in messages:
        role = str(message.get("role", "?"))
        if role == "tool":
            lines.append(f"TOOL RESULT: {message.get('content') or ''}")
            continue
        if message.get("content"):
            lines.append(f"{role.upper()}: {message['content']}")
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            lines.append(f"TOOL CALL {function.get('name')}: {function.get('arguments')}")
    return "\n".join(lines)
