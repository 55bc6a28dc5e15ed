"""Tool calls in raw completions of open models, per model family.

`parse(text, family)` splits a completion into content, reasoning, tool calls (id, name,
arguments) and problems. Where it does better than the parsers of the serving engines and agents
we learn from (the Hermes agent's and vLLM's; docs/capture.md lists each difference):

- a malformed block costs only itself: the good calls around it are returned and the bad block
  is kept as a `ToolParseError` (family, raw text, offset and why: the event capture records);
- text before, between and after the calls is content (no cut at the first call or brace);
- `<think>`, `<reasoning>` and `<REASONING_SCRATCHPAD>` blocks are reasoning, never content, and
  call markup inside them is not a call;
- formats without ids get deterministic ones (`call_` + a hash of the text and the call's
  position), so parsing the same completion twice gives the same calls;
- arguments that are not a JSON object are kept as `raw_arguments` with a problem, the call
  itself is still returned (its name is known).

`content` is the text around the calls, each piece stripped of surrounding whitespace and the
pieces joined by one newline (a call block no longer separates them). Offsets count characters of the text after the
reasoning blocks were taken out.
"""

from __future__ import annotations

import hashlib
import pkgutil
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rolltape.producers._errors import ProducerError
from rolltape.producers.parsing._blocks import Parser, Scan
from rolltape.producers.parsing._result import ParsedCompletion, ParseProblem, decode_arguments
from rolltape.schemas import ToolCall, ToolParseError, ToolSpec, split_reasoning
from rolltape.schemas.plugins import load_module


def _family_parsers() -> dict[str, Parser]:
    """Every `_*_calls` module's `FAMILIES`, merged: a format lives in one module with its
    parser, and a name may be claimed by only one module."""
    merged: dict[str, Parser] = {}
    owner: dict[str, str] = {}
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not (module_info.name.startswith("_") and module_info.name.endswith("_calls")):
            continue
        module = load_module(f"{__name__}.{module_info.name}", "tool-call parser module")
        for name, parser in module.FAMILIES.items():
            if name in merged:
                raise ImportError(
                    f"model family {name!r} is claimed by {owner[name]} and {module_info.name}"
                )
            merged[name] = parser
            owner[name] = module_info.name
    return merged


ALIASES: dict[str, str] = {
    "deepseek_v3_1": "deepseek_v31",  # the Hermes agent's name; vLLM's is deepseek_v31
    "deepseek_dsml": "deepseek_v4",  # the Hermes agent's second name of its DSML parser
}
"""Other names of a family -> the name results carry."""

FAMILIES: dict[str, Parser] = _family_parsers()
FAMILIES.update({alias: FAMILIES[name] for alias, name in ALIASES.items() if name in FAMILIES})
"""Family name -> parser, under the names the Hermes agent's and vLLM's tool parsers use (and
rolltape's earlier names, kept as aliases)."""


class UnknownFamilyError(ProducerError, ValueError):
    """The family is not one of FAMILIES."""


def check_family(family: str) -> str:
    """The name results carry for `family` (aliases resolved); UnknownFamilyError naming every
    known family when it is none of them. The one check every caller that takes a family uses."""
    if family not in FAMILIES:
        raise UnknownFamilyError(
            f"unknown model family {family!r}; known: {', '.join(sorted(FAMILIES))}"
        )
    return ALIASES.get(family, family)


def parse(
    text: str,
    family: str,
    *,
    tools: Sequence[ToolSpec] = (),
    seed: str | None = None,
) -> ParsedCompletion:
    """Split a raw completion of `family`. `tools` (the session's declared tools) type the
    arguments of formats that write values as text; `seed` makes generated ids unique across a
    session (default: the text itself)."""
    parser = FAMILIES[family := check_family(family)]
    rest, reasoning = split_reasoning(text)
    seed = seed if seed is not None else hashlib.sha256(text.encode()).hexdigest()
    try:
        scan = parser(rest, seed, _parameter_types(tools))
    except RecursionError:  # nesting the parser's readers cannot follow: nothing is lost
        scan = Scan(content=[rest])
        scan.problems.append(ParseProblem(raw=rest, error="nested too deeply to read", offset=0))
    thoughts = [r for r in (reasoning, *scan.reasoning) if r is not None]
    return ParsedCompletion(
        family=family,
        content="\n".join(piece.strip() for piece in scan.content if piece.strip()),
        reasoning="\n\n".join(thoughts) if thoughts else None,
        tool_calls=tuple(scan.calls),
        problems=tuple(
            ToolParseError(family=family, raw=p.raw, error=p.error, offset=p.offset)
            for p in scan.problems
        ),
    )


def structured_calls(
    tool_calls: Sequence[Mapping[str, Any]],
) -> tuple[tuple[ToolCall, ...], tuple[ToolParseError, ...]]:
    """OpenAI structured `tool_calls` (`{id, type, function: {name, arguments}}`) as calls; the
    argument string is decoded, and kept raw with a problem when it is not a JSON object."""
    calls: list[ToolCall] = []
    problems: list[ToolParseError] = []
    for index, item in enumerate(tool_calls):
        function = item.get("function") or {}
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not name:
            problems.append(
                ToolParseError(
                    family="openai", raw=repr(dict(item)), error="no function name", offset=index
                )
            )
            continue
        arguments, raw, error = decode_arguments(function.get("arguments"))
        given = item.get("id")
        cid = given if isinstance(given, str) and given else f"call_{index}"
        calls.append(ToolCall(id=cid, name=name, arguments=arguments, raw_arguments=raw))
        if error is not None:
            problems.append(
                ToolParseError(
                    family="openai",
                    raw=str(function.get("arguments")),
                    error=f"{name}: {error}",
                    offset=index,
                )
            )
    return tuple(calls), tuple(problems)


def declared_tools(tools: Iterable[Mapping[str, Any]]) -> list[ToolSpec]:
    """A request's `tools` as ToolSpecs, to type the arguments of formats that write values as
    text: OpenAI's form (`{"type": "function", "function": {name, parameters}}`) or rolltape's
    (`{name, parameters}`); entries without a name are skipped."""
    out = []
    for entry in tools:
        function = entry.get("function", entry)
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            out.append(
                ToolSpec(
                    name=function["name"],
                    parameters=dict(parameters) if isinstance(parameters, Mapping) else {},
                )
            )
    return out


def _parameter_types(tools: Sequence[ToolSpec]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for tool in tools:
        props = tool.parameters.get("properties")
        if isinstance(props, Mapping):
            out[tool.name] = {
                key: declared
                for key, spec in props.items()
                if isinstance(spec, Mapping) and (declared := _declared_type(spec)) is not None
            }
    return out


def _declared_type(spec: Mapping[str, Any]) -> str | None:
    """A parameter's one JSON Schema type, null aside: `"string"`, `["string", "null"]` and
    pydantic's `anyOf: [{"type": "string"}, {"type": "null"}]` (an Optional[str]) all say
    string."""
    declared = spec.get("type")
    if declared is None:
        declared = [
            member.get("type")
            for member in (spec.get("anyOf") or spec.get("oneOf") or [])
            if isinstance(member, Mapping)
        ]
    kinds = [declared] if isinstance(declared, str) else declared
    if not isinstance(kinds, list):
        return None
    named = {k for k in kinds if isinstance(k, str) and k != "null"}
    return named.pop() if len(named) == 1 else None


__all__ = [
    "ALIASES",
    "FAMILIES",
    "ParsedCompletion",
    "UnknownFamilyError",
    "check_family",
    "declared_tools",
    "parse",
    "split_reasoning",
    "structured_calls",
]
