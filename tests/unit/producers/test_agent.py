"""The reference agent over real HTTP: tools run in the workdir and are recorded linked to the
model's calls, tool errors go back to the model, and iterations are bounded."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from rolltape.producers import Recorder
from rolltape.producers.agent import file_tools, run_agent, tools_for
from rolltape.schemas.clients import ModelEndpoint
from tests.support.openai_server import Completion, OpenAICompatibleServer, Reply
from tests.unit.producers.recorded import spooled


def _fixer(body: dict[str, Any]) -> Reply:
    """Reads the file, writes a broken call, calls a tool it does not have, then fixes it."""
    done = [m for m in body["messages"] if m["role"] == "tool"]
    step = len(done)
    if step == 0:
        return Completion(tool_calls=[("c1", "read_file", json.dumps({"path": "calc.py"}))])
    if step == 1:
        return Completion(tool_calls=[("c2", "write_file", "{not json")])
    if step == 2:
        return Completion(tool_calls=[("c3", "run_shell", json.dumps({"cmd": "rm -rf /"}))])
    if step == 3:
        fixed = done[0]["content"].replace("a - b", "a + b")
        args = json.dumps({"path": "calc.py", "content": fixed})
        return Completion(tool_calls=[("c4", "write_file", args)])
    return Completion(content="Fixed add(): it subtracted.")


def _run(tmp_path: Path, reply: Any, max_iterations: int = 10) -> tuple[Any, list[Any], Path]:
    work = tmp_path / "work"
    work.mkdir()
    (work / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0, principal="agent")
    with OpenAICompatibleServer(reply) as server:
        endpoint = ModelEndpoint(base_url=server.base_url, model="local")

        async def main() -> Any:
            with recorder.session("fix calc.py", session_id="s1") as session:
                client = session.capture(endpoint.async_client())
                try:
                    return await run_agent(
                        client,
                        "local",
                        "add() is wrong; fix calc.py",
                        file_tools(work),
                        session=session,
                        max_iterations=max_iterations,
                    )
                finally:
                    await client.close()

        result = asyncio.run(main())
        requests = server.requests
    recorder.close(10)
    return result, requests, work


def test_run_agent__edits_the_workdir_and_feeds_tool_errors_back(tmp_path: Path) -> None:
    result, requests, work = _run(tmp_path, _fixer)
    assert (work / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert (result.stop, result.iterations, result.tool_calls, result.tool_errors) == (
        "answered",
        5,
        4,
        2,
    )
    assert result.final == "Fixed add(): it subtracted."
    fed_back = [m["content"] for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert fed_back[1].startswith("error: the arguments of write_file are not a JSON object")
    assert fed_back[2] == (
        "error: there is no tool 'run_shell' (tools: list_files, read_file, write_file)"
    )
    assert [t["function"]["name"] for t in requests[0]["tools"]] == [
        "list_files",
        "read_file",
        "write_file",
    ]
    envelopes = spooled(tmp_path / "spool")
    results = [e["payload"] for e in envelopes if e["type"] == "tool_result"]
    calls = {
        e["payload"]["id"]: e["payload"]["name"] for e in envelopes if e["type"] == "tool_call"
    }
    assert [(calls[r["call_id"]], r["success"]) for r in results] == [
        ("read_file", True),
        ("write_file", False),
        ("run_shell", False),
        ("write_file", True),
    ]
    assert [e["type"] for e in envelopes].count("turn") >= 6  # user + 5 replies


def test_run_agent__stops_after_max_iterations(tmp_path: Path) -> None:
    def forever(body: dict[str, Any]) -> Reply:
        return Completion(tool_calls=[(f"c{len(body['messages'])}", "list_files", "{}")])

    result, requests, _ = _run(tmp_path, forever, max_iterations=3)
    assert (result.stop, result.iterations, result.tool_calls) == ("max_iterations", 3, 3)
    assert len(requests) == 3


def test_file_tools__refuse_paths_outside_the_workdir(tmp_path: Path) -> None:
    [_, read, _] = file_tools(tmp_path)
    with pytest.raises(PermissionError, match="outside the working directory"):
        asyncio.run(read({"path": "../../etc/passwd"}))


def test_tools_for__an_unknown_skill_names_the_registered_toolsets(tmp_path: Path) -> None:
    assert [t.name for t in tools_for(["files"], tmp_path)] == [
        "list_files",
        "read_file",
        "write_file",
    ]
    with pytest.raises(ValueError, match="unknown skill 'wecom': registered toolsets are files"):
        tools_for(["wecom"], tmp_path)
