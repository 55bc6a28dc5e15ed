"""Families that write their calls as JSON after a marker, one object or a list of them:
ernie45, granite4 (`<tool_call>{...}</tool_call>`), granite (`<|tool_call|>` / `<tool_call>` or
a bare leading `[...]`), granite-20b-fc (`<function_call>{...}` repeated), jamba and
hunyuan_a13b (`<tool_calls>[...]</tool_calls>`), internlm (`<|action_start|><|plugin|>{...}
<|action_end|>`), phi4_mini_json (`functools[...]`), gigachat3 (`function call<|role_sep|>{...}`),
apertus (`<|tools_prefix|>[{"NAME": {args}}]<|tools_suffix|>`), cohere_command3/4
(`<|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}]<|END_ACTION|>`) and xlam (a
JSON list in a fenced block, `<tool_call>`, after `[TOOL_CALLS]` or bare); and poolside_v1,
whose `<tool_call>NAME` blocks write each argument as `<arg_key>K</arg_key><arg_value>V
</arg_value>` (values typed by the declared schema, else JSON, Python literal or text).

Every marker starts a call block of its own: a block whose JSON is broken costs only itself, a
list item that is not a call costs only itself, and the text around and after the JSON is
content (the reference parsers mostly keep only the text before the first marker).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from rolltape.producers.parsing._blocks import (
    BlockCall,
    BlockError,
    ParamTypes,
    Parser,
    Scan,
    scan_blocks,
    untyped,
)
from rolltape.producers.parsing._json_calls import call_from_object
from rolltape.producers.parsing._result import (
    ParseProblem,
    decode_arguments,
    json_loads,
    json_raw_decode,
    literal_value,
)

ReadItem = Callable[[Any], BlockCall]
"""One decoded JSON item -> a call, or BlockError when the item is not one."""

"""Raw control characters inside strings are accepted: models write real newlines in code."""


def _skip_blank(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def add_items(scan: Scan, value: Any, raw: str, offset: int, read: ReadItem, seed: str) -> None:
    """A decoded block (one call or a list of calls) into the scan: an item that is not a call
    is a problem of its own, its neighbours are still calls."""
    for item in value if isinstance(value, list) else [value]:
        try:
            block = read(item)
        except BlockError as exc:
            item_raw = json.dumps(item, ensure_ascii=False)
            scan.problems.append(ParseProblem(raw=item_raw, error=str(exc), offset=offset))
            continue
        scan.add_call(block, seed, raw, offset)


def _block_stop(text: str, body: int, opener: re.Pattern[str], close: str) -> int:
    """Where a block whose JSON is broken ends: after its closing tag when that comes before
    the next marker, else at the next marker, else at the end of the text."""
    nxt = opener.search(text, body)
    limit = nxt.start() if nxt else len(text)
    if close and (end := text.find(close, body, limit)) != -1:
        return end + len(close)
    return limit


def scan_marked(
    text: str,
    opener: re.Pattern[str],
    read: ReadItem,
    seed: str,
    *,
    close: str = "",
    noise: tuple[str, ...] = (),
) -> Scan:
    """Each `opener` match is followed by a JSON value (a call or a list of calls), then
    optionally by `close`; what follows up to the next marker is content. An unclosed block is
    read to the end of its JSON. `close` and `noise` tokens left in the content are dropped."""
    scan = Scan()
    pos = 0
    while (match := opener.search(text, pos)) is not None:
        start = match.start()
        scan.content.append(text[pos:start])
        at = _skip_blank(text, match.end())
        try:
            value, end = json_raw_decode(text, at, strict=False)
        except json.JSONDecodeError as exc:
            pos = _block_stop(text, match.end(), opener, close)
            error = f"not valid JSON: {exc.msg} (char {exc.pos - at})"
            scan.problems.append(ParseProblem(raw=text[start:pos], error=error, offset=start))
            continue
        after = _skip_blank(text, end)
        if close and text.startswith(close, after):
            end = after + len(close)
        add_items(scan, value, text[start:end], start, read, seed)
        pos = end
    scan.content.append(text[pos:])
    scan.content = [_without(piece, (close, *noise)) for piece in scan.content]
    return scan


def _without(text: str, tokens: tuple[str, ...]) -> str:
    for token in tokens:
        if token:
            text = text.replace(token, "")
    return text


def leading_list(text: str, read: ReadItem, seed: str) -> Scan | None:
    """A completion that opens with a bare JSON list of calls (no marker); None when it does
    not, or when any item is not a call (then the list is ordinary text, not a broken call)."""
    at = _skip_blank(text, 0)
    if not text.startswith("[", at):
        return None
    try:
        value, end = json_raw_decode(text, at, strict=False)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, list) or not value:
        return None
    try:
        blocks = [read(item) for item in value]
    except BlockError:
        return None
    scan = Scan()
    for block in blocks:
        scan.add_call(block, seed, text[at:end], at)
    scan.content.append(text[end:])
    return scan


def _opener(*tags: str) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(tag) for tag in tags))


def parse_tool_call_json(text: str, seed: str) -> Scan:
    """`<tool_call>{"name", "arguments"}</tool_call>`, any number (ERNIE 4.5, Granite 4)."""
    return scan_marked(text, _opener("<tool_call>"), call_from_object, seed, close="</tool_call>")


_GRANITE = _opener("<|tool_call|>", "<tool_call>")


def parse_granite(text: str, seed: str) -> Scan:
    """`<|tool_call|>[...]` (Granite 3.0) or `<tool_call>[...]` (3.1), or the list alone at
    the start of the completion."""
    if _GRANITE.search(text) is None and (bare := leading_list(text, call_from_object, seed)):
        return bare
    return scan_marked(text, _GRANITE, call_from_object, seed)


def parse_granite_20b_fc(text: str, seed: str) -> Scan:
    """`<function_call> {"name", "arguments"}` repeated (granite-20b-functioncalling)."""
    return scan_marked(text, _opener("<function_call>"), call_from_object, seed)


def parse_jamba(text: str, seed: str) -> Scan:
    """`<tool_calls>[{"name", "arguments"}, ...]</tool_calls>` (Jamba)."""
    return scan_marked(text, _opener("<tool_calls>"), call_from_object, seed, close="</tool_calls>")


_HUNYUAN_PREFIX = "助手："
"""The assistant prefix of Hunyuan-A13B's chat template; the model sometimes repeats it."""


def parse_hunyuan_a13b(text: str, seed: str) -> Scan:
    """`<tool_calls>[{"name", "arguments"}, ...]</tool_calls>` (Hunyuan-A13B); a leading
    `助手：` is the template's, not the model's content."""
    scan = parse_jamba(text, seed)
    if scan.content and scan.content[0].lstrip().startswith(_HUNYUAN_PREFIX):
        scan.content[0] = scan.content[0].replace(_HUNYUAN_PREFIX, "", 1)
    return scan


def parse_internlm(text: str, seed: str) -> Scan:
    """`<|action_start|><|plugin|>{"name", "parameters"}<|action_end|>` (InternLM 2)."""
    opener = _opener("<|action_start|><|plugin|>")
    return scan_marked(text, opener, call_from_object, seed, close="<|action_end|>")


def parse_phi4_mini(text: str, seed: str) -> Scan:
    """`functools[{"name", "arguments"}, ...]` (Phi-4-mini); the word alone is not a marker."""
    return scan_marked(text, re.compile(r"functools(?=\[)"), call_from_object, seed)


def parse_gigachat3(text: str, seed: str) -> Scan:
    """`content<|message_sep|>\\n\\nfunction call<|role_sep|>\\n{"name", "arguments"}`
    (GigaChat 3); separators and the end-of-text token are not content."""
    opener = _opener("function call<|role_sep|>")
    noise = ("<|message_sep|>", "</s>")
    return scan_marked(text, opener, call_from_object, seed, noise=noise)


def _apertus_item(item: Any) -> BlockCall:
    """`{"NAME": {args}}`: the one key is the tool's name."""
    if not isinstance(item, dict) or not item:
        raise BlockError("expected a JSON object {name: arguments}")
    if len(item) != 1:
        raise BlockError(f"expected one tool name per object, got {len(item)} keys")
    name, value = next(iter(item.items()))
    if not name:
        raise BlockError("the call has no name")
    arguments, raw, error = decode_arguments(value)
    return (None, name, arguments, raw, error)


def parse_apertus(text: str, seed: str) -> Scan:
    """`<|tools_prefix|>[{"NAME": {args}}, ...]<|tools_suffix|>` (Apertus)."""
    opener = _opener("<|tools_prefix|>")
    return scan_marked(text, opener, _apertus_item, seed, close="<|tools_suffix|>")


def _cohere_item(item: Any) -> BlockCall:
    """`{"tool_call_id", "tool_name", "parameters"}`; the model's id is kept."""
    if not isinstance(item, dict):
        raise BlockError(f"expected a JSON object with a tool_name, got {type(item).__name__}")
    name = item.get("tool_name")
    if not isinstance(name, str) or not name:
        raise BlockError("the call has no tool_name")
    arguments, raw, error = decode_arguments(item.get("parameters"))
    given = item.get("tool_call_id")
    cid = str(given) if isinstance(given, str | int) and str(given) else None
    return (cid, name, arguments, raw, error)


_COHERE_MARKS = (
    "<|START_RESPONSE|>",
    "<|END_RESPONSE|>",
    "<|START_TEXT|>",
    "<|END_TEXT|>",
    "<|START_THINKING|>",
    "<|END_THINKING|>",
)
"""Section markers of Command 3/4 output; the answer inside them is content."""
_COHERE_SECTION = _opener(*_COHERE_MARKS)
"""A section boundary separates content pieces."""
_COHERE_THINKING = "<|START_THINKING|>"
_COHERE_MODE = _opener(*_COHERE_MARKS, "<|START_ACTION|>", "<|END_ACTION|>")
"""Every marker switches cohere_melody's filter mode, so any of them ends a thinking section."""


def _cohere_thinking(text: str, scan: Scan, *, opens_thinking: bool) -> str:
    """Thinking sections into `scan.reasoning`; returns the text with each replaced by a
    newline. A section runs from `<|START_THINKING|>` (or, for Command 4, whose prompt ends
    with that token, from the start of the text) to the next marker, as in melody's filter."""
    kept: list[str] = []
    pos, start = 0, 0 if opens_thinking else text.find(_COHERE_THINKING)
    while start != -1:
        kept.append(text[pos:start])
        inner = start + len(_COHERE_THINKING) if text.startswith(_COHERE_THINKING, start) else 0
        mark = _COHERE_MODE.search(text, inner)
        pos = mark.start() if mark else len(text)
        if thought := text[inner:pos].strip():
            scan.reasoning.append(thought)
        start = text.find(_COHERE_THINKING, pos)
    kept.append(text[pos:])
    return "\n".join(kept)


def _parse_cohere(text: str, seed: str, *, opens_thinking: bool) -> Scan:
    thinking = Scan()
    visible = _cohere_thinking(text, thinking, opens_thinking=opens_thinking)
    opener = _opener("<|START_ACTION|>")
    scan = scan_marked(visible, opener, _cohere_item, seed, close="<|END_ACTION|>")
    scan.content = [part for piece in scan.content for part in _COHERE_SECTION.split(piece)]
    scan.reasoning = thinking.reasoning
    return scan


def parse_cohere_command3(text: str, seed: str) -> Scan:
    """`<|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}]<|END_ACTION|>`
    (Command A / Command 3); `<|START_THINKING|>` sections are reasoning."""
    return _parse_cohere(text, seed, opens_thinking=False)


def parse_cohere_command4(text: str, seed: str) -> Scan:
    """Command 4: as Command 3, but the completion starts inside a thinking section."""
    return _parse_cohere(text, seed, opens_thinking=True)


_XLAM_BLOCK = re.compile(
    r"<tool_call>(?P<tag>.*?)(?:</tool_call>|\Z)"
    r"|```(?:json)?\s*(?P<fence>.*?)```"
    r"|\[TOOL_CALLS\](?P<line>[^\n]*)",
    re.DOTALL,
)


def parse_xlam(text: str, seed: str) -> Scan:
    """xLAM: a JSON list of `{"name", "arguments"}` in a fenced block, in `<tool_call>` tags,
    after `[TOOL_CALLS]` on one line, or alone at the start. A fenced block that is not a list
    of calls is ordinary content (code); a tagged block that is not is a problem."""
    scan = Scan()
    pos = 0
    for match in _XLAM_BLOCK.finditer(text):
        kind = match.lastgroup or "tag"
        body = match.group(kind).strip()
        try:
            value = json_loads(body, strict=False)
        except json.JSONDecodeError as exc:
            if kind == "fence":
                continue
            scan.content.append(text[pos : match.start()])
            error = f"not valid JSON: {exc.msg}"
            scan.problems.append(
                ParseProblem(raw=match.group(0), error=error, offset=match.start())
            )
            pos = match.end()
            continue
        if kind == "fence" and not _all_calls(value):
            continue
        scan.content.append(text[pos : match.start()])
        add_items(scan, value, match.group(0), match.start(), call_from_object, seed)
        pos = match.end()
    if pos == 0 and not scan.problems and (bare := leading_list(text, call_from_object, seed)):
        return bare
    scan.content.append(text[pos:])
    return scan


def _all_calls(value: Any) -> bool:
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(
        isinstance(i, dict) and isinstance(i.get("name"), str) for i in items
    )


_POOLSIDE_NAME = re.compile(r"\s*([^\n<]*)")
_POOLSIDE_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


def _poolside_block(types: ParamTypes) -> Callable[[str], list[BlockCall]]:
    def read(inner: str) -> list[BlockCall]:
        match = _POOLSIDE_NAME.match(inner)
        name = match.group(1).strip() if match else ""
        if not name:
            raise BlockError("the call has no name")
        declared = types.get(name, {})
        arguments: dict[str, Any] = {}
        for key, value in _POOLSIDE_ARG.findall(inner):
            arguments[key.strip()] = literal_value(value.strip(), declared.get(key.strip()))
        return [(None, name, arguments, None, None)]

    return read


def parse_poolside_v1(text: str, seed: str, types: ParamTypes) -> Scan:
    """`<tool_call>NAME\n<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`
    (Poolside v1, the GLM 4.5 layout with each value stripped of surrounding whitespace)."""
    return scan_blocks(text, "<tool_call>", "</tool_call>", _poolside_block(types), seed=seed)


FAMILIES: dict[str, Parser] = {
    "apertus": untyped(parse_apertus),
    "cohere_command3": untyped(parse_cohere_command3),
    "cohere_command4": untyped(parse_cohere_command4),
    "ernie45": untyped(parse_tool_call_json),
    "gigachat3": untyped(parse_gigachat3),
    "granite": untyped(parse_granite),
    "granite-20b-fc": untyped(parse_granite_20b_fc),
    "granite4": untyped(parse_tool_call_json),
    "hunyuan_a13b": untyped(parse_hunyuan_a13b),
    "internlm": untyped(parse_internlm),
    "jamba": untyped(parse_jamba),
    "phi4_mini_json": untyped(parse_phi4_mini),
    "poolside_v1": parse_poolside_v1,
    "xlam": untyped(parse_xlam),
}
