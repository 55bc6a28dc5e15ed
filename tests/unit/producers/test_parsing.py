"""Tool calls in raw completions, per model family: good calls survive bad blocks, text around
the calls is content, reasoning is separated, ids are deterministic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rolltape.producers.parsing import (
    FAMILIES,
    ParsedCompletion,
    UnknownFamilyError,
    parse,
    structured_calls,
)
from rolltape.schemas import ToolSpec

DS_CALLS = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
DS_SEP = "<｜tool▁sep｜>"


def calls(result: ParsedCompletion) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, c.arguments) for c in result.tool_calls]


def hermes_call(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def ds3(name: str, args: str) -> str:
    return f"{DS_CALL[0]}function{DS_SEP}{name}\n```json\n{args}\n```{DS_CALL[1]}"


def ds31(name: str, args: str) -> str:
    return f"{DS_CALL[0]}{name}{DS_SEP}{args}{DS_CALL[1]}"


def kimi(name: str, index: int, args: str) -> str:
    return (
        f"<|tool_call_begin|>functions.{name}:{index}<|tool_call_argument_begin|>{args}"
        "<|tool_call_end|>"
    )


# One completion per family: text before, a good call, a malformed block, a good call, text after.
MIXED = {
    "hermes": "Let me look.\n"
    + hermes_call("calc", '{"expr": "1+1"}')
    + "\n<tool_call>\n{broken\n</tool_call>\n"
    + hermes_call("search", '{"q": "x"}')
    + "\nThen I answer.",
    "qwen": "Let me look.\n"
    + hermes_call("calc", '{"expr": "1+1"}')
    + "<tool_call>{broken</tool_call>"
    + hermes_call("search", '{"q": "x"}')
    + "Then I answer.",
    "longcat": 'Let me look.<longcat_tool_call>{"name": "calc", "arguments": {"expr": "1+1"}}'
    "</longcat_tool_call><longcat_tool_call>{broken</longcat_tool_call>"
    '<longcat_tool_call>{"name": "search", "arguments": {"q": "x"}}</longcat_tool_call>'
    "Then I answer.",
    "qwen3_coder": "Let me look.\n<tool_call>\n<function=calc>\n<parameter=expr>\n1+1\n"
    "</parameter>\n</function>\n</tool_call>\n<tool_call>\nno function here\n</tool_call>\n"
    "<tool_call>\n<function=search>\n<parameter=q>\nx\n</parameter>\n</function>\n</tool_call>\n"
    "Then I answer.",
    "glm45": "Let me look.<tool_call>calc\n<arg_key>expr</arg_key>\n<arg_value>1+1</arg_value>\n"
    "</tool_call><tool_call><arg_key>orphan</arg_key><arg_value>1</arg_value></tool_call>"
    "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>x</arg_value>\n</tool_call>"
    "Then I answer.",
    "glm47": "Let me look.<tool_call>calc<arg_key>expr</arg_key><arg_value>1+1</arg_value>"
    "</tool_call><tool_call><arg_key>orphan</arg_key><arg_value>1</arg_value></tool_call>"
    "<tool_call>search<arg_key>q</arg_key><arg_value>x</arg_value></tool_call>"
    "Then I answer.",
    "deepseek_v3": "Let me look."
    + DS_CALLS[0]
    + ds3("calc", '{"expr": "1+1"}')
    + f"{DS_CALL[0]}no separator{DS_CALL[1]}"
    + ds3("search", '{"q": "x"}')
    + DS_CALLS[1]
    + "Then I answer.",
    "deepseek_v3_1": "Let me look."
    + DS_CALLS[0]
    + ds31("calc", '{"expr": "1+1"}')
    + f"{DS_CALL[0]}no separator{DS_CALL[1]}"
    + ds31("search", '{"q": "x"}')
    + DS_CALLS[1]
    + "Then I answer.",
    "kimi_k2": "Let me look.<|tool_calls_section_begin|>"
    + kimi("calc", 0, '{"expr": "1+1"}')
    + "<|tool_call_begin|>functions.broken:1<|tool_call_end|>"
    + kimi("search", 2, '{"q": "x"}')
    + "<|tool_calls_section_end|>Then I answer.",
    "llama3_json": 'Let me look. {"name": "calc", "arguments": {"expr": "1+1"}}\n'
    '{"name": "broken", "arguments": {\n'
    '{"name": "search", "parameters": {"q": "x"}}\nThen I answer.',
    "llama4_json": 'Let me look.<|python_start|>{"name": "calc", "arguments": {"expr": "1+1"}}'
    '<|python_end|>\n{"name": "broken", "arguments": {\n'
    '<|python_start|>{"name": "search", "parameters": {"q": "x"}}<|python_end|>\nThen I answer.',
    "mistral": 'Let me look.[TOOL_CALLS]calc{"expr": "1+1"}[TOOL_CALLS]{oops'
    '[TOOL_CALLS]search{"q": "x"} Then I answer.',
}


@pytest.mark.parametrize("family", sorted(MIXED))
def test_parse__a_malformed_block_costs_only_itself_and_text_around_calls_is_content(
    family: str,
) -> None:
    result = parse(MIXED[family], family)
    assert calls(result) == [("calc", {"expr": "1+1"}), ("search", {"q": "x"})]
    assert len(result.problems) == 1
    problem = result.problems[0]
    assert problem.raw and problem.raw in MIXED[family] and problem.error
    assert result.content.startswith("Let me look.")
    assert result.content.endswith("Then I answer.")
    assert "calc" not in result.content and "search" not in result.content


def test_families__every_family_above_and_the_openai_passthrough_are_registered() -> None:
    assert set(MIXED) | {"openai"} <= set(FAMILIES)


def test_parse__the_same_text_gives_the_same_ids_and_a_seed_separates_turns() -> None:
    text = MIXED["hermes"]
    first, again = parse(text, "hermes"), parse(text, "hermes")
    assert [c.id for c in first.tool_calls] == [c.id for c in again.tool_calls]
    assert len({c.id for c in first.tool_calls}) == 2
    other_turn = parse(text, "hermes", seed="session-1:turn-7")
    assert not {c.id for c in other_turn.tool_calls} & {c.id for c in first.tool_calls}


def test_parse__ids_the_format_carries_are_kept() -> None:
    kimi_text = "<|tool_calls_section_begin|>" + kimi("get_weather", 3, "{}")
    assert parse(kimi_text, "kimi_k2").tool_calls[0].id == "functions.get_weather:3"
    mistral = '[TOOL_CALLS] [{"name": "calc", "arguments": {"a": 1}, "id": "Ab3dE6gH9"}] after'
    result = parse(mistral, "mistral")
    assert [(c.id, c.name) for c in result.tool_calls] == [("Ab3dE6gH9", "calc")]
    assert result.content == "after"


@pytest.mark.parametrize(
    ("text", "reasoning", "content"),
    [
        ("<think>\nplan\n</think>\nanswer", "plan", "answer"),
        ("<think>\n</think>\nanswer", "", "answer"),
        ("<think>scratch</think>answer", "scratch", "answer"),
        ("<reasoning>why</reasoning>answer", "why", "answer"),
        ("<REASONING_SCRATCHPAD>pad</REASONING_SCRATCHPAD>answer", "pad", "answer"),
        ("template opened it\n</think>\n\nanswer", "template opened it", "answer"),
        ("answer first<think>cut off while thinking", "cut off while thinking", "answer first"),
        ("no reasoning at all", None, "no reasoning at all"),
    ],
)
def test_parse__reasoning_blocks_are_separated_from_content(
    text: str, reasoning: str | None, content: str
) -> None:
    result = parse(text, "hermes")
    assert (result.reasoning, result.content) == (reasoning, content)


def test_parse__call_markup_inside_reasoning_is_thought_not_a_call() -> None:
    text = "<think>maybe " + hermes_call("rm", "{}") + "? no.</think>\n" + hermes_call("ls", "{}")
    result = parse(text, "hermes")
    assert calls(result) == [("ls", {})]
    assert result.reasoning is not None and "rm" in result.reasoning


def test_parse__arguments_that_are_not_an_object_are_kept_raw_and_the_call_survives() -> None:
    result = parse(hermes_call("calc", '"1+1"'), "hermes")
    (call,) = result.tool_calls
    assert call.name == "calc" and call.arguments == {} and call.raw_arguments == "1+1"
    assert "not valid JSON" in result.problems[0].error
    listed = parse(hermes_call("calc", "[1, 2]"), "hermes")
    assert listed.tool_calls[0].raw_arguments == "[1, 2]"
    assert "not an object" in listed.problems[0].error
    double_encoded = parse(hermes_call("calc", '"{\\"expr\\": \\"2\\"}"'), "hermes")
    assert calls(double_encoded) == [("calc", {"expr": "2"})] and not double_encoded.problems


def test_parse__an_unclosed_last_block_is_read_to_the_end() -> None:
    result = parse('ok <tool_call>{"name": "calc", "arguments": {"a": 1}}', "hermes")
    assert calls(result) == [("calc", {"a": 1})] and result.content == "ok"


def test_qwen3_coder__values_are_typed_by_the_declared_schema() -> None:
    text = (
        "<tool_call>\n<function=book>\n<parameter=code>\n42\n</parameter>\n"
        "<parameter=seats>\n2\n</parameter>\n<parameter=opts>\n{'window': True}\n</parameter>\n"
        "<parameter=note>\nline one\nline two\n</parameter>\n</function>\n</tool_call>"
    )
    untyped = parse(text, "qwen3_coder")
    assert untyped.tool_calls[0].arguments == {
        "code": 42,
        "seats": 2,
        "opts": {"window": True},
        "note": "line one\nline two",
    }
    tool = ToolSpec(
        name="book",
        parameters={"type": "object", "properties": {"code": {"type": "string"}}},
    )
    typed = parse(text, "qwen3_coder", tools=[tool])
    assert typed.tool_calls[0].arguments["code"] == "42"


def test_qwen3_coder__a_call_without_the_outer_tags_is_read() -> None:
    result = parse(
        "<function=ls>\n<parameter=path>\n/tmp\n</parameter>\n</function>", "qwen3_coder"
    )
    assert calls(result) == [("ls", {"path": "/tmp"})]


def test_glm__45_reads_as_vllm_reads_it_name_and_arguments_on_one_line_zero_arguments() -> None:
    # vLLM registers glm45 with its GLM 4.7 parser; the Hermes agent's stricter glm45 (a newline
    # after the name) is a listed disagreement in the conformance table
    same_line = "<tool_call>calc<arg_key>expr</arg_key><arg_value>1</arg_value></tool_call>"
    for family in ("glm45", "glm47"):
        assert calls(parse(same_line, family)) == [("calc", {"expr": 1})]
        assert calls(parse("<tool_call>now</tool_call>", family)) == [("now", {})]


def test_llama__braces_in_prose_are_content_not_calls() -> None:
    text = 'Use {x} or {"a": 1} here. <|python_tag|>{"name": "calc", "parameters": {"a": 1}}'
    result = parse(text, "llama3_json")
    assert calls(result) == [("calc", {"a": 1})]
    assert result.content == 'Use {x} or {"a": 1} here.' and not result.problems


def test_llama__calls_separated_by_semicolons() -> None:
    text = '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"k": 2}}'
    assert calls(parse(text, "llama3_json")) == [("a", {}), ("b", {"k": 2})]


def test_deepseek_v3__text_after_the_section_is_kept() -> None:
    text = "before" + DS_CALLS[0] + ds3("get", '{"k": 1}') + DS_CALLS[1] + "after"
    result = parse(text, "deepseek_v3")
    assert calls(result) == [("get", {"k": 1})] and result.content == "before\nafter"


def test_openai__text_is_content_and_structured_calls_are_decoded() -> None:
    assert parse(hermes_call("calc", "{}"), "openai").tool_calls == ()
    found, problems = structured_calls(
        [
            {"id": "call_a", "type": "function", "function": {"name": "calc", "arguments": "{}"}},
            {"id": "call_b", "type": "function", "function": {"name": "web", "arguments": "{x"}},
            {"id": "call_c", "type": "function", "function": {"arguments": "{}"}},
        ]
    )
    assert [(c.id, c.name, c.raw_arguments) for c in found] == [
        ("call_a", "calc", None),
        ("call_b", "web", "{x"),
    ]
    assert len(problems) == 2


def test_parse__an_unknown_family_names_the_known_ones() -> None:
    with pytest.raises(UnknownFamilyError, match="hermes"):
        parse("x", "gpt2")


def test_cli__prints_the_parse_as_json_and_exits_1_when_a_block_was_unreadable(
    tmp_path: Path,
) -> None:
    cli = [sys.executable, "-m", "rolltape.infra", "parse"]
    good = subprocess.run([*cli, "--family", "hermes", "-"], input=hermes_call("ls", "{}"),
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["tool_calls"][0]["name"] == "ls"
    completion = tmp_path / "completion.txt"
    completion.write_text(MIXED["kimi_k2"], encoding="utf-8")
    mixed = subprocess.run([*cli, "--family", "kimi_k2", str(completion)], capture_output=True,
                           text=True, check=False)  # fmt: skip
    assert mixed.returncode == 1
    assert len(json.loads(mixed.stdout)["problems"]) == 1
    unknown = subprocess.run([*cli, "--family", "gpt2", str(completion)], capture_output=True,
                             text=True, check=False)  # fmt: skip
    assert unknown.returncode == 2 and "deepseek_v3" in unknown.stderr


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_parse__nesting_too_deep_to_read_costs_only_its_block(family: str) -> None:
    deep = '{"name": "f", "arguments": {"a": ' + "[" * 5000 + "]" * 5000 + "}}"
    text = f"before <tool_call>\n{deep}\n</tool_call> after"
    result = parse(text, family)  # never RecursionError: the block is content or a problem
    assert all(call.name != "f" or call.arguments for call in result.tool_calls)
    kept = (result.reasoning or "") + result.content + "".join(p.raw for p in result.problems)
    assert "before" in kept and "after" in kept


def test_parse__a_nullable_string_parameter_stays_text() -> None:
    text = "<tool_call>\n<function=book>\n<parameter=code>\n42\n</parameter>\n</function>\n</tool_call>"
    for declared in (
        {"type": ["string", "null"]},
        {"anyOf": [{"type": "string"}, {"type": "null"}]},
    ):
        tool = ToolSpec(name="book", parameters={"properties": {"code": declared}})
        assert calls(parse(text, "qwen3_coder", tools=[tool])) == [("book", {"code": "42"})]
