"""rolltape.producers.prompts: the prompt loop. A tuner model proposes versions of a prompt
target, a tester runs champion and proposal on the same held-out cases as recorded sessions the
worker judges, and a stated rule (rolltape.schemas.PromotionRule) promotes; every step is an
event on the loop's session. The testers for each kind of target live beside what they run (the
harness's in rolltape.producers.training)."""

from rolltape.producers.prompts._loop import (
    Case,
    CaseResult,
    LoopEstimate,
    LoopResult,
    PromptLoop,
    RoundResult,
    Suite,
    Tester,
    estimate,
)
from rolltape.producers.prompts._review import (
    REVIEW_MODEL,
    Reviewer,
    judge_reviewer,
    review_spec,
)
from rolltape.producers.prompts._tuner import (
    TECHNIQUES,
    TUNER_INSTRUCTIONS,
    Tuner,
    TunerBrief,
    TunerProposal,
)

__all__ = [
    "REVIEW_MODEL",
    "TECHNIQUES",
    "TUNER_INSTRUCTIONS",
    "Case",
    "CaseResult",
    "LoopEstimate",
    "LoopResult",
    "PromptLoop",
    "Reviewer",
    "RoundResult",
    "Suite",
    "Tester",
    "Tuner",
    "TunerBrief",
    "TunerProposal",
    "estimate",
    "judge_reviewer",
    "review_spec",
]
