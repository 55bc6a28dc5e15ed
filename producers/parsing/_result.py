"""What a parser returns, and the helpers every family shares (ids, argument decoding).

A parse never throws away text it could not read: a block that is not a valid call is kept as a
problem (`rolltape.schemas.ToolParseError`) with its raw text and why, and the calls around it are still returned.
"""

from __future__ import annotations

import ast
import hashlib
import json
import warnings
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from rolltape.schemas import ToolCall, ToolParseError


@dataclass(frozen=True)
class ParseProblem:
    """A block that looked like a tool call but could not be read as one (inside a parser; the
    result carries it as a `rolltape.schemas.ToolParseError`, the event capture records)."""

    raw: str
    """The block's text exactly as the model wrote it."""
    error: str
    offset: int
    """Where the block starts in the parsed text (characters)."""


class ParsedCompletion(BaseModel):
    """A raw completion split into what the model said, thought and asked for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str
    content: str
    """The text outside reasoning and call blocks (before, between and after the calls)."""
    reasoning: str | None = None
    """The text of `<think>`, `<reasoning>` and `<REASONING_SCRATCHPAD>` blocks; None if none."""
    tool_calls: tuple[ToolCall, ...] = ()
    problems: tuple[ToolParseError, ...] = ()


_DECODERS = {True: json.JSONDecoder(), False: json.JSONDecoder(strict=False)}


def json_loads(text: str, **options: Any) -> Any:
    """`json.loads`, with nesting too deep for the interpreter reported as the JSONDecodeError
    every caller handles: a model's pathological block costs only itself, never the parse."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to read", text, 0) from None


def json_raw_decode(text: str, start: int, *, strict: bool = True) -> tuple[Any, int]:
    """The JSON value that starts at `start` and where it ends (`JSONDecoder.raw_decode`; not
    `strict`: control characters allowed in strings), deep nesting reported as a
    JSONDecodeError like `json_loads`."""
    try:
        return _DECODERS[strict].raw_decode(text, start)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to read", text, start) from None


def call_id(seed: str, index: int) -> str:
    """A deterministic id for a format that has none: the same text (and seed) gives the same
    ids, so parsing a completion twice, or importing it again, never invents new calls."""
    digest = hashlib.sha256(f"{seed}\x00{index}".encode()).hexdigest()
    return f"call_{digest[:24]}"


def decode_arguments(value: Any) -> tuple[dict[str, Any], str | None, str | None]:
    """Arguments as (object, raw text when not an object, error). A JSON string holding an
    object is decoded (models often double-encode); anything else is kept as raw evidence."""
    if isinstance(value, dict):
        return value, None, None
    if value is None:
        return {}, None, None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return {}, None, None
        try:
            decoded = json_loads(text)
        except json.JSONDecodeError as exc:
            return {}, value, f"arguments are not valid JSON: {exc}"
        if isinstance(decoded, dict):
            return decoded, None, None
        return {}, value, f"arguments are JSON but not an object ({type(decoded).__name__})"
    raw = json.dumps(value, ensure_ascii=False)
    return {}, raw, f"arguments are not an object ({type(value).__name__})"


def literal_value(text: str, declared_type: str | None = None) -> Any:
    """A parameter value written as text (qwen3-coder, GLM): typed by the tool's schema when it
    declares the parameter a string; otherwise JSON, then a Python literal, else the text."""
    if declared_type == "string":
        return text
    try:
        return json_loads(text)
    except (json.JSONDecodeError, ValueError):
        pass
    try:
        with warnings.catch_warnings():  # model text such as "\\d" must read the same everywhere
            warnings.simplefilter("ignore")
            return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def json_object_at(text: str, start: int) -> tuple[Any, int] | None:
    """The JSON value that starts at `start` and where it ends, or None."""
    try:
        return json_raw_decode(text, start)
    except json.JSONDecodeError:
        return None
