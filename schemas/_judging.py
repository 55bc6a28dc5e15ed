"""Judges as agents (docs/contracts.md, judges as agents): who a judge is and what it must return.

The design is that of PrimeIntellect's verifiers v1 (PrimeIntellect-ai/verifiers, PR #1910:
`AgentSpec`, `JudgeSpec`, judge tokens never trainable, no silent 0 for a missing verdict).

A judge is an agent spec (harness, logical model, placement, budget, never trainable) with a
typed verdict. The `null` harness is the single-call judge: no tools, its evidence rides in its
prompt and its final reply is the verdict. The `tools` harness is an agent loop with file and
shell tools that grades inside the world the policy left, and writes its verdict to
`verdict.json`. Where the verdict comes from is derived from the harness, never a fallback: a
tools judge that writes no file is an error, not re-read from its prose.

A spec's `prompt` is already rendered: the hook that makes specs receives the task and the trace
(an f-string, no template language). So a spec is per judged session; its `version` names the
judge (the hook's code and criteria) and its `digest` the exact spec a verdict came from.

Here, at the bottom of the dependency order, because the worker (processors) and the runners of
environments (producers) both hold specs, and neither may import the other.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rolltape.schemas._canonical import canonical_bytes
from rolltape.schemas._errors import SchemaError

Harness = Literal["null", "tools"]
Placement = Literal["rollout", "clean_room"]
VerdictSource = Literal["reply", "file"]
POLICY_MODEL: Final = "policy"
"""The logical model name reserved for the rollout's own model: a judge naming it judges with
the policy's endpoint, so self-judging is a deliberate one-word choice."""
JUDGE_NAME_PATTERN: Final = r"^[a-z0-9][a-z0-9_-]{0,63}$"
VERDICT_FILE: Final = "verdict.json"


class JudgeBudget(BaseModel):
    """What one judge run may spend, checked between turns (a turn is one model call): past a
    limit the run stops with an error verdict."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turns: int = Field(default=12, ge=1)
    tokens: int = Field(default=200_000, ge=1)
    """Prompt and completion tokens over all its calls, as the server reported them."""
    seconds: float = Field(default=300.0, gt=0)
    """Wall-clock time of the whole run, tool calls included."""


class AgentSpec(BaseModel):
    """Who an agent is: harness, logical model (bound to an endpoint by ROLLTAPE_MODELS, never
    by judge code), placement, budget, and whether its tokens may become training data."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    harness: Harness = "null"
    model: str = Field(default="grader", min_length=1)
    placement: Placement = "rollout"
    """Where a tools judge runs: `rollout`, in the live workdir after the policy finished (judges
    sharing it run one after another); `clean_room`, in a fresh copy of the recorded world (run
    concurrently). A null judge touches no world."""
    budget: JudgeBudget = JudgeBudget()
    trainable: bool = False
    temperature: float = Field(default=0.0, ge=0)
    seed: int | None = 0
    """Sampling settings of its calls: greedy and seeded, so a deterministic server gives the
    same verdict on replay."""


class JudgeSpec(BaseModel):
    """One judge on one session: criteria already rendered into `prompt`, the verdict's model,
    and the agent that runs it."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(pattern=JUDGE_NAME_PATTERN)
    version: str = Field(min_length=1, max_length=100)
    """The judge's version (its code and criteria), chained with every verdict it gives."""
    prompt: str = Field(min_length=1)
    verdict: type[BaseModel]
    agent: AgentSpec = AgentSpec()

    @field_validator("agent")
    @classmethod
    def _never_trainable(cls, agent: AgentSpec) -> AgentSpec:
        if agent.trainable:
            raise ValueError("a judge is never trainable: its tokens must not become training data")
        return agent

    @property
    def verdict_source(self) -> VerdictSource:
        """`reply` for the null harness, `file` (verdict.json) for the tools harness."""
        return "reply" if self.agent.harness == "null" else "file"

    @property
    def verdict_schema(self) -> dict[str, Any]:
        return self.verdict.model_json_schema()

    @property
    def digest(self) -> str:
        """sha256 of the whole spec (rendered prompt, verdict schema, agent): the exact judge a
        verdict came from, recorded with it."""
        spec = {
            "name": self.name,
            "version": self.version,
            "prompt": self.prompt,
            "verdict": self.verdict_schema,
            "agent": self.agent.model_dump(mode="json"),
        }
        return hashlib.sha256(canonical_bytes(spec)).hexdigest()

    def scores(self, verdict: BaseModel) -> dict[str, float]:
        """A verdict's scores: its numeric fields, and its booleans as 1.0 or 0.0."""
        return {
            k: float(v)
            for k, v in verdict.model_dump().items()
            if isinstance(v, int | float) and not (isinstance(v, float) and v != v)
        }


class VerdictError(SchemaError, ValueError):
    """A reply or file that is not a valid verdict; the message says why."""


_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*[ \t]*\n(?P<body>.*?)\n[ \t]*```\s*$", re.DOTALL)


def parse_verdict(text: str, model: type[BaseModel]) -> BaseModel:
    """A verdict from a reply or a verdict file: one JSON object, bare or in one fenced block
    (```json ... ```), valid against `model`. Prose around it is refused: the verdict is the
    reply, not something found in it."""
    fenced = _FENCE.match(text)
    body = fenced.group("body") if fenced else text
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise VerdictError(f"not one JSON object (bare or in a ```json fence): {exc}") from exc
    if not isinstance(data, dict):
        raise VerdictError(f"the verdict is a JSON {type(data).__name__}, not an object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise VerdictError(f"not a valid {model.__name__}: {exc.errors()[:3]}") from exc
