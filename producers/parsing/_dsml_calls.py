"""DeepSeek's DSML markup: V3.2 and V4.

The format vLLM reads (V3.2 wraps the calls in `function_calls`, V4 in `tool_calls`)::

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">杭州</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

and the one the Hermes agent reads for V4 (also with ASCII pipes, `< | DSML | ... >`)::

    <｜DSML｜tool_call_begin｜>get_weather
    ```json
    {"city": "杭州"}
    ```<｜DSML｜tool_call_end｜>

Both families read both spellings. A `string="true"` value is the text as written; any other value
is JSON when it parses, else the text, and the tool's declared types type it further.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from rolltape.producers.parsing._blocks import BlockCall, BlockError, ParamTypes, Parser, Scan
from rolltape.producers.parsing._result import decode_arguments, json_loads
from rolltape.producers.parsing._token_calls import read_blocks

_BAR = r"\s*[｜|]\s*"
_OPEN = re.compile(rf"<｜DSML｜invoke\b|<{_BAR}DSML{_BAR}tool.call.begin(?:{_BAR})?\s*>")
_CLOSE = re.compile(rf"</｜DSML｜invoke>|<{_BAR}DSML{_BAR}tool.call.end(?:{_BAR})?\s*>")
_WRAPPER = re.compile(
    rf"</?｜DSML｜(?:function_calls|tool_calls)>|<{_BAR}DSML{_BAR}tool.calls.(?:begin|end)(?:{_BAR})?\s*>"
)
_SECTION_END = re.compile(
    rf"</｜DSML｜(?:function_calls|tool_calls)>|<{_BAR}DSML{_BAR}tool.calls.end"
)
_INVOKE_NAME = re.compile(r'^\s*name\s*=\s*"([^"]*)"\s*>')
_PARAMETER = re.compile(
    r'<｜DSML｜parameter\s+name\s*=\s*"([^"]*)"(?:\s+string\s*=\s*"(true|false)")?\s*>'
    r"(.*?)(?:</｜DSML｜parameter>|(?=<｜DSML｜parameter\b)|$)",
    re.DOTALL,
)
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)
_LEGACY_NAME = re.compile(r"^\s*([^\s<|{`]+)(.*)$", re.DOTALL)
_WRAPPER_KEYS = ("arguments", "input")


def typed_value(text: str, declared: str | None) -> Any:
    """A value written as text, typed by the tool's declared JSON Schema type. Without a
    declared type the text stays text: the reference parsers (Step3, Hunyuan V3) do not guess."""
    converters: dict[str, Callable[[str], Any]] = {
        "integer": int,
        "number": lambda v: float(v) if any(c in v for c in ".eE") else int(v),
        "boolean": lambda v: {"true": True, "false": False}[v.strip().lower()],
        "null": lambda v: {"null": None}[v.strip().lower()],
        "object": json_loads,
        "array": json_loads,
    }
    convert = converters.get(declared or "string")
    if convert is None:
        return text
    try:
        return convert(text)
    except (ValueError, KeyError):
        return text


def _value(text: str, is_string: str | None, declared: str | None) -> Any:
    """`string="true"` is the text as written; otherwise JSON when it parses, else the text."""
    if is_string != "true":
        try:
            return json_loads(text)
        except ValueError:
            pass
    return typed_value(text, declared) if declared not in (None, "string") else text


def _unwrap(arguments: dict[str, Any], declared: Mapping[str, str]) -> dict[str, Any]:
    """`{"arguments": {...}}` around the real parameters (vLLM's DSML parsers unwrap it when the
    tool declares neither the wrapper key nor any key outside the inner object)."""
    if not declared or len(arguments) != 1:
        return arguments
    ((key, inner),) = arguments.items()
    if key not in _WRAPPER_KEYS or key in declared:
        return arguments
    if isinstance(inner, str):
        try:
            inner = json_loads(inner)
        except ValueError:
            return arguments
    if isinstance(inner, dict) and set(inner) <= set(declared):
        return inner
    return arguments


def _invoke(inner: str, types: ParamTypes) -> BlockCall:
    head = _INVOKE_NAME.match(inner)
    if head is None or not head.group(1).strip():
        raise BlockError('the invoke has no name="..."')
    name = head.group(1).strip()
    declared = types.get(name, {})
    body = inner[head.end() :]
    arguments: dict[str, Any] = {}
    for match in _PARAMETER.finditer(body):
        key, is_string, value = match.groups()
        arguments[key] = _value(value, is_string, declared.get(key))
    leftover = _PARAMETER.sub("", body).strip()
    if leftover:
        raise BlockError(f"{name}: unreadable parameters {leftover[:80]!r}")
    return (None, name, _unwrap(arguments, declared), None, None)


def _legacy_call(inner: str) -> BlockCall:
    head = _LEGACY_NAME.match(inner)
    if head is None:
        raise BlockError("the call has no name")
    name, args = head.groups()
    fenced = _FENCE.match(args)
    arguments, raw, error = decode_arguments(fenced.group(1) if fenced else args)
    return (None, name, arguments, raw, error)


def parse_dsml(text: str, seed: str, types: ParamTypes) -> Scan:
    """Invoke blocks and the Hermes agent's call blocks, wherever they are; the section tags
    around them are markup, text outside the blocks is content."""

    def read(inner: str) -> list[BlockCall]:
        return [_invoke(inner, types) if _INVOKE_NAME.match(inner) else _legacy_call(inner)]

    scan = Scan()
    outside = read_blocks(text, (_OPEN, _CLOSE), read, seed, scan, stop_re=_SECTION_END)
    scan.content.extend(_WRAPPER.split(outside))
    return scan


FAMILIES: dict[str, Parser] = {
    "deepseek_v32": parse_dsml,
    "deepseek_v4": parse_dsml,
}
