"""`rolltape bench prompts`: the prompt loop's own cost per round, beside the test runs it makes.

The loop runs `rounds` rounds on the harness target (`harness.policy`) on a scratch topic prefix
with a worker of its own, against a local OpenAI-compatible server in its own process that
answers at once (the tuner: a proposal whose text changes every round; the policy: a deferral of
the rule it is asked about), so a round's time is the loop's code plus the monitored training
runs it starts. Every test run is timed where the tester runs it; a round's overhead is its wall
time less its runs' time: the tuner's call, recording versions and decisions, the rule's
bootstrap. Baseline in the same invocation: the same held-out scenarios run by the harness
directly (no loop), whose median run time the loop's runs are compared with.
"""

from __future__ import annotations

import itertools
import json
import re
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rolltape.infra import open_monitor_recorder, open_recorder
from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._machine import machine
from rolltape.infra.bench.capture import start_instant_server
from rolltape.infra.broker import require_connection
from rolltape.infra.commands.worker_process import WorkerProcess, worker_running
from rolltape.infra.kafka.topics import scratch_prefix
from rolltape.infra.settings import Settings
from rolltape.producers import rules_and_verdicts_follower
from rolltape.producers.prompts import (
    TUNER_INSTRUCTIONS,
    Case,
    CaseResult,
    PromptLoop,
    Suite,
    Tester,
    Tuner,
)
from rolltape.schemas import PromptVersion, Role
from rolltape.schemas.clients import ModelEndpoint

GOAL_OVERHEAD = 0.05
"""The loop's own time, at most this share of a round's."""


class RoundFigures(BaseModel):
    round: int
    seconds: float
    runs: int
    run_seconds: float
    overhead_seconds: float
    overhead_share: float
    model_calls: int


class PromptBenchFigures(Figures):
    """Everything `rolltape bench prompts` prints (and `--json` dumps)."""

    machine: str
    epochs: int
    heldout: list[str]
    rounds: list[RoundFigures]
    median_round_s: float
    median_overhead_s: float
    median_overhead_share: float
    loop_run_p50_s: float
    """Median time of one held-out run inside the loop."""
    bare_run_p50_s: float
    """Median time of the same scenarios run by the harness directly, same run."""
    goal_overhead_share: float = GOAL_OVERHEAD

    @property
    def met(self) -> bool:
        return self.median_overhead_share <= self.goal_overhead_share

    def lines(self) -> Iterator[str]:
        yield machine_line(self.machine)
        yield (
            f"prompt loop on harness.policy, held out {', '.join(self.heldout)}, {self.epochs} "
            "epochs per run, a server that answers at once"
        )
        yield "    round   seconds   runs   in runs   loop's own   share   model calls"
        for x in self.rounds:
            yield (
                f"    {x.round:>5}   {x.seconds:7.2f}   {x.runs:>4}   {x.run_seconds:7.2f}   "
                f"{x.overhead_seconds:10.3f}   {x.overhead_share:5.1%}   {x.model_calls:>11}"
            )
        yield (
            f"    median round {self.median_round_s:.2f} s, loop's own "
            f"{self.median_overhead_s:.3f} s ({self.median_overhead_share:.1%}; goal at most "
            f"{self.goal_overhead_share:.0%}: {'met' if self.met else 'NOT met'})"
        )
        yield (
            f"    a held-out run: {self.loop_run_p50_s:.2f} s in the loop, "
            f"{self.bare_run_p50_s:.2f} s run by the harness alone (median)"
        )


_PROPOSALS = itertools.count(1)


def _reply(body: dict[str, Any]) -> dict[str, Any]:
    """The tuner's proposal (its text new every time) or the policy's deferral of the rule it
    is asked about."""
    messages = body["messages"]
    if messages[0]["content"] == TUNER_INSTRUCTIONS:
        answer: dict[str, Any] = {
            "technique": "rewrite",
            "rationale": "bench",
            "prompt": f"Defer every rule. (proposal {next(_PROPOSALS)})",
        }
    else:
        found = re.search(r"Act on (R\d)", messages[-1]["content"])
        answer = {
            "event_type": "rule_triggered_no_action",
            "cites": [found.group(1) if found else "R1"],
            "justification": "bench",
            "remedy_direction": "none",
            "remedy_params": {
                "lr_new": None,
                "edit_op": "none",
                "edit_to": "none",
                "batch_size_new": None,
                "clip_grad_norm": None,
            },
        }
    return {
        "id": "bench",
        "object": "chat.completion",
        "created": 0,
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": json.dumps(answer)},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class _Timed:
    """A tester that times every run of the one it wraps."""

    def __init__(self, inner: Tester) -> None:
        self.inner = inner
        self.max_calls_per_case = inner.max_calls_per_case
        self.scoring = inner.scoring
        self.marks: list[tuple[float, float]] = []

    def run(self, version: PromptVersion, case: Case, labels: dict[str, Any]) -> CaseResult:
        start = time.perf_counter()
        try:
            return self.inner.run(version, case, labels)
        finally:
            self.marks.append((start, time.perf_counter()))


def run_prompts_bench(
    settings: Settings, *, rounds: int = 3, epochs: int = 4
) -> PromptBenchFigures:
    """Measure on a scratch prefix (deleted after) with a worker of its own. Needs a broker and
    the torch extra."""
    require_connection(settings, Role.ADMIN)  # a clear error when there is no broker
    from rolltape.producers.training import (
        SCENARIOS,
        Harness,
        HarnessConfig,
        HarnessTester,
        LLMPolicy,
    )

    suite = Suite(
        learn=(Case(name="dead_relu", seed=100),),
        heldout=(Case(name="lr_too_high", seed=0), Case(name="deep_sigmoid", seed=0)),
    )
    base_url, server = start_instant_server(_reply)
    endpoint = ModelEndpoint(base_url=base_url, model="b")
    try:
        with (
            scratch_prefix(settings, "benchprompts", partitions=settings.partitions) as scratch,
            tempfile.TemporaryDirectory() as logs,
        ):
            worker = WorkerProcess(scratch, Path(logs) / "worker.log")
            try:
                deadline = time.monotonic() + 120
                while not worker_running(scratch):
                    if not worker.alive() or time.monotonic() > deadline:
                        raise RuntimeError(f"the bench's worker did not start: {worker.log_tail()}")
                    time.sleep(0.5)
                agent, monitor = open_recorder(scratch), open_monitor_recorder(scratch)
                follower = rules_and_verdicts_follower(
                    require_connection(scratch, Role.MONITOR), scratch.topic_prefix
                )
                try:
                    tester = _Timed(
                        HarnessTester(
                            endpoint=endpoint,
                            agent=agent,
                            monitor_recorder=monitor,
                            follower=follower,
                            suite=suite,
                            epochs=epochs,
                        )
                    )
                    tuner = Tuner(endpoint, agent)
                    loop = PromptLoop(agent, tuner, tester, target="harness.policy", suite=suite)
                    ends: list[float] = []
                    calls: list[int] = []

                    def ended(_: object) -> None:
                        ends.append(time.perf_counter())
                        calls.append(tuner.calls + loop.policy_calls)

                    start = PromptVersion.of("harness.policy", "Defer every rule. (start)")
                    began = time.perf_counter()
                    loop.run(start, rounds, on_round=ended)
                    figures = _rounds(began, ends, calls, tester.marks)
                    bare = []
                    for case in suite.heldout:
                        harness = Harness(
                            agent=agent,
                            monitor_recorder=monitor,
                            follower=follower,
                            policy=LLMPolicy(endpoint, agent, prompt=start),
                            config=HarnessConfig(epochs=epochs, seed=case.seed),
                        )
                        t0 = time.perf_counter()
                        harness.run_attempt(SCENARIOS[case.name])
                        bare.append(time.perf_counter() - t0)
                    heldout_runs = [
                        b - a for a, b in tester.marks[len(suite.learn) :]
                    ]  # every run after the start's learning runs is a held-out one
                finally:
                    follower.close()
                    monitor.close()
                    agent.close(60)
            finally:
                worker.stop()
    finally:
        server.terminate()
        server.join(10)
    return PromptBenchFigures(
        machine=machine(),
        epochs=epochs,
        heldout=[c.label for c in suite.heldout],
        rounds=figures,
        median_round_s=statistics.median(r.seconds for r in figures),
        median_overhead_s=statistics.median(r.overhead_seconds for r in figures),
        median_overhead_share=statistics.median(r.overhead_share for r in figures),
        loop_run_p50_s=statistics.median(heldout_runs),
        bare_run_p50_s=statistics.median(bare),
    )


def _rounds(
    began: float, ends: list[float], calls: list[int], marks: list[tuple[float, float]]
) -> list[RoundFigures]:
    out = []
    start, spent = began, 0
    for number, (end, made) in enumerate(zip(ends, calls, strict=True), 1):
        inside = [(a, b) for a, b in marks if start <= a and b <= end]
        run_s = sum(b - a for a, b in inside)
        seconds = end - start
        out.append(
            RoundFigures(
                round=number,
                seconds=seconds,
                runs=len(inside),
                run_seconds=run_s,
                overhead_seconds=seconds - run_s,
                overhead_share=(seconds - run_s) / seconds,
                model_calls=made - spent,
            )
        )
        start, spent = end, made
    return out
