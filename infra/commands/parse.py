"""`rolltape parse` wiring: a raw completion parsed by its model family's parser, typed by the
request's tools, so the CLI reads the files and prints the result without naming the parsers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rolltape.producers.parsing import FAMILIES as FAMILIES
from rolltape.producers.parsing import ParsedCompletion, declared_tools, parse


def parse_completion(
    text: str, family: str, tools: Iterable[Mapping[str, Any]] = ()
) -> ParsedCompletion:
    """`text` parsed as `family` (one of FAMILIES) writes it: content, reasoning, tool calls and
    the blocks that could not be read. `tools` is the request's `tools` list (OpenAI's form or
    `{name, parameters}`): formats that write values as text type them by it."""
    return parse(text, family, tools=declared_tools(tools))
