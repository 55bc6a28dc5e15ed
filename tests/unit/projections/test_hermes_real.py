"""The Hermes importer on rows written by real Hermes runs (read from the shared data folder,
never copied into the project): tools declared, failures counted by Hermes' rule, model and
time kept, reasoning separated, text as Hermes wrote it, and rolltape's export of them reads
back to the same export."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from rolltape.projections import Trajectory, fold
from rolltape.projections.exporters import sharegpt_row
from rolltape.projections.importers import RowError, hermes_sessions
from rolltape.schemas import read_event, result_failed
from tests.unit.projections.test_importers import PRODUCER, _records

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "hermes-real"
FILES = sorted(DATA.glob("*.jsonl")) if DATA.is_dir() else []
pytestmark = pytest.mark.skipif(
    not FILES, reason=f"the real Hermes rows are not here ({DATA}); they are test data only"
)


def rows() -> list[tuple[str, int, dict[str, Any]]]:
    out = []
    for path in FILES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                out.append((path.name, number, json.loads(line)))
    return out


def imported(row: dict[str, Any]) -> Trajectory:
    (session,) = list(hermes_sessions([orjson.dumps(row)]))
    assert not isinstance(session, RowError), session
    return fold([read_event(r.value) for r in _records(session, PRODUCER)])


def declared(row: dict[str, Any]) -> list[str]:
    system = row["conversations"][0]["value"]
    block = re.search(r"\n<tools>\n(.*?)\n</tools>", system, re.S)
    assert block is not None
    return [t.get("function", t)["name"] for t in json.loads(block.group(1))]


def test_real_rows__there_are_36() -> None:
    assert len(rows()) == 36


@pytest.mark.parametrize(("name", "line", "row"), rows(), ids=lambda v: str(v)[:40])
def test_real_row__imports_with_its_tools_model_time_and_reasoning(
    name: str, line: int, row: dict[str, Any]
) -> None:
    trajectory = imported(row)
    assert [t.name for t in trajectory.tools] == declared(row)
    assert trajectory.model == row["model"]
    stamp = dt.datetime.fromisoformat(row["timestamp"])
    stamp = stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)
    assert trajectory.started_ns // 10**9 == int(stamp.timestamp())
    assert trajectory.status == ("completed" if row["completed"] else "interrupted")
    turns = row["conversations"]
    humans = [t["value"] for t in turns if t["from"] == "human"]
    assert [m.content for m in trajectory.messages if m.role == "user"] == humans  # as written
    assistants = [m for m in trajectory.messages if m.role == "assistant"]
    assert len(assistants) == sum(1 for t in turns if t["from"] == "gpt")
    for message, turn in zip(assistants, (t for t in turns if t["from"] == "gpt"), strict=True):
        assert hermes_gpt_value(message) == in_key_order(turn["value"])  # every character


def in_key_order(value: str) -> str:
    """The turn with each call's arguments in sorted key order: events keep arguments as
    canonical JSON (docs/canonical-encoding.md), so an object's key order is the one thing not
    kept as written."""
    return re.sub(
        r"(?<=<tool_call>\n)(.*)(?=\n</tool_call>)",
        lambda m: json.dumps(
            {**(c := json.loads(m.group(1))), "arguments": _sorted(c["arguments"])},
            ensure_ascii=False,
        ),
        value,
    )


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def hermes_gpt_value(message: Any) -> str:
    """The gpt turn as the Hermes agent writes it (reasoning block, content, one call block per
    call), from what was imported: equal to the row's value when nothing was lost or moved."""
    blocks = [
        "<tool_call>\n"
        + json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False)
        + "\n</tool_call>"
        for c in message.tool_calls
    ]
    body = message.content + ("\n" if message.content and blocks else "") + "\n".join(blocks)
    reasoning = f"<think>\n{message.reasoning}\n</think>\n" if message.reasoning else ""
    return (reasoning or "<think>\n</think>\n") + body


def test_real_rows__failures_are_counted_by_hermes_rule() -> None:
    (row,) = [r for n, _, r in rows() if n == "neurareport__failed_trajectories.jsonl"]
    trajectory = imported(row)
    calls = [c for m in trajectory.messages for c in m.tool_calls]
    assert len(calls) == 24 and len(trajectory.tools) == 43
    failed = [c for c in calls if c.result is not None and not c.result.success]
    assert len(failed) == 2
    assert all(result_failed(c.result.content) for c in failed if c.result is not None)
    assert sum(s.failure for s in trajectory.tool_stats.values()) == 2


def test_real_rows__text_hermes_never_escaped_stays_as_written() -> None:
    found = 0
    for name, _, row in rows():
        if name != "neurareport__prodo_failed_trajectories.jsonl":
            continue
        trajectory = imported(row)
        results = [c.result.content for m in trajectory.messages for c in m.tool_calls if c.result]
        found += sum(1 for text in results if "&amp;" in text)
    assert found > 0  # `&amp;` in real tool output is the tool's text, not an escape


def test_real_rows__rolltape_export_reads_back_to_the_same_export() -> None:
    for _, _, row in rows():
        first = sharegpt_row(imported(row))
        again = sharegpt_row(imported(first))
        assert again["conversations"] == first["conversations"]
        assert again["tool_stats"] == first["tool_stats"]
