"""The tuner: a model that reads the champion prompt, what went wrong with it on the learning
cases and the scoreboard so far, and proposes a new prompt with a technique and a rationale.

It is the logical model `tuner` of ROLLTAPE_MODELS, asked once per round through the `openai`
client with strict structured output (the `TunerProposal` schema); its conversation is recorded
as an agent session of its own (untrainable: it is the loop's tool, not a policy to learn) linked
to the loop's session, through the SDK's capture, so what the tuner saw and said is on the log.
"""

from __future__ import annotations

from typing import Any, Final, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rolltape.producers._errors import PromptLoopError
from rolltape.producers._recorder import Recorder
from rolltape.schemas.clients import ModelEndpoint

Technique = Literal[
    "chain_of_thought",
    "few_shot",
    "negative_constraint",
    "rule_enumeration",
    "decision_checklist",
    "rewrite",
]
TECHNIQUES: Final = get_args(Technique)
"""What a tuner may try (the reference's six): a reasoning scaffold, worked examples of a rule
answered correctly, a stricter prohibition, every rule spelled out, a checklist to run before
answering, a rewrite of the whole prompt."""

TUNER_INSTRUCTIONS: Final = """\
You improve the system prompt of an LLM decision policy. You are shown the current champion
prompt, the failures it had on learning cases (violations a judge found in its decisions), and
the scoreboard of earlier proposals (which techniques won or lost, and why proposals were
rejected). Propose one new complete system prompt aimed at the failures, using one technique:
chain_of_thought (a reasoning scaffold), few_shot (examples of a rule answered correctly),
negative_constraint (a stricter prohibition), rule_enumeration (every rule spelled out),
decision_checklist (a checklist to run before answering) or rewrite (a rewrite of the whole
prompt). Keep every instruction the policy needs to answer in its schema. Reply with one object:
technique, rationale (one or two sentences: the hypothesis this prompt tests), prompt (the full
new system prompt)."""


class TunerProposal(BaseModel):
    """What the tuner answers (every field required, nothing else: strict structured output)."""

    model_config = ConfigDict(extra="forbid")

    technique: Technique
    rationale: str = Field(min_length=1)
    prompt: str = Field(min_length=1)


class TunerBrief(BaseModel):
    """What the tuner is shown in one round."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str
    round: int
    champion_label: str
    champion: str
    failures: tuple[str, ...] = ()
    """The champion's failures on the learning cases, one per line (never the held-out cases')."""
    scoreboard: tuple[str, ...] = ()
    """Earlier rounds and technique tallies, one per line."""

    def render(self) -> str:
        parts = [
            f"Prompt target: {self.target}. Round {self.round}.",
            "",
            f"The champion ({self.champion_label}):",
            "<<<",
            self.champion.rstrip("\n"),
            ">>>",
            "",
            "Its failures on the learning cases:",
            *([f"- {f}" for f in self.failures] or ["- none recorded"]),
            "",
            "Scoreboard so far:",
            *([f"- {line}" for line in self.scoreboard] or ["- no earlier rounds"]),
        ]
        return "\n".join(parts)


class Tuner:
    """Proposes prompts through the endpoint bound to `tuner`."""

    def __init__(
        self, endpoint: ModelEndpoint, recorder: Recorder, *, temperature: float = 0.8
    ) -> None:
        self.endpoint = endpoint
        self.recorder = recorder
        self.temperature = temperature
        self.calls = 0

    def propose(self, brief: TunerBrief, *, loop_session: str, group_id: str) -> TunerProposal:
        """One proposal; PromptLoopError naming the cause when the model gives none."""
        import openai
        from openai.lib._parsing._completions import type_to_response_format_param

        messages: list[dict[str, Any]] = [
            {"role": "system", "content": TUNER_INSTRUCTIONS},
            {"role": "user", "content": brief.render()},
        ]
        with self.recorder.session(
            f"propose a prompt for {brief.target} (round {brief.round})",
            session_id=f"{loop_session}-r{brief.round}-tuner",
            kind="agent",
            model=self.endpoint.model,
            trainable=False,
            linked_session_id=loop_session,
            group_id=group_id,
            tags=["prompt_loop", "tuner", f"target={brief.target}"],
            run_config={"role": "tuner", "prompt_target": brief.target, "round": brief.round},
        ) as session:
            client = session.capture(self.endpoint.client())
            self.calls += 1
            try:
                completion = client.chat.completions.create(
                    model=self.endpoint.model,
                    messages=messages,
                    response_format=type_to_response_format_param(TunerProposal),
                    temperature=self.temperature,
                )
            except openai.APIError as exc:
                session.end("failed", error=f"{type(exc).__name__}: {exc}"[:500])
                raise PromptLoopError(
                    f"the tuner's endpoint failed in round {brief.round}: "
                    f"{type(exc).__name__}: {exc}"[:500]
                ) from exc
            message = completion.choices[0].message if completion.choices else None
            content = message.content if message is not None else None
            try:
                if not content:
                    raise ValueError(f"no content (refusal: {getattr(message, 'refusal', None)})")
                proposal = TunerProposal.model_validate_json(content)
            except ValidationError as exc:
                detail = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}"
                    for e in exc.errors()
                )[:500]
                session.end("failed", error=f"no valid proposal: {detail}")
                raise PromptLoopError(
                    f"the tuner gave no valid proposal in round {brief.round}: {detail}"
                ) from exc
            except ValueError as exc:
                detail = str(exc)[:500]
                session.end("failed", error=f"no valid proposal: {detail}")
                raise PromptLoopError(
                    f"the tuner gave no valid proposal in round {brief.round}: {detail}"
                ) from exc
        return proposal
