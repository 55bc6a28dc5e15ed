"""Trajectory compression to a token budget.

What always stays: the first system message, the first user message (the task), every tool call
together with its response (a call is never split from its result, the defect of earlier
compressors), and the final assistant message (the outcome). What gives way, in this order, each
step applied oldest first and only until the trajectory fits:

1. reasoning of earlier assistant turns;
2. text of earlier assistant turns (their calls stay; a turn left with neither goes);
3. later user and system messages;
4. the middle of the longest tool results, replaced by a marker that says how much went.

Nothing is summarized (that would need a model and would not be deterministic). When even the
kept parts exceed the budget the report says so (`within_budget` false) and the caller decides.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from rolltape.projections._trajectory import Message, ToolCallRecord, Trajectory

TokenCounter = Callable[[str], int]
MARKER = "\n[... {n} characters elided by rolltape compression ...]\n"
_KEEP_CHARS = 200


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate (UTF-8 bytes / 4, rounded up); pass a real counter when the
    budget must be exact."""
    return (len(text.encode()) + 3) // 4


class CompressionReport(BaseModel):
    """What `compress` did: the token counts before and after (with the same counter), whether the
    result fits the budget, and the steps it took, in order. The export's provenance sidecar
    records the report when a step was taken."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    budget: int
    original_tokens: int
    tokens: int
    within_budget: bool
    steps: tuple[str, ...] = ()


def trajectory_tokens(trajectory: Trajectory, count: TokenCounter = estimate_tokens) -> int:
    """The tokens that `compress` budgets: message text, reasoning, tool names, arguments and
    results, each counted separately. The chat template's own tokens are not counted, so a
    rendered conversation is somewhat longer."""
    total = 0
    for message in trajectory.messages:
        total += count(message.content) + count(message.reasoning or "")
        for call in message.tool_calls:
            total += count(call.name) + count(call.raw_arguments or str(call.arguments))
            if call.result is not None:
                total += count(call.result.content)
    return total


def _protected(messages: list[Message]) -> set[int]:
    keep = set()
    for role in ("system", "user"):
        first = next((i for i, m in enumerate(messages) if m.role == role), None)
        if first is not None:
            keep.add(first)
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=None)
    if last is not None:
        keep.add(last)
    return keep


def compress(
    trajectory: Trajectory, budget: int, count: TokenCounter = estimate_tokens
) -> tuple[Trajectory, CompressionReport]:
    """The trajectory cut down to `budget` tokens by the module's rules, with a report of the steps
    taken. Tool calls stay with their results, and the task and the outcome stay too. The same
    input always gives the same output. Check `within_budget`: the result may still not fit."""
    original = trajectory_tokens(trajectory, count)
    messages = list(trajectory.messages)
    steps: list[str] = []

    def size() -> int:
        return trajectory_tokens(trajectory.model_copy(update={"messages": tuple(messages)}), count)

    def fits() -> bool:
        return size() <= budget

    if original > budget:
        final = _protected(messages)
        last_assistant = max((i for i in final if messages[i].role == "assistant"), default=-1)
        for i, message in enumerate(messages):
            if fits():
                break
            if message.role == "assistant" and i != last_assistant and message.reasoning:
                messages[i] = message.model_copy(update={"reasoning": None})
                steps.append(f"reasoning of message {i}")
        for i, message in enumerate(messages):
            if fits():
                break
            if message.role == "assistant" and i != last_assistant and message.content:
                messages[i] = message.model_copy(update={"content": ""})
                steps.append(f"text of message {i}")
        dropped: set[int] = set()
        for i, message in enumerate(messages):
            if fits():
                break
            if i in final:
                continue
            if message.role != "assistant" or not (message.tool_calls or message.content):
                dropped.add(i)
                messages[i] = message.model_copy(update={"content": "", "reasoning": None})
                steps.append(f"message {i} ({message.role})")
        while not fits():
            longest = _longest_result(messages)
            if longest is None:
                break
            i, j, call = longest
            assert call.result is not None
            content = call.result.content
            cut = len(content) - 2 * _KEEP_CHARS
            shorter = content[:_KEEP_CHARS] + MARKER.format(n=cut) + content[-_KEEP_CHARS:]
            result = call.result.model_copy(update={"content": shorter})
            calls = list(messages[i].tool_calls)
            calls[j] = call.model_copy(update={"result": result})
            messages[i] = messages[i].model_copy(update={"tool_calls": tuple(calls)})
            steps.append(f"{cut} characters of the result of {call.id}")
        messages = [m for i, m in enumerate(messages) if i not in dropped]
    compressed = trajectory.model_copy(update={"messages": tuple(messages)})
    tokens = trajectory_tokens(compressed, count)
    report = CompressionReport(
        budget=budget,
        original_tokens=original,
        tokens=tokens,
        within_budget=tokens <= budget,
        steps=tuple(steps),
    )
    return compressed, report


def _longest_result(messages: list[Message]) -> tuple[int, int, ToolCallRecord] | None:
    best: tuple[int, int, ToolCallRecord] | None = None
    best_len = 2 * _KEEP_CHARS + len(MARKER) + 16  # shorter results are not worth cutting
    for i, message in enumerate(messages):
        for j, call in enumerate(message.tool_calls):
            if call.result is not None and len(call.result.content) > best_len:
                best, best_len = (i, j, call), len(call.result.content)
    return best
