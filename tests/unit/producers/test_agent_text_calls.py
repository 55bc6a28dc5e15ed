"""The reference agent against servers that return tool calls as text, over real HTTP: for every
model family, the local OpenAI-compatible server answers with that family's text (a case of the
conformance table whose calls the reference parser returns), the agent parses it with the
family's parser, runs the calls under the ids the capture recorded, and sends the results back;
a block it cannot read is recorded as a `tool_parse_error` and costs only itself."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rolltape.producers import Recorder
from rolltape.producers.agent import Tool, run_agent
from rolltape.producers.parsing import ALIASES, FAMILIES
from rolltape.schemas import ToolSpec
from rolltape.schemas.clients import ModelEndpoint
from tests.support.openai_server import Completion, OpenAICompatibleServer, Reply
from tests.unit.producers.recorded import spooled
from tests.unit.producers.test_parser_conformance import calling_cases

TEXT_FAMILIES = sorted(f for f in FAMILIES if f not in ALIASES)


def _run(
    tmp_path: Path, family: str, text: str, specs: list[ToolSpec]
) -> tuple[Any, list[tuple[str, dict[str, Any]]], list[dict[str, Any]], list[dict[str, Any]]]:
    requests: list[dict[str, Any]] = []

    def reply(body: dict[str, Any]) -> Reply:
        requests.append(body)
        return text if len(body["messages"]) == 1 else "All done."

    result, ran, envelopes = _run_replies(tmp_path, reply, specs, family)
    return result, ran, requests, envelopes


def _run_replies(
    tmp_path: Path,
    reply: Callable[[dict[str, Any]], Reply],
    specs: list[ToolSpec],
    family: str | None = "hermes",
) -> tuple[Any, list[tuple[str, dict[str, Any]]], list[dict[str, Any]]]:
    """Run the agent against a local server answering with `reply`: (its result, the tool runs,
    the recorded envelopes)."""
    ran: list[tuple[str, dict[str, Any]]] = []

    def tool(spec: ToolSpec) -> Tool:
        def fn(**arguments: Any) -> str:
            ran.append((spec.name, arguments))
            return f"ok {spec.name}"

        return Tool(spec=spec, fn=fn)

    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0, principal="agent")
    with OpenAICompatibleServer(reply) as server:
        endpoint = ModelEndpoint(base_url=server.base_url, model="local")

        async def main() -> Any:
            with recorder.session("use the tools", session_id="s1") as session:
                client = session.capture(endpoint.async_client(), family=family)
                try:
                    return await run_agent(
                        client,
                        "local",
                        "use the tools",
                        [tool(spec) for spec in specs],
                        session=session,
                        family=family,
                    )
                finally:
                    await client.close()

        result = asyncio.run(main())
    recorder.close(10)
    return result, ran, spooled(tmp_path / "spool")


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_run_agent__runs_the_calls_a_family_writes_as_text(tmp_path: Path, family: str) -> None:
    case = calling_cases().get(family)
    assert case is not None, f"no conformance case of {family} makes a call"
    expected = [(c["name"], c.get("arguments", {})) for c in case["expected"]]
    declared = {t["name"]: t for t in case.get("tools", [])}
    specs = [
        ToolSpec.model_validate(declared.get(name, {"name": name}))
        for name in dict.fromkeys(name for name, _ in expected)
    ]
    result, ran, requests, envelopes = _run(tmp_path, family, case["text"], specs)
    assert ran == expected
    assert (result.stop, result.tool_calls, result.tool_errors) == ("answered", len(expected), 0)
    recorded = [e["payload"] for e in envelopes if e["type"] == "tool_call"]
    assert [(c["name"], c["arguments"]) for c in recorded] == expected  # once each, not twice
    answered = [e["payload"]["call_id"] for e in envelopes if e["type"] == "tool_result"]
    assert answered == [c["id"] for c in recorded]
    echoed = requests[1]["messages"]
    assert echoed[1] == {"role": "assistant", "content": case["text"]}
    assert [m["tool_call_id"] for m in echoed[2:]] == answered


def test_run_agent__an_unreadable_block_is_recorded_and_costs_only_itself(tmp_path: Path) -> None:
    text = (
        "Reading both.\n"
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "read_file", "arguments": {"path": \n</tool_call>'
    )
    spec = ToolSpec(name="read_file", parameters={"type": "object"})
    result, ran, requests, envelopes = _run(tmp_path, "hermes", text, [spec])
    assert ran == [("read_file", {"path": "a.txt"})]
    assert (result.stop, result.tool_calls, result.tool_errors) == ("answered", 1, 1)
    told = requests[1]["messages"][-1]  # after the good call's result
    assert told["role"] == "user" and "could not be read" in told["content"]
    (problem,) = [e["payload"] for e in envelopes if e["type"] == "tool_parse_error"]
    assert problem["family"] == "hermes" and '"path": ' in problem["raw"]
    turns = [e["payload"] for e in envelopes if e["type"] == "turn"]
    assert turns[1]["role"] == "assistant" and turns[1]["content"] == "Reading both."


def test_run_agent__a_reply_whose_only_call_is_unreadable_is_told_why_and_tries_again(
    tmp_path: Path,
) -> None:
    broken = '<tool_call>\n{"name": "read_file", "arguments": {"path": \n</tool_call>'
    fixed = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call>'
    spec = ToolSpec(name="read_file", parameters={"type": "object"})
    replies = iter([broken, fixed, "Read it."])
    seen: list[list[dict[str, Any]]] = []

    def reply(body: dict[str, Any]) -> Reply:
        seen.append(body["messages"])
        return next(replies)

    result, ran, envelopes = _run_replies(tmp_path, reply, [spec])
    assert ran == [("read_file", {"path": "a.txt"})]
    assert (result.stop, result.iterations, result.tool_calls, result.tool_errors) == (
        "answered",
        3,
        1,
        1,
    )
    told = seen[1][-1]
    assert told["role"] == "user" and told["content"].startswith("error: your tool call could")
    assert [e["type"] for e in envelopes].count("tool_parse_error") == 1


def test_run_agent__a_structured_call_without_an_id_runs_under_the_captured_id(
    tmp_path: Path,
) -> None:
    spec = ToolSpec(name="read_file", parameters={"type": "object"})
    replies = iter([Completion(tool_calls=[("", "read_file", '{"path": "a.txt"}')]), "Read it."])
    result, ran, envelopes = _run_replies(tmp_path, lambda body: next(replies), [spec], None)
    assert ran == [("read_file", {"path": "a.txt"})] and result.tool_errors == 0
    (call,) = [e["payload"] for e in envelopes if e["type"] == "tool_call"]
    (answer,) = [e["payload"] for e in envelopes if e["type"] == "tool_result"]
    assert answer["call_id"] == call["id"]
