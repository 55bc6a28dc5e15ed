"""Judge specs run by the judge runtime, through the real `openai` client over real HTTP to a
local server: a typed verdict comes back and the run is a session of its own; every way of not
getting one (no endpoint, the model failing, a reply that is not the verdict, a spent budget) is
an error verdict naming why, never a silent zero."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from rolltape.processors.judges import AnswerQuality, Transcript, TranscriptItem, answer_quality
from rolltape.producers import Recorder
from rolltape.producers.judging import JudgeRuntime
from rolltape.schemas import (
    AgentSpec,
    JudgeBudget,
    JudgeSpec,
    Verdict,
    VerdictError,
    parse_verdict,
)
from rolltape.schemas.clients import ModelEndpoint
from tests.support.openai_server import OpenAICompatibleServer, Reply, grade_by_answer
from tests.support.waiting import DEFAULT_TIMEOUT_S
from tests.unit.producers.recorded import spooled


def transcript(answer: str) -> Transcript:
    return Transcript(
        session_id="s1",
        task="What is 2+2?",
        items=[
            TranscriptItem(kind="turn", role="user", text="What is 2+2?"),
            TranscriptItem(kind="turn", role="assistant", text=answer),
        ],
        status="completed",
    )


def run(
    tmp_path: Path,
    spec: JudgeSpec,
    reply: Callable[[dict[str, Any]], Reply] = grade_by_answer,
    models: dict[str, str] | None = None,
) -> tuple[Verdict, list[dict[str, Any]], OpenAICompatibleServer]:
    """Run `spec` on session s1; (verdict, every envelope recorded, the server)."""
    recorder = Recorder(None, spool_dir=tmp_path / "spool", spool_after_s=0.0, principal="judge")
    with OpenAICompatibleServer(reply) as server:
        bound = {
            name: ModelEndpoint(base_url=server.base_url, model=model)
            for name, model in ({"grader": "local-grader"} if models is None else models).items()
        }

        async def go() -> Verdict:
            runtime = JudgeRuntime(recorder, bound)
            try:
                return await runtime.run(spec, "s1")
            finally:
                await runtime.aclose()

        verdict = asyncio.run(go())
    recorder.close(10)
    return verdict, spooled(tmp_path / "spool"), server


def test_a_null_judge__returns_the_typed_verdict_and_asks_for_structured_output(
    tmp_path: Path,
) -> None:
    spec = answer_quality(transcript("4"))
    verdict, _, server = run(tmp_path, spec)
    assert verdict.status == "ok" and verdict.judge == "llm:answer_quality"
    assert verdict.judge_version == "rolltape.judges.answer_quality/1"
    assert verdict.scores == {"score": 1.0, "passed": 1.0}
    assert verdict.details["verdict"]["rationale"] == "2+2 is 4"
    assert verdict.details["spec"] == spec.digest and verdict.details["harness"] == "null"
    request: dict[str, Any] = server.requests[-1]
    assert request["model"] == "local-grader" and request["temperature"] == 0
    schema = request["response_format"]["json_schema"]
    assert request["response_format"]["type"] == "json_schema" and schema["strict"] is True
    assert set(schema["schema"]["required"]) == {"score", "passed", "rationale"}
    assert request["messages"][-1]["content"].endswith("SESSION ENDED: completed")


def test_a_judge_run__is_a_session_of_its_own_untrainable_and_linked(tmp_path: Path) -> None:
    spec = answer_quality(transcript("4"))
    verdict, envelopes, _ = run(tmp_path, spec)
    assert {e["session_id"] for e in envelopes} == {verdict.judge_session_id}
    started = envelopes[0]["payload"]
    assert started["trainable"] is False and started["linked_session_id"] == "s1"
    assert started["tags"] == ["judge", "answer_quality"]
    assert started["run_config"]["judge"]["spec"] == spec.digest
    turns = [e["payload"] for e in envelopes if e["type"] == "turn"]
    assert [t["role"] for t in turns] == ["system", "user", "assistant"]
    ended = envelopes[-1]["payload"]
    reply = turns[-1]["content"].encode()
    assert ended["status"] == "completed" and ended["outcome"]["usage"]["total_tokens"] == 15
    assert ended["outcome"]["verdict_sha256"] == hashlib.sha256(reply).hexdigest()
    assert verdict.details["verdict_sha256"] == ended["outcome"]["verdict_sha256"]


def test_a_wrong_answer__gets_a_low_score_not_an_error(tmp_path: Path) -> None:
    verdict, _, _ = run(tmp_path, answer_quality(transcript("5")))
    assert verdict.status == "ok" and verdict.scores == {"score": 0.0, "passed": 0.0}


@pytest.mark.parametrize(
    ("answer", "cause"),
    [("garble", "not a verdict"), ("refuse", "refused"), ("crash", "endpoint failed")],
)
def test_no_verdict__is_an_error_verdict_naming_why_and_the_session_failed(
    tmp_path: Path, answer: str, cause: str
) -> None:
    verdict, envelopes, _ = run(tmp_path, answer_quality(transcript(answer)))
    assert verdict.status == "error" and verdict.scores == {}
    assert verdict.error is not None and cause in verdict.error
    assert envelopes[-1]["type"] == "session_ended"
    assert envelopes[-1]["payload"]["status"] == "failed"


def test_a_verdict_outside_its_schema__is_an_error(tmp_path: Path) -> None:
    reply = json.dumps({"score": 7, "passed": True, "rationale": "very good"})
    verdict, _, _ = run(tmp_path, answer_quality(transcript("4")), lambda body: reply)
    assert verdict.status == "error" and "AnswerQuality" in (verdict.error or "")


def test_a_fenced_reply__is_the_verdict_but_prose_around_it_is_not() -> None:
    body = json.dumps({"score": 1, "passed": True, "rationale": "ok"})
    assert parse_verdict(f"```json\n{body}\n```\n", AnswerQuality) == AnswerQuality(
        score=1, passed=True, rationale="ok"
    )
    assert parse_verdict(f"```\n{body}\n```", AnswerQuality).passed
    with pytest.raises(VerdictError, match="not one JSON object"):
        parse_verdict(f"Here is my verdict:\n```json\n{body}\n```", AnswerQuality)
    with pytest.raises(VerdictError, match="not an object"):
        parse_verdict("[1, 2]", AnswerQuality)


def test_a_judge_past_its_token_or_time_budget__is_an_error(tmp_path: Path) -> None:
    small = answer_quality(transcript("4")).model_copy(
        update={"agent": AgentSpec(budget=JudgeBudget(tokens=10))}
    )
    verdict, _, _ = run(tmp_path / "tokens", small)
    assert verdict.status == "error" and "over its budget of 10" in (verdict.error or "")

    given_up = threading.Event()

    def slow(body: dict[str, Any]) -> Reply:
        given_up.wait(DEFAULT_TIMEOUT_S)  # a model that answers only once the judge gave up
        return grade_by_answer(body)

    quick = answer_quality(transcript("4")).model_copy(
        update={"agent": AgentSpec(budget=JudgeBudget(seconds=0.3))}
    )
    try:
        verdict, _, _ = run(tmp_path / "time", quick, slow)
    finally:
        given_up.set()
    assert verdict.status == "error" and "past its budget of 0.3 s" in (verdict.error or "")


def test_a_logical_model_without_an_endpoint__is_an_error_naming_the_setting(
    tmp_path: Path,
) -> None:
    verdict, envelopes, _ = run(tmp_path, answer_quality(transcript("4")), models={})
    assert verdict.status == "error" and "ROLLTAPE_MODELS" in (verdict.error or "")
    assert envelopes == []  # nothing ran, so no judge session
    policy = answer_quality(transcript("4")).model_copy(update={"agent": AgentSpec(model="policy")})
    verdict, _, server = run(tmp_path / "p", policy, models={"policy": "the-policy"})
    assert verdict.status == "ok" and server.requests[-1]["model"] == "the-policy"


class Pass(BaseModel):
    passed: bool
    confidence: float
    why: str


def test_specs__are_never_trainable_and_derive_their_verdict_source() -> None:
    spec = JudgeSpec(name="fix", version="fix/1", prompt="Is it fixed?", verdict=Pass)
    assert spec.verdict_source == "reply"
    tools = spec.model_copy(update={"agent": AgentSpec(harness="tools")})
    assert tools.verdict_source == "file" and tools.digest != spec.digest
    assert spec.scores(Pass(passed=True, confidence=0.5, why="-")) == {
        "passed": 1.0,
        "confidence": 0.5,
    }
    with pytest.raises(ValidationError, match="never trainable"):
        JudgeSpec(
            name="fix", version="1", prompt="?", verdict=Pass, agent=AgentSpec(trainable=True)
        )
    with pytest.raises(ValidationError, match="name"):
        JudgeSpec(name="Not A Name", version="1", prompt="?", verdict=Pass)
