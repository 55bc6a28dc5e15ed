"""LLM judges: judges as agents (REFERENCE.md section 4).

A judge names a logical model ("grader"), builds its prompt from the session transcript and
declares a pydantic verdict model; the worker binds the logical name to an OpenAI-compatible
endpoint from configuration, never from judge code. One call with structured output through the
`openai` client; a missing, refused or invalid verdict is an error verdict, never a silent 0.
The judge's own conversation is returned so the worker can record it as a session of its own
(trainable=false, linked to the judged session): judge tokens never become training data.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rolltape.processors.judges._transcript import Transcript
from rolltape.schemas import Verdict
from rolltape.schemas.clients import ModelEndpoint
from rolltape.schemas.plugins import Registry


class LLMJudge(ABC):
    """The base of every LLM judge: an ABC, because judges share how a verdict becomes scores
    and the call settings. Subclass it, set `name`, `version` and `verdict_model` (and `model`,
    the logical model, if not "grader"), implement `messages` (and `scores` if the verdict
    model's numeric fields are not the scores), and register an instance with
    `register_llm_judge`."""

    name: ClassVar[str]
    version: ClassVar[str]
    model: ClassVar[str] = "grader"
    verdict_model: ClassVar[type[BaseModel]]
    temperature: ClassVar[float] = 0.0
    seed: ClassVar[int | None] = 0

    @abstractmethod
    def messages(self, transcript: Transcript) -> list[dict[str, str]]:
        """The chat messages that ask the model for a verdict on the transcript."""

    def scores(self, verdict: BaseModel) -> dict[str, float]:
        """The verdict's scores: its numeric fields, by default."""
        return {
            k: float(v)
            for k, v in verdict.model_dump().items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }


class AnswerQuality(BaseModel):
    """The built-in judge's verdict."""

    model_config = ConfigDict(extra="forbid")

    score: float = Field(ge=0, le=1, description="0 = wrong or unhelpful, 1 = correct and complete")
    passed: bool = Field(description="Would you accept this answer as correct?")
    rationale: str = Field(description="One or two sentences on why.")


class AnswerQualityJudge(LLMJudge):
    """The reference LLM judge: does the final answer solve the task, with the evidence."""

    name = "answer_quality"
    version = "rolltape.judges.answer_quality/1"
    verdict_model = AnswerQuality

    def messages(self, transcript: Transcript) -> list[dict[str, str]]:
        return [
            {
                "role": "system",
                "content": (
                    "You grade an AI assistant's work. Read the session and judge whether the "
                    "final answer correctly and completely solves the task, using the tool "
                    "results as evidence. Reply with the verdict object only."
                ),
            },
            {"role": "user", "content": transcript.render()},
        ]

    def scores(self, verdict: BaseModel) -> dict[str, float]:
        assert isinstance(verdict, AnswerQuality)
        return {"score": verdict.score, "passed": 1.0 if verdict.passed else 0.0}


LLM_JUDGES = Registry[LLMJudge]("LLM judge")
"""LLM judges by name, selectable in ROLLTAPE_LLM_JUDGES."""
LLM_JUDGES.register(AnswerQualityJudge.name, AnswerQualityJudge())


def register_llm_judge(judge: LLMJudge, *, replace: bool = False) -> None:
    """Make `judge` selectable by its name in ROLLTAPE_LLM_JUDGES (a plugin module calls this);
    a name that is taken is refused (`DuplicatePluginError`) unless `replace`."""
    LLM_JUDGES.register(judge.name, judge, replace=replace)


@dataclass
class JudgeRun:
    """One judge call: the verdict and the conversation that produced it."""

    verdict: Verdict
    messages: list[dict[str, str]]
    reply: str | None
    model: str
    usage: dict[str, int] = field(default_factory=dict)


async def run_llm_judge(
    judge: LLMJudge, transcript: Transcript, client: Any, endpoint: ModelEndpoint
) -> JudgeRun:
    """Call the judge's model once; every failure becomes an error verdict naming its cause.
    `client` is an `openai.AsyncOpenAI` bound to the endpoint."""
    import openai

    messages = judge.messages(transcript)
    name = f"llm:{judge.name}"

    def error(message: str, reply: str | None = None) -> JudgeRun:
        verdict = Verdict(judge=name, judge_version=judge.version, status="error", error=message)
        return JudgeRun(verdict, messages, reply, endpoint.model)

    try:
        completion = await client.chat.completions.parse(
            model=endpoint.model,
            messages=messages,
            response_format=judge.verdict_model,
            temperature=judge.temperature,
            seed=judge.seed,
        )
    except (openai.LengthFinishReasonError, openai.ContentFilterFinishReasonError) as exc:
        return error(f"the model stopped before a verdict: {type(exc).__name__}")
    except ValidationError as exc:
        return error(f"the reply is not a valid {judge.verdict_model.__name__}: {exc.errors()[:3]}")
    except openai.APIError as exc:
        return error(f"the model endpoint failed: {type(exc).__name__}: {exc}"[:500])
    except ValueError as exc:  # the reply was not JSON at all
        return error(f"the reply is not JSON: {exc}"[:500])
    if not completion.choices:
        return error("the reply has no choices")
    message = completion.choices[0].message
    reply = message.content
    if message.refusal:
        return error(f"the model refused: {message.refusal}"[:500], reply)
    if message.parsed is None:
        return error("the reply carries no verdict", reply)
    verdict = Verdict(
        judge=name,
        judge_version=judge.version,
        status="ok",
        scores=judge.scores(message.parsed),
        details={"verdict": message.parsed.model_dump(mode="json"), "model": completion.model},
    )
    usage = completion.usage.model_dump() if completion.usage else {}
    return JudgeRun(
        verdict,
        messages,
        reply,
        completion.model or endpoint.model,
        {k: v for k, v in usage.items() if isinstance(v, int)},
    )
