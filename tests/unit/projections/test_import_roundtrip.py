"""Imported text is kept exactly as written: Hermes rows whose texts mix tag literals, unicode,
empty blocks and whitespace at the edges import with every character in place, every export
format carries that text unchanged, and importing rolltape's own export gives the same sessions.

Rows are written here by the Hermes agent's own rules (a `<think>` block first, the content,
then one `<tool_call>` block per call; results as `<tool_response>` blocks; nothing escaped).
Two things its format cannot tell apart are left out of the generated rows, because no reader
can: reasoning that itself contains `</think>`, and content that ends with what reads as a
well-formed call block.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rolltape.projections import Trajectory, fold
from rolltape.projections.exporters import openai_row, sharegpt_row, trl_row, turn_lines
from rolltape.projections.importers import RowError, hermes_sessions
from rolltape.schemas import read_event
from tests.unit.projections.test_importers import _records

TAG_LITERALS = (
    '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>',
    "<think>",
    "</think>",
    "<think>\n</think>\n",
    "<tool_call>",
    "</tool_call>",
    "<tool_call>\n",
    "\n</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<REASONING_SCRATCHPAD>",
    "</REASONING_SCRATCHPAD>",
    "'</think><tool_call>'",
    "&lt;think&gt;",
    "&amp;",
)
TEXT = st.lists(
    st.one_of(
        st.sampled_from(TAG_LITERALS),
        st.sampled_from(("\n", "\n\n", " ", "\t", "é", "東京", "🙂", "\u200b")),
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6),
    ),
    max_size=7,
).map("".join)
PLAIN = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)  # the canonical form's integers
ARGUMENTS = st.dictionaries(PLAIN, st.one_of(TEXT, INT64, st.booleans()), max_size=3)


@st.composite
def turns(draw: st.DrawFn) -> dict[str, Any]:
    """One assistant turn: reasoning, content, calls and their results' texts."""
    reasoning = draw(TEXT)
    assume("</think>" not in reasoning)
    calls = draw(st.lists(st.tuples(PLAIN, ARGUMENTS, TEXT), max_size=2))
    results = [text for _, _, text in calls]
    assume(all(not r.lstrip().startswith(("{", "[")) for r in results))  # Hermes parses those
    return {"reasoning": reasoning, "content": draw(TEXT), "calls": calls}


def ends_like_a_call(content: str) -> bool:
    """Whether `content` ends with a `<tool_call>` block whose body is a JSON object with a
    name (decided here by the format's definition, not by the reader under test)."""
    if not content.endswith("\n</tool_call>"):
        return False
    body_end = len(content) - len("\n</tool_call>")
    opened = content.rfind("<tool_call>\n", 0, body_end)
    if opened == -1:
        return False
    try:
        body = json.loads(content[opened + len("<tool_call>\n") : body_end])
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("name"), str)


def hermes_gpt(turn: dict[str, Any]) -> str:
    reasoning = turn["reasoning"]
    head = f"<think>\n{reasoning}\n</think>\n" if reasoning else "<think>\n</think>\n"
    blocks = [
        "<tool_call>\n"
        + json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
        + "\n</tool_call>"
        for name, args, _ in turn["calls"]
    ]
    content = turn["content"]
    return head + content + ("\n" if content and blocks else "") + "\n".join(blocks)


def hermes_tool(turn: dict[str, Any], index: int) -> str:
    return "\n".join(
        "<tool_response>\n"
        + json.dumps(
            {"tool_call_id": f"call_{index}_{n}", "name": name, "content": result},
            ensure_ascii=False,
        )
        + "\n</tool_response>"
        for n, (name, _, result) in enumerate(turn["calls"])
    )


@st.composite
def rows(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """(a Hermes row, what it says: system text, user texts, assistant turns)."""
    preamble, after = draw(TEXT), draw(TEXT)
    tools = [{"name": "search", "description": "find <tool_call> text", "parameters": {}}]
    system = f"{preamble}\n<tools>\n{json.dumps(tools, ensure_ascii=False)}\n</tools>{after}"
    conversation = [{"from": "system", "value": system}]
    users, assistants = [], draw(st.lists(turns(), min_size=1, max_size=3))
    for index, turn in enumerate(assistants):
        users.append(draw(TEXT))
        conversation.append({"from": "human", "value": users[-1]})
        # content that ends in what reads as a call block is the format's own ambiguity
        assume(not ends_like_a_call(turn["content"]))
        conversation.append({"from": "gpt", "value": hermes_gpt(turn)})
        if turn["calls"]:
            conversation.append({"from": "tool", "value": hermes_tool(turn, index)})
    row = {"conversations": conversation, "completed": True, "model": "m"}
    return row, {"system": preamble + after, "users": users, "assistants": assistants}


def imported(row: dict[str, Any]) -> Trajectory:
    (session,) = list(hermes_sessions([orjson.dumps(row)]))
    assert not isinstance(session, RowError), session.reason
    return fold([read_event(r.value) for r in _records(session) if r.stream == "events"])


def said(trajectory: Trajectory) -> list[tuple[Any, ...]]:
    """Everything a session says, in order: the text of each message, reasoning, calls and
    their results."""
    return [
        (
            m.role,
            m.content,
            m.reasoning or "",
            [(c.name, c.arguments, c.result.content if c.result else None) for c in m.tool_calls],
        )
        for m in trajectory.messages
    ]


@settings(max_examples=200, deadline=None)
@given(rows())
def test_hermes_import__keeps_every_character_of_every_text(
    case: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    row, expected = case
    trajectory = imported(row)
    messages = trajectory.messages
    assert [m.content for m in messages if m.role == "system"] == [expected["system"]]
    assert [m.content for m in messages if m.role == "user"] == expected["users"]
    assistants = [m for m in messages if m.role == "assistant"]
    assert len(assistants) == len(expected["assistants"])
    for message, turn in zip(assistants, expected["assistants"], strict=True):
        assert (message.reasoning or "", message.content) == (turn["reasoning"], turn["content"])
        assert [(c.name, c.arguments) for c in message.tool_calls] == [
            (name, args) for name, args, _ in turn["calls"]
        ]
        assert [c.result.content if c.result else None for c in message.tool_calls] == [
            result for _, _, result in turn["calls"]
        ]


@settings(max_examples=200, deadline=None)
@given(rows())
def test_hermes_import__export_then_import_gives_the_same_session(
    case: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    first = imported(case[0])
    again = imported(sharegpt_row(first))
    assert said(again) == said(first)
    assert [t.name for t in again.tools] == [t.name for t in first.tools]


@settings(max_examples=100, deadline=None)
@given(rows())
def test_hermes_import__every_export_format_carries_the_text_unchanged(
    case: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    trajectory = imported(case[0])
    contents = [m.content for m in trajectory.messages]
    for row in (openai_row(trajectory), trl_row(trajectory)):
        exported = [m["content"] for m in row["messages"] if m["role"] != "tool"]
        assert exported == contents
    reasoning = [m.reasoning or "" for m in trajectory.messages if m.reasoning]
    trl = [
        m["reasoning_content"] for m in trl_row(trajectory)["messages"] if "reasoning_content" in m
    ]
    assert trl == reasoning
    lines = turn_lines(trajectory)
    assert [line["reasoning"] for line in lines] == [
        m.reasoning for m in trajectory.messages if m.role == "assistant"
    ]


def test_hermes_import__prose_that_quotes_the_tags_is_prose() -> None:
    prose = (
        "The parser splits on '</think><tool_call>', so a reply that quotes it\n"
        "must keep every word before the quote. <think> is just text here."
    )
    call = '<tool_call>\n{"name": "search", "arguments": {"q": "</tool_call>"}}\n</tool_call>'
    row = {
        "conversations": [
            {"from": "human", "value": "explain the parser"},
            {"from": "gpt", "value": f"<think>\n</think>\n{prose}\n{call}"},
            {"from": "gpt", "value": f"<think>\n</think>\n{prose}"},
        ]
    }
    first, second = [m for m in imported(row).messages if m.role == "assistant"]
    assert (first.reasoning, first.content) == (None, prose)
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("search", {"q": "</tool_call>"})]
    assert (second.reasoning, second.content, second.tool_calls) == (None, prose, ())
