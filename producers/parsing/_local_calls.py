"""Families for local models whose output follows no single template (the Hermes agent's names):

- custom_xml: `<tool_use>` or `<tool_call>` blocks (or both, nested) holding
  `<parameter=tool_name>NAME</parameter><parameter=arguments>{json}</parameter>`, or
  `<parameter=name>NAME</parameter>` in place of `tool_name`;
- auto: the first of three formats that yields a call: `<parameter=tool_name>` blocks as above
  (with or without the wrapping tags), raw `{"name": "NAME", "arguments": "<JSON string>"}`
  objects (single quotes too), then fenced code blocks (```` ```bash ````, `sh`, `shell` or no
  language) as calls of `terminal` with `{"command": ...}`.

Unlike the reference, a model that calls the same tool twice with the same arguments gets two
calls, every call is returned (not only the last of a block holding two), and the text around
the calls is content.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from rolltape.producers.parsing._blocks import BlockCall, BlockError, Parser, Scan, untyped
from rolltape.producers.parsing._result import (
    ParseProblem,
    decode_arguments,
    json_loads,
)

# --- <parameter=...> blocks ----------------------------------------------------------------------

_TAG = r"(?:<tool_call>|<tool_use>)"
_END_TAG = r"(?:</tool_use>|</tool_call>)"
_OPEN_RUN = re.compile(rf"{_TAG}(?:\s*{_TAG})*")
"""`<tool_call><tool_use>` (the hybrid wrapping) opens one block, not two."""
_CLOSE_RUN = re.compile(rf"{_END_TAG}(?:\s*{_END_TAG})*")
_PARAMETER = re.compile(r"<parameter=(\w+)>")
_PARAMETER_END = "</parameter>"
_BARE_START = "<parameter=tool_name>"
"""A call written without its wrapping tag still starts here (both references read it)."""

NameKeys = Mapping[str, bool]
"""Parameters that carry the tool name -> whether an `arguments` value that is not an object
is still tried as JSON (the reference's `tool_name` branch of custom_xml does, the others do not)."""

_CUSTOM_XML_NAMES: NameKeys = {"tool_name": True, "name": False}
_AUTO_NAMES: NameKeys = {"tool_name": False}


def _blocks(text: str) -> Iterator[tuple[int, int, int, int]]:
    """(start, inner start, inner end, end) of each block: from an opening tag, or from a
    `<parameter=tool_name>` outside any block, to the closing tags; a block left open ends where
    the next one opens, or at the end of the text."""
    pos = 0
    while True:
        opened = _OPEN_RUN.search(text, pos)
        bare = text.find(_BARE_START, pos)
        if opened is None and bare == -1:
            return
        if opened is not None and (bare == -1 or opened.start() < bare):
            start, inner_start = opened.start(), opened.end()
        else:
            start = inner_start = bare
        closed = _CLOSE_RUN.search(text, inner_start)
        reopened = _OPEN_RUN.search(text, inner_start)
        if closed is not None and (reopened is None or closed.start() < reopened.start()):
            inner_end, pos = closed.start(), closed.end()
        else:
            inner_end = pos = len(text) if reopened is None else reopened.start()
        yield start, inner_start, inner_end, pos


def _without_cut_end(value: str) -> str:
    """A parameter left open at the end may end in the first characters of `</parameter>`."""
    for size in range(len(_PARAMETER_END) - 1, 0, -1):
        if value.endswith(_PARAMETER_END[:size]):
            return value[:-size]
    return value


def _parameters(inner: str) -> Iterator[tuple[str, str]]:
    """(key, stripped value) of each parameter; one left open runs to the next parameter or the
    end of the block, so a cut call keeps what it wrote."""
    pos = 0
    while (found := _PARAMETER.search(inner, pos)) is not None:
        following = _PARAMETER.search(inner, found.end())
        stop = len(inner) if following is None else following.start()
        close = inner.find(_PARAMETER_END, found.end(), stop)
        if close == -1:
            value, pos = _without_cut_end(inner[found.end() : stop].rstrip()), stop
        else:
            value, pos = inner[found.end() : close], close + len(_PARAMETER_END)
        yield found.group(1), value.strip()


def _groups(inner: str, names: NameKeys) -> list[dict[str, str]]:
    """The block's parameters, one group per call: a second name parameter in a block starts the
    next call (the reference keeps only the last call of such a block)."""
    groups: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for key, value in _parameters(inner):
        if key in names and any(k in names for k in current):
            groups.append(current)
            current = {}
        current[key] = value
    if current:
        groups.append(current)
    return groups


def _xml_arguments(text: str, bare_json: bool) -> tuple[dict[str, Any], str | None, str | None]:
    """An object is the arguments; any other value is wrapped as `{"value": ...}` (the
    reference's convention for text), so the arguments are always an object."""
    if not text:
        return {}, None, None
    if text.startswith("{"):
        return decode_arguments(text)
    if bare_json:
        try:
            return {"value": json_loads(text)}, None, None
        except json.JSONDecodeError:
            pass
    return {"value": text}, None, None


def _group_call(group: Mapping[str, str], names: NameKeys) -> BlockCall:
    key = next((k for k in names if k in group), None)
    if key is None:
        raise BlockError("no <parameter=tool_name> in the block")
    name = group[key]
    if not name:
        raise BlockError(f"<parameter={key}> is empty")
    arguments, raw, error = _xml_arguments(group.get("arguments", ""), names[key])
    return None, name, arguments, raw, error


def _scan_parameters(text: str, seed: str, names: NameKeys, nameless_is_problem: bool) -> Scan:
    """Every block's calls. A tagged block without a name parameter is a problem when
    `nameless_is_problem`; otherwise it is not this format and stays content."""
    scan = Scan()
    pos = 0
    for start, inner_start, inner_end, end in _blocks(text):
        groups = _groups(text[inner_start:inner_end], names)
        if not nameless_is_problem and not any(k in names for g in groups for k in g):
            continue
        scan.content.append(text[pos:start])
        pos = end
        raw = text[start:end]
        for group in groups or [{}]:
            try:
                scan.add_call(_group_call(group, names), seed, raw, start)
            except BlockError as exc:
                scan.problems.append(ParseProblem(raw=raw, error=str(exc), offset=start))
    scan.content.append(text[pos:])
    return scan


def parse_custom_xml(text: str, seed: str) -> Scan:
    """`<tool_use>` / `<tool_call>` blocks of `<parameter=...>` elements; like the reference,
    nothing is a call unless the text has one of the two tags."""
    if "<tool_use>" not in text and "<tool_call>" not in text:
        return Scan(content=[text])
    return _scan_parameters(text, seed, _CUSTOM_XML_NAMES, nameless_is_problem=True)


# --- auto: raw JSON call objects -----------------------------------------------------------------

_JSON_CALL = re.compile(
    r'\{\s*"name"\s*:\s*"([^"]+)"\s*,\s*"arguments"\s*:\s*"((?:[^"\\]|\\.)*)"\s*\}'
)
_QUOTED_CALL = re.compile(
    r"\{\s*'name'\s*:\s*'([^']+)'\s*,\s*'arguments'\s*:\s*'((?:[^'\\]|\\.)*)'\s*\}"
)
"""The single-quoted form, read only when the text has no double-quoted call (as the reference)."""
_WRAP_BEFORE = re.compile(r"<tool_call>\s*$")
_WRAP_AFTER = re.compile(r"\s*</tool_call>")


def _unquote(body: str, quote: str) -> str:
    """The argument string as the model meant it: its escapes decoded (the reference only turns
    `\\"` into `"`, so `\\n` or `\\\\` inside the JSON reach it doubled)."""
    try:
        decoded: str = (
            json_loads(f'"{body}"', strict=False) if quote == '"' else ast.literal_eval(f"'{body}'")
        )
    except (ValueError, SyntaxError):
        return body.replace('\\"', '"')
    return decoded


def _json_call_arguments(body: str, quote: str) -> tuple[dict[str, Any], str | None, str | None]:
    """Decoded properly first; a model that escaped too little (`C:\\Users`) may still be read
    the reference's way."""
    decoded = decode_arguments(_unquote(body, quote))
    if decoded[2] is None:
        return decoded
    loose = decode_arguments(body.replace('\\"', '"'))
    return loose if loose[2] is None else decoded


def _wrapped_span(text: str, pos: int, start: int, end: int) -> tuple[int, int]:
    """The call object with the `<tool_call>` tags around it, which are markup, not content
    (`pos`: where the text not yet read starts)."""
    before = _WRAP_BEFORE.search(text, pos, start)
    after = _WRAP_AFTER.match(text, end)
    return (before.start() if before else start), (after.end() if after else end)


def _scan_json_objects(text: str, seed: str) -> Scan:
    pattern, quote = _JSON_CALL, '"'
    if pattern.search(text) is None:
        pattern, quote = _QUOTED_CALL, "'"
    scan = Scan()
    pos = 0
    for found in pattern.finditer(text):
        start, end = _wrapped_span(text, pos, found.start(), found.end())
        scan.content.append(text[pos:start])
        pos = end
        raw = text[start:end]
        name = found.group(1)
        if not name.strip():
            scan.problems.append(ParseProblem(raw=raw, error="the call has no name", offset=start))
            continue
        arguments, raw_arguments, error = _json_call_arguments(found.group(2), quote)
        scan.add_call((None, name, arguments, raw_arguments, error), seed, raw, start)
    scan.content.append(text[pos:])
    return scan


# --- auto: fenced shell commands -----------------------------------------------------------------

_FENCE = re.compile(r"```(?:bash|shell|sh)?\s*\n(.*?)\n```", re.DOTALL)
"""The reference's fence: any other language tag is not read at its own fence, but its closing
fence may open a match of its own, as in the reference."""


def _scan_fences(text: str, seed: str) -> Scan:
    scan = Scan()
    pos = 0
    for found in _FENCE.finditer(text):
        scan.content.append(text[pos : found.start()])
        pos = found.end()
        command = found.group(1).strip()
        if command:
            call = (None, "terminal", {"command": command}, None, None)
            scan.add_call(call, seed, found.group(0), found.start())
    scan.content.append(text[pos:])
    return scan


def _scan_auto_parameters(text: str, seed: str) -> Scan:
    """Only `<parameter=tool_name>` names a call here; a tagged block without it is left to the
    next format (a `<tool_call>{json}</tool_call>` block may still be a raw JSON call)."""
    return _scan_parameters(text, seed, _AUTO_NAMES, nameless_is_problem=False)


_AUTO_FORMATS: tuple[Callable[[str, str], Scan], ...] = (
    _scan_auto_parameters,
    _scan_json_objects,
    _scan_fences,
)


def parse_auto(text: str, seed: str) -> Scan:
    """The first format that yields a call wins, as in the reference (a fenced command next to a
    JSON call is content). Blocks of an earlier format that were not calls are still problems;
    with no call at all, the first format that found a bad block describes the text."""
    earlier: list[ParseProblem] = []
    fallback: Scan | None = None
    for read in _AUTO_FORMATS:
        scan = read(text, seed)
        if scan.calls:
            scan.problems = sorted([*earlier, *scan.problems], key=lambda p: p.offset)
            return scan
        earlier.extend(scan.problems)
        if fallback is None and scan.problems:
            fallback = scan
    return fallback if fallback is not None else Scan(content=[text])


FAMILIES: dict[str, Parser] = {
    "custom_xml": untyped(parse_custom_xml),
    "auto": untyped(parse_auto),
}
