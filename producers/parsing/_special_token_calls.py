"""More families whose call markup is special tokens: Step3 (`<｜tool_call_begin｜>` around a
`<steptml:invoke>`), Hunyuan V3 (`<tool_call>NAME<tool_sep><arg_key>..`), Kimi K3 (XTML
`<|open|>call tool="NAME"<|sep|>..`) and Inkling (`<|content_invoke_tool_json|>{"name", "args"}`).

Values written as text are typed by the tool's declared JSON Schema type and stay text without
one, as the reference parsers do.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rolltape.producers.parsing._blocks import (
    BlockCall,
    BlockError,
    ParamTypes,
    Parser,
    Scan,
    untyped,
)
from rolltape.producers.parsing._dsml_calls import typed_value
from rolltape.producers.parsing._result import decode_arguments, json_loads
from rolltape.producers.parsing._token_calls import literal, read_blocks, sections

_STEP3_SECTION = (("<｜tool_calls_begin｜>", "<｜tool_calls_end｜>"),)
_STEP3_CALL = literal("<｜tool_call_begin｜>", "<｜tool_call_end｜>")
_STEP3_INVOKE = re.compile(r'<steptml:invoke name="([^"]+)">')
_STEP3_PARAM = re.compile(r'<steptml:parameter name="([^"]+)">(.*?)</steptml:parameter>', re.DOTALL)


def _step3_call(types: ParamTypes) -> Callable[[str], list[BlockCall]]:
    def read(inner: str) -> list[BlockCall]:
        kind, sep, invoke = inner.partition("<｜tool_sep｜>")
        if not sep or kind.strip() != "function":
            raise BlockError("not a `function<｜tool_sep｜>` call")
        head = _STEP3_INVOKE.search(invoke)
        if head is None:
            raise BlockError('no <steptml:invoke name="..."> in the call')
        name, declared = head.group(1), types.get(head.group(1), {})
        arguments = {
            key: typed_value(value.strip(), declared.get(key))
            for key, value in _STEP3_PARAM.findall(invoke, head.end())
        }
        return [(None, name, arguments, None, None)]

    return read


def parse_step3(text: str, seed: str, types: ParamTypes) -> Scan:
    """`<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="N">
    <steptml:parameter name="K">V</steptml:parameter></steptml:invoke><｜tool_call_end｜>..`."""
    return sections(text, _STEP3_SECTION, _STEP3_CALL, _step3_call(types), seed)


_HY_SECTION = (("<tool_calls>", "</tool_calls>"),)
_HY_CALL = literal("<tool_call>", "</tool_call>")
_HY_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


def _hy_v3_call(types: ParamTypes) -> Callable[[str], list[BlockCall]]:
    def read(inner: str) -> list[BlockCall]:
        name, sep, args = inner.partition("<tool_sep>")
        name = name.strip()
        if not sep or not name:
            raise BlockError("no NAME<tool_sep> at the start of the call")
        declared = types.get(name, {})
        arguments = {
            key: typed_value(value, declared.get(key)) for key, value in _HY_ARG.findall(args)
        }
        leftover = _HY_ARG.sub("", args).strip()
        if leftover:
            raise BlockError(f"{name}: unreadable arguments {leftover[:80]!r}")
        return [(None, name, arguments, None, None)]

    return read


def parse_hy_v3(text: str, seed: str, types: ParamTypes) -> Scan:
    """`<tool_calls><tool_call>NAME<tool_sep><arg_key>K</arg_key><arg_value>V</arg_value>
    </tool_call></tool_calls>`."""
    return sections(text, _HY_SECTION, _HY_CALL, _hy_v3_call(types), seed)


_K3_SECTION = (("<|open|>tools<|sep|>", "<|close|>tools<|sep|>"),)
_K3_CALL = (re.compile(r"<\|open\|>\s*call\s"), re.compile(r"<\|close\|>\s*call\s*<\|sep\|>"))
_K3_ARG = re.compile(
    r"<\|open\|>\s*argument\s+((?:(?!<\|sep\|>).)*?)<\|sep\|>(.*?)"
    r"<\|close\|>\s*argument\s*<\|sep\|>",
    re.DOTALL,
)
_K3_ATTR = re.compile(r'(\w+)="([^"]*)"')
_K3_MARKUP = re.compile(r"<\|(?:open|close)\|>\s*(?:response|message)\s*<\|sep\|>")


def _attrs(text: str) -> dict[str, str]:
    return {k: v.replace("&quot;", '"').replace("&amp;", "&") for k, v in _K3_ATTR.findall(text)}


def _kimi_k3_call(inner: str) -> list[BlockCall]:
    head, sep, body = inner.partition("<|sep|>")
    name = _attrs(head).get("tool", "")
    if not sep or not name:
        raise BlockError('the call has no tool="..."')
    arguments: dict[str, Any] = {}
    for attrs, value in _K3_ARG.findall(body):
        tags = _attrs(attrs)
        if tags.get("type", "string") == "string":
            arguments[tags.get("key", "")] = value
        else:
            try:
                arguments[tags.get("key", "")] = json_loads(value)
            except ValueError:
                arguments[tags.get("key", "")] = value
    return [(None, name, arguments, None, None)]


def parse_kimi_k3(text: str, seed: str) -> Scan:
    """XTML: `<|open|>tools<|sep|><|open|>call tool="N" index="1"<|sep|><|open|>argument key="K"
    type="string"<|sep|>V<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>`; the
    `response` channel around it is content."""
    scan = sections(text, _K3_SECTION, _K3_CALL, _kimi_k3_call, seed)
    scan.content = [_K3_MARKUP.sub("\n", piece) for piece in scan.content]
    return scan


_INKLING_TOOL = (
    re.compile(re.escape("<|content_invoke_tool_json|>")),
    re.compile(r"<\|end_message\|>|<\|content_model_end_sampling\|>"),
)
_INKLING_THINKING = re.compile(
    r"<\|content_thinking\|>(.*?)(?:<\|end_message\|>|<\|content_model_end_sampling\|>"
    r"|(?=<\|content_invoke_tool_json\|>)|\Z)",
    re.DOTALL,
)
"""A thinking block: it ends with its message, or where a tool block opens (vLLM's engine
leaves reasoning there too), or with the text."""
_INKLING_MARKUP = re.compile(
    r"<\|message_model\|>[^<]*?(?=<\|content_)|<\|message_model\|>|<\|content_text\|>"
    r"|<\|content_invoke_tool_text\|>|<\|content_tool_error\|>|<\|end_message\|>"
    r"|<\|content_model_end_sampling\|>"
)


def _inkling_call(inner: str) -> list[BlockCall]:
    payload, _raw, error = decode_arguments(inner)
    if error is not None:
        raise BlockError(f"the call is not a JSON object: {error}")
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        raise BlockError("the call has no name")
    args = next((payload[k] for k in ("args", "arguments", "parameters") if k in payload), None)
    arguments, raw, arg_error = decode_arguments(args)
    return [(None, name, arguments, raw, arg_error)]


def parse_inkling(text: str, seed: str) -> Scan:
    """`<|message_model|><|content_invoke_tool_json|>{"name": N, "args": {..}}<|end_message|>`
    blocks among text blocks; `<|content_thinking|>` blocks are reasoning, neither content
    nor calls (each replaced by a newline before the calls are read)."""
    scan = Scan()

    def thought(match: re.Match[str]) -> str:
        if body := match.group(1).strip():
            scan.reasoning.append(body)
        return "\n"

    visible = _INKLING_THINKING.sub(thought, text)
    outside = read_blocks(visible, _INKLING_TOOL, _inkling_call, seed, scan)
    scan.content.extend(_INKLING_MARKUP.split(outside))
    return scan


FAMILIES: dict[str, Parser] = {
    "step3": parse_step3,
    "hy_v3": parse_hy_v3,
    "kimi_k3": untyped(parse_kimi_k3),
    "inkling": untyped(parse_inkling),
}
