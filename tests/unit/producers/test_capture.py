"""OpenAI client capture over real HTTP against the local OpenAI-compatible server: plain and
streamed, sync and async, tool calls, token ids and logprobs, a 500, a server that hangs up
mid-stream; the caller always gets what the bare client gives."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from rolltape.producers import record_tool
from rolltape.producers.capture import capture
from tests.support.openai_server import Completion, OpenAICompatibleServer
from tests.unit.producers.recorded import Spooled

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CALLS = Completion(
    content="Checking both.",
    reasoning_content="two cities, two calls",
    tool_calls=[
        ("call_a", "weather", '{"city": "Paris"}'),
        ("call_b", "weather", '{"city": "Oslo"}'),
    ],
    finish_reason="tool_calls",
    token_ids=[11, 12, 13, 14, 15, 16],
    prompt_token_ids=[1, 2, 3, 4],
    logprobs=[-0.1, -0.2, -0.3, -0.4, -0.5, -0.6],
)
ANSWER = Completion(
    content="Paris is sunny, Oslo is cold.",
    token_ids=[21, 22, 23],
    prompt_token_ids=[1, 2, 3, 4, 11, 12, 13, 14, 15, 16, 7, 8],
    logprobs=[-0.01, -0.02, -0.03],
)


def scripted(body: dict[str, Any]) -> Any:
    last = body["messages"][-1]
    if "crash" in str(last.get("content")):
        return (500, "the model fell over")
    if "hang up" in str(last.get("content")):
        return Completion(content="partial answer that never ends", hang_up_after=4)
    if "text calls" in str(last.get("content")):
        return Completion(
            content='<think>use the tool</think>Sure.<tool_call>{"name": "weather", '
            '"arguments": {"city": "Rome"}}</tool_call><tool_call>{oops</tool_call>'
        )
    return ANSWER if last.get("role") == "tool" else CALLS


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(scripted) as running:
        yield running


@record_tool
def weather(city: str) -> dict[str, str]:
    return {"city": city, "sky": "sunny" if city == "Paris" else "cold"}


def client(server: OpenAICompatibleServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0)


def aclient(server: OpenAICompatibleServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key="local", max_retries=0)


ASK = [
    {"role": "system", "content": "You answer about weather."},
    {"role": "user", "content": "Weather in Paris and Oslo?"},
]
VLLM = {"extra_body": {"return_token_ids": True}, "logprobs": True}


def recorded(spooled: Spooled) -> list[tuple[str, dict[str, Any]]]:
    return [(e["type"], e["payload"]) for e in spooled.envelopes() if e["stream"] == "events"][1:-1]


def agent_loop(llm: openai.OpenAI, **options: Any) -> list[str]:
    """A plain agent loop: ask, run the tools the model called, ask again."""
    messages: list[Any] = list(ASK)
    reply = llm.chat.completions.create(
        model="m", messages=messages, tools=TOOLS, **VLLM, **options
    )
    if options.get("stream"):
        chunks = list(reply)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return [text]
    message = reply.choices[0].message
    messages.append(message)
    for call in message.tool_calls or []:
        result = weather(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    final = llm.chat.completions.create(model="m", messages=messages, tools=TOOLS, **VLLM)
    return [message.content or "", final.choices[0].message.content or ""]


def test_capture__records_the_conversation_once_with_ids_token_ids_and_logprobs(
    server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    spooled = Spooled(tmp_path)
    bare = agent_loop(client(server))
    with spooled.agent.session("weather") as s:
        captured = s.capture(client(server), model_version="gen-3")
        assert isinstance(captured, openai.OpenAI)
        assert agent_loop(captured) == bare  # the caller gets what the bare client gives
    events = recorded(spooled)
    assert [t for t, _ in events] == [
        "turn",
        "turn",
        "turn",
        "tool_call",
        "tool_call",
        "tool_result",
        "tool_result",
        "turn",
    ]
    system, user, first = (p for _, p in events[:3])
    assert (system["role"], user["role"]) == ("system", "user")
    assert first["content"] == "Checking both." and first["reasoning"] == "two cities, two calls"
    assert first["token_ids"] == [11, 12, 13, 14, 15, 16]
    assert first["prompt_token_ids"] == [1, 2, 3, 4]
    assert first["logprobs"] == [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6]
    assert first["finish_reason"] == "tool_calls" and first["model"] == "m"
    assert first["model_version"] == "gen-3"  # the version the model table names
    assert first["prompt_tokens"] == 4 and first["completion_tokens"] == 6
    assert first["latency_ms"] > 0
    calls = [p for t, p in events if t == "tool_call"]
    assert [(c["id"], c["arguments"]) for c in calls] == [
        ("call_a", {"city": "Paris"}),
        ("call_b", {"city": "Oslo"}),
    ]
    results = [p for t, p in events if t == "tool_result"]
    assert [r["call_id"] for r in results] == ["call_a", "call_b"]  # run by record_tool, once
    assert events[-1][1]["content"] == "Paris is sunny, Oslo is cold."


def test_capture__a_streamed_reply_is_recorded_as_the_same_turn(
    server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    plain, streamed = Spooled(tmp_path / "plain"), Spooled(tmp_path / "streamed")
    with plain.agent.session("weather") as s:
        s.capture(client(server)).chat.completions.create(
            model="m", messages=ASK, tools=TOOLS, **VLLM
        )
    bare_chunks = list(
        client(server).chat.completions.create(
            model="m", messages=ASK, tools=TOOLS, stream=True, **VLLM
        )
    )
    with streamed.agent.session("weather") as s:
        stream = s.capture(client(server)).chat.completions.create(
            model="m", messages=ASK, tools=TOOLS, stream=True, **VLLM
        )
        chunks = list(stream)
    assert [c.model_dump(exclude={"created"}) for c in chunks] == [
        c.model_dump(exclude={"created"}) for c in bare_chunks
    ]

    def comparable(events: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        return [
            (
                t,
                {
                    k: v
                    for k, v in p.items()
                    if k not in ("latency_ms", "prompt_tokens", "completion_tokens")
                },
            )
            for t, p in events
        ]

    assert comparable(recorded(streamed)) == comparable(recorded(plain))


def test_capture__async_client_plain_and_streamed(
    server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    spooled = Spooled(tmp_path)

    async def run() -> None:
        async with spooled.agent.session("weather") as s:
            llm = s.capture(aclient(server))
            assert isinstance(llm, openai.AsyncOpenAI)
            await llm.chat.completions.create(model="m", messages=ASK, tools=TOOLS, **VLLM)
        async with spooled.agent.session("weather again") as s:
            llm = s.capture(aclient(server))
            stream = await llm.chat.completions.create(
                model="m", messages=ASK, stream=True, tools=TOOLS, **VLLM
            )
            async with stream:
                async for _ in stream:
                    pass

    asyncio.run(run())
    envelopes = spooled.envelopes()
    assistant = [
        e["payload"]
        for e in envelopes
        if e["type"] == "turn" and e["payload"]["role"] == "assistant"
    ]
    assert len(assistant) == 2
    assert all(a["token_ids"] == [11, 12, 13, 14, 15, 16] for a in assistant)
    assert sum(1 for e in envelopes if e["type"] == "tool_call") == 4


def test_capture__a_failed_call_is_recorded_and_raised_unchanged(
    server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    spooled = Spooled(tmp_path)
    crash = [{"role": "user", "content": "please crash"}]
    with pytest.raises(openai.InternalServerError) as bare:
        client(server).chat.completions.create(model="m", messages=crash)
    with spooled.agent.session("crash") as s, pytest.raises(openai.InternalServerError) as caught:
        s.capture(client(server)).chat.completions.create(model="m", messages=crash)
    assert caught.value.status_code == bare.value.status_code == 500
    assert str(caught.value) == str(bare.value)
    (error,) = [p for t, p in recorded(spooled) if t == "model_error"]
    assert error["status"] == 500 and error["error_type"] == "InternalServerError"
    assert "fell over" in error["message"] and error["model"] == "m"


def test_capture__a_server_hanging_up_mid_stream_is_recorded_with_what_arrived(
    server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    spooled = Spooled(tmp_path)
    hang = [{"role": "user", "content": "hang up on me"}]
    # What the bare client raises depends on the openai version (APIConnectionError; httpx's
    # RemoteProtocolError from the stream in 2.54): the captured one raises the same.
    with pytest.raises((openai.APIConnectionError, httpx.TransportError)) as bare:
        list(client(server).chat.completions.create(model="m", messages=hang, stream=True))
    with spooled.agent.session("hang") as s, pytest.raises(type(bare.value)) as caught:
        list(
            s.capture(client(server)).chat.completions.create(model="m", messages=hang, stream=True)
        )
    assert type(caught.value) is type(bare.value)
    events = recorded(spooled)
    assert [t for t, _ in events] == ["turn", "model_error"]
    error = events[1][1]
    assert error["status"] is None and error["partial_content"] == "partial answ"


def test_capture__text_tool_calls_are_parsed_by_family_and_bad_blocks_recorded(
    server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    spooled = Spooled(tmp_path)
    with spooled.agent.session("text") as s:
        llm = s.capture(client(server), family="hermes")
        llm.chat.completions.create(model="m", messages=[{"role": "user", "content": "text calls"}])
    events = recorded(spooled)
    assert [t for t, _ in events] == ["turn", "turn", "tool_call", "tool_parse_error"]
    turn, call, problem = events[1][1], events[2][1], events[3][1]
    assert (turn["content"], turn["reasoning"]) == ("Sure.", "use the tool")
    assert call["name"] == "weather" and call["arguments"] == {"city": "Rome"}
    assert call["id"].startswith("call_")
    assert problem["family"] == "hermes" and problem["raw"] == "<tool_call>{oops</tool_call>"


def test_capture__follows_the_current_session(
    server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    spooled = Spooled(tmp_path)
    llm = capture(client(server))  # once, for every session
    llm.chat.completions.create(model="m", messages=ASK)  # no session: not recorded
    with spooled.agent.session("one"):
        llm.chat.completions.create(model="m", messages=ASK)
    with spooled.agent.session("two"):
        llm.chat.completions.create(model="m", messages=ASK[1:])
    envelopes = spooled.envelopes()
    started = {
        e["session_id"]: e["payload"]["task"] for e in envelopes if e["type"] == "session_started"
    }
    turns = [
        (started[e["session_id"]], e["payload"]["role"]) for e in envelopes if e["type"] == "turn"
    ]
    assert turns == [
        ("one", "system"),
        ("one", "user"),
        ("one", "assistant"),
        ("two", "user"),
        ("two", "assistant"),
    ]


def test_capture__a_recording_error_never_reaches_the_agent(
    server: OpenAICompatibleServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from rolltape.producers.capture._conversation import Conversation
    from rolltape.producers.capture._reply import Reply, StreamAssembler

    def broken(*args: Any) -> None:
        raise RuntimeError("recorder bug")

    monkeypatch.setattr(Conversation, "reply", broken)
    monkeypatch.setattr(Conversation, "request", broken)
    monkeypatch.setattr(Reply, "from_completion", broken)
    monkeypatch.setattr(StreamAssembler, "add", broken)
    monkeypatch.setattr(StreamAssembler, "result", broken)
    spooled = Spooled(tmp_path)
    with spooled.agent.session("one") as s:
        llm = s.capture(client(server))
        reply = llm.chat.completions.create(model="m", messages=ASK)
        chunks = list(llm.chat.completions.create(model="m", messages=ASK, stream=True))
    assert reply.choices[0].message.content == "Checking both."
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Checking both."
    assert "recorder bug" in caplog.text and "the call itself is unaffected" in caplog.text


def test_capture__the_atropos_export_uses_the_token_ids_the_server_sampled(
    server: OpenAICompatibleServer, tmp_path: Path
) -> None:
    from rolltape.projections import fold
    from rolltape.projections.exporters import atropos_groups

    spooled = Spooled(tmp_path)
    sessions = []
    for reward in (1.0, 0.0):
        with spooled.agent.session("weather", group_id="g1") as s:
            agent_loop(s.capture(client(server)))
            s.reward(reward)
            sessions.append(s.session_id)
    events = spooled.events()
    trajectories = [fold([e for e in events if e.session_id == sid]) for sid in sessions]
    export = atropos_groups(trajectories)  # no tokenizer: the recorded ids are enough
    assert export.skipped == []
    ((_, _, line),) = export.groups
    prompt, first, second = [1, 2, 3, 4], [11, 12, 13, 14, 15, 16], [21, 22, 23]
    assert line["tokens"][0] == [*prompt, *first, 7, 8, *second]
    assert line["masks"][0] == [-100] * 4 + first + [-100, -100] + second
    assert line["masks"][1] == line["masks"][0] and sorted(line["scores"]) == [0.0, 1.0]


def test_bench_capture__runs_at_a_small_size_and_times_both_clients() -> None:
    from rolltape.infra.bench.capture import run_capture_bench

    figures = run_capture_bench(calls=16, turns_per_session=4)
    assert figures.calls_each == 16
    assert 0 < figures.bare_p50_us <= figures.bare_p99_us
    assert 0 < figures.captured_p50_us <= figures.captured_p99_us
    assert figures.code_alone_p50_us > 0
