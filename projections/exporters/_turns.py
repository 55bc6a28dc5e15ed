"""Per-turn trace lines, one JSON object per assistant turn (the seed article's trajectory.py
TurnTrace):

    {"session_id": "s1", "turn_index": 0, "ts_ns": 1700000000000000000, "model": "m",
     "system_prompt_hash": "ab12...", "user_message": "...", "conversation_history_length": 2,
     "reasoning": "...", "tool_calls": [{"tool_name": "search", "arguments": {...},
     "result": "...", "error": null, "duration_ms": 12.0, "success": true}],
     "assistant_response": "...", "prompt_tokens": 1847, "completion_tokens": 23,
     "user_feedback": null, "task_completed": null, "reward": null}

Fields that were not measured are null, never guessed: `prompt_tokens` is the serving engine's
usage report; `completion_tokens` is its report, else the number of recorded token ids.
`user_message` is the user text that came since the previous assistant turn (null when none);
`task_completed`, `reward` (the session's final reward) and `user_feedback` (the session's
feedback texts, joined by newlines) are set on the last turn only.
"""

from __future__ import annotations

import hashlib
from typing import Any

from rolltape.projections._trajectory import Message, Trajectory


def _completion_tokens(message: Message) -> int | None:
    if message.completion_tokens is not None:
        return message.completion_tokens
    return len(message.token_ids) if message.token_ids is not None else None


def turn_lines(trajectory: Trajectory) -> list[dict[str, Any]]:
    """One trace line per assistant turn, in conversation order; the module docstring gives the
    format and when a field is null. A session with no assistant turn gives no lines."""
    system = next((m.content for m in trajectory.messages if m.role == "system"), None)
    system_hash = hashlib.sha256(system.encode()).hexdigest()[:16] if system is not None else None
    assistant_count = sum(1 for m in trajectory.messages if m.role == "assistant")
    session_feedback = [f.text for f in trajectory.feedback if f.text]
    lines: list[dict[str, Any]] = []
    user_message: str | None = None
    for position, message in enumerate(trajectory.messages):
        if message.role == "user":
            previous = "" if user_message is None else user_message + "\n"
            user_message = previous + message.content
            continue
        if message.role != "assistant":
            continue
        index = len(lines)
        last = index == assistant_count - 1
        feedback = list(session_feedback) if last else []
        lines.append(
            {
                "session_id": trajectory.session_id,
                "turn_index": index,
                "ts_ns": message.ts_ns,
                "model": trajectory.model,
                "system_prompt_hash": system_hash,
                "user_message": user_message,
                "conversation_history_length": position,
                "reasoning": message.reasoning,
                "tool_calls": [
                    {
                        "tool_name": call.name,
                        "arguments": call.arguments
                        if call.raw_arguments is None
                        else call.raw_arguments,
                        "result": call.result.content if call.result else None,
                        "error": call.result.error if call.result else None,
                        "duration_ms": call.result.duration_ms if call.result else None,
                        "success": call.result.success if call.result else False,
                    }
                    for call in message.tool_calls
                ],
                "assistant_response": message.content,
                "prompt_tokens": message.prompt_tokens,
                "completion_tokens": _completion_tokens(message),
                "user_feedback": "\n".join(feedback) if feedback else None,
                "task_completed": trajectory.completed if last else None,
                "reward": trajectory.reward if last else None,
            }
        )
        user_message = None
    return lines
