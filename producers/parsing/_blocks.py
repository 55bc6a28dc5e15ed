"""Scanning text for delimited call blocks: what every tag-based family shares.

Each block is read on its own, so one bad block costs only itself; text between and after blocks
is content. A block left open (the stop sequence cut the closing tag, or the model opened the
next block without closing this one) is read to the next opening tag or the end of the text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rolltape.producers._errors import ProducerError
from rolltape.producers.parsing._result import ParseProblem, call_id
from rolltape.schemas import ToolCall

BlockCall = tuple[str | None, str, dict[str, object], str | None, str | None]
"""A block read as (id or None, name, arguments, raw arguments, argument error)."""

ParamTypes = Mapping[str, Mapping[str, str]]
"""tool name -> parameter name -> JSON Schema type, from the session's declared tools."""


class BlockError(ProducerError, ValueError):
    """The block is not a call; the message says why."""


@dataclass
class Scan:
    """What scanning a text found, in order."""

    content: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    problems: list[ParseProblem] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    """Thinking the format marks its own way (harmony's analysis channel, Cohere's
    START_THINKING block...), beyond the `<think>` blocks parse() takes out first."""

    def add_call(self, block: BlockCall, seed: str, raw: str, offset: int) -> None:
        given_id, name, arguments, raw_arguments, error = block
        index = len(self.calls)
        self.calls.append(
            ToolCall(
                id=given_id or call_id(seed, index),
                name=name,
                arguments=arguments,
                raw_arguments=raw_arguments,
            )
        )
        if error is not None:
            self.problems.append(ParseProblem(raw=raw, error=f"{name}: {error}", offset=offset))


def scan_blocks(
    text: str,
    open_tag: str,
    close_tag: str,
    read: Callable[[str], list[BlockCall]],
    *,
    seed: str,
    base: int = 0,
    scan: Scan | None = None,
) -> Scan:
    """Split `text` at `open_tag`...`close_tag` blocks; `read` turns a block's inside into calls
    or raises BlockError. `base` is the offset of `text` in the whole completion."""
    scan = scan if scan is not None else Scan()
    pos = 0
    while (start := text.find(open_tag, pos)) != -1:
        scan.content.append(text[pos:start])
        inner_start = start + len(open_tag)
        reopened = text.find(open_tag, inner_start)
        end = text.find(close_tag, inner_start, len(text) if reopened == -1 else reopened)
        if reopened != -1 and end == -1:  # unclosed: ends where the next opens
            inner_end = pos = reopened
        else:
            inner_end, pos = (len(text), len(text)) if end == -1 else (end, end + len(close_tag))
        raw = text[start:pos]
        try:
            blocks = read(text[inner_start:inner_end])
        except BlockError as exc:
            scan.problems.append(ParseProblem(raw=raw, error=str(exc), offset=base + start))
            continue
        for block in blocks:
            scan.add_call(block, seed, raw, base + start)
    scan.content.append(text[pos:])
    return scan


Parser = Callable[[str, str, ParamTypes], "Scan"]
"""A family's parser: (text with reasoning blocks taken out, id seed, declared parameter types)
-> what it found. Each family module exports `FAMILIES: dict[str, Parser]`."""


def untyped(parser: Callable[[str, str], Scan]) -> Parser:
    """A parser for a format whose arguments are JSON (the declared types are not needed)."""
    return lambda text, seed, _types: parser(text, seed)
