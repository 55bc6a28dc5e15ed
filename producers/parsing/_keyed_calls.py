"""Families that write each argument as its own tagged value:

- the Qwen3 XML grammar, `<tool_call><function=NAME><parameter=K>V</parameter></function>
  </tool_call>`: qwen3-coder, qwen3_xml and MiMo, Step 3.5, and Seed-OSS (the same grammar inside
  `<seed:tool_call>`);
- GLM 4.5 / 4.7, `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`;
- Solar Open 2, `<|tool_call:start|>NAME\\n<|tool_arg:start|>K<|tool_arg:value|>V<|tool_arg:end|>
  <|tool_call:end|>`.

Values are text; they are typed by the tool's JSON Schema when the session declared the tool (a
string parameter stays the text, so `"007"` is not turned into 7), otherwise by JSON, then Python
literal, else kept as text, as the Hermes agent's parsers do.

A block whose closing tag is missing ends where the next block of its kind opens (or at the end of
the text), so a lost closing tag costs no other call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rolltape.producers.parsing._blocks import BlockCall, BlockError, ParamTypes, Parser, Scan
from rolltape.producers.parsing._result import ParseProblem, literal_value

Read = Callable[[str], list[BlockCall]]


@dataclass(frozen=True)
class BlockKind:
    """One way a call block is written. `open` may match zero characters (a block that starts at
    its first tag, such as a bare `<function=`); `stop` says where a block whose `close` is missing
    ends (the next block), searched from just after the block's start."""

    open: re.Pattern[str]
    close: re.Pattern[str]
    stop: re.Pattern[str]
    read: Read


def scan_kinds(text: str, kinds: tuple[BlockKind, ...], seed: str) -> Scan:
    """Split `text` at blocks of any of `kinds` (the earliest first); each block is read on its own
    and the text between blocks is content."""
    scan = Scan()
    pos = 0
    # each kind's next opening, searched again only once the scan has passed it: searching every
    # kind from every block would cost the square of the text's length
    upcoming: dict[int, re.Match[str] | None] = {}
    while True:
        for i, k in enumerate(kinds):
            seen = upcoming.get(i, ...)
            if seen is ... or (seen is not None and seen.start() < pos):
                upcoming[i] = k.open.search(text, pos)
        found = [(m.start(), i, m) for i, m in upcoming.items() if m is not None]
        if not found:
            break
        start, index, opened = min(found, key=lambda item: (item[0], item[1]))
        kind = kinds[index]
        scan.content.append(text[pos:start])
        inner = opened.end()
        stop = kind.stop.search(text, start + 1)
        cut = stop.start() if stop is not None else len(text)
        close = kind.close.search(text, inner, cut)  # only up to the next block: linear
        inner_end, end = (close.start(), close.end()) if close else (cut, cut)
        _read_block(text[start:end], text[inner:inner_end], kind.read, seed, start, scan)
        pos = max(end, start + 1)
    scan.content.append(text[pos:])
    return scan


def _read_block(raw: str, inner: str, read: Read, seed: str, offset: int, scan: Scan) -> None:
    try:
        calls = read(inner)
    except BlockError as exc:
        scan.problems.append(ParseProblem(raw=raw, error=str(exc), offset=offset))
        return
    for call in calls:
        scan.add_call(call, seed, raw, offset)


def _exact(tag: str) -> re.Pattern[str]:
    return re.compile(re.escape(tag))


def _one_newline_off(value: str) -> str:
    """The grammar puts a value on its own lines: exactly one newline on each side belongs to the
    markup; any further blank lines are the value's own."""
    value = value.removeprefix("\n")
    return value.removesuffix("\n")


# --- Qwen3 XML grammar -------------------------------------------------------------------------

_FUNCTION = re.compile(r"<function=([^>]*)>")
_FUNCTION_END = "</function>"
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>")


def _qwen3_functions(types: ParamTypes) -> Read:
    def read(inner: str) -> list[BlockCall]:
        starts = [m.start() for m in re.finditer("<function=", inner)]
        if not starts:
            raise BlockError("no <function=NAME> in the call")
        ends = [*starts[1:], len(inner)]
        return [_qwen3_function(inner[a:b], types) for a, b in zip(starts, ends, strict=True)]

    return read


def _qwen3_function(text: str, types: ParamTypes) -> BlockCall:
    """One `<function=NAME>...</function>`; the body ends at `</function>` or, when the model
    dropped it, where the next function (or the block) ends."""
    match = _FUNCTION.match(text)
    name = match.group(1).strip() if match else ""
    if match is None or not name or "<" in name or "\n" in name:
        raise BlockError(f"no readable function name in {text[:80]!r}")
    end = text.find(_FUNCTION_END, match.end())
    body = text[match.end() : end if end != -1 else len(text)]
    declared = types.get(name, {})
    arguments: dict[str, Any] = {}
    params = list(_PARAMETER.finditer(body))
    for i, param in enumerate(params):
        stop = params[i + 1].start() if i + 1 < len(params) else len(body)
        value = body[param.end() : stop]
        close = value.find("</parameter>")
        value = _one_newline_off(value[:close] if close != -1 else value.rstrip())
        key = param.group(1).strip()
        arguments[key] = literal_value(value, declared.get(key))
    return (None, name, arguments, None, None)


def _qwen3_kinds(open_tag: str, close_tag: str, types: ParamTypes) -> tuple[BlockKind, ...]:
    """The wrapped form, and a bare `<function=...>` the model wrote without the wrapper (then a
    stray closing wrapper right after it belongs to the call, not to the content)."""
    read = _qwen3_functions(types)
    wrapped = BlockKind(_exact(open_tag), _exact(close_tag), _exact(open_tag), read)
    bare = BlockKind(
        re.compile("(?=<function=)"),
        re.compile(re.escape(_FUNCTION_END) + r"(?:\s*" + re.escape(close_tag) + ")?"),
        re.compile(re.escape(open_tag) + "|<function="),
        read,
    )
    return (wrapped, bare)


def parse_qwen3_coder(text: str, seed: str, types: ParamTypes) -> Scan:
    """`<tool_call><function=NAME><parameter=K>V</parameter>...</function></tool_call>`; several
    functions in one block are several calls, and a bare `<function=...>` is read too."""
    return scan_kinds(text, _qwen3_kinds("<tool_call>", "</tool_call>", types), seed)


def parse_seed_oss(text: str, seed: str, types: ParamTypes) -> Scan:
    """The Qwen3 grammar inside `<seed:tool_call>`...`</seed:tool_call>`."""
    return scan_kinds(text, _qwen3_kinds("<seed:tool_call>", "</seed:tool_call>", types), seed)


# --- GLM 4.5 / 4.7 -----------------------------------------------------------------------------

_GAP = r"(?:\s|\\n)*"
"""Between tags: whitespace, or a newline the model wrote escaped (a literal backslash-n)."""
_ARG = re.compile(rf"<arg_key>(.*?)</arg_key>{_GAP}<arg_value>(.*?)</arg_value>", re.DOTALL)
_ONLY_GAP = re.compile(_GAP)


def _glm_block(types: ParamTypes) -> Read:
    def read(inner: str) -> list[BlockCall]:
        first_key = inner.find("<arg_key>")
        head = inner if first_key == -1 else inner[:first_key]
        name = _strip_gap(head)
        if not name or "<" in name:
            raise BlockError("the call has no tool name")
        rest = "" if first_key == -1 else inner[first_key:]
        return [(None, name, _glm_arguments(name, rest, types.get(name, {})), None, None)]

    return read


def _strip_gap(text: str) -> str:
    """Whitespace and escaped newlines around a name are markup, not part of it."""
    return re.sub(rf"^{_GAP}|{_GAP}$", "", text)


def _glm_arguments(name: str, rest: str, declared: Mapping[str, str]) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    consumed = 0
    for match in _ARG.finditer(rest):
        if not _ONLY_GAP.fullmatch(rest, consumed, match.start()):
            break
        key = match.group(1).strip()
        arguments[key] = literal_value(match.group(2), declared.get(key))
        consumed = match.end()
    if not _ONLY_GAP.fullmatch(rest, consumed):
        raise BlockError(f"{name}: unreadable arguments {rest[consumed:].strip()[:80]!r}")
    return arguments


def parse_glm(text: str, seed: str, types: ParamTypes) -> Scan:
    """`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`; the name may
    be followed by a newline or directly by the first key, and a call may have no arguments."""
    kind = BlockKind(
        _exact("<tool_call>"), _exact("</tool_call>"), _exact("<tool_call>"), _glm_block(types)
    )
    return scan_kinds(text, (kind,), seed)


# --- Solar Open 2 ------------------------------------------------------------------------------

_SOLAR_START = "<|tool_call:start|>"
_SOLAR_ARG = re.compile(
    r"<\|tool_arg:start\|>((?:(?!<\|tool_arg:start\|>).)*?)<\|tool_arg:value\|>"
    r"((?:(?!<\|tool_arg:end\|>|<\|tool_arg:start\|>).)*)(?:<\|tool_arg:end\|>|(?=<\|tool_arg:start\|>)|\Z)",
    re.DOTALL,
)


def _solar_block(types: ParamTypes) -> Read:
    def read(inner: str) -> list[BlockCall]:
        ends = [i for i in (inner.find("\n"), inner.find("<|tool_arg:start|>")) if i != -1]
        name = inner[: min(ends, default=len(inner))].strip()
        if not name or "<|" in name:
            raise BlockError("the call has no tool name")
        declared = types.get(name, {})
        arguments: dict[str, Any] = {}
        for match in _SOLAR_ARG.finditer(inner):
            key = match.group(1).strip()
            if key not in arguments:
                arguments[key] = literal_value(match.group(2), declared.get(key))
        return [(None, name, arguments, None, None)]

    return read


def parse_solar_open2(text: str, seed: str, types: ParamTypes) -> Scan:
    """`<|tool_call:start|>NAME\\n<|tool_arg:start|>K<|tool_arg:value|>V<|tool_arg:end|>...
    <|tool_call:end|>`; a repeated argument keeps its first value."""
    kind = BlockKind(
        _exact(_SOLAR_START), _exact("<|tool_call:end|>"), _exact(_SOLAR_START), _solar_block(types)
    )
    return scan_kinds(text, (kind,), seed)


FAMILIES: dict[str, Parser] = {
    "qwen3_coder": parse_qwen3_coder,
    "qwen3_xml": parse_qwen3_coder,
    "mimo": parse_qwen3_coder,
    "step3p5": parse_qwen3_coder,
    "seed_oss": parse_seed_oss,
    "glm45": parse_glm,
    "glm47": parse_glm,
    "solar_open2": parse_solar_open2,
}
