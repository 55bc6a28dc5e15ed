"""GenAI content sent as log records, joined to its inference span (pure).

Instrumentations that keep message content off their spans send it as log records emitted in
the span, so each carries the span's trace and span id:

- the **legacy per-message events** (OpenTelemetry's `opentelemetry-instrumentation-openai-v2`
  with its default conventions): `gen_ai.<role>.message` for each request message (`system`,
  `developer`, `user`, `assistant` with `tool_calls`, `tool` with the call `id`) and
  `gen_ai.choice` for each reply choice (`index`, `finish_reason`, `message`), bodies as maps;
- the **operation details event** of the current conventions,
  `gen_ai.client.inference.operation.details`, holding `gen_ai.input.messages`,
  `gen_ai.output.messages`, `gen_ai.system_instructions` and `gen_ai.tool.definitions` as
  attributes (structured, or JSON strings) or in its body.

`joined` turns a span's records into the attributes of the current conventions on the span, so
one reader (`_genai.inference`) reads content wherever it came from. Content is taken once:
when the span itself carries messages, its records are duplicates (an instrumentation sending
both, `SPAN_AND_EVENT`) and are counted, not read.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from rolltape.producers.capture._conversation import text_of
from rolltape.producers.otlp._genai import DETAILS_EVENT, EVALUATION_EVENT, MESSAGE_KEYS
from rolltape.producers.otlp._log_records import LogRecord
from rolltape.producers.otlp._wire import STATUS_ERROR, Span, SpanEvent, amended

CHOICE_EVENT = "gen_ai.choice"
_MESSAGE_EVENT = re.compile(r"gen_ai\.([a-z_]+)\.message")


def event_kind(record: LogRecord) -> str | None:
    """What a log record is to rolltape: "message" (a legacy request message), "choice",
    "details", "evaluation", or None (not a GenAI event: an application's own logs)."""
    return _kind_of(record.event_name)


@functools.lru_cache(maxsize=256)
def _kind_of(name: str) -> str | None:
    if name == CHOICE_EVENT:
        return "choice"
    if name == DETAILS_EVENT:
        return "details"
    if name == EVALUATION_EVENT:
        return "evaluation"
    if _MESSAGE_EVENT.fullmatch(name):
        return "message"
    return None


def has_content(span: Span) -> bool:
    """Whether the span carries messages itself (attributes of the current or older
    conventions, or its own details event): then log records add nothing to read."""
    attributes = span.attributes
    if any(key in attributes for key in MESSAGE_KEYS):
        return True
    if any(k.startswith(("gen_ai.prompt.", "gen_ai.completion.")) for k in attributes):
        return True
    return any(event.name == DETAILS_EVENT for event in span.events)


def completes(span: Span, records: Sequence[LogRecord]) -> bool:
    """Whether the records that end a call have come: its details event or a choice (emitted
    when the reply is read, after every request message), or, for a failed call, which has no
    choice, any request message."""
    kinds = {event_kind(r) for r in records}
    if "details" in kinds or "choice" in kinds:
        return True
    return span.status_code == STATUS_ERROR and "message" in kinds


def joined(
    span: Span, records: Sequence[LogRecord], *, content: bool | None = None
) -> tuple[Span, int]:
    """The span with the content its log records carry, as the current conventions' attributes;
    and how many content records were not read because the span carries its own (`content`:
    whether it does, when the caller knows already)."""
    found = [r for r in records if event_kind(r) in ("message", "choice", "details")]
    evaluations = [r for r in records if event_kind(r) == "evaluation"]
    events = span.events + tuple(
        SpanEvent(r.event_name, r.time_ns, _evaluation_attributes(r)) for r in evaluations
    )
    if has_content(span) if content is None else content:
        return amended(span, events=events), len(found)
    attributes = dict(span.attributes)
    details = [r for r in found if event_kind(r) == "details"]
    if details:
        for record in details:
            attributes.update(_details_attributes(record))
    else:
        attributes.update(_legacy_attributes(_in_order(found)))
    return amended(span, attributes=attributes, events=events), 0


def _in_order(records: Iterable[LogRecord]) -> list[LogRecord]:
    """Records in the order they were emitted (time, then their place in the request)."""
    return sorted(records, key=lambda r: (r.time_ns, r.position))


def _details_attributes(record: LogRecord) -> dict[str, Any]:
    found = {k: v for k, v in record.attributes.items() if k in MESSAGE_KEYS}
    if isinstance(record.body, Mapping):
        found.update({k: v for k, v in record.body.items() if k in MESSAGE_KEYS and k not in found})
    return found


def _evaluation_attributes(record: LogRecord) -> dict[str, Any]:
    attributes = dict(record.attributes)
    if isinstance(record.body, Mapping):  # some write the result in the body
        attributes.update({k: v for k, v in record.body.items() if k not in attributes})
    elif isinstance(record.body, str) and "gen_ai.evaluation.explanation" not in attributes:
        attributes["gen_ai.evaluation.explanation"] = record.body
    return attributes


# -- the legacy events as messages of the current conventions -----------------------------------
def _legacy_attributes(records: Sequence[LogRecord]) -> dict[str, Any]:
    inputs: list[dict[str, Any]] = []
    outputs: list[tuple[int, dict[str, Any]]] = []
    for record in records:
        body = record.body if isinstance(record.body, Mapping) else {}
        if event_kind(record) == "choice":
            message = body.get("message")
            output = _message(
                "assistant", message if isinstance(message, Mapping) else {}, assistant=True
            )
            reason = body.get("finish_reason")
            if reason is not None:
                output["finish_reason"] = str(reason)
            index = body.get("index")
            outputs.append((index if isinstance(index, int) else len(outputs), output))
            continue
        found = _MESSAGE_EVENT.fullmatch(record.event_name)
        assert found is not None
        role = found.group(1)
        if role == "tool":
            response = {"type": "tool_call_response", "id": str(body.get("id") or "")}
            response["response"] = text_of(body.get("content"))
            inputs.append({"role": "tool", "parts": [response]})
        else:
            inputs.append(_message(role, body, assistant=role == "assistant"))
    attributes: dict[str, Any] = {}
    if inputs:
        attributes["gen_ai.input.messages"] = inputs
    if outputs:
        attributes["gen_ai.output.messages"] = [m for _, m in sorted(outputs, key=lambda o: o[0])]
    return attributes


def _message(role: str, body: Mapping[str, Any], *, assistant: bool) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    content = body.get("content")
    if content is not None and content != "":
        parts.append({"type": "text", "content": text_of(content)})
    calls = body.get("tool_calls") if assistant else None
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        function = function if isinstance(function, Mapping) else {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(orjson.JSONDecodeError):
                arguments = orjson.loads(arguments)
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": arguments,
            }
        )
    return {"role": str(body.get("role") or role), "parts": parts}
