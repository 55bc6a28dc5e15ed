"""The optional LLM reviewer of a round: a judge (the one judge API: a null-harness JudgeSpec run
by JudgeRuntime, recorded as an untrainable session of its own) that reads both prompts, the
rule's figures and every held-out pair, and answers which prompt it prefers and why
(rolltape.schemas.PromptReview). Its verdict is recorded in the round's decision; it decides
only when the rule says so (`PromotionRule.review_veto`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from rolltape.producers.judging import JudgeRuntime
from rolltape.schemas import (
    AgentSpec,
    JudgeSpec,
    PairedResult,
    PromotionFigures,
    PromptReview,
    PromptVersion,
    Verdict,
)

REVIEW_MODEL: Final = "reviewer"
"""The logical model the reviewer runs on (ROLLTAPE_MODELS)."""
REVIEW_VERSION: Final = "rolltape.prompt_review/1"

_CRITERIA = """\
You review one round of a prompt loop for the prompt target {target}. The champion is the
system prompt in use; the proposal is a tuner's rewrite ({technique}: {rationale}). Both ran the
same held-out cases with the same seeds, scored by the judge of those runs. Say which prompt you
prefer to keep in use and why: weigh the measured results first, then whether the proposal's
text would hold up on cases not in the suite (is it overfitted, does it drop instructions the
policy needs, does it contradict itself). Reply with prefer ("champion" or "proposal") and your
reasons.

The champion:
<<<
{champion}
>>>

The proposal:
<<<
{proposal}
>>>

Held-out results (case: champion score pass/fail -> proposal score pass/fail):
{pairs}

The rule's figures: mean score difference {mean}, interval [{lower}, {upper}], pass rate
{old_rate} -> {new_rate}.
"""


def review_spec(
    champion: PromptVersion,
    proposal: PromptVersion,
    pairs: tuple[PairedResult, ...],
    figures: PromotionFigures,
) -> JudgeSpec:
    """The reviewer's spec for one round, its criteria rendered."""

    def num(value: float | None) -> str:
        return "-" if value is None else f"{value:+.3f}"

    def result(score: float | None, passed: bool) -> str:
        return f"{'-' if score is None else f'{score:.3f}'} {'pass' if passed else 'fail'}"

    lines = "\n".join(
        f"- {p.label}: {result(p.champion_score, p.champion_passed)} -> "
        f"{result(p.proposal_score, p.proposal_passed)}"
        for p in pairs
    )
    return JudgeSpec(
        name="prompt_review",
        version=REVIEW_VERSION,
        prompt=_CRITERIA.format(
            target=champion.target,
            technique=proposal.technique or "-",
            rationale=proposal.rationale or "-",
            champion=champion.content.rstrip("\n"),
            proposal=proposal.content.rstrip("\n"),
            pairs=lines or "- none",
            mean=num(figures.mean_difference),
            lower=num(figures.lower),
            upper=num(figures.upper),
            old_rate=num(figures.champion_pass_rate),
            new_rate=num(figures.proposal_pass_rate),
        ),
        verdict=PromptReview,
        agent=AgentSpec(model=REVIEW_MODEL),
    )


Reviewer = Callable[
    [PromptVersion, PromptVersion, tuple[PairedResult, ...], PromotionFigures, str], Verdict
]
"""(champion, proposal, pairs, figures, the loop's session id) -> the reviewer's verdict."""


def judge_reviewer(runtime: Callable[[], JudgeRuntime]) -> Reviewer:
    """A reviewer run by a fresh JudgeRuntime per round (its clients live in that round's event
    loop); every failure is an error verdict naming it, never an exception."""

    def review(
        champion: PromptVersion,
        proposal: PromptVersion,
        pairs: tuple[PairedResult, ...],
        figures: PromotionFigures,
        loop_session: str,
    ) -> Verdict:
        async def run() -> Verdict:
            judges = runtime()
            try:
                return await judges.run(
                    review_spec(champion, proposal, pairs, figures), loop_session
                )
            finally:
                await judges.aclose()

        return asyncio.run(run())

    return review
