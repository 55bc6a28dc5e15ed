"""Families whose calls are JSON objects.

- hermes, qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks;
- longcat: the same inside `<longcat_tool_call>` tags;
- llama3_json, llama4_json: bare `{"name": ..., "arguments" | "parameters": {...}}` objects,
  optionally after `<|python_tag|>` (or between `<|python_start|>`/`<|python_end|>`) and
  separated by `;` or whitespace;
- mistral: `[TOOL_CALLS]` followed by a JSON list of calls, or bare call objects (tokenizers
  before v11), or by `NAME{args}` / `NAME[ARGS]{args}` (v11 and later), ids of 9 alphanumerics.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Callable
from typing import Any

from rolltape.producers.parsing._blocks import (
    BlockCall,
    BlockError,
    Parser,
    Scan,
    scan_blocks,
    untyped,
)
from rolltape.producers.parsing._result import (
    ParseProblem,
    call_id,
    decode_arguments,
    json_raw_decode,
)

_BLANK = " \t\r\n"


def call_from_object(obj: Any) -> BlockCall:
    """{"name", "arguments" | "parameters", "id"?} as a call; BlockError when it is not one."""
    if not isinstance(obj, dict):
        raise BlockError(f"expected a JSON object with a name, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        raise BlockError("the call has no name")
    raw_args = obj.get("arguments", obj.get("parameters"))
    arguments, raw, error = decode_arguments(raw_args)
    given = obj.get("id")
    return (given if isinstance(given, str) and given else None, name, arguments, raw, error)


def _skip(text: str, pos: int, chars: str) -> int:
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


def _decode_at(text: str, pos: int) -> tuple[Any, int]:
    """The JSON value at `pos` and where it ends; BlockError (with the decoder's reason)."""
    try:
        return json_raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        raise BlockError(f"not valid JSON: {exc}") from exc


def _calls_from_values(values: list[Any]) -> list[BlockCall]:
    """Call objects, or lists of them, as calls: a model that writes `[{...}, {...}]` or two
    objects in one block means two calls."""
    calls: list[BlockCall] = []
    for value in values:
        items = value if isinstance(value, list) else [value]
        calls.extend(call_from_object(item) for item in items)
    return calls


def _json_values(text: str) -> list[Any]:
    """Every JSON value in `text`, one after another (whitespace or commas between them)."""
    pos = _skip(text, 0, _BLANK)
    if pos == len(text):
        raise BlockError("the block is empty")
    values: list[Any] = []
    while pos < len(text):
        value, pos = _decode_at(text, pos)
        values.append(value)
        pos = _skip(text, pos, _BLANK + ",")
    return values


def _without_cut_tag(inner: str, close_tag: str) -> str:
    """A block left open at the end may end in the first characters of its closing tag (the
    stop sequence cut it): they are not part of the JSON."""
    stripped = inner.rstrip()
    for size in range(len(close_tag) - 1, 0, -1):
        if stripped.endswith(close_tag[:size]):
            return stripped[:-size]
    return inner


def _json_block(close_tag: str) -> Callable[[str], list[BlockCall]]:
    def read(inner: str) -> list[BlockCall]:
        return _calls_from_values(_json_values(_without_cut_tag(inner, close_tag)))

    return read


def parse_hermes(text: str, seed: str) -> Scan:
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number (hermes, qwen)."""
    close = "</tool_call>"
    return scan_blocks(text, "<tool_call>", close, _json_block(close), seed=seed)


def parse_longcat(text: str, seed: str) -> Scan:
    """`<longcat_tool_call>{json}</longcat_tool_call>`."""
    close = "</longcat_tool_call>"
    return scan_blocks(text, "<longcat_tool_call>", close, _json_block(close), seed=seed)


_CALL_START = re.compile(r'\{\s*"name"\s*:')
_OBJECT_START = re.compile(r'\{\s*["}]')
_PYTHON_TAGS = ("<|python_tag|>", "<|python_start|>", "<|python_end|>")


def parse_llama_json(text: str, seed: str) -> Scan:
    """Bare JSON call objects anywhere in the text. An object is a call when it has a "name"
    and "arguments" or "parameters" (in any order); any other brace or JSON object is content,
    and a broken object that starts like a call is a problem that costs only itself."""
    scan = Scan()
    pos = content_from = 0
    while (start := text.find("{", pos)) != -1:
        if not _OBJECT_START.match(text, start):  # `{{`, `{x}`: not JSON, not worth decoding
            pos = start + 1
            continue
        try:
            obj, end = json_raw_decode(text, start)
        except json.JSONDecodeError as exc:
            if not _CALL_START.match(text, start):
                pos = start + 1
                continue
            end = _block_end(text, start)
            scan.content.append(text[content_from:start])
            scan.problems.append(
                ParseProblem(raw=text[start:end], error=f"not valid JSON: {exc}", offset=start)
            )
            pos = content_from = end
            continue
        if not _names_a_call(obj):
            pos = end  # a JSON object in prose: content, and so is every brace inside it
            continue
        scan.content.append(text[content_from:start])
        try:
            scan.add_call(call_from_object(obj), seed, text[start:end], start)
        except BlockError as exc:
            scan.problems.append(ParseProblem(raw=text[start:end], error=str(exc), offset=start))
        pos = content_from = _skip_separator(text, end)
    scan.content.append(text[content_from:])
    scan.content = [_without_python_tags(piece) for piece in scan.content]
    return scan


def _names_a_call(obj: Any) -> bool:
    return isinstance(obj, dict) and "name" in obj and ("arguments" in obj or "parameters" in obj)


def _without_python_tags(text: str) -> str:
    for tag in _PYTHON_TAGS:
        text = text.replace(tag, "")
    return text


def _skip_separator(text: str, pos: int) -> int:
    """After a call: whitespace, python tags and one `;` between calls belong to the calls."""
    end = _skip_blank(text, pos)
    if end < len(text) and text[end] == ";":
        return _skip_blank(text, end + 1)
    return end


def _skip_blank(text: str, pos: int) -> int:
    while True:
        pos = _skip(text, pos, _BLANK)
        tag = next((t for t in _PYTHON_TAGS if text.startswith(t, pos)), None)
        if tag is None:
            return pos
        pos += len(tag)


def _block_end(text: str, start: int) -> int:
    """The end of a broken JSON block: the next call, the next line break or the end."""
    nxt = _CALL_START.search(text, start + 1)
    newline = text.find("\n", start)
    candidates = [i for i in (nxt.start() if nxt else -1, newline) if i != -1]
    return min(candidates) if candidates else len(text)


_MISTRAL = "[TOOL_CALLS]"
_MISTRAL_ARGS = "[ARGS]"
_MISTRAL_NAME = re.compile(r"\s*([^\s{\[]+)")
_ALPHANUMERIC = string.ascii_letters + string.digits


def mistral_call_id(seed: str, index: int) -> str:
    """Mistral's id shape (9 alphanumerics, what its templates validate), derived from
    `call_id` so that parsing the same text twice gives the same ids."""
    number = int.from_bytes(hashlib.sha256(call_id(seed, index).encode()).digest(), "big")
    chars = []
    for _ in range(9):
        number, digit = divmod(number, len(_ALPHANUMERIC))
        chars.append(_ALPHANUMERIC[digit])
    return "".join(chars)


def parse_mistral(text: str, seed: str) -> Scan:
    """Each `[TOOL_CALLS]` starts calls: a JSON list or bare objects (before v11), or
    `NAME{args}` / `NAME[ARGS]{args}` (v11 and later); every marker is read, and text after a
    marker's calls, up to the next marker, is content."""
    scan = Scan()
    starts = [m.start() for m in re.finditer(re.escape(_MISTRAL), text)]
    scan.content.append(text[: starts[0]] if starts else text)
    for number, start in enumerate(starts):
        end = starts[number + 1] if number + 1 < len(starts) else len(text)
        segment = text[:end]
        at = _skip(segment, start + len(_MISTRAL), _BLANK)
        if at < end and segment[at] in "[{":
            rest = _mistral_objects(segment, start, at, seed, scan)
        else:
            rest = _mistral_named(segment, start, seed, scan)
        scan.content.append(segment[rest:])
    return scan


def _mistral_objects(segment: str, start: int, at: int, seed: str, scan: Scan) -> int:
    """Lists of calls and call objects one after another (commas or whitespace between): the
    references read one list and drop everything when the model leaves the brackets out."""
    pos = at
    while True:
        origin = start if pos == at else pos  # the marker belongs to its first value
        try:
            value, end = _decode_at(segment, pos)
        except BlockError as exc:
            scan.problems.append(ParseProblem(raw=segment[origin:], error=str(exc), offset=origin))
            return len(segment)
        for item in value if isinstance(value, list) else [value]:
            _add_mistral_call(item, seed, scan, segment[origin:end], origin)
        nxt = _skip(segment, end, _BLANK + ",")
        if nxt >= len(segment) or segment[nxt] not in "[{":
            return end
        pos = nxt


def _add_mistral_call(item: Any, seed: str, scan: Scan, raw: str, offset: int) -> None:
    """One list item: a bad item is a problem of its own, the model's id is kept, and a
    missing id gets Mistral's shape."""
    try:
        given, name, arguments, raw_arguments, error = call_from_object(item)
    except BlockError as exc:
        raw_item = json.dumps(item, ensure_ascii=False)
        scan.problems.append(ParseProblem(raw=raw_item, error=str(exc), offset=offset))
        return
    cid = given or mistral_call_id(seed, len(scan.calls))
    scan.add_call((cid, name, arguments, raw_arguments, error), seed, raw, offset)


def _mistral_named(segment: str, start: int, seed: str, scan: Scan) -> int:
    """`NAME{args}`: the arguments end with their JSON object (text after it is content, not
    part of the arguments as the references read it) and a name is never padded."""
    match = _MISTRAL_NAME.match(segment, start + len(_MISTRAL))
    if match is None:
        scan.problems.append(
            ParseProblem(
                raw=segment[start:], error="[TOOL_CALLS] without a tool name", offset=start
            )
        )
        return len(segment)
    name = match.group(1)
    at = _skip(segment, match.end(), _BLANK)
    if segment.startswith(_MISTRAL_ARGS, at):
        at = _skip(segment, at + len(_MISTRAL_ARGS), _BLANK)
    try:
        arguments, end = _decode_at(segment, at)
    except BlockError:
        arguments, end = None, at
    cid = mistral_call_id(seed, len(scan.calls))
    if not isinstance(arguments, dict) and not segment.startswith("{", at):
        scan.problems.append(
            ParseProblem(
                raw=segment[start:],
                error=f"{name}: no JSON object of arguments after the name",
                offset=start,
            )
        )
        return len(segment)
    if not isinstance(arguments, dict):  # begun but unreadable: the call stays, its text raw
        raw = segment[at:].rstrip()
        scan.add_call(
            (cid, name, {}, raw, "arguments are not a JSON object"),
            seed,
            segment[start:],
            start,
        )
        return len(segment)
    scan.add_call((cid, name, arguments, None, None), seed, segment[start:end], start)
    return end


FAMILIES: dict[str, Parser] = {
    "hermes": untyped(parse_hermes),
    "qwen": untyped(parse_hermes),
    "longcat": untyped(parse_longcat),
    "llama3_json": untyped(parse_llama_json),
    "llama4_json": untyped(parse_llama_json),
    "mistral": untyped(parse_mistral),
}
