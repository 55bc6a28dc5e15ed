"""Importing Hermes-agent trajectories: ShareGPT / batch-runner JSONL rows into sessions.

A row becomes one agent session on the events stream, marked as imported (tag `imported:hermes`,
`run_config.imported_from` with the row's sha256), then chained like any recorded session, so the
processors audit, filter and judge it like the rest. The session is a function of the row's bytes
alone: the file name and line are not in it, so importing the same row again from a renamed or
reordered file writes the same records (redeliveries readers drop), never a fork of its chain.

Mapping: the first system turn gives the system message and the declared tools (`<tools>`);
`human` turns are user turns, `gpt` turns assistant turns with their reasoning and tool calls,
`tool` turns the results. Hermes rows carry no call ids on the calls: results are matched by
their `tool_call_id` when it names a call of the preceding turn (rows written by rolltape keep
ids in `tool_call_ids`), else by tool name and order within the preceding turn, since the row has
nothing better; a result that matches no call is still recorded (with its own id) and the fold
lists it as unmatched. `completed` gives the end status (a row without it is `interrupted`),
`reward` (when present) a reward event, `metadata.timestamp` the event times (else the epoch).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from rolltape.projections.exporters import ParsedMessage, ShareGPTFormatError, parse_sharegpt_row
from rolltape.projections.importers._imported import ImportedSession
from rolltape.schemas import PAYLOAD_MODELS, canonical_bytes

IMPORT_TAG = "imported:hermes"


@dataclass(frozen=True)
class RowError:
    line: int
    reason: str


def _payload(event_type: str, data: dict[str, Any]) -> dict[str, Any]:
    return PAYLOAD_MODELS[event_type].model_validate(data).model_dump(mode="python")


def _start_ns(row: dict[str, Any]) -> int:
    stamp = (row.get("metadata") or {}).get("timestamp")
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

    raw_metadata = row.get("metadata")
    metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    task = next((m.content for m in parsed.messages if m.role == "user"), "")
    add(
        "session_started",
        {
            "task": task,
            "kind": "agent",
            "tools": _tools(parsed.tools),
            "model": metadata.get("model") if isinstance(metadata.get("model"), str) else None,
            "run_config": {
                "imported_from": {
                    "format": "hermes",
                    "row_sha256": digest,
                    "prompt_index": row.get("prompt_index"),
                }
            },
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
            add("turn", {"role": message.role, "content": message.content})
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
        content = response.content
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
        add("tool_result", {"call_id": call_id, "content": text})


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
