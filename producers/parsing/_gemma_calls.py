"""Google's Gemma formats: gemma4 (`<|tool_call>call:NAME{key:<|"|>text<|"|>,n:42}<tool_call|>`)
and FunctionGemma (`<start_function_call>call:NAME{key:<escape>text<escape>}<end_function_call>`).

Arguments are `key:value` pairs: strings between a delimiter token, other values bare (numbers,
`true`, `false`, `null`), objects in `{}` and arrays in `[]`. Bare values are typed (by the
tool's declared type when there is one); delimited strings stay strings unless the tool declares
another type. Gemma 4's `<|channel>thought\n...<channel|>` blocks are reasoning (without the
`thought` channel name), never content.
"""

from __future__ import annotations

import re
from typing import Any

from rolltape.producers.parsing._blocks import BlockCall, BlockError, ParamTypes, Parser, Scan
from rolltape.producers.parsing._result import ParseProblem, literal_value

_SPACE = " \t\r\n"


class _Args:
    """A reader over one call's argument text; `pos` moves as values are read."""

    def __init__(self, text: str, delim: str) -> None:
        self.text, self.delim, self.pos = text, delim, 0

    def skip(self, chars: str = _SPACE) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in chars:
            self.pos += 1

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def string(self) -> str:
        """A delimited string; an unterminated one runs to the end (the stop cut it)."""
        start = self.pos + len(self.delim)
        end = self.text.find(self.delim, start)
        self.pos = len(self.text) if end == -1 else end + len(self.delim)
        return self.text[start:] if end == -1 else self.text[start:end]

    def value(self, declared: str | None) -> Any:
        if self.text.startswith(self.delim, self.pos):
            text = self.string()
            return text if declared in (None, "string") else literal_value(text, declared)
        if self.text.startswith("{", self.pos):
            self.pos += 1
            return self.pairs({}, "}")
        if self.text.startswith("[", self.pos):
            self.pos += 1
            return self.items()
        start = self.pos
        while not self.at_end() and self.text[self.pos] not in ",}]":
            self.pos += 1
        bare = self.text[start : self.pos].strip()
        if not bare:
            raise BlockError(f"a value is missing at {start}")
        return literal_value(bare, declared)

    def pairs(self, types: dict[str, str], close: str | None) -> dict[str, Any]:
        """`key:value` pairs up to `close` (None: to the end of the text)."""
        out: dict[str, Any] = {}
        while True:
            self.skip(_SPACE + ",")
            if self.at_end() or (close and self.text.startswith(close, self.pos)):
                self.pos += 0 if self.at_end() else len(close or "")
                return out
            colon = self.text.find(":", self.pos)
            if colon == -1:
                raise BlockError(f"{self.text[self.pos :][:80]!r} is not a key:value pair")
            key = self.text[self.pos : colon].strip()
            if key.startswith(self.delim) and key.endswith(self.delim):
                key = key[len(self.delim) : -len(self.delim)]
            if not key:
                raise BlockError(f"an argument has no name at {self.pos}")
            self.pos = colon + 1
            self.skip()
            out[key] = "" if self.at_end() else self.value(types.get(key))

    def items(self) -> list[Any]:
        out: list[Any] = []
        while True:
            self.skip(_SPACE + ",")
            if self.at_end() or self.text.startswith("]", self.pos):
                self.pos += 0 if self.at_end() else 1
                return out
            out.append(self.value(None))


_HEAD = re.compile(r"\s*(?:call)?:\s*([\w.\-]+)\s*([{(])")


def _calls(inner: str, delim: str, types: ParamTypes) -> list[BlockCall]:
    """`call:NAME{args}` (several in a row are several calls); Gemma 4 also writes `:NAME{` and
    `NAME(args)` variants, and a call cut by the end of the text keeps what was written."""
    calls: list[BlockCall] = []
    pos = 0
    while inner[pos:].strip():
        head = _HEAD.match(inner, pos)
        if head is None:
            raise BlockError(f"expected call:NAME{{...}}, got {inner[pos:][:80]!r}")
        name, opener = head.group(1), head.group(2)
        reader = _Args(inner, delim)
        reader.pos = head.end()
        close = "}" if opener == "{" else ")"
        start = reader.pos
        try:
            arguments = reader.pairs(dict(types.get(name, {})), close)
        except BlockError as exc:
            calls.append((None, name, {}, inner[start:], str(exc)))
            return calls
        calls.append((None, name, arguments, None, None))
        pos = reader.pos
    if not calls:
        raise BlockError("the call block is empty")
    return calls


def _scan(
    text: str,
    tags: tuple[str, ...],
    delim: str,
    seed: str,
    types: ParamTypes,
    scan: Scan,
    base: int = 0,
) -> list[tuple[int, str]]:
    """Call blocks into `scan` (`tags`: the opener, then the closers); returns the text outside
    them with offsets (`base`: where `text` starts in the completion)."""
    open_tag, *close_tags = tags
    outside: list[tuple[int, str]] = []
    pos = 0
    while (start := text.find(open_tag, pos)) != -1:
        outside.append((pos, text[pos:start]))
        inner_start = start + len(open_tag)
        ends = [(i, tag) for tag in close_tags if (i := text.find(tag, inner_start)) != -1]
        end, close_tag = min(ends) if ends else (-1, "")
        inner_end, pos = (len(text), len(text)) if end == -1 else (end, end + len(close_tag))
        raw = text[start:pos]
        try:
            blocks = _calls(text[inner_start:inner_end], delim, types)
        except BlockError as exc:
            scan.problems.append(ParseProblem(raw=raw, error=str(exc), offset=base + start))
            continue
        for block in blocks:
            scan.add_call(block, seed, raw, base + start)
    outside.append((pos, text[pos:]))
    return outside


def parse_functiongemma(text: str, seed: str, types: ParamTypes) -> Scan:
    """`<start_function_call>call:NAME{key:<escape>value<escape>}<end_function_call>`."""
    scan = Scan()
    tags = ("<start_function_call>", "<end_function_call>")
    outside = _scan(text, tags, "<escape>", seed, types, scan)
    scan.content.extend(piece for _, piece in outside)
    return scan


_GEMMA4_TAGS = ("<|tool_call>", "<tool_call|>", "<turn|>")
"""The call opener and its closers: some Gemma 4 checkpoints end a call with `<turn|>`."""
_GEMMA4_DELIM = '<|"|>'
_THOUGHT_OPEN, _THOUGHT_CLOSE, _THOUGHT_PREFIX = "<|channel>", "<channel|>", "thought"
_STRAY = re.compile(r"<channel\|>|<tool_call\|>")
_BARE_CALL = re.compile(r"(?:^|(?<=\s))call:[\w.\-]+\{")
"""A call written without `<|tool_call>` (Gemma 4 does after its thought block): only at a word
start and only when its braces close, so prose that says "call:" stays content."""


def _bare_calls(piece: str, base: int, seed: str, types: ParamTypes, scan: Scan) -> None:
    pos = 0
    while (match := _BARE_CALL.search(piece, pos)) is not None:
        end = _brace_end(piece, match.end() - 1)
        if end is None:
            break
        scan.content.append(_STRAY.sub("", piece[pos : match.start()]))
        raw = piece[match.start() : end]
        try:
            blocks = _calls(raw, _GEMMA4_DELIM, types)
        except BlockError as exc:
            scan.problems.append(ParseProblem(raw=raw, error=str(exc), offset=base + match.start()))
        else:
            for block in blocks:
                scan.add_call(block, seed, raw, base + match.start())
        pos = end
    scan.content.append(_STRAY.sub("", piece[pos:]))


def _brace_end(text: str, start: int) -> int | None:
    """The index after the `}` closing the `{` at `start`, skipping delimited strings."""
    depth, i = 0, start
    while i < len(text):
        if text.startswith(_GEMMA4_DELIM, i):
            end = text.find(_GEMMA4_DELIM, i + len(_GEMMA4_DELIM))
            if end == -1:
                return None
            i = end + len(_GEMMA4_DELIM)
            continue
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            return i
    return None


def _thought_end(text: str, start: int) -> tuple[int, int]:
    """(end of the thought's text, where what follows it starts). A closed thought is all
    reasoning; an unclosed one ends where a call begins (vLLM's engine leaves reasoning at
    `<|tool_call>` and at `call:`; here only at a bare call whose braces close), else at the
    end of the text."""
    close = text.find(_THOUGHT_CLOSE, start)
    if close != -1:
        return close, close + len(_THOUGHT_CLOSE)
    ends = [len(text)]
    if (tagged := text.find(_GEMMA4_TAGS[0], start)) != -1:
        ends.append(tagged)
    for match in _BARE_CALL.finditer(text, start):
        if _brace_end(text, match.end() - 1) is not None:
            ends.append(match.start())
            break
    end = min(ends)
    return end, end


def _thought(inner: str) -> str:
    """The thought's text without the `thought` channel name vLLM strips."""
    if inner == _THOUGHT_PREFIX or inner.startswith(_THOUGHT_PREFIX + "\n"):
        inner = inner[len(_THOUGHT_PREFIX) :]
    return inner.strip()


def _split_thoughts(text: str, scan: Scan) -> str:
    """Thought blocks (`<|channel>thought\n...<channel|>`) into `scan.reasoning`; returns the
    text with each replaced by a newline. Without any `<|channel>`, a completion that opens
    with `thought\n` or holds a `<channel|>` starts inside a thought (the prompt opened it),
    as vLLM's engine assumes."""
    implicit = _THOUGHT_OPEN not in text and (
        _THOUGHT_CLOSE in text or text == _THOUGHT_PREFIX or text.startswith(_THOUGHT_PREFIX + "\n")
    )
    kept: list[str] = []
    pos, start = 0, 0 if implicit else text.find(_THOUGHT_OPEN)
    while start != -1:
        kept.append(text[pos:start])
        inner_start = start if implicit else start + len(_THOUGHT_OPEN)
        end, pos = _thought_end(text, inner_start)
        if thought := _thought(text[inner_start:end]):
            scan.reasoning.append(thought)
        implicit, start = False, text.find(_THOUGHT_OPEN, pos)
    kept.append(text[pos:])
    return "\n".join(kept)


def parse_gemma4(text: str, seed: str, types: ParamTypes) -> Scan:
    """`<|tool_call>call:NAME{key:<|"|>value<|"|>}<tool_call|>`, and bare `call:NAME{...}`
    outside the tags (read after the tagged calls)."""
    scan = Scan()
    text = _split_thoughts(text, scan)
    for base, piece in _scan(text, _GEMMA4_TAGS, _GEMMA4_DELIM, seed, types, scan):
        _bare_calls(piece, base, seed, types, scan)
    return scan


FAMILIES: dict[str, Parser] = {
    "functiongemma": parse_functiongemma,
    "gemma4": parse_gemma4,
}
