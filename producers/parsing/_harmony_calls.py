"""gpt-oss's harmony format, under vLLM's name `openai`: messages
`<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>`.

A message addressed to `functions.NAME` is a call; `final` messages and `commentary` messages
addressed to no one are content; `analysis` messages are reasoning (vLLM's `parse_chat_output`
reads them so), joined by a newline, as vLLM joins them. The completion
usually starts inside the first message's header (the prompt ends with `<|start|>assistant`).
Text without harmony markup is all content: OpenAI-style servers return their calls structured,
and rolltape reads those with `structured_calls`.
"""

from __future__ import annotations

import re

from rolltape.producers.parsing._blocks import ParamTypes, Parser, Scan
from rolltape.producers.parsing._result import ParseProblem, decode_arguments

_START, _MESSAGE = "<|start|>", "<|message|>"
_END = re.compile(r"<\|end\|>|<\|call\|>|<\|return\|>")
_CHANNEL = re.compile(r"<\|channel\|>\s*([\w.\-]+)")
_RECIPIENT = re.compile(r"(?:^|\s|>)to=([^\s<]+)")
_FUNCTIONS = "functions."


def _message(
    scan: Scan, thoughts: list[str], header: str, body: str, raw: str, offset: int, seed: str
) -> None:
    """One message: a call, content, or (analysis) a thought. An analysis message to a
    built-in tool is a thought as well as a problem: its text is the model's own."""
    channel = match.group(1) if (match := _CHANNEL.search(header)) else None
    recipient = match.group(1) if (match := _RECIPIENT.search(header)) else None
    if channel == "analysis" and not (recipient or "").startswith(_FUNCTIONS):
        thoughts.append(body.strip())
    if recipient is None:
        if channel != "analysis":
            scan.content.append(body)
        return
    if not recipient.startswith(_FUNCTIONS) or not recipient[len(_FUNCTIONS) :]:
        why = f"addressed to {recipient!r}, which is not a function"
        scan.problems.append(ParseProblem(raw=raw, error=why, offset=offset))
        return
    arguments, raw_arguments, error = decode_arguments(body)
    name = recipient[len(_FUNCTIONS) :]
    scan.add_call((None, name, arguments, raw_arguments, error), seed, raw, offset)


def parse_harmony(text: str, seed: str, _types: ParamTypes) -> Scan:
    """Every message in order; a message cut by the end of the text is read to the end."""
    if _MESSAGE not in text:
        return Scan(content=[text])
    scan = Scan()
    thoughts: list[str] = []
    pos = 0
    while pos < len(text):
        head_end = text.find(_MESSAGE, pos)
        next_start = text.find(_START, pos + 1)
        if head_end == -1 or (next_start != -1 and next_start < head_end):
            stop = len(text) if next_start == -1 else next_start
            scan.content.append(text[pos:stop].removeprefix(_START))
            pos = stop
            continue
        body_start = head_end + len(_MESSAGE)
        end = _END.search(text, body_start)
        body_end, after = (len(text), len(text)) if end is None else (end.start(), end.end())
        header = text[pos:head_end].removeprefix(_START)
        _message(scan, thoughts, header, text[body_start:body_end], text[pos:after], pos, seed)
        pos = after
    if reasoning := "\n".join(t for t in thoughts if t):
        scan.reasoning.append(reasoning)
    return scan


FAMILIES: dict[str, Parser] = {"openai": parse_harmony}
