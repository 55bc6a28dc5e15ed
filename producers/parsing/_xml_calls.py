"""Families whose calls are XML elements naming the tool and each argument in attributes or tags:

- MiniMax M2, `<minimax:tool_call><invoke name="NAME"><parameter name="K">V</parameter></invoke>
  </minimax:tool_call>` (several invokes per wrapper);
- MiniMax M3, the same shape with the namespace token `]<]minimax[>[` before every structural tag
  and each argument written as its own tag (`<K>V</K>`), nested for objects, `<item>` for lists;
- MiniCPM 5, `<function name="NAME"><param name="K">V</param></function>`.

Values are text, typed as in the keyed families (declared schema type, else JSON, Python literal,
text). The reference parsers of MiniMax M3 and MiniCPM 5 return no call at all unless the request
declared the tool; here a call is a call whether or not the session declared tools.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rolltape.producers.parsing._blocks import BlockCall, BlockError, ParamTypes, Parser, Scan
from rolltape.producers.parsing._keyed_calls import BlockKind, Read, scan_kinds
from rolltape.producers.parsing._result import literal_value

_NAME_ATTR = r"""\s*=\s*(?:"([^"]*)"|'([^']*)'|([^>\s]+))\s*>"""


def _attr_name(match: re.Match[str]) -> str:
    return (match.group(1) or match.group(2) or match.group(3) or "").strip()


# --- MiniMax M2 --------------------------------------------------------------------------------

_INVOKE = re.compile(r"<invoke\s+name" + _NAME_ATTR)
_M2_PARAMETER = re.compile(r"<parameter\s+name" + _NAME_ATTR)


def _m2_invokes(types: ParamTypes) -> Read:
    def read(inner: str) -> list[BlockCall]:
        invokes = list(_INVOKE.finditer(inner))
        if not invokes:
            raise BlockError('no <invoke name="NAME"> in the call')
        ends = [m.start() for m in invokes[1:]] + [len(inner)]
        return [
            _m2_invoke(m, inner[m.end() : end], types) for m, end in zip(invokes, ends, strict=True)
        ]

    return read


def _m2_invoke(invoke: re.Match[str], body: str, types: ParamTypes) -> BlockCall:
    name = _attr_name(invoke)
    if not name:
        raise BlockError("an <invoke> has an empty name")
    close = body.find("</invoke>")
    body = body if close == -1 else body[:close]
    declared = types.get(name, {})
    arguments: dict[str, Any] = {}
    params = list(_M2_PARAMETER.finditer(body))
    for i, param in enumerate(params):
        stop = params[i + 1].start() if i + 1 < len(params) else len(body)
        value = body[param.end() : stop]
        close = value.find("</parameter>")
        key = _attr_name(param)
        if key:
            value = (value[:close] if close != -1 else value).strip()
            arguments[key] = literal_value(value, declared.get(key))
    return (None, name, arguments, None, None)


def parse_minimax_m2(text: str, seed: str, types: ParamTypes) -> Scan:
    """`<minimax:tool_call>` wrappers holding `<invoke>` calls; an `<invoke>` written without the
    wrapper is a call too."""
    read = _m2_invokes(types)
    wrapped = BlockKind(
        re.compile("<minimax:tool_call>"),
        re.compile("</minimax:tool_call>"),
        re.compile("<minimax:tool_call>"),
        read,
    )
    bare = BlockKind(
        re.compile(r"(?=<invoke\s+name)"),
        re.compile(r"</invoke>(?:\s*</minimax:tool_call>)?"),
        re.compile(r"<minimax:tool_call>|<invoke\s+name"),
        read,
    )
    return scan_kinds(text, (wrapped, bare), seed)


# --- MiniMax M3 --------------------------------------------------------------------------------

_NS = "]<]minimax[>["
_M3_INVOKE = re.compile(re.escape(_NS) + r'<invoke name="([^"]*)">')
_M3_INVOKE_END = _NS + "</invoke>"
_M3_TAG = re.compile(r"(/?)([^<>/\s]+)>(.*)", re.DOTALL)


def _m3_invokes(types: ParamTypes) -> Read:
    def read(inner: str) -> list[BlockCall]:
        invokes = list(_M3_INVOKE.finditer(inner))
        if not invokes:
            raise BlockError('no <invoke name="NAME"> in the call')
        ends = [m.start() for m in invokes[1:]] + [len(inner)]
        return [
            _m3_invoke(m, inner[m.end() : end], types) for m, end in zip(invokes, ends, strict=True)
        ]

    return read


def _m3_invoke(invoke: re.Match[str], body: str, types: ParamTypes) -> BlockCall:
    name = invoke.group(1).strip()
    if not name:
        raise BlockError("an <invoke> has an empty name")
    close = body.find(_M3_INVOKE_END)
    body = body if close == -1 else body[:close]
    tree = _m3_tree(name, body)
    declared = types.get(name, {})
    arguments = {key: _m3_value(node, declared.get(key)) for key, node in tree["children"]}
    return (None, name, arguments, None, None)


def _m3_tree(name: str, body: str) -> dict[str, Any]:
    """The tags of an invoke's body as nested nodes ({"children": [(tag, node)], "text": str});
    every structural tag follows the namespace token, so `<` inside a value is just text."""
    root: dict[str, Any] = {"children": [], "text": ""}
    stack: list[tuple[str, dict[str, Any]]] = [("", root)]
    for chunk in body.split(_NS)[1:]:
        tag = _M3_TAG.match(chunk[1:]) if chunk.startswith("<") else None
        if tag is None:
            raise BlockError(f"{name}: unreadable argument markup {chunk[:80]!r}")
        closing, label, text = tag.groups()
        if closing:
            while len(stack) > 1 and stack.pop()[0] != label:
                pass
        else:
            node: dict[str, Any] = {"children": [], "text": ""}
            stack[-1][1]["children"].append((label, node))
            stack.append((label, node))
        stack[-1][1]["text"] += text
    return root


def _m3_value(node: Mapping[str, Any], declared: str | None) -> Any:
    children = node["children"]
    if not children:
        return literal_value(node["text"], declared)
    if all(label == "item" for label, _ in children):
        return [_m3_value(child, None) for _, child in children]
    return {label: _m3_value(child, None) for label, child in children}


def parse_minimax_m3(text: str, seed: str, types: ParamTypes) -> Scan:
    """`]<]minimax[>[<tool_call>` wrappers holding namespaced `<invoke>` calls."""
    start = re.compile(re.escape(_NS + "<tool_call>"))
    kind = BlockKind(start, re.compile(re.escape(_NS + "</tool_call>")), start, _m3_invokes(types))
    return scan_kinds(text, (kind,), seed)


# --- MiniCPM 5 ---------------------------------------------------------------------------------

_CPM_FUNCTION = re.compile(r"<function\s*name" + _NAME_ATTR)
_CPM_PARAM = re.compile(r"<param((?:\s|name=)[^>]*)?>(.*?)</param>", re.DOTALL)
_CPM_PARAM_NAME = re.compile(r"""name\s*=\s*["']([^"']+)["']""")
_CDATA = re.compile(r"^<!\[CDATA\[(.*)\]\]>$", re.DOTALL)


def _cpm_function(types: ParamTypes) -> Read:
    def read(inner: str) -> list[BlockCall]:
        match = _CPM_FUNCTION.match(inner)
        name = _attr_name(match) if match else ""
        if match is None or not name:
            raise BlockError('no <function name="NAME"> in the call')
        declared = types.get(name, {})
        arguments: dict[str, Any] = {}
        for param in _CPM_PARAM.finditer(inner, match.end()):
            key_match = _CPM_PARAM_NAME.search(param.group(1) or "")
            if key_match is None:
                raise BlockError(f"{name}: a <param> has no name")
            key = key_match.group(1).strip()
            if key in arguments:
                raise BlockError(f"{name}: parameter {key!r} is given twice")
            value = param.group(2).strip()
            cdata = _CDATA.match(value)
            value = (cdata.group(1) if cdata else value).strip()
            arguments[key] = literal_value(value, declared.get(key))
        return [(None, name, arguments, None, None)]

    return read


def parse_minicpm5(text: str, seed: str, types: ParamTypes) -> Scan:
    """`<function name="NAME"><param name="K">V</param>...</function>`, optionally with the params
    inside `<arguments>`; the collapsed `<functionname="...">` spelling is read too."""
    kind = BlockKind(
        re.compile(r"(?=<function\s*name\s*=)"),
        re.compile("</function>"),
        re.compile(r"<function\s*name\s*="),
        _cpm_function(types),
    )
    return scan_kinds(text, (kind,), seed)


FAMILIES: dict[str, Parser] = {
    "minimax_m2": parse_minimax_m2,
    "minimax_m3": parse_minimax_m3,
    "minicpm5": parse_minicpm5,
}
