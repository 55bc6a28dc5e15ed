"""Families that mark calls with special tokens: DeepSeek V3 and V3.1, Kimi K2.

Calls sit in a section (`<｜tool▁calls▁begin｜>`...`<｜tool▁calls▁end｜>`); text before and after the
section is content. Each call in the section is read on its own, and a call whose closing token
is missing ends where the next call begins (or at the end of the text), so it costs only itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from rolltape.producers.parsing._blocks import (
    BlockCall,
    BlockError,
    Parser,
    Scan,
    untyped,
)
from rolltape.producers.parsing._result import ParseProblem, decode_arguments

Read = Callable[[str], list[BlockCall]]


def blocks(
    text: str, open_re: re.Pattern[str], close_re: re.Pattern[str], stop_re: re.Pattern[str] | None
) -> Iterator[tuple[int, int, int, int]]:
    """(start, inner start, inner end, end) of each block. A block without its close tag ends at
    the next opening tag, at `stop_re` (the end of the calls section) or at the end of the text:
    a lost close token must not swallow the calls after it."""
    pos = 0
    stop: re.Match[str] | None = None  # searched again only once passed: linear in the text
    stop_searched = stop_re is None
    while (opened := open_re.search(text, pos)) is not None:
        inner = opened.end()
        if stop_re is not None and (not stop_searched or (stop and stop.start() < inner)):
            stop, stop_searched = stop_re.search(text, inner), True
        cuts = [m.start() for m in (open_re.search(text, inner), stop) if m]
        cut = min(cuts, default=len(text))
        close = close_re.search(text, inner, cut)
        if close is not None:
            yield opened.start(), inner, close.start(), close.end()
            pos = close.end()
        else:
            yield opened.start(), inner, cut, cut
            pos = max(cut, inner)


def read_blocks(
    text: str,
    tags: tuple[re.Pattern[str], re.Pattern[str]],
    read: Read,
    seed: str,
    scan: Scan,
    *,
    base: int = 0,
    stop_re: re.Pattern[str] | None = None,
) -> str:
    """Add each block's calls (or its problem) to `scan`; return the text outside the blocks."""
    outside: list[str] = []
    pos = 0
    for start, inner, inner_end, end in blocks(text, *tags, stop_re):
        outside.append(text[pos:start])
        raw = text[start:end]
        try:
            found = read(text[inner:inner_end])
        except BlockError as exc:
            scan.problems.append(ParseProblem(raw=raw, error=str(exc), offset=base + start))
        else:
            for block in found:
                scan.add_call(block, seed, raw, base + start)
        pos = end
    outside.append(text[pos:])
    return "".join(outside)


def literal(open_tag: str, close_tag: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Block tags written exactly so."""
    return re.compile(re.escape(open_tag)), re.compile(re.escape(close_tag))


def sections(
    text: str,
    spellings: tuple[tuple[str, str], ...],
    call_tags: tuple[re.Pattern[str], re.Pattern[str]],
    read: Read,
    seed: str,
) -> Scan:
    """Calls inside `spellings` (begin, end) sections; text around the sections, and stray text
    inside one, is content. A section left open runs to the end of the text."""
    scan = Scan()
    pos = 0
    while found := [(i, b, e) for b, e in spellings if (i := text.find(b, pos)) != -1]:
        start, begin, end_tag = min(found)
        scan.content.append(text[pos:start])
        body_start = start + len(begin)
        end = text.find(end_tag, body_start)
        body_end, pos = (len(text), len(text)) if end == -1 else (end, end + len(end_tag))
        body = text[body_start:body_end]
        scan.content.append(read_blocks(body, call_tags, read, seed, scan, base=body_start))
    scan.content.append(text[pos:])
    return scan


_DS_SECTION = (("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),)
_DS_CALL = literal("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>")
_DS_SEP = "<｜tool▁sep｜>"
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


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
    return sections(text, _DS_SECTION, _DS_CALL, _deepseek_v3_call, seed)


def parse_deepseek_v3_1(text: str, seed: str) -> Scan:
    """`<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{args}<｜tool▁call▁end｜>`."""
    return sections(text, _DS_SECTION, _DS_CALL, _deepseek_v3_1_call, seed)


_KIMI_SECTION = (
    ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
    ("<|tool_call_section_begin|>", "<|tool_call_section_end|>"),  # an older spelling
)
_KIMI_CALL = literal("<|tool_call_begin|>", "<|tool_call_end|>")
_KIMI_ARGS = "<|tool_call_argument_begin|>"
_KIMI_ID = re.compile(r"^\s*((?:functions\.)?([^\s<]+?)(?::\d+)?)\s*$")


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
    inside a calls section; the id is the model's own (`functions.NAME:0`), the name is the id
    without the `functions.` namespace and the `:0` index (a dotted tool name stays whole)."""
    return sections(text, _KIMI_SECTION, _KIMI_CALL, _kimi_call, seed)


FAMILIES: dict[str, Parser] = {
    "deepseek_v3": untyped(parse_deepseek_v3),
    "deepseek_v31": untyped(parse_deepseek_v3_1),
    "kimi_k2": untyped(parse_kimi_k2),
}
