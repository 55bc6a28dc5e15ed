"""Judges the worker runs on finished agent sessions: judges as agents (docs/judges.md).

A judge is another agent (a harness and a logical model) whose verdict is a typed object, as in
the v1 judge design of PrimeIntellect's verifiers (PrimeIntellect-ai/verifiers, PR #1910).

A judge is registered once, by name, with its version and a hook that makes its spec for one
session from the session's transcript (`JudgeSpec`: criteria already rendered into the prompt,
a pydantic verdict, the agent that runs it). The hook may return None when there is nothing to
judge (conditional judging: a programmatic check already settles the grade). The spec names a
logical model ("grader"); configuration binds it to an endpoint (ROLLTAPE_MODELS), never judge
code. Running specs (and recording each run as a session of its own) is the judge runtime's
work (rolltape.producers.judging), wired into the worker and replay by rolltape.infra.

This is the one judge API: the built-in `answer_quality` judge is a null-harness spec like any
plugin's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from rolltape.processors.judges._transcript import Transcript
from rolltape.schemas import AgentSpec, JudgeSpec
from rolltape.schemas.plugins import Registry


@dataclass(frozen=True)
class Judge:
    """A judge the worker can run: `specs` makes its spec for one session (None: not needed).
    `model` is the logical model its specs name, checked against ROLLTAPE_MODELS when the worker
    starts."""

    name: str
    version: str
    specs: Callable[[Transcript], JudgeSpec | None]
    model: str = "grader"


class AnswerQuality(BaseModel):
    """The built-in judge's verdict."""

    model_config = ConfigDict(extra="forbid")

    score: float = Field(ge=0, le=1, description="0 = wrong or unhelpful, 1 = correct and complete")
    passed: bool = Field(description="Would you accept this answer as correct?")
    rationale: str = Field(description="One or two sentences on why.")


ANSWER_QUALITY_VERSION = "rolltape.judges.answer_quality/1"


def answer_quality(transcript: Transcript) -> JudgeSpec:
    """The reference judge: does the final answer solve the task, with the evidence."""
    return JudgeSpec(
        name="answer_quality",
        version=ANSWER_QUALITY_VERSION,
        prompt=(
            "Grade an AI assistant's work. Read the session below and judge whether the final "
            "answer correctly and completely solves the task, using the tool results as "
            f"evidence.\n\n{transcript.render()}"
        ),
        verdict=AnswerQuality,
        agent=AgentSpec(harness="null", model="grader"),
    )


JUDGES = Registry[Judge]("judge")
"""Judges by name, selectable in ROLLTAPE_LLM_JUDGES."""
JUDGES.register("answer_quality", Judge("answer_quality", ANSWER_QUALITY_VERSION, answer_quality))


def register_judge(judge: Judge, *, replace: bool = False) -> None:
    """Make `judge` selectable by its name in ROLLTAPE_LLM_JUDGES (a plugin module calls this);
    a name that is taken is refused (`DuplicatePluginError`) unless `replace`."""
    JUDGES.register(judge.name, judge, replace=replace)
