"""What a span says in the OpenTelemetry GenAI conventions, as rolltape reads it (pure).

- An **inference** span (`gen_ai.operation.name` chat / text_completion / generate_content, or
  any span carrying GenAI messages): the request messages, the reply, the declared tools, model,
  usage, finish reason, latency, or the error when the span failed. Messages come from, in order
  of preference: `gen_ai.input.messages` / `gen_ai.output.messages` / `gen_ai.system_instructions`
  / `gen_ai.tool.definitions` on the span or on its `gen_ai.client.inference.operation.details`
  event (JSON strings or structured values), then the older indexed `gen_ai.prompt.N.*` /
  `gen_ai.completion.N.*` / `llm.request.functions.N.*` attributes (OpenLLMetry).
- An **execute_tool** span: tool name, call id, arguments, result, duration, failure.
- `gen_ai.evaluation.result` events on any span: evaluations (name, score, label, explanation).

Messages are turned into OpenAI chat messages, the form the client capture records, so a trace
and a captured client record a conversation the same way (one recorder of conversations).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from rolltape.producers.capture._conversation import text_of
from rolltape.producers.capture._reply import Reply
from rolltape.producers.otlp._wire import STATUS_ERROR, Span
from rolltape.schemas import ToolSpec, split_reasoning

INFERENCE_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
EVALUATION_EVENT = "gen_ai.evaluation.result"
MESSAGE_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
)


@dataclass
class Inference:
    """One model call read from an inference span. The raw input and output are kept beside
    the OpenAI messages so the ingest can tell that a later request starts with this one's
    conversation by comparing what the spans wrote, before converting anything."""

    raw_input: list[Any]
    """The input messages as the span holds them (current conventions; [] for the older ones)."""
    head: list[dict[str, Any]]
    """OpenAI messages before those: the system instructions when the input has no system
    message, or the whole request of the older indexed attributes."""
    raw_output: dict[str, Any] | None
    """Choice 0 as the span holds it, without `finish_reason`: as the next request echoes it."""
    reply: Reply | None
    """Choice 0 of the output; None when the span failed."""
    tools: list[ToolSpec]
    model: str | None
    latency_ms: float
    error: tuple[str, str] | None = None
    """(error type, message) of a failed call."""
    status: int | None = None
    """The HTTP status of a failed call, when the span has it."""
    missing: str | None = None
    """What of the call's content the span did not carry ("input and output", "input",
    "output"; a failed call has no output to miss): content capture off, or hidden."""
    unreadable: list[str] = field(default_factory=list)
    """Message attributes that were present but could not be read, with why."""
    response_id: str | None = None
    starts_with: bytes = b""
    """The request's first message (system instructions or the first input message): which
    agent's conversation this call belongs to, when a trace holds several."""

    def messages(self, skip: int = 0) -> list[dict[str, Any]]:
        """The request as OpenAI chat messages; `skip` > 0 leaves out the head and that many
        input messages (known to be recorded already)."""
        out = [] if skip else list(self.head)
        for message in self.raw_input[skip:]:
            if isinstance(message, dict):
                out.extend(_openai_messages(message))
        return out


@dataclass
class ToolExecution:
    """One tool run read from an `execute_tool` span. `arguments` is the decoded JSON, or the
    raw value when it is not JSON; `result` is None when the span did not carry one."""

    name: str
    call_id: str | None
    arguments: Any
    result: str | None
    failed: bool
    error: str | None
    duration_ms: float


@dataclass
class Evaluation:
    """One `gen_ai.evaluation.result` event. `score` is None unless the event's value is a
    number; `response_id` names the model response judged, when the event says."""

    name: str
    score: float | None
    label: str | None
    explanation: str | None
    response_id: str | None


def operation(span: Span) -> str | None:
    """The span's GenAI operation: `gen_ai.operation.name` when set, else inferred from an
    `execute_tool` name, OpenLLMetry's `llm.request.type` (completion counts as chat) or the
    presence of messages. None for spans that are not GenAI operations."""
    op = span.attributes.get("gen_ai.operation.name")
    if isinstance(op, str):
        return op
    if span.name.startswith("execute_tool") and "gen_ai.tool.name" in span.attributes:
        return "execute_tool"
    request_type = span.attributes.get("llm.request.type")
    if isinstance(request_type, str):  # OpenLLMetry: chat, completion, embedding, rerank
        return "chat" if request_type in ("chat", "completion") else request_type
    if any(k.startswith(("gen_ai.prompt.", "gen_ai.completion.")) for k in span.attributes):
        return "chat"
    if "gen_ai.input.messages" in span.attributes or "gen_ai.output.messages" in span.attributes:
        return "chat"
    return None


def is_local_root(span: Span) -> bool:
    """The trace's root in this service: no parent, or a parent in another process (the agent
    was called with a remote `traceparent`)."""
    return not span.parent_span_id or span.parent_is_remote


def is_genai(span: Span) -> bool:
    """Whether the span belongs to the GenAI conventions (spans of other libraries in the same
    trace, HTTP or database spans, are not recorded)."""
    if operation(span) is not None:
        return True
    return any(e.name == EVALUATION_EVENT for e in span.events) or any(
        k.startswith("gen_ai.") for k in span.attributes
    )


def _duration_ms(span: Span) -> float:
    return round(max(span.end_ns - span.start_ns, 0) / 1e6, 3)


def _structured(value: Any) -> Any:
    """An attribute that holds JSON: decoded when it is a string, as it is when structured."""
    if isinstance(value, str):
        return orjson.loads(value)
    return value


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return json.dumps(value, ensure_ascii=False, default=_jsonable)


def _jsonable(value: Any) -> Any:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else repr(value)


# -- the current conventions: messages made of parts ----------------------------------------------
def _openai_messages(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    role = str(message.get("role", "user"))
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    responses: list[dict[str, Any]] = []
    parts = message.get("parts")
    if parts is None and "content" in message:  # the OpenAI form, still written by some
        parts = [{"type": "text", "content": text_of(message["content"])}]
    if not isinstance(parts, list):
        raise TypeError(f"a message's parts must be a list, not {type(parts).__name__}")
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            texts.append(_text(part.get("content", part.get("text"))))
        elif kind in ("reasoning", "thinking"):
            reasoning.append(_text(part.get("content", part.get("text"))))
        elif kind == "tool_call":
            calls.append(
                {
                    "id": part.get("id"),
                    "type": "function",
                    "function": {"name": part.get("name"), "arguments": part.get("arguments")},
                }
            )
        elif kind == "tool_call_response":
            response = part.get("response", part.get("result"))
            responses.append(
                {"role": "tool", "tool_call_id": part.get("id") or "", "content": _text(response)}
            )
        else:  # images, files, audio: named so the turn shows they were there
            texts.append(f"[{kind or 'part'}]")
    if role == "tool" or (responses and not calls and not texts):
        return responses
    out: dict[str, Any] = {"role": role, "content": "".join(texts)}
    if reasoning:
        out["content"] = f"<think>{''.join(reasoning)}</think>{out['content']}"
    if calls:
        out["tool_calls"] = calls
    return [out, *responses]


def _system(value: Any) -> dict[str, Any] | None:
    parts = _structured(value)
    if isinstance(parts, str):
        return {"role": "system", "content": parts}
    message = _openai_messages({"role": "system", "parts": parts or []})
    return message[0] if message else None


def _missing(has_input: bool, has_output: bool, *, failed: bool) -> str | None:
    if not has_input and not (has_output or failed):
        return "input and output"
    if not has_input:
        return "input"
    return None if has_output or failed else "output"


def _tool_specs(value: Any) -> list[ToolSpec]:
    out = []
    for tool in _structured(value) or []:
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        spec: Mapping[str, Any] = function if isinstance(function, Mapping) else tool
        name = spec.get("name")
        if isinstance(name, str) and name:
            parameters = _structured(spec.get("parameters")) or {}
            out.append(
                ToolSpec(
                    name=name,
                    description=str(spec.get("description") or ""),
                    parameters=dict(parameters) if isinstance(parameters, Mapping) else {},
                )
            )
    return out


# -- the older indexed attributes (gen_ai.prompt.0.role, ...) -------------------------------------
def _indexed(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """`prefix.N.key[.M.key]` attributes as a list of nested dicts, by index."""
    tree: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        path = key[len(prefix) :].split(".")
        if not (path[0].isascii() and path[0].isdigit()) or len(path) < 2:
            continue
        node: dict[Any, Any] = tree.setdefault(int(path[0]), {})
        rest = path[1:]
        for step in rest[:-1]:  # lists are dicts by index here, made lists by _lists
            node = node.setdefault(int(step) if step.isascii() and step.isdigit() else step, {})
            if not isinstance(node, dict):
                raise ValueError(f"{key}: {step} is both a value and a group")
        node[rest[-1]] = value
    return [_lists(tree[i]) for i in sorted(tree)]


def _lists(node: dict[Any, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict) and value and all(isinstance(k, int) for k in value):
            items = [value[i] for i in sorted(value)]
            out[key] = [_lists(v) if isinstance(v, dict) else v for v in items]
        else:
            out[key] = _lists(value) if isinstance(value, dict) else value
    return out


def _legacy_message(entry: Mapping[str, Any]) -> dict[str, Any]:
    role = str(entry.get("role") or "user")
    content = entry.get("content")
    if isinstance(content, str) and content.startswith("[{"):  # parts written as JSON
        with contextlib.suppress(orjson.JSONDecodeError):
            content = text_of(orjson.loads(content))
    message: dict[str, Any] = {"role": role, "content": _text(content)}
    calls = entry.get("tool_calls") or []
    if not isinstance(calls, list):
        raise TypeError(f"tool_calls must be a list, not {type(calls).__name__}")
    if isinstance(entry.get("function_call"), Mapping):
        calls = [*calls, entry["function_call"]]
    if calls:
        message["tool_calls"] = [
            {
                "id": call.get("id"),
                "type": "function",
                "function": {"name": call.get("name"), "arguments": call.get("arguments")},
            }
            for call in calls
            if isinstance(call, Mapping)
        ]
    if role == "tool":
        message["tool_call_id"] = str(entry.get("tool_call_id") or "")
    return message


def _first(attributes: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        value = attributes.get(key)
        if value is not None:
            return value
    return None


def _int(value: Any) -> int | None:
    """A count: a finite, non-negative number, else unknown."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return int(value) if value >= 0 else None


def _list(value: Any) -> list[Any]:
    decoded = _structured(value)
    if decoded is None:
        return []
    if not isinstance(decoded, list):
        raise TypeError(f"expected a JSON array, got {type(decoded).__name__}")
    return decoded


def _has_indexed(attributes: Mapping[str, Any]) -> bool:
    return any(k.startswith(("gen_ai.prompt.", "gen_ai.completion.")) for k in attributes)


def inference(span: Span) -> Inference:
    """Read an inference span, with message attributes from its details event overriding the
    span's. Unreadable current-convention attributes are listed in `unreadable`, not raised;
    malformed indexed ones raise (the ingest then rejects the span, saying why). Reply tool
    calls without an id get one derived from the span id, so their results can find them."""
    attributes = span.attributes
    for event in span.events:
        if event.name == DETAILS_EVENT:
            attributes = dict(attributes)
            attributes.update({k: v for k, v in event.attributes.items() if k in MESSAGE_KEYS})
    unreadable: list[str] = []

    def read(key: str, reader: Any) -> Any:
        if key not in attributes:
            return None
        try:
            return reader(attributes[key])
        except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError) as exc:
            unreadable.append(f"{key}: {type(exc).__name__}: {exc}")
            return None

    raw_input: list[Any] = read("gen_ai.input.messages", _list) or []
    raw_outputs: list[Any] = read("gen_ai.output.messages", _list) or []
    head: list[dict[str, Any]] = []
    output: dict[str, Any] | None = None
    output_finish = None
    raw_output = None
    if raw_outputs and isinstance(raw_outputs[0], dict):
        first = raw_outputs[0]
        output_finish = first.get("finish_reason")
        raw_output = {k: v for k, v in first.items() if k != "finish_reason"}
        converted = _openai_messages(first)
        output = converted[0] if converted else None
    system = read("gen_ai.system_instructions", _system)
    tools: list[ToolSpec] = read("gen_ai.tool.definitions", _tool_specs) or []
    if not raw_input and not raw_outputs and _has_indexed(attributes):
        head = [_legacy_message(m) for m in _indexed(attributes, "gen_ai.prompt.")]
        completions = _indexed(attributes, "gen_ai.completion.")
        output = _legacy_message(completions[0]) if completions else None
        output_finish = completions[0].get("finish_reason") if completions else None
    if not tools and "llm.request.functions.0.name" in attributes:
        try:
            tools = _tool_specs(_indexed(attributes, "llm.request.functions."))
        except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
            unreadable.append(f"llm.request.functions: {type(exc).__name__}: {exc}")
    roles = [m.get("role") for m in head] + [
        m.get("role") for m in raw_input if isinstance(m, dict)
    ]
    if system is not None and not any(r in ("system", "developer") for r in roles):
        head.insert(0, system)
    for index, tool_call in enumerate((output or {}).get("tool_calls") or []):
        if not tool_call.get("id"):  # unique in the session, so its result finds it
            tool_call["id"] = f"call_{span.span_id}_{index}"
    model = _first(attributes, "gen_ai.response.model", "gen_ai.request.model")
    response_id = attributes.get("gen_ai.response.id")
    opening = head[0] if head else raw_input[0] if raw_input else None
    call = Inference(
        raw_input=raw_input,
        head=head,
        raw_output=raw_output,
        reply=None,
        tools=tools,
        model=model if isinstance(model, str) else None,
        latency_ms=_duration_ms(span),
        missing=_missing(
            _openai_content(head) or _parts_content(raw_input),
            output is not None and _openai_content([output]),
            failed=span.status_code == STATUS_ERROR,
        ),
        unreadable=unreadable,
        response_id=str(response_id) if response_id else None,
        starts_with=orjson.dumps(opening, option=orjson.OPT_SORT_KEYS, default=_jsonable),
    )
    if span.status_code == STATUS_ERROR:
        error_type = attributes.get("error.type") or "error"
        call.error = (str(error_type), span.status_message or str(error_type))
        call.status = _int(attributes.get("http.response.status_code"))
        return call
    reply = Reply(model=call.model)
    if output is not None:
        reply.content, reply.reasoning = split_reasoning(str(output.get("content") or ""))
        reply.tool_calls = list(output.get("tool_calls") or [])
    # The span's finish reasons are the provider's own words (`tool_calls`); a message's may be
    # the conventions' normalised ones (`tool_call`): the provider's are what a replay expects.
    finishes = attributes.get("gen_ai.response.finish_reasons")
    if isinstance(finishes, Sequence) and not isinstance(finishes, str) and finishes:
        output_finish = finishes[0]
    reply.finish_reason = str(output_finish) if output_finish is not None else None
    reply.prompt_tokens = _int(
        _first(attributes, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
    )
    reply.completion_tokens = _int(
        _first(attributes, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
    )
    call.reply = reply
    return call


def _openai_content(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether OpenAI-form messages hold content: text, or a call with its arguments."""
    for message in messages:
        if str(message.get("content") or "").strip():
            return True
        for call in message.get("tool_calls") or []:
            if (
                isinstance(call, Mapping)
                and (call.get("function") or {}).get("arguments") is not None
            ):
                return True
    return False


def _parts_content(messages: Sequence[Any]) -> bool:
    """Whether GenAI-convention messages hold content: text, a call's arguments or a tool's
    result. Messages without any (an instrumentation with content capture off still sends
    their roles, and its calls' names) are no conversation to learn from."""
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        parts = message.get("parts")
        if parts is None and message.get("content"):
            return True
        for part in parts if isinstance(parts, list) else []:
            if not isinstance(part, Mapping):
                continue
            if part.get("type") == "tool_call":
                if part.get("arguments") is not None:
                    return True
                continue
            value = part.get("content", part.get("response", part.get("result")))
            if value not in (None, "", [], {}):
                return True
    return False


OPENINFERENCE_SCOPE = "openinference."
_OPENAI_V2_SCOPE = "opentelemetry.instrumentation.openai_v2"


def content_setting(span: Span, events_came: bool) -> str:
    """What would send the content an inference span came without, for the mode the span
    shows (its instrumentation and conventions), and whether its log records came at all."""
    if span.scope.startswith(OPENINFERENCE_SCOPE):
        return (
            "OpenInference sends content unless told not to: unset OPENINFERENCE_HIDE_INPUTS, "
            "OPENINFERENCE_HIDE_OUTPUTS and OPENINFERENCE_HIDE_*_MESSAGES (or the TraceConfig "
            "passed to the instrumentor)"
        )
    latest = "gen_ai.provider.name" in span.attributes
    if not latest and span.scope == _OPENAI_V2_SCOPE:
        if events_came:
            return (
                "the instrumentation's log records came without content: set "
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true"
            )
        return (
            "with these conventions content goes as log records, and none came for this span: "
            "set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true and export logs to this "
            "receiver too (a LoggerProvider with an OTLP log exporter, or OTEL_LOGS_EXPORTER=otlp "
            "under opentelemetry-instrument)"
        )
    if events_came:
        return (
            "its log records came without content: set "
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_AND_EVENT (or EVENT_ONLY)"
        )
    return (
        "set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY (the conventions' "
        "content on the spans; older instrumentations take true), or EVENT_ONLY with "
        "OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT=true and logs exported to this receiver"
    )


def tool_execution(span: Span) -> ToolExecution:
    """Read an `execute_tool` span. Failed means the span's status is error; whether a result
    text reads as a failure is left to the caller's rule."""
    a = span.attributes
    call_id = a.get("gen_ai.tool.call.id")
    arguments = a.get("gen_ai.tool.call.arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(orjson.JSONDecodeError):  # else kept as the raw arguments
            arguments = orjson.loads(arguments)
    result = a.get("gen_ai.tool.call.result")
    failed = span.status_code == STATUS_ERROR
    return ToolExecution(
        name=str(a.get("gen_ai.tool.name") or span.name.removeprefix("execute_tool ").strip()),
        call_id=str(call_id) if call_id else None,
        arguments=arguments,
        result=None if result is None else _text(result),
        failed=failed,
        error=(span.status_message or str(a.get("error.type") or "error")) if failed else None,
        duration_ms=_duration_ms(span),
    )


def evaluations(span: Span) -> list[Evaluation]:
    """The span's `gen_ai.evaluation.result` events, in the order the span lists them (any
    span may carry them, not only inference spans)."""
    out = []
    for event in span.events:
        if event.name != EVALUATION_EVENT:
            continue
        a = event.attributes
        score = a.get("gen_ai.evaluation.score.value")
        label = a.get("gen_ai.evaluation.score.label")
        explanation = a.get("gen_ai.evaluation.explanation")
        response_id = a.get("gen_ai.response.id")
        out.append(
            Evaluation(
                name=str(a.get("gen_ai.evaluation.name") or "evaluation"),
                score=float(score) if isinstance(score, int | float) else None,
                label=str(label) if label is not None else None,
                explanation=str(explanation) if explanation is not None else None,
                response_id=str(response_id) if response_id is not None else None,
            )
        )
    return out
