"""Families that mark calls with special tokens: DeepSeek V3 and V3.1, Kimi K2.

Calls sit in a section (`<｜tool▁calls▁begin｜>`...`<｜tool▁calls▁end｜>`); text before and after the
section is content. Each call in the section is read on its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rolltape.producers.parsing._blocks import BlockCall, BlockError, Scan, scan_blocks
from rolltape.producers.parsing._result import decode_arguments

_DS_SECTION = (("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),)
_DS_CALL = ("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>")
_DS_SEP = "<｜tool▁sep｜>"
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


def _sections(
    text: str,
    sections: tuple[tuple[str, str], ...],
    call_tags: tuple[str, str],
    read: Callable[[str], list[BlockCall]],
    seed: str,
) -> Scan:
    """`sections` are (begin, end) spellings of the calls section."""
    scan = Scan()
    pos = 0
    while True:
        found = [(i, b, e) for b, e in sections if (i := text.find(b, pos)) != -1]
        if not found:
            break
        start, begin, end_tag = min(found)
        scan.content.append(text[pos:start])
        body_start = start + len(begin)
        end = text.find(end_tag, body_start)
        body_end, pos = (len(text), len(text)) if end == -1 else (end, end + len(end_tag))
        inner = Scan(calls=scan.calls, problems=scan.problems)
        scan_blocks(
            text[body_start:body_end], *call_tags, read, seed=seed, base=body_start, scan=inner
        )
        stray = "".join(inner.content).strip()  # text in the section outside any call
        if stray:
            scan.content.append(stray)
    scan.content.append(text[pos:])
    return scan


def _deepseek_v3_call(inner: str) -> list[BlockCall]:
    if _DS_SEP not in inner:
        raise BlockError("no <｜tool▁sep｜> between the call type and the name")
    _kind, rest = inner.split(_DS_SEP, 1)
    name, _, args = rest.partition("\n")
    name = name.strip()
    if not name:
        raise BlockError("the call has no name")
    fenced = _FENCE.match(args)
    arguments, raw, error = decode_arguments(fenced.group(1) if fenced else args)
    return [(None, name, arguments, raw, error)]


def _deepseek_v3_1_call(inner: str) -> list[BlockCall]:
    if _DS_SEP not in inner:
        raise BlockError("no <｜tool▁sep｜> between the name and the arguments")
    name, args = inner.split(_DS_SEP, 1)
    name = name.strip()
    if not name:
        raise BlockError("the call has no name")
    arguments, raw, error = decode_arguments(args)
    return [(None, name, arguments, raw, error)]


def parse_deepseek_v3(text: str, seed: str) -> Scan:
    """`<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{args}\\n```<｜tool▁call▁end｜>`."""
    return _sections(text, _DS_SECTION, _DS_CALL, _deepseek_v3_call, seed)


def parse_deepseek_v3_1(text: str, seed: str) -> Scan:
    """`<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{args}<｜tool▁call▁end｜>`."""
    return _sections(text, _DS_SECTION, _DS_CALL, _deepseek_v3_1_call, seed)


_KIMI_SECTION = (
    ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
    ("<|tool_call_section_begin|>", "<|tool_call_section_end|>"),  # an older spelling
)
_KIMI_CALL = ("<|tool_call_begin|>", "<|tool_call_end|>")
_KIMI_ARGS = "<|tool_call_argument_begin|>"
_KIMI_ID = re.compile(r"^\s*((?:[\w\-]+\.)?([\w\-.]+?)(?::\d+)?)\s*$")


def _kimi_call(inner: str) -> list[BlockCall]:
    if _KIMI_ARGS not in inner:
        raise BlockError("no <|tool_call_argument_begin|> after the call id")
    head, args = inner.split(_KIMI_ARGS, 1)
    match = _KIMI_ID.match(head)
    if match is None:
        raise BlockError(f"unreadable call id {head.strip()[:80]!r}")
    arguments, raw, error = decode_arguments(args)
    return [(match.group(1), match.group(2), arguments, raw, error)]


def parse_kimi_k2(text: str, seed: str) -> Scan:
    """`<|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{json}<|tool_call_end|>`
    inside a calls section; the id is the model's own (`functions.NAME:0`)."""
    return _sections(text, _KIMI_SECTION, _KIMI_CALL, _kimi_call, seed)
