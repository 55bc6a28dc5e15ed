from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolltape.projections import Message, ToolCallRecord, ToolOutcome, Trajectory
from rolltape.projections.exporters import (
    IGNORE,
    atropos_groups,
    escape,
    jsonl_line,
    load_tokenizer,
    openai_row,
    parse_sharegpt_row,
    sharegpt_row,
    trl_row,
    turn_lines,
    unescape,
)
from tests.support.golden import assert_golden
from tests.unit.projections.sessions import HOSTILE, conversation, trajectories

atropos_server = pytest.importorskip("atroposlib.api.server")


def _jsonl(rows: list[Any]) -> bytes:
    return b"".join(jsonl_line(row) for row in rows)


def _ordered() -> list[Trajectory]:
    return [t for _, t in sorted(trajectories().items())]


@pytest.mark.parametrize(
    ("name", "export"),
    [("sharegpt", sharegpt_row), ("openai", openai_row), ("trl", trl_row)],
)
def test_row_formats_match_their_golden_files(name: str, export: Any) -> None:
    assert_golden(f"projections/{name}.jsonl", _jsonl([export(t) for t in _ordered()]))


def test_turn_lines_match_their_golden_file() -> None:
    assert_golden(
        "projections/turns.jsonl", _jsonl([line for t in _ordered() for line in turn_lines(t)])
    )


def test_atropos_from_recorded_token_ids_matches_golden_and_validates() -> None:
    export = atropos_groups(_ordered())
    assert [key for key, _, _ in export.groups] == ["g2"]
    line = export.groups[0][2]
    assert line["tokens"] == [[5, 6, 7, 8, 9], [5, 6, 7, 8, 9]]
    assert line["masks"] == [[IGNORE, IGNORE, 7, 8, 9]] * 2
    assert line["scores"] == [0.5, 0.25]
    atropos_server.ScoredData(**line)
    assert_golden("projections/atropos.jsonl", _jsonl([line for _, _, line in export.groups]))
    # The tool-using group has no token ids: without a tokenizer it is skipped, never invented.
    assert {(sid, reason) for sid, reason, _ in export.skipped} == {
        ("s-good", "needs_tokenizer"),
        ("s-bad", "needs_tokenizer"),
    }


def test_atropos_with_a_tokenizer_trains_exactly_the_assistant_replies(tmp_path: Path) -> None:
    from tests.support.tokenizer import build_chat_tokenizer

    tokenizer = load_tokenizer(build_chat_tokenizer(tmp_path / "tok"))
    export = atropos_groups(_ordered(), tokenizer, score="verdict:reward:final_reward:reward")
    assert [key for key, _, _ in export.groups] == ["g1", "g2"]
    _key, members, line = export.groups[0]
    assert [t.session_id for t in members] == ["s-bad", "s-good"]
    assert line["scores"] == [0.0, 1.0]
    atropos_server.ScoredData(**line)
    good = members[1]
    tokens, masks = line["tokens"][1], line["masks"][1]
    rendered = tokenizer.apply_chat_template(line["messages"][1], tokenize=False)
    assert tokenizer.decode(tokens) == rendered
    trained = tokenizer.decode([t for t, m in zip(tokens, masks, strict=True) if m != IGNORE])
    assert trained == "".join(segment for segment in _assistant_segments(rendered))
    assert HOSTILE in tokenizer.decode(tokens)
    assert good.messages[-1].content in trained


def _assistant_segments(rendered: str) -> list[str]:
    parts = rendered.split("<|im_start|>assistant\n")[1:]
    return [part.split("<|im_end|>\n")[0] + "<|im_end|>\n" for part in parts]


def test_groups_with_equal_scores_are_dropped_unless_kept() -> None:
    trajectories_ = [t for t in _ordered() if t.group_id == "g2"]
    export = atropos_groups(trajectories_, score="reward:none")
    assert export.groups == [] and {r for _, r, _ in export.skipped} == {"no_score"}
    equal = atropos_groups(trajectories_, score="verdict:nobody:x")
    assert equal.groups == []
    from rolltape.projections import RewardRecord

    same = [
        t.model_copy(update={"rewards": (RewardRecord(name="reward", value=1.0, event_hash="x"),)})
        for t in trajectories_
    ]
    dropped = atropos_groups(same)
    assert dropped.groups == [] and {r for _, r, _ in dropped.skipped} == {"equal_scores"}
    kept = atropos_groups(same, keep_equal_scores=True)
    assert kept.groups[0][2]["scores"] == [1.0, 1.0]


def test_sharegpt_follows_the_hermes_conventions() -> None:
    good = trajectories()["s-good"]
    row = sharegpt_row(good)
    turns = row["conversations"]
    assert [t["from"] for t in turns] == ["system", "human", "gpt", "tool", "gpt"]
    assert turns[0]["value"].endswith("</tools>") and "\n\n<tools>\n[" in turns[0]["value"]
    assert turns[2]["value"].startswith("<think>\nthink ")
    assert turns[2]["value"].count("\n<tool_call>\n") == 2
    assert turns[3]["value"].count("<tool_response>\n") == 2
    assert turns[4]["value"].startswith("<think>\n\n</think>\n")
    assert row["tool_stats"]["never_used"] == {"count": 0, "success": 0, "failure": 0}
    assert row["tool_error_counts"] == {"calc": 0, "never_used": 0, "search": 0}
    assert row["tool_call_ids"] == [["c-search", "c-calc"], []]
    assert row["completed"] is True and row["reward"] == 1.0 and row["accepted"] is True
    # The hostile text's own tags never survive unescaped between our tags.
    assert turns[1]["value"].count("<think>") == 0


def test_sharegpt_round_trips_hostile_content_losslessly() -> None:
    for trajectory in trajectories().values():
        assert _parsed_back(trajectory) == _expected(trajectory)


def _parsed_back(trajectory: Trajectory) -> Any:
    parsed = parse_sharegpt_row(orjson.loads(jsonl_line(sharegpt_row(trajectory))))
    messages = []
    for m in parsed.messages:
        if m.role == "tool":
            messages.append(("tool", [(r.tool_call_id, r.name, r.content) for r in m.responses]))
        else:
            messages.append(
                (
                    m.role,
                    m.content,
                    m.reasoning or None,
                    [(c.id, c.name, c.arguments) for c in m.tool_calls],
                )
            )
    return parsed.system, [t["function"]["name"] for t in parsed.tools], messages


def _expected(trajectory: Trajectory) -> Any:
    messages_ = list(trajectory.messages)
    system = messages_.pop(0).content if messages_ and messages_[0].role == "system" else None
    messages: list[Any] = []
    for m in messages_:
        if m.role == "assistant":
            calls = [
                (c.id, c.name, c.raw_arguments if c.raw_arguments is not None else c.arguments)
                for c in m.tool_calls
            ]
            messages.append(("assistant", m.content, m.reasoning or None, calls))
            results = [(c.id, c.name, c.result.content) for c in m.tool_calls if c.result]
            if results:
                messages.append(("tool", results))
        else:
            messages.append((m.role, m.content, None, []))
    return system, [t.name for t in trajectory.tools], messages


_PIECES = [
    *list('<>/&;ltamp_thinkoolcresponsx \n{}"\\\u2028é'),
    "</think>",
    "<tool_call>",
    "&lt;",
    "&amp;",
    "</tools>",
    "<|im_end|>",
    "<tool_response>",
]
_text = st.lists(st.sampled_from(_PIECES), max_size=20).map("".join)


@settings(max_examples=300, deadline=None)
@given(_text)
def test_escape_round_trips_and_leaves_no_structural_tag(text: str) -> None:
    escaped = escape(text)
    assert unescape(escaped) == text
    for tag in (
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        "</tool_response>",
        "<tools>",
        "</tools>",
    ):
        assert tag not in escaped


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_text, _text, _text, _text), min_size=1, max_size=4), _text)
def test_any_conversation_round_trips_through_sharegpt(
    turns: list[tuple[str, str, str, str]], system: str
) -> None:
    messages = [Message(role="system", content=system, ts_ns=0, event_hash="h")]
    for i, (user, reasoning, content, result) in enumerate(turns):
        messages.append(Message(role="user", content=user, ts_ns=0, event_hash="h"))
        call = ToolCallRecord(
            id=f"c{i}",
            name="t",
            arguments={"a": result},
            event_hash="h",
            result=ToolOutcome(content=result, success=True, event_hash="h"),
        )
        messages.append(
            Message(
                role="assistant",
                content=content,
                reasoning=reasoning,
                tool_calls=(call,),
                ts_ns=0,
                event_hash="h",
            )
        )
    trajectory = conversation(messages)
    assert _parsed_back(trajectory) == _expected(trajectory)


def test_openai_rows_carry_tool_calls_with_json_string_arguments() -> None:
    row = openai_row(trajectories()["s-good"])
    assistant = row["messages"][2]
    assert [c["id"] for c in assistant["tool_calls"]] == ["c-search", "c-calc"]
    assert orjson.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"q": HOSTILE}
    assert [m["role"] for m in row["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert row["messages"][3] == {
        "role": "tool",
        "tool_call_id": "c-search",
        "content": '{"hits": ["xxxxxxxxxx"]}',
    }
    assert "reasoning_content" not in assistant
    trl = trl_row(trajectories()["s-good"])
    assert trl["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"q": HOSTILE}
    assert trl["messages"][3]["name"] == "search"
    bad = openai_row(trajectories()["s-bad"])
    assert bad["messages"][1]["tool_calls"][1]["function"]["arguments"] == "6*7 please"


def test_turn_lines_leave_unmeasured_counts_null() -> None:
    lines = turn_lines(trajectories()["s-good"])
    assert [line["turn_index"] for line in lines] == [0, 1]
    assert (lines[0]["prompt_tokens"], lines[0]["completion_tokens"]) == (120, 9)
    assert (lines[1]["prompt_tokens"], lines[1]["completion_tokens"]) == (None, None)
    assert (
        lines[0]["user_message"] == "What is 6*7? " + HOSTILE and lines[1]["user_message"] is None
    )
    assert [c["tool_name"] for c in lines[0]["tool_calls"]] == ["search", "calc"]
    assert (
        lines[0]["reward"] is None
        and lines[1]["reward"] == 1.0
        and lines[1]["task_completed"] is True
    )
    assert lines[1]["user_feedback"] == "great"
    token_lines = turn_lines(trajectories()["s-tok-a"])
    assert token_lines[0]["completion_tokens"] == 3
