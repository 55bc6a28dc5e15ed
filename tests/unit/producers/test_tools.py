"""Tool recording: timed, success by the Hermes rule unless the tool says otherwise, exceptions
recorded and re-raised, results linked to the calls the model made."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from rolltape.producers import Recorder, current_session, record_tool
from rolltape.schemas import result_failed
from tests.unit.producers.recorded import Spooled


@pytest.mark.parametrize(
    ("content", "failed"),
    [
        ('{"error": "no such file"}', True),
        ('{"error": null, "output": "ok"}', False),
        ('{"success": false}', True),
        ('{"content": {"error": "denied"}}', True),
        ('{"exit_code": 1, "output": "grep found nothing"}', False),  # exit code alone: success
        ("", True),
        ("   ", True),
        ("Error: timed out", True),
        ("ERROR: boom", True),
        ("Unknown tool: foo", False),
        ("[1, 2]", False),
        ("plain text", False),
    ],
)
def test_result_failed__is_the_hermes_rule(content: str, failed: bool) -> None:
    assert result_failed(content) is failed


@record_tool
def read_file(path: str, limit: int = 10) -> dict[str, Any]:
    if path == "/missing":
        return {"error": "no such file"}
    return {"content": "hello", "limit": limit}


@record_tool(name="shell", success=lambda result: result["exit_code"] == 0)
def run_shell(command: str) -> dict[str, Any]:
    return {"exit_code": 0 if command == "true" else 1}


@record_tool
def explode(reason: str) -> str:
    raise RuntimeError(reason)


@record_tool
async def fetch(url: str) -> str:
    await asyncio.sleep(0)
    return f"<html>{url}</html>"


def events(spooled: Spooled) -> list[tuple[str, dict[str, Any]]]:
    return [(e["type"], e["payload"]) for e in spooled.envelopes() if e["type"].startswith("tool")]


def test_record_tool__records_call_result_duration_and_success_in_the_current_session(
    tmp_path: Path,
) -> None:
    spooled = Spooled(tmp_path)
    with spooled.agent.session("files") as s:
        assert current_session() is s
        assert read_file("/etc/hosts", limit=3) == {"content": "hello", "limit": 3}
        read_file("/missing")
        assert run_shell("false") == {"exit_code": 1}
        with pytest.raises(RuntimeError, match="disk on fire"):
            explode("disk on fire")
    assert current_session() is None
    recorded = events(spooled)
    calls = [p for t, p in recorded if t == "tool_call"]
    results = [p for t, p in recorded if t == "tool_result"]
    assert [(c["name"], c["arguments"]) for c in calls] == [
        ("read_file", {"path": "/etc/hosts", "limit": 3}),
        ("read_file", {"path": "/missing"}),
        ("shell", {"command": "false"}),
        ("explode", {"reason": "disk on fire"}),
    ]
    assert [r["call_id"] for r in results] == [c["id"] for c in calls]
    assert [r["success"] for r in results] == [True, False, False, False]
    assert json.loads(results[0]["content"]) == {"content": "hello", "limit": 3}
    assert results[3]["error"] == "RuntimeError: disk on fire"
    assert json.loads(results[3]["content"]) == {"error": "RuntimeError: disk on fire"}
    assert all(r["duration_ms"] >= 0 for r in results)


def test_record_tool__an_async_tool_is_recorded_in_the_session_of_its_task(tmp_path: Path) -> None:
    spooled = Spooled(tmp_path)

    async def agent() -> str:
        async with spooled.agent.session("web") as s:
            call_id = s.tool_call("fetch", {"url": "https://a"})  # the model's call, recorded
            page = await fetch("https://a")
            return call_id + " " + page

    call_id, _page = asyncio.run(agent()).split(" ", 1)
    recorded = events(spooled)
    assert [t for t, _ in recorded] == ["tool_call", "tool_result"]  # the call is not repeated
    assert recorded[1][1]["call_id"] == call_id and recorded[1][1]["success"] is True


def test_tool_run__links_to_the_oldest_open_call_with_the_same_name_and_arguments(
    tmp_path: Path,
) -> None:
    spooled = Spooled(tmp_path)
    with spooled.agent.session("parallel") as s:
        first = s.tool_call("read_file", {"path": "a"}, call_id="call_1")
        s.tool_call("read_file", {"path": "b"}, call_id="call_2")
        s.tool_call("read_file", {"path": "a"}, call_id="call_3")
        read_file("b")
        read_file("a")
        read_file("a")
        with s.tool("grep", {"q": "x"}, call_id="call_9") as run:
            run.result = "Error: pattern too long"
            run.success = True  # the tool knows better than the text rule
    results = [p for t, p in events(spooled) if t == "tool_result"]
    assert [r["call_id"] for r in results] == ["call_2", first, "call_3", "call_9"]
    assert results[-1]["success"] is True


def test_record_tool__outside_a_session_the_tool_just_runs(tmp_path: Path) -> None:
    recorder = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0)
    assert read_file("x") == {"content": "hello", "limit": 10}
    recorder.close()
