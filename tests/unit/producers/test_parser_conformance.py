"""Parity with the reference tool-call parsers (the Hermes agent's and vLLM's), case by case.

Each file in `parser_conformance/` holds the cases of one reference parser: the source file and
commit that was read, and per case the line of that code the case pins, the behaviour, the model
text and the calls the reference returns (written from reading its code, not by running it).
`parse(text, family)` must return those calls (names and arguments, in order), unless the case
lists rolltape's own `calls` with the `why`: those are the deliberate disagreements
docs/capture.md lists. Cases may also pin rolltape's extras: the content kept around the calls,
the reasoning separated from it, the number of blocks reported as problems, and the shape of
the ids.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rolltape.infra.cli import app
from rolltape.producers.parsing import ALIASES, FAMILIES, parse
from rolltape.schemas import ToolSpec

CASES_DIR = Path(__file__).parent / "parser_conformance"

HERMES_AGENT_FAMILIES = {
    "auto",
    "custom_xml",
    "deepseek_dsml",
    "deepseek_v3",
    "deepseek_v3_1",
    "deepseek_v31",
    "deepseek_v4",
    "glm45",
    "glm47",
    "hermes",
    "kimi_k2",
    "llama3_json",
    "llama4_json",
    "longcat",
    "mistral",
    "qwen",
    "qwen3_coder",
}
"""The Hermes agent's parser registry (NousResearch/hermes-agent, environments/tool_call_parsers:
the names its `@register_parser` decorators give, at 544ac55e plus deepseek_v4 / deepseek_dsml at
a32832e0 and custom_xml / auto at 7ddcede8)."""

VLLM_FAMILIES = {
    "apertus",
    "cohere_command3",
    "cohere_command4",
    "deepseek_v3",
    "deepseek_v31",
    "deepseek_v32",
    "deepseek_v4",
    "ernie45",
    "functiongemma",
    "gemma4",
    "gigachat3",
    "glm45",
    "glm47",
    "granite",
    "granite-20b-fc",
    "granite4",
    "hermes",
    "hunyuan_a13b",
    "hy_v3",
    "inkling",
    "internlm",
    "jamba",
    "kimi_k2",
    "kimi_k3",
    "lfm2",
    "llama3_json",
    "llama4_json",
    "llama4_pythonic",
    "longcat",
    "mimo",
    "minicpm5",
    "minimax_m2",
    "minimax_m3",
    "mistral",
    "olmo3",
    "openai",
    "phi4_mini_json",
    "poolside_v1",
    "pythonic",
    "qwen3_coder",
    "qwen3_xml",
    "seed_oss",
    "solar_open2",
    "step3",
    "step3p5",
    "xlam",
}
"""vLLM's tool-parser registry (vllm/tool_parsers/__init__.py, commit 0064cc9cb1ae)."""

_HEX40 = re.compile(r"^[0-9a-f]{40}$")


def _load() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    out = []
    for path in sorted(CASES_DIR.glob("*.json")):
        table = json.loads(path.read_text(encoding="utf-8"))
        for number, case in enumerate(table["cases"]):
            out.append((f"{path.stem}[{number}]", table, case))
    return out


CASES = _load()


def _calls(items: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """(name, arguments): an object, or the text a parser returned when it was not one."""
    return [(item["name"], item.get("arguments", {})) for item in items]


def _got(calls: list[dict[str, Any]], expected: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The calls as (name, arguments), where the reference returned text it could not read as
    an object, rolltape's raw_arguments in its place."""
    raw = [isinstance(arguments, str) for _, arguments in expected]
    raw += [False] * (len(calls) - len(raw))
    return [
        (c["name"], c["raw_arguments"] if as_text and not c["arguments"] else c["arguments"])
        for c, as_text in zip(calls, raw, strict=False)
    ]


@pytest.mark.parametrize(("case_id", "table", "case"), CASES, ids=[c[0] for c in CASES])
def test_parse__returns_the_calls_the_reference_parser_returns(
    case_id: str, table: dict[str, Any], case: dict[str, Any]
) -> None:
    family = case.get("family", table["families"][0])
    tools = [ToolSpec.model_validate(tool) for tool in case.get("tools", [])]
    result = parse(case["text"], family, tools=tools)
    expected = _calls(case["calls"] if "calls" in case else case["reference_calls"])
    got = _got([c.model_dump() for c in result.tool_calls], expected)
    assert got == expected, case["behaviour"]
    if "content" in case:
        assert result.content == case["content"], case["behaviour"]
    if "reasoning" in case:
        assert result.reasoning == case["reasoning"], case["behaviour"]
    if "problems" in case:
        assert len(result.problems) == case["problems"], [p.error for p in result.problems]
    if "id_pattern" in case:
        for call in result.tool_calls:
            assert re.fullmatch(case["id_pattern"], call.id), call.id


@pytest.mark.parametrize(("case_id", "table", "case"), CASES, ids=[c[0] for c in CASES])
def test_conformance_case__names_the_reference_line_it_pins_and_why_it_differs(
    case_id: str, table: dict[str, Any], case: dict[str, Any]
) -> None:
    assert table["reference"] in {"vllm", "hermes-agent"}
    assert _HEX40.match(table["commit"]) and table["source"].endswith(".py")
    assert isinstance(case["line"], int) and case["line"] > 0
    assert case["behaviour"] and isinstance(case["reference_calls"], list)
    assert ("calls" in case) == ("why" in case), "a deliberate difference says why"
    family = case.get("family", table["families"][0])
    assert family in table["families"]


def test_families__every_reference_family_is_accepted_by_its_own_name() -> None:
    missing = (HERMES_AGENT_FAMILIES | VLLM_FAMILIES) - set(FAMILIES)
    assert not missing, sorted(missing)
    assert set(ALIASES) <= set(FAMILIES)


def test_families__every_family_has_conformance_cases_from_its_reference() -> None:
    covered = {
        ALIASES.get(family, family)
        for _, table, case in CASES
        for family in [case.get("family", table["families"][0])]
    }
    named = {ALIASES.get(f, f) for f in HERMES_AGENT_FAMILIES | VLLM_FAMILIES}
    assert not named - covered, sorted(named - covered)


def calling_cases() -> dict[str, dict[str, Any]]:
    """Per family, its first case whose text makes calls and reads cleanly (no problems, no
    carriage return a text-mode read would change): a reply the CLI and the agent can run."""
    out: dict[str, dict[str, Any]] = {}
    for _, table, case in CASES:
        named = case.get("family", table["families"][0])
        family = ALIASES.get(named, named)
        calls = case["calls"] if "calls" in case else case["reference_calls"]
        if family not in out and calls and not case.get("problems") and "\r" not in case["text"]:
            out[family] = {**case, "expected": calls}
    return out


@pytest.mark.parametrize(
    ("family", "case"), sorted(calling_cases().items()), ids=lambda v: str(v)[:20]
)
def test_cli__parse_prints_the_calls_for_every_family(
    family: str, case: dict[str, Any], tmp_path: Path
) -> None:
    text, tools = tmp_path / "completion.txt", tmp_path / "tools.json"
    text.write_bytes(case["text"].encode())
    tools.write_text(json.dumps(case.get("tools", [])))
    argv = ["parse", "--family", family, "--tools", str(tools), str(text)]
    result = CliRunner().invoke(app, argv, catch_exceptions=False)
    printed = json.loads(result.stdout)
    expected = _calls(case["expected"])
    assert _got(printed["tool_calls"], expected) == expected
    assert result.exit_code == (1 if printed["problems"] else 0)
