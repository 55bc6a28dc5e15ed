"""Families that write calls as Python: pythonic and llama4_pythonic (`[get_weather(city="Paris")]`,
llama 4 optionally between `<|python_start|>` and `<|python_end|>`), olmo3 (one call per line,
optionally inside `<function_calls>`...`</function_calls>`) and lfm2 (a call list between
`<|tool_call_start|>` and `<|tool_call_end|>`).

Calls are read with `ast` and never evaluated. Each call stands on its own: a call whose
arguments are not literals is kept with its raw text and a problem, a list element that is not a
call is a problem, and the calls around it are still returned.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from typing import Any

from rolltape.producers.parsing._blocks import BlockCall, BlockError, Parser, Scan, untyped
from rolltape.producers.parsing._result import ParseProblem

_JSON_NAMES: dict[str, Any] = {"null": None, "true": True, "false": False}
"""Names some models write for JSON literals (their tool schemas are JSON)."""

_PARSE_ERRORS = (SyntaxError, ValueError, RecursionError, MemoryError)


class _NotLiteral(ValueError):
    """An argument value that is not a literal (a name, an expression, a call...)."""


def _literal(node: ast.expr) -> Any:
    """A literal argument as JSON data; tuples become lists and signed numbers are numbers,
    since they are literals the reference only rejects by accident."""
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, str | int | float):
            return node.value
        raise _NotLiteral(f"{type(node.value).__name__} is not a JSON value")
    if isinstance(node, ast.Dict):
        return {_key(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    raise _NotLiteral(f"{ast.unparse(node)[:80]!r} is not a literal")


def _key(node: ast.expr | None) -> str:
    """A dict key as JSON writes it (JSON keys are strings)."""
    if node is None:
        raise _NotLiteral("a ** entry in a dict argument is not a literal")
    value = _literal(node)
    return value if isinstance(value, str) else json.dumps(value)


def _dotted_name(node: ast.expr) -> str:
    """`get_weather` or `weather.get` (a namespaced tool keeps its dotted name)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise BlockError(f"{ast.unparse(node)[:80]!r} is not a function name")
    parts.append(node.id)
    return ".".join(reversed(parts))


def _call(node: ast.expr, source: str) -> BlockCall:
    """One call node; arguments that cannot be read keep the call's text as raw arguments."""
    if not isinstance(node, ast.Call):
        raise BlockError(f"{ast.unparse(node)[:80]!r} is not a function call")
    name = _dotted_name(node.func)
    raw = ast.get_source_segment(source, node) or ast.unparse(node)
    if node.args:
        return (None, name, {}, raw, "positional arguments have no parameter names")
    try:
        arguments = {_kwarg(k): _literal(k.value) for k in node.keywords}
    except _NotLiteral as exc:
        return (None, name, {}, raw, str(exc))
    return (None, name, arguments, None, None)


def _kwarg(keyword: ast.keyword) -> str:
    if keyword.arg is None:
        raise _NotLiteral("**arguments are not literals")
    return keyword.arg


def _add_nodes(
    scan: Scan, nodes: list[ast.expr], source: str, seed: str, offset: int, raw: str
) -> None:
    """Every call of a block; an element that is not a call costs only itself."""
    for node in nodes:
        try:
            block = _call(node, source)
        except BlockError as exc:
            segment = ast.get_source_segment(source, node) or raw
            scan.problems.append(ParseProblem(raw=segment, error=str(exc), offset=offset))
            continue
        scan.add_call(block, seed, raw, offset)


def _expression(source: str) -> ast.expr:
    try:
        return ast.parse(source.strip(), mode="eval").body
    except _PARSE_ERRORS as exc:
        raise BlockError(f"not valid Python: {exc}") from exc


def _call_nodes(node: ast.expr) -> list[ast.expr]:
    """A list of calls, or one call written without the list."""
    if isinstance(node, ast.List) and node.elts:
        return list(node.elts)
    if isinstance(node, ast.Call):
        return [node]
    raise BlockError("expected a list of function calls")


def _read_block(scan: Scan, source: str, seed: str, offset: int, raw: str) -> None:
    """A call list (or a lone call) written as Python."""
    try:
        nodes = _call_nodes(_expression(source))
    except BlockError as exc:
        scan.problems.append(ParseProblem(raw=raw, error=str(exc), offset=offset))
        return
    _add_nodes(scan, nodes, source.strip(), seed, offset, raw)


_LIST_START = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(\s*(?:\)|[A-Za-z_]\w*\s*=)")
"""A call list starts like the reference's pattern: `[name(` then `)` or `keyword=`, which
plain prose in square brackets does not."""
_CLOSERS = {"[": "]", "(": ")", "{": "}"}


def _bracket_end(text: str, start: int) -> tuple[int | None, str | None]:
    """(index after the bracket that closes the one at `start`, None), or when the text ends
    first (None, the closers that would complete it; None if it ends inside a string)."""
    stack: list[str] = []
    quote: str | None = None
    i = start
    while i < len(text):
        char = text[i]
        if quote is not None:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char in _CLOSERS:
            stack.append(_CLOSERS[char])
        elif char in ")]}":
            if not stack or stack.pop() != char:
                return i + 1, None
            if not stack:
                return i + 1, None
        i += 1
    return None, (None if quote is not None else "".join(reversed(stack)))


def _scan_lists(text: str, seed: str, scan: Scan, base: int) -> None:
    """Call lists anywhere in `text`; the text around them is content. A list cut off by the
    end of the text is closed and read when it stopped outside a string."""
    pos = 0
    while (match := _LIST_START.search(text, pos)) is not None:
        start = match.start()
        scan.content.append(text[pos:start])
        end, closers = _bracket_end(text, start)
        if end is not None:
            raw = source = text[start:end]
        else:
            raw, end = text[start:], len(text)
            source = raw.rstrip().rstrip(",") + closers if closers is not None else raw
        _read_block(scan, source, seed, base + start, raw)
        pos = end
    scan.content.append(text[pos:])


def _segments(text: str, markers: re.Pattern[str]) -> list[tuple[int, str]]:
    """The text between marker tokens, each with its offset (the markers are not content)."""
    out: list[tuple[int, str]] = []
    pos = 0
    for match in markers.finditer(text):
        out.append((pos, text[pos : match.start()]))
        pos = match.end()
    out.append((pos, text[pos:]))
    return out


_BlockReader = Callable[[Scan, str, str, int, str], None]
"""Reads one block's inside into the scan: (scan, inside, seed, offset, raw block)."""

_PYTHON_MARKERS = re.compile(r"<\|python_tag\|>|<\|python_start\|>|<\|python_end\|>")


def parse_pythonic(text: str, seed: str) -> Scan:
    """`[get_weather(city="Paris"), get_time(tz="UTC")]`, with text before and after kept as
    content; llama's python tags around the list are markers, not content."""
    scan = Scan()
    for base, segment in _segments(text, _PYTHON_MARKERS):
        _scan_lists(segment, seed, scan, base)
    return scan


def _scan_tagged(
    text: str, open_tag: str, close_tag: str, seed: str, read: _BlockReader
) -> tuple[Scan, list[tuple[int, str]]]:
    """Blocks between tags (an open last block runs to the end); returns the scan and the text
    outside the blocks with offsets, for the caller to treat as content."""
    scan = Scan()
    outside: list[tuple[int, str]] = []
    pos = 0
    while (start := text.find(open_tag, pos)) != -1:
        outside.append((pos, text[pos:start]))
        inner_start = start + len(open_tag)
        end = text.find(close_tag, inner_start)
        inner_end, pos = (len(text), len(text)) if end == -1 else (end, end + len(close_tag))
        read(scan, text[inner_start:inner_end], seed, start, text[start:pos])
    outside.append((pos, text[pos:]))
    return scan, outside


def _olmo3_block(scan: Scan, inner: str, seed: str, offset: int, raw: str) -> None:
    """Calls one per line (or a call list); a line that cannot be read costs only itself."""
    source = inner.strip()
    try:
        module = ast.parse(source)
    except _PARSE_ERRORS:
        for chunk in _statements(source):
            _read_block(scan, chunk, seed, offset, chunk)
        return
    for statement in module.body:
        segment = ast.get_source_segment(source, statement) or raw
        if not isinstance(statement, ast.Expr):
            error = "expected a function call"
            scan.problems.append(ParseProblem(raw=segment, error=error, offset=offset))
            continue
        try:
            nodes = _call_nodes(statement.value)
        except BlockError as exc:
            scan.problems.append(ParseProblem(raw=segment, error=str(exc), offset=offset))
            continue
        _add_nodes(scan, nodes, source, seed, offset, raw)


def _parses(source: str) -> bool:
    try:
        ast.parse(source.strip(), mode="eval")
    except _PARSE_ERRORS:
        return False
    return True


def _statements(source: str) -> list[str]:
    """Lines grouped into calls: a call may span lines (a dict argument), and a line that
    starts nothing readable stands alone, so one broken call costs only its own line."""
    lines = source.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        end = next(
            (j for j in range(i + 1, len(lines) + 1) if _parses("\n".join(lines[i:j]))), i + 1
        )
        out.append("\n".join(lines[i:end]))
        i = end
    return out


def _all_calls(text: str) -> bool:
    """Whether untagged olmo3 text is nothing but calls (else it is prose)."""
    try:
        module = ast.parse(text.strip())
    except _PARSE_ERRORS:
        return False
    return bool(module.body) and all(
        isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) for s in module.body
    )


def parse_olmo3(text: str, seed: str) -> Scan:
    """`<function_calls>\\nget_weather(city="Paris")\\nget_time()\\n</function_calls>`, every
    block; without the tags the text is calls only when every line is one."""
    if "<function_calls>" in text:
        scan, outside = _scan_tagged(
            text, "<function_calls>", "</function_calls>", seed, _olmo3_block
        )
        scan.content.extend(piece for _, piece in outside)
        return scan
    scan = Scan()
    if _all_calls(text):
        _olmo3_block(scan, text, seed, 0, text)
    else:
        scan.content.append(text)
    return scan


_LFM2_START, _LFM2_END = "<|tool_call_start|>", "<|tool_call_end|>"


def parse_lfm2(text: str, seed: str) -> Scan:
    """`<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>`, every block. LFM2 may
    echo the call body after the block, capped by a second end tag: the echo is not called
    again nor shown as content, it is kept as a problem."""
    scan, outside = _scan_tagged(text, _LFM2_START, _LFM2_END, seed, _read_block)
    for offset, piece in outside:
        echo_end = piece.rfind(_LFM2_END)
        if echo_end == -1:
            scan.content.append(piece)
            continue
        echo = piece[: echo_end + len(_LFM2_END)]
        error = "an echo of a call after its block closed (not called again)"
        scan.problems.append(ParseProblem(raw=echo, error=error, offset=offset))
        scan.content.append(piece[len(echo) :])
    return scan


FAMILIES: dict[str, Parser] = {
    "pythonic": untyped(parse_pythonic),
    "llama4_pythonic": untyped(parse_pythonic),
    "olmo3": untyped(parse_olmo3),
    "lfm2": untyped(parse_lfm2),
}
