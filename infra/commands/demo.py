"""The main job: record agent sessions and monitored training runs, run the processors over
them, verify every chain and show what the processors concluded.

The agent's tool is real (a safe arithmetic evaluator); the training runs are real too: two
attempts of the decision harness (scripted playbook policy) training the reference CNN on
scikit-learn's digits under the training monitor, acting on the rule firings the worker writes.
"""

from __future__ import annotations

import ast
import asyncio
import operator
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rolltape.infra import open_monitor_recorder, open_recorder
from rolltape.infra._errors import InfraError
from rolltape.infra.broker import require_connection
from rolltape.infra.commands.broker import BrokerUp, broker_up
from rolltape.infra.commands.export import collect, run_export
from rolltape.infra.commands.report import write_report
from rolltape.infra.commands.worker_process import WorkerProcess, worker_running
from rolltape.infra.kafka.readback import RawRecord, read_records, verify_topics
from rolltape.infra.kafka.sessions import read_sessions
from rolltape.infra.settings import Settings
from rolltape.producers import Recorder, Session
from rolltape.producers.training import (
    SCENARIOS,
    Harness,
    ScriptedPolicy,
    SelfRefineResult,
    rules_and_verdicts_follower,
)
from rolltape.projections import ExportOptions, Selection
from rolltape.schemas import (
    CHAINED_STREAMS,
    LIVE_JUDGE_VERSION,
    REFERENCE_TASK,
    ChainBroken,
    ChainReport,
    FilterOutcome,
    Role,
    RuleEvaluation,
    Stream,
    ToolSpec,
    Verdict,
    read_event,
)
from rolltape.schemas.clients import KafkaConnection

_OPS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
}


def calculate(expression: str) -> float:
    """Evaluate + - * / ** on numbers, nothing else."""

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return float(_OPS[type(node.op)](ev(node.left), ev(node.right)))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return float(_OPS[type(node.op)](ev(node.operand)))
        raise ValueError(f"unsupported expression: {ast.dump(node)[:60]}")

    return ev(ast.parse(expression, mode="eval").body)


CALCULATOR = ToolSpec(
    name="calculator",
    description="Evaluate an arithmetic expression.",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
)


def record_agent_session(recorder: Recorder, session_id: str) -> None:
    """A scripted agent: plans, calls the calculator twice (one bad call), answers."""
    question = "A train leaves at 14:05 and travels 342 km at 76 km/h. What time does it arrive?"
    with recorder.session(
        question,
        session_id=session_id,
        tools=[CALCULATOR],
        model="scripted-agent-0",
        tags=["demo"],
        group_id="demo-train-question",
    ) as s:
        s.turn("system", "You are a careful assistant. Use the calculator for arithmetic.")
        s.turn("user", question)
        s.turn("assistant", "", reasoning="Travel time is distance / speed; compute it.")
        _call(s, "342 / 76")
        s.turn(
            "assistant",
            "",
            reasoning="4.5 h is 4 h 30 min. Check the minutes with a bad call first.",
        )
        _call(s, "4.5 hours * 60")
        _call(s, "0.5 * 60")
        s.turn("assistant", "The train arrives at 18:35.", reasoning="14:05 + 4:30 = 18:35.")
        s.reward(1.0, name="answer_correct", source="demo-checker")


def _call(session: Session, expression: str) -> None:
    call_id = session.tool_call("calculator", {"expression": expression})
    start = time.perf_counter()
    try:
        result, ok, error = repr(calculate(expression)), True, None
    except (ValueError, SyntaxError, ZeroDivisionError) as exc:
        result, ok, error = f"error: {exc}", False, type(exc).__name__
    session.tool_result(
        call_id, result, success=ok, error=error, duration_ms=(time.perf_counter() - start) * 1000
    )


def record_hallucinating_session(recorder: Recorder, session_id: str) -> None:
    """An agent that calls a tool it was never given: the reward filter must reject it."""
    question = "What is the weather in Lisbon?"
    with recorder.session(question, session_id=session_id, tools=[CALCULATOR], tags=["demo"]) as s:
        s.turn("user", question)
        call_id = s.tool_call("web_search", {"query": "Lisbon weather"})
        s.tool_result(
            call_id, "error: unknown tool web_search", success=False, error="unknown tool"
        )
        s.turn("assistant", "It is sunny.", reasoning="The search failed; guess.")


def record_sampled_sessions(recorder: Recorder, session_ids: list[str]) -> None:
    """Two samples of one prompt (an Atropos group), with the token ids a serving engine would
    record; here the ids are UTF-8 bytes, as from a byte-level tokenizer."""
    prompt = "Count to three, separated by commas."
    for session_id, answer, reward in zip(
        session_ids, ("1, 2, 3", "1, 3, 2"), (1.0, 0.0), strict=True
    ):
        with recorder.session(
            prompt, session_id=session_id, model="scripted-sampler-0", group_id="demo-count"
        ) as s:
            s.turn("user", prompt, token_ids=list(prompt.encode()))
            s.turn(
                "assistant",
                answer,
                reasoning="",
                token_ids=list(answer.encode()),
                completion_tokens=len(answer.encode()),
            )
            s.reward(reward)


DEMO_SCENARIO = "dead_relu"


class DemoError(InfraError, RuntimeError):
    """The demo cannot run (the worker it starts does not come up); the message shows why."""


class ExportSummary(BaseModel):
    """One format's export of the demo sessions, for the demo's closing lines. `skipped` omits
    the count of sessions not selected: every other session on the topic."""

    format: str
    folder: str
    files: list[str]
    lines: int
    sessions: int
    skipped: dict[str, int]


class DemoResult(BaseModel):
    """Everything the demo shows. Chain breaks appear in `verdicts` as failed `chain_audit`
    verdicts; rule evaluations are the last training attempt's. When the worker did not finish,
    `worker_error` says why and there are no exports and no report."""

    bootstrap: str
    broker: BrokerUp
    """The cluster as the demo left it: what `broker up` leaves (topics, principals, the judge's
    key, which signed the worker's checkpoints)."""
    sessions: list[str]
    chains: list[ChainReport]
    rule_evaluations: list[RuleEvaluation]
    verdicts: dict[str, list[Verdict]]
    filter_outcomes: dict[str, FilterOutcome]
    dead_letters: int
    self_refine: SelfRefineResult | None = None
    report: str | None = None
    """The HTML report of the training attempts."""
    exports: list[ExportSummary] = []
    worker_error: str | None = None

    @property
    def ok(self) -> bool:
        return (
            self.worker_error is None and len(self.chains) >= 3 and all(c.ok for c in self.chains)
        )


def _wait_for_outputs(
    worker: WorkerProcess,
    connection: KafkaConnection,
    prefix: str,
    sessions: list[str],
    timeout_s: float,
) -> tuple[list[RawRecord], str | None]:
    """Read the outputs until every demo session has its end-of-session output."""
    wanted = {s.encode() for s in sessions}
    deadline = time.monotonic() + timeout_s
    while True:
        records = _read_outputs(connection, prefix, wanted)
        done = {
            r.key
            for r in records
            if r.stream == Stream.FILTERED
            or (r.stream == Stream.VERDICTS and b'"type":"verdict"' in r.value)
        }
        if done >= wanted:
            return records, None
        if not worker.alive() or time.monotonic() > deadline:
            return records, f"the worker did not finish the demo sessions:\n{worker.log_tail()}"
        time.sleep(0.5)


def _wait_until_up(worker: WorkerProcess, settings: Settings, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not worker_running(settings):
        if not worker.alive() or time.monotonic() > deadline:
            raise DemoError(f"the worker did not start:\n{worker.log_tail()}")
        time.sleep(0.5)


def _self_refine(settings: Settings, agent: Recorder) -> SelfRefineResult:
    """Two attempts of the scripted harness on the dead-ReLU scenario, monitored."""
    follower = rules_and_verdicts_follower(
        require_connection(settings, Role.MONITOR), settings.topic_prefix
    )
    monitor = open_monitor_recorder(settings)
    try:
        harness = Harness(
            agent=agent, monitor_recorder=monitor, follower=follower, policy=ScriptedPolicy()
        )
        return harness.self_refine(SCENARIOS[DEMO_SCENARIO], attempts=2)
    finally:
        monitor.close()
        follower.close()


def _read_outputs(connection: KafkaConnection, prefix: str, keys: set[bytes]) -> list[RawRecord]:
    async def read() -> list[RawRecord]:
        streams = (Stream.RULES, Stream.VERDICTS, Stream.FILTERED, Stream.DEADLETTER)
        return [r async for r in read_records(connection, streams, prefix=prefix) if r.key in keys]

    return asyncio.run(read())


def _export(
    connection: KafkaConnection, prefix: str, sessions: list[str], out: Path
) -> list[ExportSummary]:
    """The demo's sessions as ShareGPT, Atropos and OpenAI files, one folder per format."""
    summaries = []
    collected = asyncio.run(collect(connection, prefix=prefix, judge_version=LIVE_JUDGE_VERSION))
    with collected:
        manifests = {
            format: run_export(
                collected,
                ExportOptions(format=format, selection=Selection(sessions=tuple(sessions))),
                out / format,
                overwrite=True,
            )
            for format in ("sharegpt", "atropos", "openai")
        }
    for format, manifest in manifests.items():
        folder = out / format
        skipped = {k: v for k, v in manifest.skipped.items() if k != "session_not_selected"}
        summaries.append(
            ExportSummary(
                format=format,
                folder=str(folder),
                files=[f.name for f in manifest.files],
                lines=manifest.lines,
                sessions=manifest.sessions_exported,
                skipped=skipped,
            )
        )
    return summaries


def run_demo(
    settings: Settings, out: Path | None = None, *, on_step: Callable[[str], None] | None = None
) -> DemoResult:
    """Record the demo's agent, sampled and training sessions with a worker of its own running,
    then verify their chains and gather what the processors wrote. Brings the cluster up as
    `broker up` does (the managed broker unless ROLLTAPE_BOOTSTRAP is set, topics, the judge's
    key), so exports of the demo's sessions can carry evidence; exports and the report go to
    `out` (default: a new temporary folder, kept). `on_step(line)`: before each slow step.
    Raises `DemoError` if the worker does not come up."""
    say = on_step or (lambda _line: None)
    up = broker_up(settings, on_step=say)
    new = "new judge key" if up.judge_key_created else "judge key"
    say(f"broker at {up.bootstrap}; {new} {up.judge_key_id} signs the worker's checkpoints")
    connection = require_connection(settings, Role.READER)
    run = uuid.uuid4().hex[:8]
    agent_id, bad_id = f"demo-agent-{run}", f"demo-halluc-{run}"
    sampled = [f"demo-sample-{run}-a", f"demo-sample-{run}-b"]
    sessions = [agent_id, bad_id, *sampled]
    out = out or Path(tempfile.mkdtemp(prefix=f"rolltape-demo-{run}-"))
    out.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory() as logs,
        WorkerProcess(settings, Path(logs) / "worker.log") as worker,
    ):
        say("starting a worker (the processors)")
        _wait_until_up(worker, settings, timeout_s=120)
        recorder = open_recorder(settings)
        try:
            say("recording four agent sessions")
            record_agent_session(recorder, agent_id)
            record_hallucinating_session(recorder, bad_id)
            record_sampled_sessions(recorder, sampled)
            recorder.flush()
            say(f"training: two monitored attempts of the decision harness ({DEMO_SCENARIO})")
            refine = _self_refine(settings, recorder)
        finally:
            recorder.close()
        training = [a.session_id for a in refine.attempts]
        sessions += [*training, refine.summary_session_id]
        say("waiting for the worker's verdicts and filter outcomes")
        records, error = _wait_for_outputs(
            worker, connection, settings.topic_prefix, sessions, timeout_s=180
        )
    chains: list[ChainReport] = []
    for sid in sessions:
        verifier = asyncio.run(
            verify_topics(connection, CHAINED_STREAMS, prefix=settings.topic_prefix, session_id=sid)
        )
        chains += verifier.reports()
    evaluations: dict[str, RuleEvaluation] = {}
    verdicts: dict[str, list[Verdict]] = {}
    outcomes: dict[str, FilterOutcome] = {}
    seen: set[str] = set()
    for r in records:
        if r.stream == Stream.DEADLETTER:
            continue
        env = read_event(r.value)
        if env.event_id in seen:
            continue  # a redelivery
        seen.add(env.event_id)
        payload = env.body
        if isinstance(payload, RuleEvaluation):
            if env.session_id == training[-1]:
                evaluations[f"{payload.epoch:06d}"] = payload
        elif isinstance(payload, Verdict | ChainBroken):
            verdicts.setdefault(env.session_id, []).append(
                payload
                if isinstance(payload, Verdict)
                else Verdict(
                    judge="chain_audit",
                    judge_version=payload.auditor_version,
                    status="failed",
                    error=f"{payload.stream} seq {payload.seq}: {payload.reason}",
                )
            )
        elif isinstance(payload, FilterOutcome):
            outcomes[env.session_id] = payload
    return DemoResult(
        bootstrap=connection.bootstrap,
        broker=up,
        sessions=sessions,
        chains=chains,
        rule_evaluations=[evaluations[k] for k in sorted(evaluations)],
        verdicts=verdicts,
        filter_outcomes=outcomes,
        dead_letters=sum(1 for r in records if r.stream == Stream.DEADLETTER),
        self_refine=refine,
        exports=[] if error else _export(connection, settings.topic_prefix, sessions, out),
        report=None if error else _report(connection, settings.topic_prefix, refine, out),
        worker_error=error,
    )


def _report(connection: KafkaConnection, prefix: str, refine: SelfRefineResult, out: Path) -> str:
    sessions = asyncio.run(read_sessions(connection, prefix))
    path = out / "report.html"
    mine = {sid: envs for sid, envs in sessions.items() if sid.startswith(refine.run_id)}
    write_report(mine, path, task=f"{REFERENCE_TASK}/{refine.scenario}", runs=1)
    return str(path)
