"""OpenInference spans read as the GenAI conventions' (pure).

OpenInference (Arize's conventions: Phoenix and most framework instrumentations, LangChain,
LlamaIndex, DSPy, smolagents, CrewAI, the OpenAI Agents SDK) marks each span with
`openinference.span.kind` and flattens messages into indexed attributes:
`llm.input_messages.<i>.message.role|content|contents.<j>.message_content.text`,
`...message.tool_calls.<j>.tool_call.id|function.name|function.arguments`,
`...message.tool_call_id`, the same under `llm.output_messages`, declared tools as
`llm.tools.<i>.tool.json_schema`, `llm.model_name`, `llm.invocation_parameters`,
`llm.token_count.prompt|completion`, `llm.finish_reason`; TOOL spans carry `tool.name`,
`tool.id` (or `tool_call.id`), the arguments and the result as `input.value` /
`output.value`; `session.id` and `user.id` group spans and name the end user.

`as_genai` rewrites such a span into the current GenAI conventions' attributes, so one reader
(`_genai.py`) and one recorder (`_span_records.py`) serve both conventions. A span that also
carries the GenAI conventions' own messages (`OPENINFERENCE_ENABLE_GENAI_SEMCONV=true`) is read
by those; the OpenInference attributes then only fill what is missing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import orjson

from rolltape.producers.otlp._wire import Span, amended

SPAN_KIND = "openinference.span.kind"
SESSION_ID = "session.id"
USER_ID = "user.id"
RECORDED_KINDS = frozenset({"LLM", "TOOL", "CHAIN", "AGENT"})
"""The kinds that shape a conversation; the others (RETRIEVER, EMBEDDING, RERANKER, GUARDRAIL,
EVALUATOR, UNKNOWN) are counted as not recorded."""
_OPERATION = {"LLM": "chat", "TOOL": "execute_tool", "AGENT": "invoke_agent", "CHAIN": "chain"}


def kind(span: Span) -> str | None:
    """The span's OpenInference kind, or None for a span of another convention."""
    value = span.attributes.get(SPAN_KIND)
    return value.upper() if isinstance(value, str) and value else None


def as_genai(span: Span) -> Span:
    """The span in the GenAI conventions' terms (unchanged when it is not OpenInference)."""
    oi = kind(span)
    if oi is None:
        return span
    attributes = dict(span.attributes)
    operation = _OPERATION.get(oi)
    if operation is None:  # kept as it is: the ingest counts it, records nothing
        return span
    attributes.setdefault("gen_ai.operation.name", operation)
    if oi == "LLM":
        _llm(span.attributes, attributes)
    elif oi == "TOOL":
        _tool(span.attributes, attributes, span.name)
    else:
        agent = span.attributes.get("agent.name") or (span.name if oi == "AGENT" else None)
        if isinstance(agent, str) and agent:
            attributes.setdefault("gen_ai.agent.name", agent)
    return amended(span, attributes=attributes)


def _json(value: Any) -> Any:
    if isinstance(value, str):
        with contextlib.suppress(orjson.JSONDecodeError):
            return orjson.loads(value)
    return value


def _indexed(attributes: Mapping[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """`prefix.<i>.<rest>` attributes as {i: {rest: value}}."""
    out: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[len(prefix) :].partition(".")
        if index.isascii() and index.isdigit() and rest:
            out.setdefault(int(index), {})[rest] = value
    return out


def _messages(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """OpenInference messages under `prefix` as GenAI messages (role and parts)."""
    out = []
    for _, fields in sorted(_indexed(attributes, prefix).items()):
        role = str(fields.get("message.role") or "user")
        parts: list[dict[str, Any]] = []
        content = fields.get("message.content")
        if isinstance(content, str) and content:
            parts.append({"type": "text", "content": content})
        for _, item in sorted(_indexed(fields, "message.contents.").items()):
            text = item.get("message_content.text")
            kind_of = item.get("message_content.type") or "text"
            if kind_of == "text" and isinstance(text, str):
                parts.append({"type": "text", "content": text})
            elif kind_of != "text":
                parts.append({"type": str(kind_of)})
        calls = _indexed(fields, "message.tool_calls.")
        for _, call in sorted(calls.items()):
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("tool_call.id"),
                    "name": call.get("tool_call.function.name"),
                    "arguments": _json(call.get("tool_call.function.arguments")),
                }
            )
        legacy_name = fields.get("message.function_call_name")
        if isinstance(legacy_name, str) and legacy_name:  # the older function_call form
            arguments = _json(fields.get("message.function_call_arguments_json"))
            parts.append(
                {"type": "tool_call", "id": None, "name": legacy_name, "arguments": arguments}
            )
        if role == "tool":
            response = " ".join(p["content"] for p in parts if p.get("type") == "text")
            call_id = str(fields.get("message.tool_call_id") or "")
            parts = [{"type": "tool_call_response", "id": call_id, "response": response}]
        out.append({"role": role, "parts": parts})
    return out


def _llm(source: Mapping[str, Any], attributes: dict[str, Any]) -> None:
    if "gen_ai.input.messages" not in attributes:
        inputs = _messages(source, "llm.input_messages.")
        if inputs:
            attributes["gen_ai.input.messages"] = inputs
    finish = source.get("llm.finish_reason")
    if isinstance(finish, str) and finish:
        # The provider's own words (`tool_calls`): OpenInference's GenAI conversion writes the
        # conventions' normalised ones (`tool_call`) beside them.
        attributes["gen_ai.response.finish_reasons"] = [finish]
    if "gen_ai.output.messages" not in attributes:
        outputs = _messages(source, "llm.output_messages.")
        if outputs and isinstance(finish, str) and finish:
            outputs[0]["finish_reason"] = finish
        if outputs:
            attributes["gen_ai.output.messages"] = outputs
    if "gen_ai.tool.definitions" not in attributes:
        tools = [
            _json(fields.get("tool.json_schema"))
            for _, fields in sorted(_indexed(source, "llm.tools.").items())
        ]
        tools = [t for t in tools if isinstance(t, Mapping)]
        if tools:
            attributes["gen_ai.tool.definitions"] = tools
    parameters = _json(source.get("llm.invocation_parameters"))
    requested = parameters.get("model") if isinstance(parameters, Mapping) else None
    model = source.get("llm.model_name")
    if isinstance(requested, str):
        attributes.setdefault("gen_ai.request.model", requested)
    if isinstance(model, str):
        attributes.setdefault("gen_ai.response.model", model)
        attributes.setdefault("gen_ai.request.model", model)
    for theirs, ours in (
        ("llm.token_count.prompt", "gen_ai.usage.input_tokens"),
        ("llm.token_count.completion", "gen_ai.usage.output_tokens"),
    ):
        if theirs in source:
            attributes.setdefault(ours, source[theirs])
    provider = source.get("llm.provider") or source.get("llm.system")
    if isinstance(provider, str):
        attributes.setdefault("gen_ai.provider.name", provider)
    output = _json(source.get("output.value"))
    if isinstance(output, Mapping) and isinstance(output.get("id"), str):
        attributes.setdefault("gen_ai.response.id", output["id"])


def _tool(source: Mapping[str, Any], attributes: dict[str, Any], span_name: str) -> None:
    name = source.get("tool.name") or source.get("tool_call.function.name") or span_name
    attributes.setdefault("gen_ai.tool.name", str(name))
    call_id = source.get("tool.id") or source.get("tool_call.id")
    if isinstance(call_id, str) and call_id:
        attributes.setdefault("gen_ai.tool.call.id", call_id)
    arguments = source.get("tool_call.function.arguments", source.get("input.value"))
    if arguments is not None:
        attributes.setdefault("gen_ai.tool.call.arguments", arguments)
    if "output.value" in source:
        attributes.setdefault("gen_ai.tool.call.result", source["output.value"])
