"""The bug-fix environment's tools judge: does the fix address the bug without weakening the
tests? It re-runs the tests in the world the agent left and reads the change against the
original code, which its prompt carries.

Tests passing is necessary, not sufficient: an agent can special-case the tests' inputs, or
(before the scorer restores them) loosen the tests themselves. A judge that reads the change
catches what the test run cannot. It runs only when the tests pass (a failing run is settled at
0 without it), and its review joins the programmatic reward as a third component.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rolltape.producers.environments._base import Item, RewardResult, composite
from rolltape.schemas import AgentSpec, JudgeBudget, JudgeSpec, Verdict

REVIEW_VERSION = "rolltape.bugfix.fix_review/1"
WEIGHTS = {"tests_pass": 0.5, "coverage": 0.2, "review": 0.3}
"""The judged reward's weights (the unjudged environment's are 0.6 and 0.4)."""


class FixReview(BaseModel):
    """The judge's verdict on one fix."""

    model_config = ConfigDict(extra="forbid")

    tests_pass: bool = Field(description="Do the tests pass when you re-run them in /world?")
    fixes_bug: bool = Field(
        description="Does the change fix the described bug for every input, not only the "
        "tests' inputs?"
    )
    tests_weakened: bool = Field(
        description="Were tests removed, skipped or loosened, or their inputs special-cased "
        "in the module?"
    )
    score: float = Field(ge=0, le=1, description="0 = no real fix, 1 = a correct, clean fix")
    rationale: str = Field(description="Two or three sentences on why.")


def review_spec(item: Item, task_folder: Path) -> JudgeSpec:
    """The review of one rollout of `item`, its criteria and the original code rendered in."""
    module = f"{item.data['module']}.py"
    originals = "\n\n".join(
        f"--- original {name} ---\n{(task_folder / name).read_text(encoding='utf-8')}"
        for name in [module, *item.data["tests"]]
    )
    return JudgeSpec(
        name="fix_review",
        version=REVIEW_VERSION,
        prompt=(
            f"An agent was asked to fix this bug: {item.data['description']}\n"
            f"The code is {module}, the tests {', '.join(item.data['tests'])}. /world holds "
            "the files as the agent left them; the originals are below. Re-run the tests "
            "(python -m pytest -q -p no:cacheprovider), read the change against the original, "
            "and judge whether it fixes the bug without weakening the tests.\n\n"
            f"{originals}"
        ),
        verdict=FixReview,
        agent=AgentSpec(
            harness="tools",
            model="grader",
            placement="rollout",
            budget=JudgeBudget(turns=10, tokens=60_000, seconds=180),
        ),
    )


def judged_reward(reward: RewardResult, review: Verdict) -> RewardResult:
    """The composite of the test run and the review: the review counts its score when the fix
    is real and the tests are intact, else 0, and the rollout passes only then."""
    found = FixReview.model_validate(review.details["verdict"])
    accepted = found.fixes_bug and not found.tests_weakened
    tests = reward.components.get("tests_pass", 0.0)
    coverage = reward.components.get("coverage", 0.0)
    return composite(
        {
            "tests_pass": (WEIGHTS["tests_pass"], tests),
            "coverage": (WEIGHTS["coverage"], coverage),
            "review": (WEIGHTS["review"], found.score if accepted else 0.0),
        },
        passed=reward.passed and accepted,
        **reward.metadata,
        review=found.rationale,
    )
