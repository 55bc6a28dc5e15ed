"""Families whose calls are JSON objects: hermes/qwen and longcat (tagged blocks), llama 3/4
(bare objects, optional python tag) and mistral (`[TOOL_CALLS]`, before and from tokenizer v11)."""

from __future__ import annotations

import json
import re
from typing import Any

from rolltape.producers.parsing._blocks import BlockCall, BlockError, Scan, scan_blocks
from rolltape.producers.parsing._result import ParseProblem, decode_arguments, json_object_at


def call_from_object(obj: Any) -> BlockCall:
    """{"name", "arguments" | "parameters", "id"?} as a call; BlockError when it is not one."""
    if not isinstance(obj, dict):
        raise BlockError(f"expected a JSON object with a name, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise BlockError("the call has no name")
    raw_args = obj.get("arguments", obj.get("parameters"))
    arguments, raw, error = decode_arguments(raw_args)
    given = obj.get("id")
    return (given if isinstance(given, str) and given else None, name, arguments, raw, error)


def _json_block(inner: str) -> list[BlockCall]:
    text = inner.strip()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BlockError(f"not valid JSON: {exc}") from exc
    if isinstance(obj, list):
        return [call_from_object(item) for item in obj]
    return [call_from_object(obj)]


def parse_hermes(text: str, seed: str) -> Scan:
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number (hermes, qwen)."""
    return scan_blocks(text, "<tool_call>", "</tool_call>", _json_block, seed=seed)


def parse_longcat(text: str, seed: str) -> Scan:
    """`<longcat_tool_call>{json}</longcat_tool_call>`."""
    return scan_blocks(text, "<longcat_tool_call>", "</longcat_tool_call>", _json_block, seed=seed)


_CALL_START = re.compile(r'\{\s*"name"\s*:')
_PYTHON_TAGS = ("<|python_tag|>", "<|python_start|>", "<|python_end|>")


def parse_llama_json(text: str, seed: str) -> Scan:
    """Bare JSON objects `{"name": ..., "arguments" | "parameters": {...}}` (llama 3.x and 4),
    optionally after `<|python_tag|>` (or between `<|python_start|>`/`<|python_end|>`) and
    separated by `;` or whitespace. Unlike the reference parser, a `{` that is not a call stays
    content: only objects that start with a `"name"` key are calls."""
    scan = Scan()
    cleaned = text
    pos = 0
    content_from = 0
    while (match := _CALL_START.search(cleaned, pos)) is not None:
        start = match.start()
        found = json_object_at(cleaned, start)
        if found is None:
            end = _block_end(cleaned, start)
            scan.content.append(cleaned[content_from:start])
            scan.problems.append(
                ParseProblem(raw=cleaned[start:end], error="not valid JSON", offset=start)
            )
            pos = content_from = end
            continue
        obj, end = found
        try:
            block = call_from_object(obj)
        except BlockError:
            pos = end  # a JSON object with a name that is not a call: content
            continue
        scan.content.append(cleaned[content_from:start])
        scan.add_call(block, seed, cleaned[start:end], start)
        pos = content_from = _skip_separator(cleaned, end)
    scan.content.append(cleaned[content_from:])
    scan.content = [_without_python_tags(piece) for piece in scan.content]
    return scan


def _without_python_tags(text: str) -> str:
    for tag in _PYTHON_TAGS:
        text = text.replace(tag, "")
    return text


def _skip_separator(text: str, pos: int) -> int:
    """After a call: whitespace and one `;` between calls belong to the calls, not content."""
    end = _skip_blank(text, pos)
    if end < len(text) and text[end] == ";":
        return _skip_blank(text, end + 1)
    return end if _CALL_START.match(text, end) else pos


def _skip_blank(text: str, pos: int) -> int:
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
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
_MISTRAL_NAME = re.compile(r"\s*([A-Za-z0-9_.\-]+)")


def parse_mistral(text: str, seed: str) -> Scan:
    """`[TOOL_CALLS] [{"name", "arguments", "id"?}, ...]` (tokenizers before v11) and
    `[TOOL_CALLS]NAME{args}` / `[TOOL_CALLS]NAME[ARGS]{args}` repeated (v11 and later). Text
    before the first marker and after the last call is content."""
    scan = Scan()
    first = text.find(_MISTRAL)
    if first == -1:
        scan.content.append(text)
        return scan
    scan.content.append(text[:first])
    pos = first
    while pos < len(text) and text.startswith(_MISTRAL, pos):
        start = pos
        body = pos + len(_MISTRAL)
        stripped = len(text) - len(text[body:].lstrip())
        if stripped < len(text) and text[stripped] == "[":
            pos = _mistral_list(text, start, stripped, seed, scan)
        else:
            pos = _mistral_named(text, start, body, seed, scan)
        nxt = len(text) - len(text[pos:].lstrip())
        if text.startswith(_MISTRAL, nxt):
            pos = nxt
    scan.content.append(text[pos:])
    return scan


def _mistral_list(text: str, start: int, at: int, seed: str, scan: Scan) -> int:
    found = json_object_at(text, at)
    if found is None or not isinstance(found[0], list):
        end = _next_marker(text, at)
        scan.problems.append(
            ParseProblem(
                raw=text[start:end],
                error="[TOOL_CALLS] is not followed by a JSON list of calls",
                offset=start,
            )
        )
        return end
    items, end = found
    for item in items:
        try:
            block = call_from_object(item)
        except BlockError as exc:
            raw = json.dumps(item, ensure_ascii=False)
            scan.problems.append(ParseProblem(raw=raw, error=str(exc), offset=start))
            continue
        scan.add_call(block, seed, text[start:end], start)
    return end


def _mistral_named(text: str, start: int, body: int, seed: str, scan: Scan) -> int:
    match = _MISTRAL_NAME.match(text, body)
    if match is None:
        end = _next_marker(text, body)
        scan.problems.append(
            ParseProblem(
                raw=text[start:end], error="[TOOL_CALLS] without a tool name", offset=start
            )
        )
        return end
    name, at = match.group(1), match.end()
    if text.startswith(_MISTRAL_ARGS, at):
        at += len(_MISTRAL_ARGS)
    found = json_object_at(text, at)
    if found is None or not isinstance(found[0], dict):
        end = _next_marker(text, at)
        scan.problems.append(
            ParseProblem(
                raw=text[start:end], error=f"{name}: arguments are not a JSON object", offset=start
            )
        )
        return end
    arguments, end = found
    scan.add_call((None, name, arguments, None, None), seed, text[start:end], start)
    return int(end)


def _next_marker(text: str, pos: int) -> int:
    nxt = text.find(_MISTRAL, pos)
    return len(text) if nxt == -1 else nxt
