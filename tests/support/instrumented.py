"""Run the instrumented agent (instrumented_agent.py) against a receiver and a local
OpenAI-compatible server, and check the session it became field by field against what the
client sent and the server answered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.openai_server import Completion, OpenAICompatibleServer

AGENT = Path(__file__).with_name("instrumented_agent.py")
CALL_ID = "call_w1"
ANSWER = "Sunny in Paris."
RESULT = '{"sky": "sunny"}'


FOLLOW_UP = "Thanks! And tomorrow?"
FOLLOW_UP_ANSWER = "Sunny again tomorrow."


def weather_model(body: dict[str, Any]) -> Completion:
    """The model of the weather conversation: asks for the tool, then answers from its result;
    answers the follow-up question from what it knows."""
    if body["messages"][-1].get("content") == FOLLOW_UP:
        return Completion(content=FOLLOW_UP_ANSWER, prompt_token_ids=[0] * 80, token_ids=[0] * 4)
    if body["messages"][-1]["role"] == "tool":
        return Completion(content=ANSWER, prompt_token_ids=[0] * 60, token_ids=[0] * 5)
    return Completion(
        tool_calls=[(CALL_ID, "weather", '{"city": "Paris"}')],
        finish_reason="tool_calls",
        prompt_token_ids=[0] * 40,
        token_ids=[0] * 12,
    )


@contextmanager
def weather_server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(weather_model) as server:
        yield server


def run_agent(
    python: str,
    instrumentation: str,
    endpoint: str,
    openai_url: str,
    *,
    env: Mapping[str, str],
    transport: str = "http",
    order: str = "logs-first",
    batch: int = 512,
    more: tuple[str, ...] = (),
) -> str:
    """Run the agent once in its own process; its trace ids (space-separated when several)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENINFERENCE_"))}
    done = subprocess.run(
        [python, str(AGENT), "--instrumentation", instrumentation, "--endpoint", endpoint,
         "--transport", transport, "--openai-url", openai_url, "--order", order,
         "--batch", str(batch), *more],
        env={**clean, **env}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]


def python_of(venv: str) -> str:
    """The Python of an environment the test command made beside .venv, or this one's."""
    path = Path(venv) / "bin" / "python"
    return str(path) if path.exists() else sys.executable


CHECKED = (
    "task",
    "model",
    "system prompt",
    "user text",
    "tool call name",
    "tool call arguments",
    "tool call id",
    "first finish reason",
    "first prompt tokens",
    "first completion tokens",
    "tool result",
    "tool result call id",
    "answer text",
    "answer finish reason",
    "answer prompt tokens",
    "answer completion tokens",
)
"""The fields of the weather conversation a session must hold, each from what the client sent
or the server answered."""


def kept_fields(events: list[dict[str, Any]]) -> dict[str, bool]:
    """Which CHECKED fields the session recorded exactly (events: one session's, in order)."""
    payloads = [(e["type"], e["payload"]) for e in events]
    start = next((p for t, p in payloads if t == "session_started"), {})
    turns = [p for t, p in payloads if t == "turn"]
    system = [t for t in turns if t["role"] == "system"]
    user = [t for t in turns if t["role"] == "user"]
    replies = [t for t in turns if t["role"] == "assistant"]
    calls = [p for t, p in payloads if t == "tool_call"]
    results = [p for t, p in payloads if t == "tool_result"]
    first = replies[0] if replies else {}
    answer = replies[1] if len(replies) > 1 else {}
    call = calls[0] if calls else {}
    result = results[0] if results else {}
    return {
        "task": start.get("task") == "Weather in Paris?",
        "model": (start.get("model") or "").startswith("qwen3"),
        "system prompt": [t["content"] for t in system] == ["You are a weather bot."],
        "user text": [t["content"] for t in user] == ["Weather in Paris?"],
        "tool call name": call.get("name") == "weather",
        "tool call arguments": call.get("arguments") == {"city": "Paris"},
        "tool call id": call.get("id") == CALL_ID,
        "first finish reason": first.get("finish_reason") == "tool_calls",
        "first prompt tokens": first.get("prompt_tokens") == 40,
        "first completion tokens": first.get("completion_tokens") == 12,
        "tool result": _json(result.get("content")) == json.loads(RESULT),
        "tool result call id": result.get("call_id") == CALL_ID,
        "answer text": answer.get("content") == ANSWER,
        "answer finish reason": answer.get("finish_reason") == "stop",
        "answer prompt tokens": answer.get("prompt_tokens") == 60,
        "answer completion tokens": answer.get("completion_tokens") == 5,
    }


def conversation(events: list[dict[str, Any]]) -> list[str]:
    """The session's conversation events, each once: what "recorded whole, no duplicates" is
    checked against."""
    out = []
    for e in events:
        if e["type"] == "turn":
            out.append(f"turn:{e['payload']['role']}")
        elif e["type"] in ("tool_call", "tool_result", "model_error"):
            out.append(e["type"])
    return out


WHOLE = ["turn:system", "turn:user", "turn:assistant", "tool_call", "tool_result", "turn:assistant"]


def _json(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
