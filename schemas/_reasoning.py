"""Reasoning blocks in a raw completion, separated from the answer before tool calls are looked
for.

Recognised: `<think>`, `<reasoning>` and `<REASONING_SCRATCHPAD>` blocks (and Seed-OSS's and
MiniMax's own spellings) anywhere in the text, an unclosed block at the end (generation stopped
while thinking), and a leading `...</think>` with no opening tag (Qwen3 and DeepSeek-R1 chat
templates put `<think>` in the prompt, so everything up to the last closing tag before any
opening one is reasoning). Tool-call markup inside a reasoning block is thought, not a call. One
rule, used by the tool-call parsers, the client capture and the OTLP ingest: for text a model is
producing. Imported rows are read by their writer's own layout instead (only the leading block
is reasoning there: `rolltape.projections.exporters.parse_gpt_value`).
"""

from __future__ import annotations

import re

_TAGS = ("think", "reasoning", "REASONING_SCRATCHPAD", "seed:think", "mm:think")
"""Seed-OSS writes `<seed:think>`, MiniMax M3 `<mm:think>`; the rest are everyone else's."""
_OPEN = re.compile("<(" + "|".join(_TAGS) + ")>")


def split_reasoning(text: str) -> tuple[str, str | None]:
    """(text without reasoning blocks, their contents joined by blank lines or None)."""
    parts: list[str] = []
    kept: list[str] = []
    first_open = _OPEN.search(text)
    head = text if first_open is None else text[: first_open.start()]
    head_close = head.rfind("</think>")
    if head_close != -1:  # the last of the closing tags before any opening one
        thought = text[:head_close].replace("</think>", "").strip("\n")
        if thought.strip():
            parts.append(thought)
        else:
            kept.append("")  # only stray closing tags: no reasoning, nothing to keep
        text = text[head_close + len("</think>") :]
    pos = 0
    while (match := _OPEN.search(text, pos)) is not None:
        kept.append(text[pos : match.start()])
        close = f"</{match.group(1)}>"
        end = text.find(close, match.end())
        if end == -1:
            parts.append(text[match.end() :])
            pos = len(text)
            break
        parts.append(text[match.end() : end])
        pos = end + len(close)
    kept.append(text[pos:])
    if not parts:
        return (_join(kept) if len(kept) > 1 else text), None
    reasoning = "\n\n".join(p.strip("\n") for p in parts)
    return _join(kept), reasoning


def _join(pieces: list[str]) -> str:
    """Glue the text around removed blocks; the newline that followed a block goes with it."""
    out = pieces[0]
    for piece in pieces[1:]:
        out += piece[1:] if piece.startswith("\n") and (not out or out.endswith("\n")) else piece
    return out
