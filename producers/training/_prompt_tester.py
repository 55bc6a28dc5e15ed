"""The harness's tester for the prompt loop: runs the LLM decision policy with a version of the
`harness.policy` prompt on a named scenario, as one monitored attempt the worker judges.

A case is a scenario and a seed. It is scored by rolltape.schemas.CaseScoring's default: the
training judge's process score (0 when a hard gate failed it; None when the judge erred), and a
pass when the judge found no violation of a rule the scenario is built to provoke (for a scenario
that provokes none, no violation at all): the fault was answered as the playbook asks. Failures are the judge's violations, one line each, as
the tuner reads them. The default suite learns from two scenarios and decides on three others,
two seeds each, so every rule the default rule set fires is exercised on one side or the other.
"""

from __future__ import annotations

from typing import Any

from rolltape.producers._errors import HarnessError
from rolltape.producers._follow import LogFollower
from rolltape.producers._recorder import Recorder
from rolltape.producers.prompts import Case, CaseResult, Suite
from rolltape.producers.training._harness import Harness, HarnessConfig, violation_line
from rolltape.producers.training._policies import LLMPolicy
from rolltape.producers.training._scenarios import SCENARIOS
from rolltape.schemas import CaseScoring, PromptVersion
from rolltape.schemas.clients import ModelEndpoint

DEFAULT_SUITE = Suite(
    learn=(Case(name="dead_relu", seed=100), Case(name="tiny_lr", seed=100)),
    heldout=tuple(
        Case(name=name, seed=seed)
        for name in ("lr_too_high", "deep_sigmoid", "plateau")
        for seed in (0, 1)
    ),
)
"""Learn from dead_relu and tiny_lr (R5, R1, R4); decide on lr_too_high, deep_sigmoid and plateau
(R7, R6, R3), seeds 0 and 1."""


def max_policy_calls(epochs: int | None, suite: Suite) -> int:
    """The most policy calls one attempt of the suite makes: the harness asks about one rule
    per epoch at most, over `epochs` epochs (None: the longest of its scenarios')."""
    return max(epochs or SCENARIOS[c.name].epochs for c in (*suite.learn, *suite.heldout))


class HarnessTester:
    """Runs cases as monitored attempts with an LLM policy through `endpoint`."""

    def __init__(
        self,
        *,
        endpoint: ModelEndpoint,
        agent: Recorder,
        monitor_recorder: Recorder,
        follower: LogFollower,
        suite: Suite,
        epochs: int | None = None,
        config: HarnessConfig | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.agent = agent
        self.monitor_recorder = monitor_recorder
        self.follower = follower
        self.config = (config or HarnessConfig()).model_copy(update={"epochs": epochs})
        self.max_calls_per_case = max_policy_calls(epochs, suite)
        self.scoring = CaseScoring()
        """The training judge's process score; a pass: no violation of a provoked rule."""

    def run(self, version: PromptVersion, case: Case, labels: dict[str, Any]) -> CaseResult:
        scenario = SCENARIOS[case.name]
        policy = LLMPolicy(self.endpoint, self.agent, prompt=version, labels=labels, seed=case.seed)
        harness = Harness(
            agent=self.agent,
            monitor_recorder=self.monitor_recorder,
            follower=self.follower,
            policy=policy,
            config=self.config.model_copy(update={"seed": case.seed}),
        )
        run_id = f"{labels['prompt_loop']}-r{labels['prompt_round']}-{version.digest[:8]}-{case.name}-s{case.seed}"
        try:
            result = harness.run_attempt(
                scenario, run_id=run_id, labels=labels, tags=("prompt_loop",)
            )
        except HarnessError as exc:  # no rule evaluation or verdict in time: unscored, not fatal
            return CaseResult(
                case=case,
                session_id=f"{run_id}-a1",
                rules=scenario.provokes,
                score=None,
                passed=False,
                failures=(str(exc),),
                model_calls=policy.calls,
            )
        verdict = result.verdict
        score, passed = self.scoring.of(verdict, scenario.provokes)
        return CaseResult(
            case=case,
            session_id=result.session_id,
            rules=scenario.provokes,
            score=score,
            passed=passed,
            failures=tuple(violation_line(v) for v in verdict.violations),
            model_calls=policy.calls,
        )
