"""The LLM judge through the real `openai` client over real HTTP to a local server: a verdict
comes back typed, and every way of not getting one is an error verdict, never a silent zero."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from rolltape.processors.judges import (
    AnswerQualityJudge,
    JudgeRun,
    Transcript,
    TranscriptItem,
    run_llm_judge,
)
from rolltape.schemas.clients import ModelEndpoint
from tests.support.openai_server import OpenAICompatibleServer, grade_by_answer


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(grade_by_answer) as s:
        yield s


def judge(server: OpenAICompatibleServer, answer: str) -> JudgeRun:
    transcript = Transcript(
        session_id="s1",
        task="What is 2+2?",
        items=[
            TranscriptItem(kind="turn", role="user", text="What is 2+2?"),
            TranscriptItem(kind="turn", role="assistant", text=answer),
        ],
        status="completed",
    )
    endpoint = ModelEndpoint(base_url=server.base_url, model="local-grader")

    async def go() -> JudgeRun:
        client = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key="x", max_retries=0)
        try:
            return await run_llm_judge(AnswerQualityJudge(), transcript, client, endpoint)
        finally:
            await client.close()

    return asyncio.run(go())


def test_llm_judge__returns_the_typed_verdict_and_asks_for_structured_output(
    server: OpenAICompatibleServer,
) -> None:
    run = judge(server, "4")
    assert run.verdict.status == "ok" and run.verdict.judge == "llm:answer_quality"
    assert run.verdict.scores == {"score": 1.0, "passed": 1.0}
    assert run.verdict.details["verdict"]["rationale"] == "2+2 is 4"
    request: dict[str, Any] = server.requests[-1]
    assert request["model"] == "local-grader" and request["temperature"] == 0
    schema = request["response_format"]["json_schema"]
    assert request["response_format"]["type"] == "json_schema" and schema["strict"] is True
    assert set(schema["schema"]["required"]) == {"score", "passed", "rationale"}
    assert run.messages[-1]["content"].endswith("SESSION ENDED: completed")
    assert run.usage["total_tokens"] == 15


def test_llm_judge__a_wrong_answer_gets_a_low_score_not_an_error(
    server: OpenAICompatibleServer,
) -> None:
    run = judge(server, "5")
    assert run.verdict.status == "ok" and run.verdict.scores == {"score": 0.0, "passed": 0.0}


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        ("garble", "not"),
        ("refuse", "refused"),
        ("crash", "endpoint failed"),
    ],
)
def test_llm_judge__no_verdict_is_an_error_verdict_naming_why(
    server: OpenAICompatibleServer, answer: str, cause: str
) -> None:
    run = judge(server, answer)
    assert run.verdict.status == "error" and run.verdict.scores == {}
    assert run.verdict.error is not None and cause in run.verdict.error


def test_llm_judge__a_verdict_outside_its_schema_is_an_error() -> None:
    reply = json.dumps({"score": 7, "passed": True, "rationale": "very good"})
    with OpenAICompatibleServer(lambda body: reply) as server:
        run = judge(server, "4")
    assert run.verdict.status == "error" and "AnswerQuality" in (run.verdict.error or "")
