"""Families that write each argument as its own tagged value: qwen3-coder
(`<function=NAME><parameter=K>V</parameter></function>`) and GLM 4.5 / 4.7
(`NAME<arg_key>K</arg_key><arg_value>V</arg_value>`), both inside `<tool_call>` blocks.

Values are text; they are typed by the tool's JSON Schema when the session declared the tool (a
string parameter stays the text, so `"007"` is not turned into 7), otherwise by JSON, then Python
literal, else kept as text, as the reference parsers do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from rolltape.producers.parsing._blocks import BlockCall, BlockError, Scan, scan_blocks
from rolltape.producers.parsing._result import literal_value

ParamTypes = Mapping[str, Mapping[str, str]]
"""tool name -> parameter name -> JSON Schema type, from the session's declared tools."""

_FUNCTION = re.compile(r"<function=([^>\n]+)>")
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>")


def _strip_newline(value: str) -> str:
    """The format puts the value on its own lines: one newline on each side belongs to it."""
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def _qwen3_coder_block(types: ParamTypes) -> Callable[[str], list[BlockCall]]:
    def read(inner: str) -> list[BlockCall]:
        match = _FUNCTION.search(inner)
        if match is None:
            raise BlockError("no <function=NAME> in the call")
        name = match.group(1).strip()
        body_end = inner.find("</function>", match.end())
        body = inner[match.end() : body_end if body_end != -1 else len(inner)]
        declared = types.get(name, {})
        arguments: dict[str, Any] = {}
        params = list(_PARAMETER.finditer(body))
        for i, param in enumerate(params):
            stop = params[i + 1].start() if i + 1 < len(params) else len(body)
            value = body[param.end() : stop]
            close = value.find("</parameter>")
            value = _strip_newline(value[:close] if close != -1 else value.rstrip())
            key = param.group(1).strip()
            arguments[key] = literal_value(value, declared.get(key))
        return [(None, name, arguments, None, None)]

    return read


def parse_qwen3_coder(text: str, seed: str, types: ParamTypes) -> Scan:
    """`<tool_call><function=NAME><parameter=K>V</parameter>...</function></tool_call>`; a bare
    `<function=...>...</function>` without the outer tags is read too (the model drops them)."""
    read = _qwen3_coder_block(types)
    if "<tool_call>" not in text and "<function=" in text:
        return scan_blocks(text, "<function=", "</function>", _reopen(read), seed=seed)
    return scan_blocks(text, "<tool_call>", "</tool_call>", read, seed=seed)


def _reopen(read: Callable[[str], list[BlockCall]]) -> Callable[[str], list[BlockCall]]:
    """Give a block scanned from `<function=` its opening tag back."""
    return lambda inner: read("<function=" + inner + "</function>")


_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


def _glm_block(types: ParamTypes, *, newline_required: bool) -> Callable[[str], list[BlockCall]]:
    def read(inner: str) -> list[BlockCall]:
        first_key = inner.find("<arg_key>")
        head = inner if first_key == -1 else inner[:first_key]
        if newline_required and first_key != -1 and "\n" not in head:
            raise BlockError("glm45 expects a newline after the tool name")
        name = head.strip()
        if not name or "<" in name:
            raise BlockError("the call has no tool name")
        declared = types.get(name, {})
        rest = "" if first_key == -1 else inner[first_key:]
        arguments: dict[str, Any] = {}
        consumed = 0
        for match in _ARG.finditer(rest):
            if rest[consumed : match.start()].strip():
                break
            key = match.group(1).strip()
            arguments[key] = literal_value(match.group(2), declared.get(key))
            consumed = match.end()
        if rest[consumed:].strip():
            raise BlockError(f"{name}: unreadable arguments {rest[consumed:].strip()[:80]!r}")
        return [(None, name, arguments, None, None)]

    return read


def parse_glm45(text: str, seed: str, types: ParamTypes) -> Scan:
    """`<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value></tool_call>`."""
    read = _glm_block(types, newline_required=True)
    return scan_blocks(text, "<tool_call>", "</tool_call>", read, seed=seed)


def parse_glm47(text: str, seed: str, types: ParamTypes) -> Scan:
    """As glm45, but the name and the first argument may share a line, and a call may have no
    arguments at all (`<tool_call>NAME</tool_call>`)."""
    read = _glm_block(types, newline_required=False)
    return scan_blocks(text, "<tool_call>", "</tool_call>", read, seed=seed)
