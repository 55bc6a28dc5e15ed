"""Importing Hermes-agent trajectories: batch-runner and interactive JSONL rows into sessions.

A row becomes one agent session on the events stream, marked as imported (tag `imported:hermes`,
`run_config.imported_from` with the row's sha256), then chained like any recorded session, so the
processors audit, filter and judge it like the rest. The session is a function of the row's bytes
alone: the file name and line are not in it, so importing the same row again from a renamed or
reordered file writes the same records (redeliveries readers drop), never a fork of its chain.

Mapping: the first system turn gives the system message and the declared tools (the `<tools>`
block, wherever it stands: Hermes writes more text after it); `human` turns are user turns, `gpt`
turns assistant turns: the `<think>` block at the start is the reasoning (empty or without
newlines), the run of well-formed `<tool_call>` blocks at the end the calls, and everything between
the content, character for character, tag literals included (a model that quotes `</think>` in its
answer, or closed its own reasoning in the text, wrote that text); `tool` turns the results. Text
is taken as Hermes wrote it (Hermes escapes nothing); only rows rolltape wrote (`text_escaping`)
are un-escaped. Tags are read as Hermes writes them (`\n` line breaks, nothing after the last
block): a row another writer framed with `\r\n` keeps its calls as content, never loses them. Hermes rows carry no call ids on the calls: results are matched
by their `tool_call_id` when it names a call of the preceding turn (rows written by rolltape keep
ids in `tool_call_ids`), else by tool name and order within the preceding turn; a result that
matches no call is still recorded (with its own id) and the fold lists it as unmatched. A result
fails by Hermes' rule (`rolltape.schemas.result_failed`); when the row has `tool_stats`, the
counts are checked against them (`imported_from.tool_stats_agree`, and the disagreements).
The compressor's `[CONTEXT SUMMARY]:` turn is a user turn marked `summary`. `completed` gives
the end status (a row without it is `interrupted`), `reward` (when present) a
reward event, `metadata.timestamp` or the interactive format's top-level `timestamp` the event
times (else the epoch), `metadata.model` or the top-level `model` the model.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from rolltape.projections.exporters import (
    ParsedMessage,
    ParsedRow,
    ShareGPTFormatError,
    parse_sharegpt_row,
)
from rolltape.projections.importers._imported import ImportedSession
from rolltape.schemas import PAYLOAD_MODELS, canonical_bytes, result_failed

IMPORT_TAG = "imported:hermes"
SUMMARY_PREFIX = "[CONTEXT SUMMARY]:"
"""How the Hermes compressor starts the human turn that replaces the middle of a conversation."""


@dataclass(frozen=True)
class RowError:
    """A Hermes line that did not become a session: its 1-based line number and the reason."""

    line: int
    reason: str


def _payload(event_type: str, data: dict[str, Any]) -> dict[str, Any]:
    return PAYLOAD_MODELS[event_type].model_validate(data).model_dump(mode="python")


def _field(row: dict[str, Any], name: str) -> Any:
    """`metadata.NAME` (batch runner) or the top-level NAME (interactive agent)."""
    metadata = row.get("metadata")
    value = metadata.get(name) if isinstance(metadata, dict) else None
    return value if value is not None else row.get(name)


def _start_ns(row: dict[str, Any]) -> int:
    stamp = _field(row, "timestamp")
    if isinstance(stamp, str):
        try:
            moment = dt.datetime.fromisoformat(stamp)
        except ValueError:
            return 0
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        return int(moment.timestamp()) * 10**9 + moment.microsecond * 1000
    if isinstance(stamp, int | float):
        return int(stamp * 10**9)
    return 0


def _tools(declared: list[dict[str, Any]]) -> list[dict[str, Any]]:
    tools = []
    for entry in declared:
        function = entry.get("function", entry) if isinstance(entry, dict) else {}
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            tool: dict[str, Any] = {"name": function["name"]}
            if isinstance(function.get("description"), str):
                tool["description"] = function["description"]
            if isinstance(function.get("parameters"), dict):
                tool["parameters"] = function["parameters"]
            tools.append(tool)
    return tools


def hermes_session(row: dict[str, Any]) -> ImportedSession:
    """One row as a session; raises ShareGPTFormatError or ValueError saying what is wrong."""
    parsed = parse_sharegpt_row(row)
    digest = hashlib.sha256(canonical_bytes(row)).hexdigest()
    session = ImportedSession(f"hermes-{digest[:24]}")
    clock = _start_ns(row)

    def add(event_type: str, data: dict[str, Any]) -> None:
        nonlocal clock
        session.add("events", event_type, clock, _payload(event_type, data))
        clock += 1000

    task = next((m.content for m in parsed.messages if m.role == "user"), "")
    model = _field(row, "model")
    stats = _tool_stats(parsed)
    imported_from: dict[str, Any] = {
        "format": "hermes",
        "row_sha256": digest,
        "prompt_index": row.get("prompt_index"),
    }
    if isinstance(row.get("tool_stats"), dict):
        disagree = _disagreements(stats, row["tool_stats"])
        imported_from["tool_stats_agree"] = not disagree
        if disagree:
            imported_from["tool_stats_disagreements"] = disagree
    add(
        "session_started",
        {
            "task": task,
            "kind": "agent",
            "tools": _tools(parsed.tools),
            "model": model if isinstance(model, str) else None,
            "run_config": {"imported_from": imported_from},
            "tags": [IMPORT_TAG],
        },
    )
    if parsed.system is not None:
        add("turn", {"role": "system", "content": parsed.system})
    previous_calls: list[tuple[str, str]] = []
    for index, message in enumerate(parsed.messages):
        if message.role == "tool":
            _results(message, previous_calls, index, add)
            previous_calls = []
            continue
        if message.role != "assistant":
            turn: dict[str, Any] = {"role": message.role, "content": message.content}
            if message.role == "user" and message.content.startswith(SUMMARY_PREFIX):
                turn["summary"] = True
            add("turn", turn)
            continue
        add(
            "turn",
            {
                "role": "assistant",
                "content": message.content,
                "reasoning": message.reasoning or None,
            },
        )
        previous_calls = []
        for number, call in enumerate(message.tool_calls):
            call_id = call.id or f"call_{index}_{number}"
            data: dict[str, Any] = {"id": call_id, "name": call.name}
            if isinstance(call.arguments, dict):
                data["arguments"] = call.arguments
            else:
                data["raw_arguments"] = (
                    call.arguments
                    if isinstance(call.arguments, str)
                    else orjson.dumps(call.arguments).decode()
                )
            add("tool_call", data)
            previous_calls.append((call_id, call.name))
    reward = row.get("reward")
    if isinstance(reward, int | float) and not isinstance(reward, bool):
        add("reward", {"value": float(reward), "source": "hermes"})
    completed = row.get("completed") is True and row.get("partial") is not True
    outcome = {k: row[k] for k in ("completed", "partial", "api_calls") if k in row}
    add(
        "session_ended",
        {"status": "completed" if completed else "interrupted", "outcome": outcome},
    )
    return session


def _results(
    message: ParsedMessage,
    calls: list[tuple[str, str]],
    index: int,
    add: Any,
) -> None:
    unanswered = list(calls)
    for number, response in enumerate(message.responses):
        match = next((c for c in unanswered if c[0] == response.tool_call_id), None)
        if match is None:
            match = next((c for c in unanswered if c[1] == response.name), None)
        if match is not None:
            unanswered.remove(match)
            call_id = match[0]
        else:
            call_id = response.tool_call_id or f"result_{index}_{number}"
        text = _result_text(response.content)
        add(
            "tool_result", {"call_id": call_id, "content": text, "success": not result_failed(text)}
        )


def _result_text(content: Any) -> str:
    """Hermes parses a result into JSON when its text started with `{` or `[`; the rest is text."""
    return content if isinstance(content, str) else orjson.dumps(content).decode()


def _tool_stats(parsed: ParsedRow) -> dict[str, dict[str, int]]:
    """Per tool: calls, and results that succeeded or failed by Hermes' rule (a call without a
    result counts as neither, as in Hermes' own tool_stats)."""
    stats: dict[str, dict[str, int]] = {}
    for message in parsed.messages:
        for call in message.tool_calls:
            stats.setdefault(call.name, {"count": 0, "success": 0, "failure": 0})["count"] += 1
        for response in message.responses:
            if response.name is None:
                continue
            entry = stats.setdefault(response.name, {"count": 0, "success": 0, "failure": 0})
            entry["failure" if result_failed(_result_text(response.content)) else "success"] += 1
    return stats


def _disagreements(
    ours: dict[str, dict[str, int]], theirs: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """Tools whose counts differ from the row's own tool_stats (zero rows Hermes fills in for
    unused tools agree with an absent tool)."""
    zero = {"count": 0, "success": 0, "failure": 0}
    out = {}
    for name in sorted(set(ours) | set(theirs)):
        mine = ours.get(name, zero)
        row = theirs.get(name, zero)
        row = {k: row.get(k, 0) for k in zero} if isinstance(row, dict) else row
        if mine != row:
            out[name] = {"imported": mine, "row": row}
    return out


def hermes_sessions(lines: Iterator[bytes] | list[bytes]) -> Iterator[ImportedSession | RowError]:
    """Every line of a Hermes JSONL file as a session or as the reason it cannot be one."""
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            row = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            yield RowError(number, f"not JSON: {exc}")
            continue
        if not isinstance(row, dict):
            yield RowError(number, "a row must be a JSON object with 'conversations'")
            continue
        try:
            yield hermes_session(row)
        except (ShareGPTFormatError, ValidationError, ValueError, KeyError, TypeError) as exc:
            yield RowError(number, str(exc).splitlines()[0][:300])
